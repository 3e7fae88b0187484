"""The lease keeper process (``python -m seawall.saga._keeper``) against a real store: it renews
the first leases it is given at once, then on its own schedule, not at each change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from seawall import saga


def keeper(url: str, lease: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "seawall.saga._keeper"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    tell(proc, {"url": url, "lease": lease})
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    return proc


def tell(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def held_runs(orch: saga.Orchestrator, ids: list[str]) -> None:
    """Mark the runs held by a worker (token 7) with a lease that lapsed long ago."""
    for run_id in ids:
        orch.store.execute(
            "UPDATE seawall_saga_runs SET lease_owner = 'w', lease_token = 7, due_at = 100.0 "
            "WHERE run_id = ?",
            (run_id,),
        )


def due(orch: saga.Orchestrator, run_id: str) -> float:
    rows = orch.store.execute(
        "SELECT due_at FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
    ).fetchall()
    return float(rows[0][0])


def test_the_keeper_renews_its_first_leases_at_once_and_later_ones_on_its_schedule(
    store_url: str,
) -> None:
    flow = saga.Saga("k", [saga.Step("a", lambda ctx: None)])
    with saga.Orchestrator(store_url, [flow], hooks=()) as orch:
        for run_id in ("r1", "r2"):
            orch.start("k", {}, run_id=run_id)
        held_runs(orch, ["r1", "r2"])
        # A long lease: the keeper's next renewal is 20 s away once it has renewed once.
        proc = keeper(store_url, lease=60.0)
        try:
            tell(proc, {"hold": [["r1", 7]]})
            deadline = time.monotonic() + 60.0
            while due(orch, "r1") == 100.0 and time.monotonic() < deadline:
                time.sleep(0.02)
            renewed = due(orch, "r1")
            assert renewed > orch.store.now() + 30.0  # extended to about a lease from now
            # A run added later was leased by the commit just before (here: the test says so):
            # the keeper does not spend a commit on it at once, only at its next tick.
            tell(proc, {"hold": [["r1", 7], ["r2", 7]]})
            time.sleep(1.0)
            assert due(orch, "r2") == 100.0
            assert due(orch, "r1") == renewed
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # the keeper exits at the end of its input
            assert proc.wait(30.0) == 0
            assert proc.stdout is not None
            proc.stdout.close()


def test_a_keeper_renews_the_changed_leases_at_its_next_tick(store_url: str) -> None:
    flow = saga.Saga("k", [saga.Step("a", lambda ctx: None)])
    with saga.Orchestrator(store_url, [flow], hooks=()) as orch:
        for run_id in ("r1", "r2"):
            orch.start("k", {}, run_id=run_id)
        held_runs(orch, ["r1", "r2"])
        proc = keeper(store_url, lease=1.5)  # a tick every 0.5 s
        try:
            tell(proc, {"hold": [["r1", 7]]})
            tell(proc, {"hold": [["r1", 7], ["r2", 7]]})
            deadline = time.monotonic() + 60.0
            while due(orch, "r2") == 100.0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert due(orch, "r2") > 1000.0
            # And again at the next tick, the first leases too.
            first = due(orch, "r1")
            deadline = time.monotonic() + 60.0
            while due(orch, "r1") == first and time.monotonic() < deadline:
                time.sleep(0.02)
            assert due(orch, "r1") > first
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            assert proc.wait(30.0) == 0
            assert proc.stdout is not None
            proc.stdout.close()


def test_a_rounds_leases_are_held_before_any_of_its_attempts_starts(sqlite_url: str) -> None:
    """The keeper process (and the renewing thread) learn a round's leases before any attempt
    of the round is handed to a thread: a step that holds the GIL from its first instant would
    otherwise keep the worker from telling them, maybe until after the leases expired."""
    seen: list[tuple[str, bool]] = []

    def book(ctx: saga.StepContext) -> str:
        return ctx.run_id

    flow = saga.Saga("trip", [saga.Step("book", book)])
    with saga.Orchestrator(sqlite_url, [flow], concurrency=3, hooks=()) as orch:
        execution = orch._worker._execution
        pool = execution._threads()
        submit = pool.submit

        def submitted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            run_id = args[1].ctx.run_id  # (context.run, Executor._call, the attempt)
            with execution.heartbeat._lock:
                seen.append((run_id, run_id in execution.heartbeat._held))
            return submit(fn, *args, **kwargs)

        pool.submit = submitted  # type: ignore[method-assign]
        ids = [orch.start("trip") for _ in range(3)]
        assert orch.run_due() == 3
        assert execution.heartbeat._use_process  # the keeper process was told, not only a thread
        runs = [orch.get(run_id) for run_id in ids]
    assert sorted(run_id for run_id, _ in seen) == sorted(ids)
    assert all(held for _, held in seen), seen
    assert all(run.status is saga.Status.SUCCEEDED for run in runs)

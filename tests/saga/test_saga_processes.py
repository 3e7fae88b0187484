"""Real processes on real databases: workers killed with SIGKILL inside a step and inside a wait,
four workers on PostgreSQL, two on one SQLite file (the worker is saga_worker.py)."""

from __future__ import annotations

import collections
import functools
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import saga_worker
from postgres_cluster import Cluster

from seawall import saga

WORKER = pathlib.Path(saga_worker.__file__)


def spawn(url: str, sidelog: pathlib.Path, scenario: str, expected: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), url, str(sidelog), scenario, str(expected)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def finish(proc: subprocess.Popen[bytes], timeout: float = 100.0) -> None:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out.decode(errors="replace")


def lines(sidelog: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in sidelog.read_text().splitlines()]


def definition(scenario: str, tmp_path: pathlib.Path) -> saga.Saga:
    return saga_worker.build(scenario, str(tmp_path / "unused.log"), str(tmp_path / "unused"))[0]


def check_exactly_once(orch: saga.Orchestrator, log: list[dict[str, Any]], expected: int) -> None:
    """No run lost, no step finished twice, every compensation exactly once."""
    finished = collections.Counter(
        (e["run"], e["step"], e["phase"]) for e in log if e["event"] == "ok"
    )
    runs = orch.runs(limit=expected + 10)
    assert len(runs) == expected
    for run in runs:
        assert run.status in (saga.Status.SUCCEEDED, saga.Status.COMPENSATED), run
        for step in run.steps:
            done = finished[(run.run_id, step.name, "action")]
            undone = finished[(run.run_id, step.name, "compensation")]
            if step.status in (saga.Status.SUCCEEDED, saga.Status.COMPENSATED):
                assert done == 1, (
                    run.run_id,
                    step,
                    [e for e in log if e["run"] == run.run_id and e["step"] == step.name],
                    [
                        (h.event, h.step, h.attempt, dict(h.detail))
                        for h in orch.history(run.run_id)
                    ],
                )
            else:
                assert done == 0, (run.run_id, step)
            assert undone == (1 if step.status is saga.Status.COMPENSATED else 0), (
                run.run_id,
                step,
            )
    keys = {(e["run"], e["step"], e["phase"]): set() for e in log}  # type: dict[Any, set[str]]
    for e in log:
        keys[(e["run"], e["step"], e["phase"])].add(e["key"])
    assert all(len(k) == 1 for k in keys.values())  # one idempotency key per step, across workers


def test_a_worker_killed_inside_a_step_is_taken_over_with_the_same_idempotency_key(
    sqlite_url: str, tmp_path: pathlib.Path
) -> None:
    sidelog = tmp_path / "side.log"
    with saga.Orchestrator(sqlite_url, [definition("crash_in_step", tmp_path)], hooks=()) as orch:
        for i in range(3):
            orch.start("crashy", {"i": i}, run_id=f"r{i}")
        first = spawn(sqlite_url, sidelog, "crash_in_step", 3)
        marker = pathlib.Path(str(sidelog) + ".marker")
        wait_for(marker.exists, 30.0, "the worker to block inside step b")
        assert orch.get("r0").step("b").status is saga.Status.RUNNING
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)
        killed_at = time.time()
        second = spawn(sqlite_url, sidelog, "crash_in_step", 3)
        finish(second)
        log = lines(sidelog)
        check_exactly_once(orch, log, 3)
        b = [e for e in log if e["run"] == "r0" and e["step"] == "b"]
        assert [(e["attempt"], e["event"]) for e in b] == [(1, "begin"), (2, "begin"), (2, "ok")]
        assert b[0]["pid"] != b[1]["pid"]
        assert b[0]["key"] == b[1]["key"] == "r0:b"
        # The second worker waited for the lease (1 s) to expire before taking over.
        assert b[1]["at"] >= killed_at
        run = orch.get("r0")
        assert run.status is saga.Status.SUCCEEDED
        assert run.step("b").attempt_count == 2
        assert run.step("a").attempt_count == 1  # recorded as done: never ran again
        events = [(h.event, h.step) for h in orch.history("r0")]
        assert ("lost", "b") in events


def test_a_worker_killed_inside_a_wait_keeps_the_backoff(
    sqlite_url: str, tmp_path: pathlib.Path
) -> None:
    sidelog = tmp_path / "side.log"
    with saga.Orchestrator(sqlite_url, [definition("crash_in_wait", tmp_path)], hooks=()) as orch:
        orch.start("waity", {}, run_id="w")
        first = spawn(sqlite_url, sidelog, "crash_in_wait", 1)
        wait_for(lambda: orch.get("w").step("b").status is saga.Status.RETRYING, 30.0, "a wait")
        due = orch.get("w").step("b").next_retry_at
        assert due is not None
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)
        assert due.timestamp() - time.time() > 0.5  # killed well inside the 4 s wait
        second = spawn(sqlite_url, sidelog, "crash_in_wait", 1)
        finish(second)
        log = lines(sidelog)
        check_exactly_once(orch, log, 1)
        b = [e for e in log if e["step"] == "b" and e["event"] == "begin"]
        assert [e["attempt"] for e in b] == [1, 2]
        # The restart did not reset the backoff: attempt 2 began at the logged next_retry_at.
        assert b[1]["at"] >= due.timestamp()
        assert b[1]["pid"] != b[0]["pid"]
        assert orch.get("w").status is saga.Status.SUCCEEDED


def start_fleet(
    url: str, tmp_path: pathlib.Path, workers: int, runs: int, scenario: str
) -> tuple[list[subprocess.Popen[bytes]], pathlib.Path, saga.Saga]:
    """*workers* worker processes of *scenario*, ready, and *runs* runs started; returns the
    processes, their side log and the saga."""
    sidelog = tmp_path / "side.log"
    flow = definition(scenario, tmp_path)
    with saga.Orchestrator(url, [flow], hooks=()) as orch:  # (the schema, before the workers)
        procs = [spawn(url, sidelog, scenario, runs) for _ in range(workers)]
        wait_for(
            lambda: len(list(tmp_path.glob("side.log.ready.*"))) == workers, 60.0, "the workers"
        )
        orch.start_many(
            "mixed", [{"i": i} for i in range(runs)], [f"m{i:04d}" for i in range(runs)]
        )
    return procs, sidelog, flow


def run_fleet(
    url: str, tmp_path: pathlib.Path, workers: int, runs: int, scenario: str = "mixed"
) -> None:
    procs, sidelog, flow = start_fleet(url, tmp_path, workers, runs, scenario)
    for proc in procs:
        finish(proc)
    with saga.Orchestrator(url, [flow], hooks=()) as orch:
        log = lines(sidelog)
        check_exactly_once(orch, log, runs)
        counts = orch.counts()
        assert counts.get(saga.Status.COMPENSATED, 0) > 0  # the permanent failures compensated
        assert counts.get(saga.Status.SUCCEEDED, 0) > runs // 2
        assert any(e["attempt"] > 1 for e in log)  # transient failures were retried
        assert len({e["pid"] for e in log}) == workers  # every worker took part


def test_four_workers_on_postgresql_run_1000_sagas_exactly_once(
    pg_url: str, tmp_path: pathlib.Path
) -> None:
    run_fleet(pg_url, tmp_path, workers=4, runs=1000)


def test_four_workers_of_four_attempts_at_once_on_postgresql_run_each_step_once(
    pg_url: str, tmp_path: pathlib.Path
) -> None:
    # Each worker runs up to four attempts at once: its commits write several runs (outcomes,
    # then queued runs' attempts) while its lease keeper renews the same runs. Neither waits
    # for the other (a deadlock PostgreSQL would end by aborting the worker's commit, whose
    # finished attempts would then run again elsewhere).
    run_fleet(pg_url, tmp_path, workers=4, runs=1000, scenario="mixed_concurrent")


def test_two_processes_share_one_sqlite_file(sqlite_url: str, tmp_path: pathlib.Path) -> None:
    run_fleet(sqlite_url, tmp_path, workers=2, runs=200)


def test_a_worker_survives_a_postgresql_restart(own_cluster: Cluster) -> None:
    import threading

    import seawall

    cluster = own_cluster
    attempts: list[int] = []

    def flaky(ctx: saga.StepContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("transient")
        return "ok"

    policy = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(2.0), hooks=())
    flow = saga.Saga("restart", [saga.Step("a", flaky, policy=policy)])
    # A short lease: should the restart come before the first attempt's failure is
    # committed (a loaded machine), the commit is lost with the connection and the run
    # waits for its lease to expire before a worker takes it over and retries; with the
    # default 30 s that alone would outlast the wait below.
    with saga.Orchestrator(cluster.url, [flow], poll=0.05, lease=3.0, hooks=()) as orch:
        run_id = orch.start("restart", {})
        stop = threading.Event()
        died: list[BaseException] = []

        def worker() -> None:
            try:
                orch.work(stop)
            except BaseException as exc:
                died.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        try:
            wait_for(lambda: attempts == [1], 30.0, "the first attempt")
            cluster.restart()
            with saga.Orchestrator(cluster.url, [flow], hooks=()) as reader:
                wait_for(
                    lambda: reader.get(run_id).status is saga.Status.SUCCEEDED, 30.0, "the run"
                )
        finally:
            stop.set()
            thread.join(30)
        assert died == []
        assert attempts == [1, 2]


def test_workers_through_postgresql_restarts_run_each_step_once(
    own_cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    # Three worker processes, four attempts at once each, 600 runs; the server is restarted
    # three times while they work (``pg_ctl restart -m fast``: every session ended, whatever
    # it was doing, a commit too). Each worker reconnects and settles what its ended rounds
    # left (a commit that failed may have landed): every step that succeeded ran once, and no
    # attempt is recorded as lost (the leases, 20 s, outlast the restarts).
    url, runs = own_cluster.url, 600
    procs, sidelog, flow = start_fleet(url, tmp_path, 3, runs, "restarts")

    def finished(n: int) -> bool:
        return sidelog.exists() and sidelog.read_text().count('"ok"') >= n

    for n in (300, 700, 1100):  # steps finished, of about 2,000
        wait_for(functools.partial(finished, n), 60.0, f"{n} steps")
        own_cluster.restart()
    for proc in procs:
        finish(proc)
    with saga.Orchestrator(url, [flow], hooks=()) as orch:
        check_exactly_once(orch, lines(sidelog), runs)
        lost = [
            (run.run_id, h.step, h.attempt)
            for run in orch.runs(limit=runs)
            for h in orch.history(run.run_id)
            if h.event in ("lost", "fenced")
        ]
    assert lost == []


@pytest.mark.slow
def test_a_step_holding_the_gil_past_its_lease_runs_in_one_worker(
    sqlite_url: str, tmp_path: pathlib.Path
) -> None:
    # Two workers with a 1 s lease; the step holds the GIL for seconds, which starves every
    # thread of its worker (the lease thread too). The keeper process renews the lease: the
    # other worker, polling all along, never runs the step a second time.
    sidelog = tmp_path / "side.log"
    with saga.Orchestrator(sqlite_url, [definition("gil", tmp_path)], hooks=()) as orch:
        workers = [spawn(sqlite_url, sidelog, "gil", 1) for _ in range(2)]
        wait_for(lambda: len(list(tmp_path.glob("side.log.ready.*"))) == 2, 60.0, "the workers")
        orch.start("gil", {}, run_id="r0")
        for worker in workers:
            finish(worker)
        log = lines(sidelog)
        begun = [e for e in log if e["event"] == "begin"]
        assert len(begun) == 1, begun
        run = orch.get("r0")
        assert run.status is saga.Status.SUCCEEDED
        assert run.step("hog").attempt_count == 1
        assert [h.event for h in orch.history("r0")].count("lost") == 0


@pytest.mark.slow
def test_workers_killed_again_and_again_lose_nothing(
    store_url: str, tmp_path: pathlib.Path
) -> None:
    # A worker is SIGKILLed at a seeded random moment, six times, then a last one finishes.
    # Nothing is lost, every run ends as its steps did, each run's attempts are charged only
    # for attempts that began (at most `concurrency` a kill began without running), and a kill
    # repeats at most `concurrency` side effects (attempts that finished, not yet recorded).
    import random

    runs, kills, concurrency = 120, 6, 1
    rng = random.Random(7)
    sidelog = tmp_path / "side.log"
    sidelog.touch()
    with saga.Orchestrator(store_url, [definition("mixed", tmp_path)], hooks=()) as orch:
        orch.start_many(
            "mixed", [{"i": i} for i in range(runs)], [f"k{i:03d}" for i in range(runs)]
        )
        for _ in range(kills):
            size = sidelog.stat().st_size
            proc = spawn(store_url, sidelog, "mixed", runs)
            wait_for(
                lambda n=size, p=proc: sidelog.stat().st_size > n or p.poll() is not None,
                60.0,
                "the worker's first step",
            )
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
        finish(spawn(store_url, sidelog, "mixed", runs))
        log = lines(sidelog)
        found = orch.runs(limit=runs + 10)
        assert len(found) == runs
        began = collections.Counter(
            (e["run"], e["step"], e["phase"]) for e in log if e["event"] == "begin"
        )
        done = collections.Counter(
            (e["run"], e["step"], e["phase"]) for e in log if e["event"] == "ok"
        )
        unbegun = 0
        for run in found:
            assert run.status in (saga.Status.SUCCEEDED, saga.Status.COMPENSATED), run
            for step in run.steps:
                unbegun += max(0, step.attempt_count - began[(run.run_id, step.name, "action")])
                if step.status is saga.Status.SUCCEEDED:
                    assert done[(run.run_id, step.name, "action")] >= 1, (run.run_id, step)
        assert unbegun <= kills * concurrency
        repeated = sum(n - 1 for n in done.values() if n > 1)
        assert repeated <= kills * concurrency, repeated
        keys: dict[Any, set[str]] = collections.defaultdict(set)
        for e in log:
            keys[(e["run"], e["step"], e["phase"])].add(e["key"])
            assert e["key"].startswith(f"{e['run']}:{e['step']}")  # its own row's key
        assert all(len(k) == 1 for k in keys.values())

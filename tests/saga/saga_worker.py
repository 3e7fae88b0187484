"""A saga worker process for the tests that kill and run real processes.

Usage: ``python saga_worker.py URL SIDELOG SCENARIO [EXPECTED_RUNS]``. The worker runs the
scenario's saga with ``Orchestrator.work`` until EXPECTED_RUNS runs are settled (or 100 s pass).
Every action and compensation appends one JSON line to SIDELOG (``O_APPEND``, one ``write``) when
it begins and one when it returns, so the test counts executions outside the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import sys
import threading
import time
from typing import Any

import seawall
from seawall import saga


def log(path: str, ctx: saga.StepContext, event: str) -> None:
    line = {
        "run": ctx.run_id,
        "step": ctx.step,
        "phase": "compensation" if ctx.compensating else "action",
        "attempt": ctx.attempt,
        "key": ctx.idempotency_key,
        "event": event,
        "at": time.time(),
        "pid": os.getpid(),
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def chance(*parts: Any) -> float:
    """A number in [0, 1) fixed by *parts*: the same in every process."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def build(scenario: str, sidelog: str, marker: str) -> tuple[saga.Saga, float]:
    """The scenario's saga and the lease its workers use."""
    fast = seawall.RetryPolicy(
        max_attempts=6, backoff=seawall.Backoff(base=0.01, cap=0.05), hooks=()
    )

    def step(name: str, behaviour: Any, policy: seawall.RetryPolicy = fast) -> saga.Step:
        def act(ctx: saga.StepContext) -> dict[str, Any]:
            log(sidelog, ctx, "begin")
            behaviour(ctx)
            log(sidelog, ctx, "ok")
            return {"step": ctx.step, "attempt": ctx.attempt}

        return saga.Step(name, act, compensate=act, policy=policy)

    def ok(ctx: saga.StepContext) -> None:
        pass

    if scenario == "crash_in_step":
        # The first attempt of step b of run r0 blocks (the test kills the worker there).
        def block_once(ctx: saga.StepContext) -> None:
            if ctx.run_id == "r0" and not ctx.compensating and ctx.attempt == 1:
                with open(marker, "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(600)

        return saga.Saga("crashy", [step("a", ok), step("b", block_once), step("c", ok)]), 1.0

    if scenario == "crash_in_wait":
        # Step b fails once, then waits 4 s (a row) before its second attempt.
        waiting = seawall.RetryPolicy(
            max_attempts=3, backoff=seawall.Backoff.constant(4.0), hooks=()
        )

        def fail_once(ctx: saga.StepContext) -> None:
            if ctx.attempt == 1 and not ctx.compensating:
                raise ConnectionError("transient")

        return saga.Saga(
            "waity", [step("a", ok), step("b", fail_once, waiting), step("c", ok)]
        ), 1.0

    if scenario in ("mixed", "mixed_concurrent", "restarts"):
        # Transient failures everywhere (20% of actions, 10% of compensations), and a
        # permanent one in 4% of the runs' step c or b: those runs compensate.
        def flaky(ctx: saga.StepContext) -> None:
            time.sleep(0.002)  # an action does I/O: the store is free meanwhile
            x = chance(ctx.run_id, ctx.step, ctx.compensating, ctx.attempt)
            if (
                not ctx.compensating
                and ctx.step in ("b", "c")
                and chance(ctx.run_id, ctx.step) < 0.02
            ):
                raise seawall.Permanent("declined")
            if x < (0.1 if ctx.compensating else 0.2):
                raise ConnectionError("transient")

        # Through restarts of the database, leases outlast the outage: what a worker's round
        # left in doubt is its own to settle.
        lease = 20.0 if scenario == "restarts" else 5.0
        return saga.Saga("mixed", [step("a", flaky), step("b", flaky), step("c", flaky)]), lease

    if scenario == "gil":
        # The step holds the GIL for seconds (a loop in C), longer than the 1 s lease: the
        # worker's threads are starved meanwhile, its lease keeper process is not.
        def hog(ctx: saga.StepContext) -> None:
            sum(range(10**8))

        return saga.Saga("gil", [step("hog", hog)]), 1.0

    raise SystemExit(f"unknown scenario {scenario!r}")


def main() -> int:
    url, sidelog, scenario = sys.argv[1:4]
    expected = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    marker = sidelog + ".marker"
    definition, lease = build(scenario, sidelog, marker)
    random.seed(os.getpid())
    stop = threading.Event()
    batch = 8 if scenario == "mixed" else 32  # small batches: every worker gets a share
    # The kill inside a step checks that nothing else ran twice: no other attempt may be in
    # flight when the blocked one is killed (with more, their unrecorded outcomes would be
    # repeated, as at-least-once allows; benchmarks/saga_kills.py counts those).
    concurrency = 4 if scenario in ("mixed_concurrent", "restarts") else 1
    with saga.Orchestrator(
        url,
        [definition],
        lease=lease,
        poll=0.02,
        batch=batch,
        concurrency=concurrency,
        hooks=(),
    ) as orch:
        watchers = [saga.Orchestrator(url, [definition], hooks=())]
        with open(f"{sidelog}.ready.{os.getpid()}", "w"):
            pass

        def watch() -> None:
            deadline = time.monotonic() + 100.0
            while time.monotonic() < deadline:
                try:
                    counts = watchers[-1].counts()
                except Exception:  # the database restarting: connect again
                    time.sleep(0.3)
                    with contextlib.suppress(Exception):
                        watchers.append(saga.Orchestrator(url, [definition], hooks=()))
                    continue
                settled = sum(
                    n for s, n in counts.items() if s.final or s is saga.Status.NEEDS_ATTENTION
                )
                if settled >= expected:
                    break
                time.sleep(0.3)
            stop.set()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        orch.work(stop)
        thread.join()
        for watcher in watchers:
            with contextlib.suppress(Exception):
                watcher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

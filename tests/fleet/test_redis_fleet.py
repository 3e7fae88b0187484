"""Four real processes share one budget and one breaker through a real redis-server."""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from redis_process import RedisServer

from seawall import redis as fleet_redis

WORKER = str(pathlib.Path(__file__).with_name("fleet_worker.py"))
PROCESSES = 4


def run_fleet(
    server: RedisServer | str,
    namespace: str,
    modes: Sequence[str],
    arg: str = "",
    before_go: Any = None,
) -> list[dict[str, Any]]:
    """Start one worker per mode (on *server*, or a redis:// URL), wait until each is ready,
    let them go together, and return what each printed."""
    url = server if isinstance(server, str) else server.url
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, mode, url, namespace, arg],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for mode in modes
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        if before_go is not None:
            before_go()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == 0
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_one_budget_bounds_the_whole_fleet(redis_server: RedisServer, namespace: str) -> None:
    calls = 400
    shared = run_fleet(redis_server, namespace, ["amplify-shared"] * PROCESSES, str(calls))
    local = run_fleet(redis_server, namespace, ["amplify-local"] * PROCESSES, str(calls))
    total_calls = PROCESSES * calls
    floor = 5.0 * 10.0  # min_per_second * window: one floor
    shared_retries = sum(r["attempts"] for r in shared) - total_calls
    local_retries = sum(r["attempts"] for r in local) - total_calls
    # Shared: 10% of the fleet's calls plus one floor for the whole fleet.
    assert shared_retries <= 0.1 * total_calls + floor
    assert shared_retries >= 0.1 * total_calls  # the budget was spent, not refused wholesale
    # Local: one floor per process.
    assert local_retries == PROCESSES * (0.1 * calls + floor)
    assert all(not r["stats"]["degraded"] for r in shared)


def test_a_breaker_opened_by_one_process_fails_fast_in_the_others(
    redis_server: RedisServer, namespace: str
) -> None:
    results = run_fleet(redis_server, namespace, ["open"] + ["watch"] * (PROCESSES - 1))
    opened_at = results[0]["opened_at"]
    interval = 0.05
    for watcher in results[1:]:
        assert watcher["calls"] > 0  # healthy calls went through before
        assert watcher["failed_fast_at"] is not None
        # Within one sync interval (plus scheduling on a busy machine).
        assert watcher["failed_fast_at"] - opened_at <= interval + 0.2


def test_exactly_n_half_open_probes_across_the_fleet(
    redis_server: RedisServer, namespace: str
) -> None:
    fleet = fleet_redis.Fleet(redis_server.url, namespace=namespace, interval=None)
    breaker = fleet_redis.SharedCircuitBreaker(
        fleet,
        "breaker",
        minimum_calls=10,
        window_calls=50,
        open_duration=0.5,
        open_jitter=0.0,
        half_open_probes=2,
    )

    def open_now() -> None:
        for _ in range(10):
            with contextlib.suppress(ZeroDivisionError):
                breaker.call(lambda: 1 / 0)
        assert fleet.sync()
        assert breaker.state == "open"

    started = time.monotonic()
    results = run_fleet(redis_server, namespace, ["probe"] * PROCESSES, "1.2", open_now)
    assert time.monotonic() - started > 1.0
    assert sum(r["probes"] for r in results) == 2
    assert sum(r["refused"] for r in results) > 0
    fleet.close()

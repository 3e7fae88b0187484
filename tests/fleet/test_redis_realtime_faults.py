"""Real processes, real time: a prober killed with its probe, and a fleet whose Redis flaps.

Bounds are checked with margins that hold on a loaded machine: the faults fixed here made the
breaker hang for ever and the budget allow several floors, far beyond any margin.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time

import pytest
from flapping_proxy import FlappingProxy, flap_schedule
from redis_process import RedisServer
from test_redis_fleet import PROCESSES, WORKER, run_fleet

import seawall
from seawall import redis as fleet_redis

pytestmark = pytest.mark.slow


def test_a_killed_prober_holds_the_breaker_half_open_no_longer_than_probe_timeout(
    redis_server: RedisServer, namespace: str
) -> None:
    probe_timeout, open_duration = 1.0, 0.5
    fleet = fleet_redis.Fleet(redis_server.url, namespace=namespace, interval=0.05)
    breaker = fleet_redis.SharedCircuitBreaker(
        fleet,
        "breaker",
        minimum_calls=10,
        window_calls=50,
        open_duration=open_duration,
        open_jitter=0.0,
        probe_timeout=probe_timeout,
    )
    for _ in range(10):
        with contextlib.suppress(ZeroDivisionError):
            breaker.call(lambda: 1 / 0)
    assert fleet.sync()
    assert breaker.state == "open"
    with subprocess.Popen(
        [sys.executable, WORKER, "hold-probe", redis_server.url, namespace],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as prober:
        try:
            assert prober.stdout is not None and prober.stdin is not None
            assert prober.stdout.readline().strip() == "ready"
            prober.stdin.write("go\n")
            prober.stdin.flush()
            probe_at = json.loads(prober.stdout.readline())["probe_at"]
        finally:
            prober.kill()  # SIGKILL: the probe never reports
            prober.wait()
    # This process keeps calling, as every process of the fleet would.
    refusals: list[tuple[float, str]] = []
    closed_at = None
    deadline = time.time() + 10 * (probe_timeout + open_duration)
    while time.time() < deadline:
        try:
            permit = breaker.acquire()
        except seawall.CircuitOpen as refused:
            refusals.append((time.time(), refused.state))
        else:
            breaker.record(permit)  # the dependency is healthy again
            if breaker.state == "closed":
                closed_at = time.time()
                break
        time.sleep(0.01)
    fleet.close()
    half_open = [t - probe_at for t, state in refusals if state == "half_open"]
    closed = closed_at - probe_at if closed_at is not None else None
    print(
        f"\nkilled prober: half-open for {max(half_open, default=0):.3f} s, closed after {closed}"
    )
    assert half_open  # the slot was held for a while...
    # ...but never much past probe_timeout (the margin covers a busy machine and one interval).
    assert max(half_open) <= probe_timeout + 1.0
    assert "open" in {state for _, state in refusals}  # it opened again, as the local breaker
    assert closed_at is not None  # and a new probe closed it
    assert closed_at - probe_at <= 3 * (probe_timeout + open_duration)


def test_a_fleet_behind_a_flapping_redis_keeps_one_floor(
    redis_server: RedisServer, namespace: str
) -> None:
    calls, pause = 400, 0.005
    schedule = flap_schedule(seed=25, duration=3.0, up=(0.1, 0.4), down=(0.01, 0.15))
    with FlappingProxy(redis_server.port) as proxy:
        started = []
        results = run_fleet(
            proxy.url,
            namespace,
            ["amplify-paced"] * PROCESSES,
            f"{calls}:{pause}",
            before_go=lambda: (proxy.follow(schedule), started.append(time.monotonic())),
        )
        downs = proxy.downs
    total_calls = PROCESSES * calls
    retries = sum(r["attempts"] for r in results) - total_calls
    seconds = max(r["seconds"] for r in results)
    floor = 5.0 * 10.0
    # One sync interval (the default 0.1 s) of the fleet's calls, counted late.
    worth = 0.1 * total_calls * 0.1 / seconds
    local = PROCESSES * (0.1 * calls + floor)  # four plain local budgets
    periods = sum(r["stats"]["degraded_periods"] for r in results)
    print(
        f"\nflap: {downs} drops in {seconds:.2f} s, {periods} degraded periods; "
        f"{retries} retries for {total_calls} calls; bound {0.1 * total_calls + floor + worth:.1f}"
        f"; four local budgets {local:.0f}"
    )
    assert downs >= 5 and periods >= PROCESSES  # Redis did flap, and the processes saw it
    assert retries <= 0.1 * total_calls + floor + worth
    assert retries >= 0.1 * total_calls * 0.5  # retries were still allowed, not refused wholesale

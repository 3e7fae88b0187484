"""Hedge hooks and metrics: hedges sent, won and refused, in memory and in Prometheus."""

from __future__ import annotations

import random

import anyio
import prometheus_client
import pytest

import seawall
from backends import Run
from seawall import Hedge, VirtualClock
from seawall.instrumentation import Counters, MetricsHook
from seawall.instrumentation.prometheus import PrometheusRecorder
from seawall.lowlevel import HedgeDelayPassed, HedgeEvent


def drive(run: Run, policy: Hedge, latencies: list[float], clock: VirtualClock) -> None:
    """One call per latency: the first attempt takes it, every extra attempt takes 10 ms."""

    async def main() -> None:
        for latency in latencies:
            attempts = 0

            async def fetch(latency: float = latency) -> str:
                nonlocal attempts
                attempts += 1
                await anyio.sleep(latency if attempts == 1 else 0.01)
                return "ok"

            assert await policy.acall(fetch) == "ok"

    run(main(), clock)


def test_hooks_receive_hedges_and_wins(run: Run) -> None:
    clock = VirtualClock()
    events: list[HedgeEvent] = []
    policy = Hedge(0.05, name="search", clock=clock, hooks=[events.append])
    # Fast (no hedge); slow (hedged, the hedge wins at 60 ms); 55 ms (hedged, the first wins).
    drive(run, policy, [0.01, 1.0, 0.055], clock)
    assert [(e.kind, e.policy, e.attempt) for e in events] == [
        ("hedge", "search", 2),
        ("win", "search", 2),
        ("hedge", "search", 2),
    ]
    assert isinstance(events[0].error, HedgeDelayPassed)
    assert events[1].error is None
    assert (policy.calls, policy.hedges, policy.wins) == (3, 2, 1)


def test_budget_refusal_is_reported(run: Run) -> None:
    clock = VirtualClock()
    counters = Counters()
    # Two failures empty a two-token bucket below its threshold: it refuses every withdrawal.
    bucket = seawall.TokenBucket(max_tokens=2.0, token_ratio=0.1)
    bucket.on_failure(TimeoutError())
    bucket.on_failure(TimeoutError())
    policy = Hedge(
        0.05, name="search", budget=bucket, clock=clock, hooks=[MetricsHook(counters).hedge_hook]
    )
    drive(run, policy, [1.0], clock)
    assert counters.get("budget_refusals", "search") == 1
    assert counters.get("hedges", "search") == 0


def test_counters_match_the_policys_own_counts(run: Run) -> None:
    clock = VirtualClock()
    counters = Counters()
    rng = random.Random(3)
    policy = Hedge(
        0.05,
        max_attempts=3,
        name="search",
        clock=clock,
        hooks=[MetricsHook(counters).hedge_hook],
    )
    drive(run, policy, [rng.choice([0.01, 0.07, 2.0]) for _ in range(200)], clock)
    assert policy.hedges > 0 and policy.wins > 0
    assert counters.get("hedges", "search") == policy.hedges
    assert counters.get("hedge_wins", "search") == policy.wins
    assert 'seawall_hedges_total{policy="search"}' in counters.format()


def test_prometheus_registry_counts_hedges_and_wins(run: Run) -> None:
    clock = VirtualClock()
    registry = prometheus_client.CollectorRegistry()
    hook = MetricsHook(PrometheusRecorder(registry))
    policy = Hedge(0.05, name="search", clock=clock, hooks=[hook.hedge_hook])
    drive(run, policy, [1.0, 1.0, 0.01, 0.055], clock)
    assert registry.get_sample_value("seawall_hedges_total", {"policy": "search"}) == 3
    assert registry.get_sample_value("seawall_hedge_wins_total", {"policy": "search"}) == 2
    text = prometheus_client.generate_latest(registry).decode()
    assert 'seawall_hedge_wins_total{policy="search"} 2.0' in text


def test_hooks_are_validated() -> None:
    with pytest.raises(TypeError, match="hooks"):
        Hedge(0.05, hooks=[3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="hooks"):
        Hedge(0.05, hooks=print)  # type: ignore[arg-type]

"""The Prometheus adapter against a real prometheus_client registry."""

from __future__ import annotations

import asyncio
from typing import Any

import prometheus_client
import pytest

import seawall
from seawall.instrumentation import MetricsHook
from seawall.instrumentation.prometheus import PrometheusRecorder
from seawall.server import LoadShedder
from seawall.testing import VirtualClock, run


def sample(registry: prometheus_client.CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_policy_metrics_land_in_the_registry() -> None:
    registry = prometheus_client.CollectorRegistry()
    hook = MetricsHook(PrometheusRecorder(registry))
    clock = VirtualClock()
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        clock.advance(0.03)
        if calls < 3:
            raise TimeoutError("slow")
        return "ok"

    p = seawall.RetryPolicy(name="users", clock=clock, hooks=[hook], max_attempts=3)
    assert p.call(flaky) == "ok"
    assert sample(registry, "seawall_attempts_total", policy="users", outcome="failure") == 2
    assert sample(registry, "seawall_attempts_total", policy="users", outcome="success") == 1
    assert sample(registry, "seawall_retries_total", policy="users") == 2
    count = sample(
        registry, "seawall_attempt_duration_seconds_count", policy="users", outcome="failure"
    )
    assert count == 2
    # Both failed attempts took 30 ms: they fall in the 50 ms bucket, not in the 25 ms one.
    le = {"policy": "users", "outcome": "failure"}
    assert (
        registry.get_sample_value("seawall_attempt_duration_seconds_bucket", {**le, "le": "0.025"})
        == 0
    )
    assert (
        registry.get_sample_value("seawall_attempt_duration_seconds_bucket", {**le, "le": "0.05"})
        == 2
    )


def test_breaker_and_shed_metrics_land_in_the_registry() -> None:
    registry = prometheus_client.CollectorRegistry()
    recorder = PrometheusRecorder(registry)
    hook = MetricsHook(recorder)
    clock = VirtualClock()
    breaker = seawall.CircuitBreaker(
        name="db", minimum_calls=1, window_calls=1, clock=clock, hooks=[hook.breaker_hook]
    )
    breaker.isolate()
    breaker.reset()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(1.0)

    shedder = LoadShedder(app, max_concurrency=1, max_queue=0, metrics=recorder, clock=clock)

    async def main() -> None:
        async def noop() -> Any:
            return {"type": "http.request"}

        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "headers": []}
        await asyncio.gather(shedder(scope, noop, send), shedder(scope, noop, send))
        assert [m["status"] for m in sent if "status" in m] == [503]

    run(main(), clock)
    recorder.hedge("search")
    assert (
        sample(registry, "seawall_breaker_transitions_total", breaker="db", state="isolated") == 1
    )
    assert sample(registry, "seawall_breaker_transitions_total", breaker="db", state="closed") == 1
    assert sample(registry, "seawall_sheds_total", server="server", reason="queue_full") == 1
    assert sample(registry, "seawall_hedges_total", policy="search") == 1


def test_exposition_lists_every_metric_name() -> None:
    registry = prometheus_client.CollectorRegistry()
    PrometheusRecorder(registry).attempt("users", "success", 0.01)
    text = prometheus_client.generate_latest(registry).decode()
    for name in (
        "seawall_attempts_total",
        "seawall_retries_total",
        "seawall_budget_refusals_total",
        "seawall_give_ups_total",
        "seawall_breaker_transitions_total",
        "seawall_hedges_total",
        "seawall_hedge_wins_total",
        "seawall_sheds_total",
        "seawall_attempt_duration_seconds",
    ):
        assert f"# HELP {name} " in text
    assert 'seawall_attempts_total{outcome="success",policy="users"} 1.0' in text


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="registry"):
        PrometheusRecorder(registry=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="buckets"):
        PrometheusRecorder(prometheus_client.CollectorRegistry(), buckets=[0.1, -1])

"""The OpenTelemetry adapter against the real SDK with an in-memory metric reader."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import seawall
from seawall.instrumentation import MetricsHook
from seawall.instrumentation.otel import OpenTelemetryRecorder
from seawall.testing import VirtualClock


def collect(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, Any] = {}
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            assert scope_metrics.scope.name == "seawall"
            for metric in scope_metrics.metrics:
                found[metric.name] = metric
    return found


def points(metric: Any) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {tuple(sorted(p.attributes.items())): p for p in metric.data.data_points}


@pytest.fixture
def reader() -> Any:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield reader, provider
    provider.shutdown()


def test_policy_metrics_reach_the_sdk(reader: Any) -> None:
    memory, provider = reader
    hook = MetricsHook(OpenTelemetryRecorder(provider))
    clock = VirtualClock()
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        clock.advance(0.2)
        if calls == 1:
            raise ConnectionError("reset")
        return "ok"

    seawall.RetryPolicy(name="users", clock=clock, hooks=[hook]).call(flaky)
    found = collect(memory)
    attempts = points(found["seawall.attempts"])
    assert attempts[(("outcome", "failure"), ("policy", "users"))].value == 1
    assert attempts[(("outcome", "success"), ("policy", "users"))].value == 1
    assert points(found["seawall.retries"])[(("policy", "users"),)].value == 1
    duration = found["seawall.attempt_duration"]
    assert duration.unit == "s"
    success = points(duration)[(("outcome", "success"), ("policy", "users"))]
    assert success.count == 1
    assert success.sum == pytest.approx(0.2)


def test_every_signal_has_an_instrument(reader: Any) -> None:
    memory, provider = reader
    recorder = OpenTelemetryRecorder(provider)
    recorder.attempt("users", "success", 0.001)
    recorder.retry("users")
    recorder.budget_refusal("users")
    recorder.give_up("users", "budget")
    recorder.breaker_transition("db", "open")
    recorder.hedge("search")
    recorder.shed("api", "deadline")
    recorder.shed("api", "deadline")
    found = collect(memory)
    assert set(found) == {
        "seawall.attempts",
        "seawall.attempt_duration",
        "seawall.retries",
        "seawall.budget_refusals",
        "seawall.give_ups",
        "seawall.breaker_transitions",
        "seawall.hedges",
        "seawall.sheds",
    }
    assert points(found["seawall.sheds"])[(("reason", "deadline"), ("server", "api"))].value == 2
    assert points(found["seawall.breaker_transitions"])[(("breaker", "db"), ("state", "open"))]

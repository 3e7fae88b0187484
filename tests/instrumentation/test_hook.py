"""MetricsHook and Counters: what policies, breakers and servers report, on virtual time."""

from __future__ import annotations

import pytest

import seawall
from seawall.instrumentation import METRICS, Counters, MetricsHook, Recorder
from seawall.testing import VirtualClock, run


class Flaky:
    """Fails *failures* times (each attempt taking *latency* virtual seconds), then returns."""

    def __init__(self, clock: VirtualClock, failures: int, latency: float = 0.25) -> None:
        self.clock = clock
        self.failures = failures
        self.latency = latency
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        self.clock.advance(self.latency)
        if self.calls <= self.failures:
            raise ConnectionError(f"failure {self.calls}")
        return "ok"

    async def acall(self) -> str:
        return self()


def policy(clock: VirtualClock, hook: MetricsHook, **kw: object) -> seawall.RetryPolicy:
    return seawall.RetryPolicy(
        name="users",
        clock=clock,
        backoff=seawall.Backoff.constant(1.0),
        hooks=[seawall.logging_hook, hook],
        **kw,  # type: ignore[arg-type]
    )


def test_every_attempt_and_its_latency_is_counted() -> None:
    clock = VirtualClock()
    counters = Counters()
    p = policy(clock, MetricsHook(counters), max_attempts=4)
    assert p.call(Flaky(clock, failures=2)) == "ok"
    assert counters.get("attempts", "users", "failure") == 2
    assert counters.get("attempts", "users", "success") == 1
    assert counters.get("retries", "users") == 2
    assert counters.get("attempt_duration_seconds_count", "users", "success") == 1
    assert counters.get("attempt_duration_seconds_sum", "users", "success") == pytest.approx(0.25)
    # Waits between attempts are not attempt latency.
    assert counters.get("attempt_duration_seconds_sum", "users", "failure") == pytest.approx(0.5)
    assert counters.total("give_ups") == 0


def test_async_calls_report_the_same() -> None:
    clock = VirtualClock()
    counters = Counters()
    p = policy(clock, MetricsHook(counters), max_attempts=2)
    flaky = Flaky(clock, failures=5)
    with pytest.raises(ConnectionError):
        run(p.acall(flaky.acall), clock)
    assert counters.get("attempts", "users", "failure") == 2
    assert counters.get("retries", "users") == 1
    assert counters.get("give_ups", "users", "attempts_exhausted") == 1


def test_give_ups_are_counted_by_reason() -> None:
    clock = VirtualClock()
    counters = Counters()
    hook = MetricsHook(counters)
    p = policy(clock, hook)

    def bad_input() -> None:
        raise seawall.Permanent("no such user")

    with pytest.raises(seawall.Permanent):
        p.call(bad_input)
    seawall.set_enabled(False, name="users")
    with pytest.raises(ConnectionError):
        p.call(Flaky(clock, failures=1))
    assert counters.get("give_ups", "users", "not_retryable") == 1
    assert counters.get("give_ups", "users", "disabled") == 1
    assert counters.get("attempts", "users", "failure") == 2


def test_budget_refusals_are_counted() -> None:
    clock = VirtualClock()
    counters = Counters()
    budget = seawall.RetryBudget(ratio=0.01, min_per_second=0.0, clock=clock)
    p = policy(clock, MetricsHook(counters), budget=budget)
    with pytest.raises(ConnectionError):
        p.call(Flaky(clock, failures=10))
    assert counters.get("budget_refusals", "users") == 1
    assert counters.get("give_ups", "users", "budget") == 1
    assert counters.get("retries", "users") == 0


def test_breaker_transitions_are_counted_by_state_entered() -> None:
    clock = VirtualClock()
    counters = Counters()
    breaker = seawall.CircuitBreaker(
        name="db",
        minimum_calls=2,
        window_calls=2,
        open_duration=5.0,
        open_jitter=0.0,
        clock=clock,
        hooks=[MetricsHook(counters).breaker_hook],
    )
    for _ in range(2):
        with pytest.raises(ConnectionError):
            breaker.call(Flaky(clock, failures=1))
    clock.advance(6.0)
    assert breaker.call(lambda: "ok") == "ok"
    assert counters.get("breaker_transitions", "db", "open") == 1
    assert counters.get("breaker_transitions", "db", "half_open") == 1
    assert counters.get("breaker_transitions", "db", "closed") == 1


def test_labels_stay_bounded_whatever_the_names() -> None:
    clock = VirtualClock()
    counters = Counters()
    hook = MetricsHook(counters)
    for i in range(500):
        seawall.RetryPolicy(name=f"https://example.test/users/{i}", clock=clock, hooks=[hook]).call(
            lambda: None
        )
    names = {key[1] for key in counters.snapshot() if key[0] == "attempts"}
    assert len(names) == 201
    assert "other" in names
    assert counters.total("attempts") == 500


def test_only_hooks_that_ask_see_success_events_and_plain_policies_keep_the_fast_path() -> None:
    seen: list[str] = []
    plain = seawall.RetryPolicy(hooks=[lambda e: seen.append(e.kind)])
    assert plain.call(lambda: 1) == 1
    assert seen == []
    assert plain._fast
    counters = Counters()
    observed = seawall.RetryPolicy(hooks=[lambda e: seen.append(e.kind), MetricsHook(counters)])
    assert not observed._fast
    assert observed.call(lambda: 1) == 1
    assert seen == []
    assert counters.get("attempts", "", "success") == 1


def test_counters_format_uses_the_exported_metric_names() -> None:
    counters = Counters()
    counters.attempt("users", "success", 0.5)
    counters.retry("users")
    counters.shed("api", "queue_full")
    counters.breaker_transition("db", "open")
    counters.hedge("search")
    counters.hedge_win("search")
    counters.budget_refusal("users")
    counters.give_up("users", "deadline")
    counters.fleet_transition("shop", "degraded")
    text = counters.format()
    assert 'seawall_attempts_total{policy="users",outcome="success"} 1' in text
    assert 'seawall_attempt_duration_seconds_sum{policy="users",outcome="success"} 0.5' in text
    assert 'seawall_sheds_total{server="api",reason="queue_full"} 1' in text
    assert 'seawall_breaker_transitions_total{breaker="db",state="open"} 1' in text
    assert 'seawall_hedges_total{policy="search"} 1' in text
    assert 'seawall_hedge_wins_total{policy="search"} 1' in text
    assert 'seawall_give_ups_total{policy="users",reason="deadline"} 1' in text
    assert 'seawall_fleet_transitions_total{fleet="shop",state="degraded"} 1' in text
    for metric in METRICS:
        if metric.kind == "counter":
            assert f"{metric.prometheus_name}{{" in text


def test_recorders_implement_the_protocol_and_bad_recorders_are_refused() -> None:
    assert isinstance(Counters(), Recorder)
    with pytest.raises(TypeError, match="recorder"):
        MetricsHook(object())  # type: ignore[arg-type]

"""OpenTelemetry spans of saga runs, through the real SDK's in-memory exporter, on both stores."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import seawall
from seawall import saga
from seawall.instrumentation import Counters

START = 1_700_000_000.0


def policy(**kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("max_attempts", 5)
    kwargs.setdefault("backoff", seawall.Backoff(base=1.0, cap=60.0))
    return seawall.RetryPolicy(rng=random.Random(1), hooks=(), **kwargs)


class Traced:
    """A tracer provider writing to memory, and the hook on it."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.hook = saga.TracingHook(self.provider)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]


@pytest.fixture
def traced() -> Iterator[Traced]:
    t = Traced()
    yield t
    t.provider.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def order(failures: dict[str, int]) -> saga.Saga:
    def act(ctx: saga.StepContext) -> Any:
        if ctx.step == "ship" and not ctx.compensating:
            raise seawall.Permanent("carrier refused the address")
        if failures.get(ctx.step, 0) and not ctx.compensating:
            failures[ctx.step] -= 1
            raise ConnectionError("gateway reset")
        return {"step": ctx.step}

    return saga.Saga(
        "order",
        [
            saga.Step("reserve", act, compensate=act, policy=policy()),
            saga.Step("charge", act, compensate=act, policy=policy()),
            saga.Step("ship", act, policy=policy()),
        ],
    )


def test_a_run_its_steps_attempts_and_compensations_are_spans(
    store_url: str, traced: Traced
) -> None:
    counters = Counters()
    clock = seawall.VirtualClock(start=START)
    hooks = [traced.hook, saga.MetricsHook(counters)]
    with saga.Orchestrator(store_url, [order({"charge": 1})], clock=clock, hooks=hooks) as orch:
        run_id = orch.start("order", {"id": 42}, run_id="order-42")
        assert orch.run_until_settled(run_id).status is saga.Status.COMPENSATED
    spans = traced.spans()
    trace_id = int(saga.TracingHook.trace_id("order-42"), 16)
    # One trace for the run, one parent (the run's root, derived from its id) for every span.
    assert {s.context.trace_id for s in spans} == {trace_id}
    parents = {s.parent.span_id for s in spans if s.parent is not None}
    assert len(parents) == 1 and all(s.parent is not None and s.parent.is_remote for s in spans)
    assert all(attrs(s)["seawall.saga.run_id"] == "order-42" for s in spans)
    assert all(attrs(s)["seawall.saga.name"] == "order" for s in spans)

    first, second = sorted(
        traced.named("attempt order.charge"), key=lambda s: attrs(s)["seawall.saga.attempt"]
    )
    assert attrs(first)["seawall.saga.attempt"] == 1
    assert attrs(first)["seawall.saga.idempotency_key"] == "order-42:charge"
    assert attrs(first)["error.type"] == "ConnectionError"
    assert attrs(first)["seawall.saga.retry_delay"] > 0
    assert first.status.status_code is StatusCode.ERROR
    assert "gateway reset" in (first.status.description or "")
    assert [e.name for e in first.events] == ["exception"]
    assert attrs(second)["seawall.saga.attempt"] == 2
    assert second.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(second)

    (ship,) = traced.named("attempt order.ship")
    assert attrs(ship)["error.type"] == "Permanent"
    assert attrs(ship)["seawall.saga.give_up_reason"] == "not_retryable"
    (ship_step,) = traced.named("step order.ship")
    assert ship_step.status.status_code is StatusCode.ERROR
    (charge_step,) = traced.named("step order.charge")
    assert charge_step.status.status_code is StatusCode.UNSET
    assert charge_step.start_time is not None and first.start_time is not None
    assert charge_step.end_time is not None and second.end_time is not None
    assert charge_step.start_time <= first.start_time
    assert charge_step.end_time >= second.end_time

    # Compensations, in reverse, each spanned with its own idempotency key.
    (undo,) = traced.named("attempt order.charge.compensate")
    assert attrs(undo)["seawall.saga.idempotency_key"] == "order-42:charge:compensate"
    assert attrs(undo)["seawall.saga.phase"] == "compensation"
    assert len(traced.named("compensate order.charge")) == 1
    assert len(traced.named("compensate order.reserve")) == 1

    (run,) = traced.named("saga order")
    assert attrs(run)["seawall.saga.status"] == "COMPENSATED"
    assert run.status.status_code is StatusCode.ERROR
    assert "ship" in attrs(run)["seawall.saga.reason"]
    assert all(s.end_time is not None and s.end_time <= (run.end_time or 0) for s in spans)
    # The metrics hook beside it still counts.
    assert counters.get("attempts", "order.charge", "failure") == 1
    assert counters.get("saga_runs", "order", "COMPENSATED") == 1


def test_a_run_across_a_restart_is_one_trace(store_url: str) -> None:
    """Two orchestrators, one after the other (a restart), each with its own tracer: the
    second's spans join the first's trace, and the step it finishes begins where the first
    orchestrator began it."""
    clock = seawall.VirtualClock(start=START)
    failures = {"charge": 1}
    first, second = Traced(), Traced()
    try:
        with saga.Orchestrator(
            store_url, [order(failures)], clock=clock, hooks=[first.hook]
        ) as orch:
            run_id = orch.start("order", {"id": 7}, run_id="order-7")
            while orch.get(run_id).step("charge").attempt_count == 0:
                orch.run_due()
            assert orch.get(run_id).step("charge").status is saga.Status.RETRYING
        clock.advance(120.0)
        with saga.Orchestrator(
            store_url, [order(failures)], clock=clock, hooks=[second.hook]
        ) as orch:
            assert orch.run_until_settled(run_id).status is saga.Status.COMPENSATED
        before, after = first.spans(), second.spans()
        assert before and after
        assert {s.context.trace_id for s in before} == {s.context.trace_id for s in after}
        assert {s.parent.span_id for s in before if s.parent} == {
            s.parent.span_id for s in after if s.parent
        }
        assert [s.name for s in before if s.name == "step order.reserve"] == ["step order.reserve"]
        assert not [s for s in after if s.name == "step order.reserve"]
        (failed,) = first.named("attempt order.charge")
        (retried,) = second.named("attempt order.charge")
        assert attrs(failed)["seawall.saga.attempt"] == 1
        assert attrs(retried)["seawall.saga.attempt"] == 2
        assert attrs(retried)["seawall.saga.idempotency_key"] == "order-7:charge"
        (step,) = second.named("step order.charge")
        # The step's span starts at its first attempt, which the first orchestrator ran.
        assert step.start_time is not None and failed.end_time is not None
        assert step.start_time <= failed.end_time
        assert retried.start_time is not None and step.start_time < retried.start_time
        assert len(second.named("saga order")) == 1
        assert not first.named("saga order")
    finally:
        first.provider.shutdown()
        second.provider.shutdown()


def test_a_parked_run_and_an_ended_one_are_errors_or_not(sqlite_url: str, traced: Traced) -> None:
    clock = seawall.VirtualClock(start=START)
    down = {"on": True}

    def book(ctx: saga.StepContext) -> str:
        if down["on"]:
            raise ConnectionError("down")
        return "booked"

    hotel = saga.Saga(
        "hotel",
        [
            saga.Step(
                "book",
                book,
                on_exhausted="park",
                policy=policy(max_attempts=2, backoff=seawall.Backoff.constant(1.0)),
            )
        ],
    )
    with saga.Orchestrator(sqlite_url, [hotel], clock=clock, hooks=[traced.hook]) as orch:
        run = orch.run_until_settled(orch.start("hotel", {}, run_id="h-1"))
        assert run.status is saga.Status.NEEDS_ATTENTION
        (parked,) = traced.named("saga hotel needs attention")
        assert parked.status.status_code is StatusCode.ERROR
        assert attrs(parked)["seawall.saga.status"] == "NEEDS_ATTENTION"
        (gave_up,) = traced.named("step hotel.book")
        assert attrs(gave_up)["seawall.saga.give_up_reason"] == "attempts_exhausted"
        down["on"] = False
        orch.retry_now("h-1")
        assert orch.run_until_settled("h-1").status is saga.Status.SUCCEEDED
    (ended,) = traced.named("saga hotel")
    assert ended.status.status_code is StatusCode.UNSET
    assert attrs(ended)["seawall.saga.status"] == "SUCCEEDED"
    assert [attrs(s)["seawall.saga.attempt"] for s in traced.named("attempt hotel.book")] == [
        1,
        2,
        3,
    ]


def test_the_trace_id_is_the_run_ids_and_the_provider_is_checked() -> None:
    a = saga.TracingHook.trace_id("order-1")
    assert a == saga.TracingHook.trace_id("order-1")
    assert a != saga.TracingHook.trace_id("order-2")
    assert len(a) == 32 and int(a, 16) != 0
    with pytest.raises(TypeError, match="tracer_provider"):
        saga.TracingHook(tracer_provider=object())


def test_a_retry_held_back_by_the_budget_is_spanned_and_the_give_up_ends_the_step(
    sqlite_url: str, traced: Traced
) -> None:
    clock = seawall.VirtualClock(start=START)
    budget = seawall.RetryBudget(ratio=0.1, min_per_second=0.0, window=600.0, clock=clock)
    shared = policy(max_attempts=3, budget=budget)

    def call(ctx: saga.StepContext) -> str:
        raise ConnectionError("dependency down")

    sick = saga.Saga("sick", [saga.Step("call", call, policy=shared)])
    with saga.Orchestrator(sqlite_url, [sick], clock=clock, hooks=[traced.hook]) as orch:
        ids = [orch.start("sick", {}, run_id=f"s-{n}") for n in range(20)]
        assert orch.run_due() == 20
        held = [
            s
            for s in traced.named("attempt sick.call")
            if attrs(s).get("seawall.saga.hold_reason") == "budget"
        ]
        # The budget let 10% retry; the others' first attempts are held back, not given up.
        assert len(held) == 18
        assert all(s.status.status_code is StatusCode.ERROR for s in held)
        assert not traced.named("step sick.call")
        for run_id in ids:
            orch.run_until_settled(run_id)
    steps = traced.named("step sick.call")
    assert len(steps) == 20
    assert all(s.status.status_code is StatusCode.ERROR for s in steps)
    reasons = {attrs(s)["seawall.saga.give_up_reason"] for s in steps}
    assert "budget" in reasons
    holds = traced.named("hold sick.call")
    assert holds and all(attrs(s)["seawall.saga.hold_reason"] == "budget" for s in holds)
    assert {attrs(s)["seawall.saga.run_id"] for s in steps} == set(ids)


def test_an_attempt_lost_with_its_worker_is_an_error_span_in_the_worker_that_took_over(
    sqlite_url: str,
) -> None:
    clock = seawall.VirtualClock(start=START)
    first, second = Traced(), Traced()
    other: dict[str, saga.Orchestrator] = {}

    def slow(ctx: saga.StepContext) -> int:
        if ctx.attempt == 1:
            clock.advance(31.0)  # longer than the lease: the run is up for grabs
            assert other["b"].run_due() == 1  # another worker takes it over, and succeeds
        return ctx.attempt

    pol = policy(backoff=seawall.Backoff.constant(0.0))
    flow = saga.Saga("slow", [saga.Step("s", slow, policy=pol)])
    try:
        with (
            saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, hooks=[first.hook]) as a,
            saga.Orchestrator(
                sqlite_url, [flow], lease=30.0, clock=clock, hooks=[second.hook]
            ) as b,
        ):
            other["b"] = b
            run_id = a.start("slow", {}, run_id="slow-1")
            assert a.run_due() == 1
            assert a.get(run_id).status is saga.Status.SUCCEEDED
        lost, won = sorted(
            second.named("attempt slow.s"), key=lambda s: attrs(s)["seawall.saga.attempt"]
        )
        assert attrs(lost)["seawall.saga.attempt"] == 1
        assert attrs(lost)["error.type"] == "WorkerLost"
        assert lost.status.status_code is StatusCode.ERROR
        assert attrs(won)["seawall.saga.attempt"] == 2 and "error.type" not in attrs(won)
        # The first worker's late outcome was fenced off (not recorded); the hooks still hear of
        # the attempt it ran, in the same trace.
        assert [attrs(s)["seawall.saga.attempt"] for s in first.named("attempt slow.s")] == [1]
        # ... but not of a run it would have finished: the log says the other one did.
        assert first.named("saga slow") == [] and len(second.named("saga slow")) == 1
        assert {s.context.trace_id for s in first.spans()} == {lost.context.trace_id}
        assert {s.context.trace_id for s in second.spans()} == {
            int(saga.TracingHook.trace_id("slow-1"), 16)
        }
    finally:
        first.provider.shutdown()
        second.provider.shutdown()


def test_the_saga_package_loads_opentelemetry_only_for_the_hook() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from seawall import saga\n"
        "assert not any(m.startswith('opentelemetry') for m in sys.modules), 'at import'\n"
        "saga.TracingHook()\n"
        "assert 'opentelemetry.trace' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

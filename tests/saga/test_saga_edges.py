"""Edges: a lease lost to a slow attempt, parameters refused, awaitables from sync steps, the
worker loop on virtual time, compensate after a stuck compensation."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import seawall
from seawall import saga

START = 1_700_000_000.0


def test_a_worker_whose_lease_expired_during_a_slow_attempt_records_nothing(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = seawall.VirtualClock(start=START)
    attempts: list[int] = []
    other: dict[str, saga.Orchestrator] = {}

    def slow(ctx: saga.StepContext) -> int:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            clock.advance(31.0)  # longer than the lease: the run is up for grabs
            assert other["b"].run_due() == 1  # another worker takes it over, and succeeds
        return ctx.attempt

    pol = seawall.RetryPolicy(backoff=seawall.Backoff.constant(0.0), hooks=())
    flow = saga.Saga("slow", [saga.Step("s", slow, policy=pol)])
    with (
        saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, hooks=()) as a,
        saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, hooks=()) as b,
    ):
        other["b"] = b
        run_id = a.start("slow", {})
        caplog.set_level("WARNING", logger="seawall.saga")
        assert a.run_due() == 1
        run = a.get(run_id)
    assert attempts == [1, 2]
    assert run.status is saga.Status.SUCCEEDED
    assert run.steps[0].result == 2  # the first worker's late outcome was not recorded
    assert any("the lease was lost" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda o: o.start_many("s", "abc"), TypeError, "inputs"),
        (lambda o: o.start_many("s", [{}], run_ids=["a", "b"]), ValueError, "run_ids"),
        (lambda o: o.get("nope"), KeyError, "nope"),
        (lambda o: o.run_until_settled("nope"), KeyError, "nope"),
        (lambda o: o.work(stop=1), TypeError, "stop"),
        (lambda o: o.runs(limit=0), ValueError, "limit"),
    ],
)
def test_bad_calls(sqlite_url: str, call: Any, error: type[Exception], message: str) -> None:
    flow = saga.Saga("s", [saga.Step("a", lambda ctx: None)])
    with saga.Orchestrator(sqlite_url, [flow], hooks=()) as orch:
        with pytest.raises(error, match=message):
            call(orch)
        assert "saga.Orchestrator" in repr(orch)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"worker_id": ""}, "worker_id"), ({"hooks": "log"}, "hooks")],
)
def test_bad_orchestrator_keywords(sqlite_url: str, kwargs: dict[str, Any], message: str) -> None:
    flow = saga.Saga("s", [saga.Step("a", lambda ctx: None)])
    with pytest.raises(TypeError, match=message):
        saga.Orchestrator(sqlite_url, [flow], **kwargs)
    with pytest.raises(TypeError, match="sagas"):
        saga.Orchestrator(sqlite_url, flow)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"saga\.Saga objects"):
        saga.Orchestrator(sqlite_url, [1])  # type: ignore[list-item]


def test_a_sync_step_that_returns_an_awaitable_fails_permanently(sqlite_url: str) -> None:
    async def later() -> int:
        return 1

    def wrong(ctx: saga.StepContext) -> Any:
        return later()

    clock = seawall.VirtualClock(start=START)
    flow = saga.Saga("s", [saga.Step("a", wrong)])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        run = orch.run_until_settled(orch.start("s", {}))
    assert run.status is saga.Status.COMPENSATED
    assert run.steps[0].attempt_count == 1
    assert "declare it `async def`" in (run.steps[0].last_error or "")


def test_async_steps_on_the_system_clock(sqlite_url: str) -> None:
    async def step(ctx: saga.StepContext) -> str:
        await asyncio.sleep(0)
        return ctx.step

    flow = saga.Saga("s", [saga.Step("a", step), saga.Step("b", step)])
    with saga.Orchestrator(sqlite_url, [flow], hooks=()) as orch:
        run = orch.run_until_settled(orch.start("s", {}))
    assert [s.result for s in run.steps] == ["a", "b"]


def test_the_worker_loop_sleeps_on_virtual_time_until_the_next_retry(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    stop = threading.Event()

    def flaky(ctx: saga.StepContext) -> int:
        if ctx.attempt < 3:
            raise ConnectionError("x")
        return ctx.attempt

    def done(event: saga.SagaEvent) -> None:
        if event.kind == "run" and event.status.final:
            stop.set()

    pol = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(60.0), hooks=())
    flow = saga.Saga("s", [saga.Step("a", flaky, policy=pol)])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, poll=600.0, hooks=[done]) as orch:
        run_id = orch.start("s", {})
        assert orch.work(stop) == 3
        assert orch.get(run_id).status is saga.Status.SUCCEEDED
    assert clock.now() == pytest.approx(START + 120.0)


def test_an_operators_retry_now_reaches_a_waiting_worker_within_poll(store_url: str) -> None:
    """The worker's idle wait is at most ``poll``, whatever the old next_retry_at: an operator's
    retry_now (another process, here another orchestrator) is run a poll later, not when the
    backoff would have ended."""
    poll, backoff = 5.0, 3600.0
    stop = threading.Event()
    waits: list[float] = []

    class Operator(seawall.VirtualClock):
        """Virtual time whose first idle wait is when the operator acts."""

        def sleep(self, seconds: float) -> None:
            waits.append(seconds)
            if len(waits) == 1:
                with saga.Orchestrator(store_url, [flow], clock=self, hooks=()) as operator:
                    operator.retry_now(run_id)
            super().sleep(seconds)

    def flaky(ctx: saga.StepContext) -> int:
        if ctx.attempt == 1:
            raise ConnectionError("x")
        return ctx.attempt

    def done(event: saga.SagaEvent) -> None:
        if event.kind == "run" and event.status.final:
            stop.set()

    pol = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(backoff), hooks=())
    flow = saga.Saga("s", [saga.Step("a", flaky, policy=pol)])
    clock = Operator(start=START)
    with saga.Orchestrator(store_url, [flow], clock=clock, poll=poll, hooks=[done]) as orch:
        run_id = orch.start("s", {})
        assert orch.work(stop) == 2
        assert orch.get(run_id).status is saga.Status.SUCCEEDED
    assert waits and max(waits) <= poll
    assert clock.now() - START <= poll  # not START + 3600: the old next_retry_at


def test_compensate_after_a_compensation_gave_up_tries_it_again(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    undo_calls: list[int] = []

    def undo(ctx: saga.StepContext) -> None:
        undo_calls.append(ctx.attempt)
        if len(undo_calls) == 1:
            raise seawall.Permanent("locked")

    flow = saga.Saga(
        "s",
        [
            saga.Step("a", lambda ctx: "a", compensate=undo),
            saga.Step("b", lambda ctx: (_ for _ in ()).throw(seawall.Permanent("no"))),
        ],
    )
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        run_id = orch.start("s", {})
        assert orch.run_until_settled(run_id).status is saga.Status.NEEDS_ATTENTION
        orch.compensate(run_id)
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.COMPENSATED
    assert undo_calls == [1, 2]


def test_an_unknown_operation_is_refused(sqlite_url: str) -> None:
    from seawall.saga._operations import operate

    flow = saga.Saga("s", [saga.Step("a", lambda ctx: None)])
    with saga.Orchestrator(sqlite_url, [flow], hooks=()) as orch:
        run_id = orch.start("s", {})
        with pytest.raises(ValueError, match="operation"):
            operate(orch.store, run_id, "restart", 0.0)


def test_the_callers_one_attempt_and_deadline_do_not_reach_durable_runs(sqlite_url: str) -> None:
    from seawall.lowlevel import one_attempt

    clock = seawall.VirtualClock(start=START)
    seen: list[float] = []

    def flaky(ctx: saga.StepContext) -> int:
        seen.append(seawall.remaining())
        if ctx.attempt == 1:
            raise ConnectionError("x")
        return ctx.attempt

    flow = saga.Saga("s", [saga.Step("a", flaky)])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        run_id = orch.start("s", {})
        with one_attempt(), seawall.deadline(0.5, clock=clock):
            orch.run_due()
        step = orch.get(run_id).steps[0]
        assert step.status is saga.Status.RETRYING  # retried by the orchestrator, not delegated
        assert orch.run_until_settled(run_id).status is saga.Status.SUCCEEDED
    assert seen == [float("inf"), float("inf")]

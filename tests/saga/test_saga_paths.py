"""Less travelled paths on virtual time: a worker that dies (its lease expires), throttles,
Overloaded without a hint, metrics and log lines of holds and give-ups."""

from __future__ import annotations

import random
from typing import Any

import pytest

import seawall
from seawall import saga
from seawall.instrumentation import Counters

START = 1_700_000_000.0


class Died(KeyboardInterrupt):
    """Stands for the process dying inside an attempt: nothing after it runs in this worker."""


def test_a_worker_that_dies_inside_an_attempt_is_taken_over_after_its_lease(
    sqlite_url: str,
) -> None:
    clock = seawall.VirtualClock(start=START)
    calls: list[tuple[str, int, str]] = []
    die = {"b": True, "undo a": False}

    def act(name: str) -> Any:
        def run(ctx: saga.StepContext) -> str:
            label = ("undo " if ctx.compensating else "") + name
            calls.append((label, ctx.attempt, ctx.idempotency_key))
            if die.get(label):
                die[label] = False
                raise Died
            if name == "c":
                raise seawall.Permanent("no")
            return label

        return run

    pol = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(5.0), hooks=())
    flow = saga.Saga(
        "s",
        [
            saga.Step("a", act("a"), compensate=act("a"), policy=pol),
            saga.Step("b", act("b"), policy=pol),
            saga.Step("c", act("c"), policy=pol),
        ],
    )
    first = saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, hooks=())
    run_id = first.start("s", {})
    with pytest.raises(Died):
        first.run_due()
    assert first.get(run_id).step("b").status is saga.Status.RUNNING
    with saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, hooks=()) as second:
        assert second.run_due() == 0  # the lease still holds the run
        clock.advance(30.0)
        second.run_due()  # the lost attempt is recorded as failed: a retry 5 s later
        b = second.get(run_id).step("b")
        assert b.status is saga.Status.RETRYING
        assert b.last_error is not None and b.last_error.startswith("WorkerLost: ")
        die["undo a"] = True
        clock.advance(5.0)
        with pytest.raises(Died):  # dies again, in a compensation this time
            second.run_due()
    with saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, hooks=()) as third:
        clock.advance(30.0)
        run = third.run_until_settled(run_id)
        events = [(h.event, h.step, h.phase) for h in third.history(run_id)]
    first.close()
    assert run.status is saga.Status.COMPENSATED
    assert [c[:2] for c in calls] == [
        ("a", 1),
        ("b", 1),
        ("b", 2),
        ("c", 1),
        ("undo a", 1),
        ("undo a", 2),
    ]
    assert calls[1][2] == calls[2][2] == f"{run_id}:b"
    assert ("lost", "b", "action") in events and ("lost", "a", "compensation") in events


def test_a_step_that_must_not_run_twice_compensates_after_a_lost_attempt(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    once = seawall.RetryPolicy(max_attempts=1, hooks=())
    undone: list[str] = []

    def pay(ctx: saga.StepContext) -> None:
        raise Died

    flow = saga.Saga(
        "s",
        [
            saga.Step("a", lambda ctx: "a", compensate=lambda ctx: undone.append("a")),
            saga.Step("pay", pay, policy=once),
        ],
    )
    with saga.Orchestrator(sqlite_url, [flow], lease=10.0, clock=clock, hooks=()) as orch:
        run_id = orch.start("s", {})
        with pytest.raises(Died):
            orch.run_due()
        clock.advance(10.0)
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.COMPENSATED
    assert run.step("pay").attempt_count == 1
    assert undone == ["a"]


class Refusing:
    """A budget that rejects the first *calls* locally (as an adaptive throttle does), and
    refuses the first *retries* it is asked about."""

    def __init__(self, calls: int = 0, retries: int = 0) -> None:
        self.calls = calls
        self.retries = retries

    def on_request(self) -> None:
        if self.calls > 0:
            self.calls -= 1
            raise seawall.Throttled(0.9)

    def allow_retry(self, error: BaseException) -> bool:
        self.retries -= 1
        return self.retries < 0

    def on_success(self) -> None:
        pass

    def on_failure(self, error: BaseException) -> None:
        pass


def test_a_throttled_first_attempt_waits_and_tries_again(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = seawall.VirtualClock(start=START)
    counters = Counters()
    pol = seawall.RetryPolicy(
        max_attempts=3,
        budget=Refusing(calls=2),
        backoff=seawall.Backoff(base=1.0, cap=8.0, jitter="none"),
        hooks=(),
    )
    flow = saga.Saga("s", [saga.Step("a", lambda ctx: "done", policy=pol)])
    hooks = (saga.logging_hook, saga.MetricsHook(counters))
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=hooks) as orch:
        caplog.set_level("INFO", logger="seawall.saga")
        run_id = orch.start("s", {})
        orch.run_due()
        step = orch.get(run_id).steps[0]
        assert step.status is saga.Status.PENDING
        assert step.attempt_count == 0
        assert step.last_error is not None and step.last_error.startswith("Throttled: ")
        assert step.next_retry_at is not None
        assert step.next_retry_at.timestamp() == pytest.approx(START + 2.0)  # backoff step 1
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.SUCCEEDED
    assert run.steps[0].attempt_count == 1
    assert any("held back (overloaded)" in r.getMessage() for r in caplog.records)
    assert counters.get("saga_runs", "s", "SUCCEEDED") == 1
    assert counters.get("attempts", "s.a", "success") == 1


def test_overloaded_without_a_hint_waits_the_backoff(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    answers = [seawall.Overloaded()]

    def call(ctx: saga.StepContext) -> str:
        if answers:
            raise answers.pop()
        return "ok"

    pol = seawall.RetryPolicy(backoff=seawall.Backoff.constant(7.0), hooks=())
    flow = saga.Saga("s", [saga.Step("a", call, policy=pol)])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        run_id = orch.start("s", {})
        orch.run_due()
        step = orch.get(run_id).steps[0]
        assert step.next_retry_at is not None
        assert step.next_retry_at.timestamp() == pytest.approx(START + 7.0)
        assert orch.run_until_settled(run_id).status is saga.Status.SUCCEEDED


def test_give_ups_and_budget_holds_reach_the_logs_and_the_metrics(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = seawall.VirtualClock(start=START)
    counters = Counters()
    budget = seawall.RetryBudget(ratio=0.01, min_per_second=0.0, clock=clock)  # 1 call: no retry
    tight = seawall.RetryPolicy(max_attempts=2, budget=budget, rng=random.Random(1), hooks=())

    def down(ctx: saga.StepContext) -> None:
        raise ConnectionError("down")

    def undo(ctx: saga.StepContext) -> None:
        raise seawall.Permanent("cannot undo")

    flow = saga.Saga(
        "s",
        [saga.Step("a", lambda ctx: "a", compensate=undo), saga.Step("b", down, policy=tight)],
    )
    hooks = (saga.logging_hook, saga.MetricsHook(counters))
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=hooks) as orch:
        caplog.set_level("INFO", logger="seawall.saga")
        run = orch.run_until_settled(orch.start("s", {}))
        assert orch.runs(saga.Status.NEEDS_ATTENTION)[0].run_id == run.run_id
        assert orch.runs("SUCCEEDED") == []
    assert run.status is saga.Status.NEEDS_ATTENTION
    messages = [r.getMessage() for r in caplog.records]
    assert any("held back (budget)" in m for m in messages)
    assert any(
        "compensation of step a attempt 1 failed: Permanent: cannot undo; gave up" in m
        for m in messages
    )
    gave_up = "the compensation of step 'a' gave up (not_retryable): Permanent: cannot undo"
    assert any(m.endswith(f"NEEDS_ATTENTION ({gave_up})") for m in messages)
    # Step b's one attempt failed and the budget refused its retry three times (the bound is
    # max_attempts holds in a row): three holds, then one give-up; a hold is not a give-up.
    assert counters.get("budget_refusals", "s.b") == 3
    assert counters.get("give_ups", "s.b", "budget") == 1
    assert counters.get("retries", "s.b") == 0
    assert any("held back (budget) once too often: gave up" in m for m in messages)
    assert counters.get("give_ups", "s.a.compensate", "not_retryable") == 1
    assert counters.get("saga_runs", "s", "NEEDS_ATTENTION") == 1


def test_the_metrics_hook_refuses_what_is_not_a_recorder() -> None:
    with pytest.raises(TypeError, match="recorder"):
        saga.MetricsHook(object())  # type: ignore[arg-type]
    assert "Counters" in repr(saga.MetricsHook(Counters()))


def test_a_failing_hook_is_logged_and_changes_nothing(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: saga.SagaEvent) -> None:
        raise RuntimeError("hook bug")

    clock = seawall.VirtualClock(start=START)
    flow = saga.Saga("s", [saga.Step("a", lambda ctx: "a")])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=[broken]) as orch:
        run = orch.run_until_settled(orch.start("s", {}))
    assert run.status is saga.Status.SUCCEEDED
    assert any("hook" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


def test_a_retry_the_budget_held_back_is_not_a_give_up(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    counters = Counters()
    pol = seawall.RetryPolicy(
        max_attempts=3,
        budget=Refusing(retries=2),
        backoff=seawall.Backoff(base=1.0, cap=8.0, jitter="none"),
        hooks=(),
    )
    answers = [ConnectionError("down")]

    def call(ctx: saga.StepContext) -> str:
        if answers:
            raise answers.pop()
        return "ok"

    flow = saga.Saga("s", [saga.Step("a", call, policy=pol)])
    with saga.Orchestrator(
        sqlite_url, [flow], clock=clock, hooks=(saga.MetricsHook(counters),)
    ) as orch:
        run_id = orch.start("s", {})
        orch.run_due()
        step = orch.get(run_id).steps[0]
        assert step.status is saga.Status.RETRYING
        # Held back one backoff step further than the retry would have waited (1 s): 2 s.
        assert step.next_retry_at is not None
        assert step.next_retry_at.timestamp() == pytest.approx(START + 2.0)
        run = orch.run_until_settled(run_id)
        holds = [h for h in orch.history(run_id) if h.event == "hold"]
    assert run.status is saga.Status.SUCCEEDED
    assert run.steps[0].attempt_count == 2
    assert [h.delay for h in holds] == [2.0, 4.0]  # the second hold one step further again
    assert counters.get("budget_refusals", "s.a") == 2
    assert counters.get("give_ups", "s.a", "budget") == 0
    assert counters.get("attempts", "s.a", "failure") == 1
    assert counters.get("attempts", "s.a", "success") == 1

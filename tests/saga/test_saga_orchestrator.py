"""The orchestrator on virtual time, on both stores: retries, waits, compensation, operations."""

from __future__ import annotations

import asyncio
import datetime
import json
import random
from typing import Any

import pytest

import seawall
from seawall import saga
from seawall.instrumentation import Counters

START = 1_700_000_000.0


def policy(seed: int = 1, **kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("max_attempts", 5)
    kwargs.setdefault("backoff", seawall.Backoff(base=1.0, cap=60.0))
    return seawall.RetryPolicy(rng=random.Random(seed), hooks=(), **kwargs)


class Recorder:
    """Steps whose behaviour a test scripts; every call is logged."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []
        self.script: dict[str, list[Any]] = {}

    def action(self, name: str) -> Any:
        def run(ctx: saga.StepContext) -> Any:
            self.calls.append(
                (("undo " if ctx.compensating else "") + name, ctx.attempt, ctx.idempotency_key)
            )
            outcomes = self.script.get(("undo " if ctx.compensating else "") + name, [])
            outcome = outcomes.pop(0) if outcomes else {"done": name}
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        return run

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def order_saga(rec: Recorder, **step_kwargs: Any) -> saga.Saga:
    return saga.Saga(
        "order",
        [
            saga.Step(
                "reserve", rec.action("reserve"), compensate=rec.action("reserve"), policy=policy(1)
            ),
            saga.Step(
                "charge",
                rec.action("charge"),
                compensate=rec.action("charge"),
                policy=policy(2),
                **step_kwargs,
            ),
            saga.Step("ship", rec.action("ship"), policy=policy(3)),
        ],
    )


@pytest.fixture
def clock() -> seawall.VirtualClock:
    return seawall.VirtualClock(start=START)


def test_a_run_succeeds_and_the_log_shows_every_step(
    store_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    with saga.Orchestrator(store_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        run_id = orch.start("order", {"order_id": 42}, run_id="o-42")
        assert orch.get(run_id).status is saga.Status.RUNNING
        assert orch.run_due() == 3
        run = orch.get(run_id)
    assert run.status is saga.Status.SUCCEEDED
    assert run.input == {"order_id": 42}
    assert [s.status for s in run.steps] == [saga.Status.SUCCEEDED] * 3
    assert [s.result for s in run.steps] == [
        {"done": "reserve"},
        {"done": "charge"},
        {"done": "ship"},
    ]
    assert [s.attempt_count for s in run.steps] == [1, 1, 1]
    assert all(s.next_retry_at is None and s.last_error is None for s in run.steps)
    assert rec.calls == [
        ("reserve", 1, "o-42:reserve"),
        ("charge", 1, "o-42:charge"),
        ("ship", 1, "o-42:ship"),
    ]


def test_a_transient_error_is_a_wait_in_the_log_not_a_sleep(
    store_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    rec.script["charge"] = [ConnectionError("reset by peer"), ConnectionError("reset again")]
    with saga.Orchestrator(store_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        run_id = orch.start("order", {"order_id": 1})
        assert orch.run_due() == 2  # reserve, charge (fails); nothing else is due now
        run = orch.get(run_id)
        charge = run.step("charge")
        assert run.status is saga.Status.RETRYING
        assert charge.status is saga.Status.RETRYING
        assert charge.attempt_count == 1
        assert charge.last_error == "ConnectionError: reset by peer"
        assert isinstance(charge.next_retry_at, datetime.datetime)
        assert charge.next_retry_at.tzinfo is datetime.timezone.utc
        # The delay is the policy's own: the first jittered backoff delay of its rng.
        expected = seawall.Backoff(base=1.0, cap=60.0).compute(0, random.Random(2))
        assert charge.next_retry_at.timestamp() == pytest.approx(START + expected, abs=1e-3)
        assert orch.run_due() == 0  # not due yet: nothing slept
        assert clock.now() == START
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.SUCCEEDED
    assert run.step("charge").attempt_count == 3
    assert rec.names() == ["reserve", "charge", "charge", "charge", "ship"]
    assert clock.now() > START


def test_a_permanent_error_compensates_the_finished_steps_in_reverse(
    store_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    rec.script["ship"] = [ConnectionError("down"), seawall.Permanent("address unknown")]
    with saga.Orchestrator(store_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        run_id = orch.start("order", {})
        run = orch.run_until_settled(run_id)
        history = orch.history(run_id)
    assert run.status is saga.Status.COMPENSATED
    assert "ship" in (run.reason or "") and "Permanent: address unknown" in (run.reason or "")
    assert [s.status for s in run.steps] == [
        saga.Status.COMPENSATED,
        saga.Status.COMPENSATED,
        saga.Status.FAILED,
    ]
    assert rec.names() == ["reserve", "charge", "ship", "ship", "undo charge", "undo reserve"]
    assert rec.calls[-1][2] == f"{run_id}:reserve:compensate"
    events = [(h.event, h.step, h.phase) for h in history]
    assert events[0] == ("started", None, None)
    assert ("failure", "ship", "action") in events
    assert ("give_up", "ship", "action") in events
    assert events.index(("success", "charge", "compensation")) < events.index(
        ("success", "reserve", "compensation")
    )
    assert events[-1] == ("status", None, None)
    assert history[-1].detail == {"status": "COMPENSATED"}
    waits = [h for h in history if h.event == "failure" and h.delay is not None]
    assert len(waits) == 1 and waits[0].detail["next_retry_at"] > START


def test_a_compensation_that_gives_up_needs_attention_then_retry_now(
    store_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    rec.script["charge"] = [seawall.Permanent("declined")]
    rec.script["undo reserve"] = [ConnectionError("stock service down")] * 5
    with saga.Orchestrator(store_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        run_id = orch.start("order", {})
        run = orch.run_until_settled(run_id)
        assert run.status is saga.Status.NEEDS_ATTENTION
        reserve = run.step("reserve")
        assert reserve.status is saga.Status.COMPENSATING
        assert reserve.compensation_attempt_count == 5
        assert reserve.last_error == "ConnectionError: stock service down"
        assert reserve.next_retry_at is None
        assert "compensation of step 'reserve' gave up" in (run.reason or "")
        assert orch.run_due() == 0  # a person decides
        orch.retry_now(run_id)
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.COMPENSATED
    assert run.step("reserve").compensation_attempt_count == 6
    assert run.step("charge").status is saga.Status.FAILED


def test_park_then_retry_now_runs_the_step_again_with_a_fresh_policy(
    store_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    rec.script["charge"] = [ConnectionError("x")] * 5
    with saga.Orchestrator(
        store_url, [order_saga(rec, on_exhausted="park")], clock=clock, hooks=()
    ) as orch:
        run_id = orch.start("order", {})
        run = orch.run_until_settled(run_id)
        assert run.status is saga.Status.NEEDS_ATTENTION
        assert run.step("charge").status is saga.Status.FAILED
        assert run.step("charge").attempt_count == 5
        assert "undo reserve" not in rec.names()  # parked: nothing compensated
        orch.retry_now(run_id)
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.SUCCEEDED
    assert run.step("charge").attempt_count == 6


def test_park_then_compensate(store_url: str, clock: seawall.VirtualClock) -> None:
    rec = Recorder()
    rec.script["charge"] = [seawall.Permanent("declined")]
    with saga.Orchestrator(
        store_url, [order_saga(rec, on_exhausted="park")], clock=clock, hooks=()
    ) as orch:
        run_id = orch.start("order", {})
        assert orch.run_until_settled(run_id).status is saga.Status.NEEDS_ATTENTION
        orch.compensate(run_id)
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.COMPENSATED
    assert rec.names()[-1] == "undo reserve"


def test_on_exhausted_fail_stops_without_compensating(
    store_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    rec.script["charge"] = [seawall.Permanent("declined")]
    with saga.Orchestrator(
        store_url, [order_saga(rec, on_exhausted="fail")], clock=clock, hooks=()
    ) as orch:
        run = orch.run_until_settled(orch.start("order", {}))
    assert run.status is saga.Status.FAILED
    assert rec.names() == ["reserve", "charge"]


def test_cancel_and_compensate_a_waiting_run(store_url: str, clock: seawall.VirtualClock) -> None:
    rec = Recorder()
    rec.script["charge"] = [ConnectionError("x")] * 2
    with saga.Orchestrator(store_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        a = orch.start("order", {}, run_id="a")
        b = orch.start("order", {}, run_id="b")
        orch.run_due()
        assert orch.get(a).status is saga.Status.RETRYING
        cancelled = orch.cancel(a)
        assert cancelled.status is saga.Status.FAILED
        assert cancelled.step("charge").status is saga.Status.FAILED
        assert cancelled.step("charge").next_retry_at is None
        orch.compensate(b)
        assert orch.run_until_settled(b).status is saga.Status.COMPENSATED
        clock.advance(3600)
        assert orch.run_due() == 0
        with pytest.raises(ValueError, match="FAILED"):
            orch.retry_now(a)
        with pytest.raises(KeyError):
            orch.cancel("nope")
        assert [h.detail.get("operation") for h in orch.history(a) if h.event == "operator"] == [
            "cancel"
        ]
    assert rec.names().count("undo reserve") == 1  # b's only; a was cancelled, not compensated


def test_retry_now_makes_a_wait_due_at_once(store_url: str, clock: seawall.VirtualClock) -> None:
    rec = Recorder()
    rec.script["charge"] = [ConnectionError("x")]
    with saga.Orchestrator(store_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        run_id = orch.start("order", {})
        orch.run_due()
        assert orch.get(run_id).step("charge").next_retry_at is not None
        orch.retry_now(run_id)
        assert orch.run_due() == 2
        assert orch.get(run_id).status is saga.Status.SUCCEEDED
    assert clock.now() == START


def test_start_is_idempotent_with_a_run_id(store_url: str, clock: seawall.VirtualClock) -> None:
    rec = Recorder()
    with saga.Orchestrator(store_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        assert orch.start("order", {"n": 1}, run_id="same") == "same"
        assert orch.start("order", {"n": 1}, run_id="same") == "same"
        with pytest.raises(ValueError, match="another saga or input"):
            orch.start("order", {"n": 2}, run_id="same")
        assert orch.run_due() == 3
        assert len(orch.runs()) == 1
    assert rec.names() == ["reserve", "charge", "ship"]


def test_a_shared_budget_pushes_next_retry_at_out_instead_of_every_run_retrying(
    sqlite_url: str, clock: seawall.VirtualClock
) -> None:
    budget = seawall.RetryBudget(ratio=0.1, min_per_second=0.0, window=600.0, clock=clock)
    shared = policy(
        5, max_attempts=4, budget=budget, backoff=seawall.Backoff(base=1.0, cap=60.0, jitter="none")
    )
    calls: list[str] = []

    def call(ctx: saga.StepContext) -> str:
        calls.append(ctx.run_id)
        raise ConnectionError("dependency down")

    sick = saga.Saga("sick", [saga.Step("call", call, policy=shared)])
    with saga.Orchestrator(sqlite_url, [sick], clock=clock, hooks=()) as orch:
        ids = [orch.start("sick", {}) for _ in range(50)]
        assert orch.run_due() == 50
        runs = [orch.get(i) for i in ids]
        # Every run failed once. The budget (10% of 50 calls) let 5 retry after the backoff's
        # 1 s and pushed the others' next attempt out, to the backoff's next step (2 s).
        delays = sorted(r.steps[0].next_retry_at.timestamp() - START for r in runs)  # type: ignore[union-attr]
        assert all(r.status is saga.Status.RETRYING for r in runs)
        assert delays == pytest.approx([1.0] * 5 + [2.0] * 45)
        holds = [[h for h in orch.history(i) if h.event == "hold"] for i in ids]
        assert sorted(len(h) for h in holds) == [0] * 5 + [1] * 45
        assert all(h[0].detail["reason"] == "budget" for h in holds if h)
        clock.advance(1.0)
        assert orch.run_due() == 5  # only the five the budget allowed
        settled = [orch.run_until_settled(i) for i in ids]
    # 55 calls reached the sick dependency, not 50 x 4: the budget bounds the fleet's retries.
    assert len(calls) == 55
    assert all(r.status is saga.Status.COMPENSATED for r in settled)
    assert sum("(budget)" in (r.reason or "") for r in settled) == 50


def test_retry_after_and_overloaded_move_next_retry_at(
    sqlite_url: str, clock: seawall.VirtualClock
) -> None:
    answers: list[BaseException] = [
        seawall.RetryAfter(30.0),
        seawall.Overloaded("shed", retry_after=45.0),
    ]

    def call(ctx: saga.StepContext) -> str:
        if answers:
            raise answers.pop(0)
        return "ok"

    s = saga.Saga("pushback", [saga.Step("call", call, policy=policy(1))])
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        run_id = orch.start("pushback", {})
        orch.run_due()
        step = orch.get(run_id).steps[0]
        assert step.next_retry_at is not None
        assert step.next_retry_at.timestamp() == pytest.approx(START + 30.0)
        clock.advance(30.0)
        orch.run_due()
        step = orch.get(run_id).steps[0]
        assert step.last_error == "Overloaded: shed"
        assert step.next_retry_at is not None
        assert step.next_retry_at.timestamp() == pytest.approx(START + 75.0)
        assert orch.run_until_settled(run_id).status is saga.Status.SUCCEEDED


def test_the_step_deadline_gives_up_and_compensates(
    sqlite_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    rec.script["charge"] = [ConnectionError("slow")] * 10
    s = saga.Saga(
        "order",
        [
            saga.Step("reserve", rec.action("reserve"), compensate=rec.action("reserve")),
            saga.Step(
                "charge",
                rec.action("charge"),
                policy=policy(
                    4, max_attempts=50, timeout=10.0, backoff=seawall.Backoff.constant(4.0)
                ),
            ),
        ],
    )
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        run = orch.run_until_settled(orch.start("order", {}))
    assert run.status is saga.Status.COMPENSATED
    assert run.step("charge").attempt_count == 3  # at 0, 4 and 8 s; a wait to 12 s would cross 10 s
    assert "(deadline)" in (run.reason or "")


def test_sync_actions_see_the_attempt_deadline_and_policies_inside_make_one_attempt(
    sqlite_url: str, clock: seawall.VirtualClock
) -> None:
    seen: list[float] = []
    inner_calls: list[int] = []
    inner = seawall.RetryPolicy(max_attempts=4, hooks=(), backoff=seawall.Backoff.constant(0.0))

    def call(ctx: saga.StepContext) -> None:
        seen.append(seawall.remaining())

        def flaky() -> None:
            inner_calls.append(1)
            raise ConnectionError("down")

        inner.call(flaky)

    s = saga.Saga(
        "nested", [saga.Step("call", call, policy=policy(1, max_attempts=2, attempt_timeout=5.0))]
    )
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        run = orch.run_until_settled(orch.start("nested", {}))
    assert run.status is saga.Status.COMPENSATED
    assert seen == [pytest.approx(5.0), pytest.approx(5.0)]
    assert len(inner_calls) == 2  # one per orchestrator attempt, not 4 x 2


def test_async_actions_are_cancelled_at_the_attempt_deadline(
    sqlite_url: str, clock: seawall.VirtualClock
) -> None:
    attempts: list[int] = []

    async def slow(ctx: saga.StepContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(3600)  # virtual: cancelled at 2 s
        return "fast enough"

    async def undo(ctx: saga.StepContext) -> None:
        await asyncio.sleep(0)

    s = saga.Saga(
        "aio", [saga.Step("slow", slow, compensate=undo, policy=policy(1, attempt_timeout=2.0))]
    )
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        run_id = orch.start("aio", {})
        orch.run_due()
        step = orch.get(run_id).steps[0]
        assert step.status is saga.Status.RETRYING
        assert step.last_error is not None and step.last_error.startswith("DeadlineExceeded")
        assert clock.now() == pytest.approx(START + 2.0)
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.SUCCEEDED
    assert run.steps[0].result == "fast enough"
    assert attempts == [1, 2]


def test_a_result_that_is_not_json_fails_the_step_and_writes_no_result(
    sqlite_url: str, clock: seawall.VirtualClock
) -> None:
    s = saga.Saga("bad", [saga.Step("a", lambda ctx: {"when": {1, 2}})])
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        run = orch.run_until_settled(orch.start("bad", {}))
    assert run.status is saga.Status.COMPENSATED
    assert run.steps[0].status is saga.Status.FAILED
    assert run.steps[0].result is None
    assert run.steps[0].attempt_count == 1  # a bug is not retried
    assert (
        run.steps[0].last_error
        == "TypeError: the result of step 'a'['when'] is a set, not JSON ({1, 2})"
    )


def test_schedules_on_virtual_time_are_deterministic_by_seed(tmp_path: Any) -> None:
    def schedule(seed: int, name: str) -> list[tuple[str, str | None, int | None, float | None]]:
        clock = seawall.VirtualClock(start=START)
        rng = random.Random(seed)

        def flaky(ctx: saga.StepContext) -> int:
            if rng.random() < 0.6:
                raise ConnectionError("flaky")
            return ctx.attempt

        s = saga.Saga(
            "s",
            [
                saga.Step(f"s{i}", flaky, compensate=flaky, policy=policy(seed + i))
                for i in range(3)
            ],
        )
        with saga.Orchestrator(
            f"sqlite:///{tmp_path}/{name}.db", [s], clock=clock, hooks=()
        ) as orch:
            ids = [orch.start("s", {"i": i}, run_id=f"r{i}") for i in range(5)]
            for run_id in ids:
                orch.run_until_settled(run_id)
            return [
                (h.event, h.step, h.attempt, None if h.delay is None else round(h.delay, 9))
                for run_id in ids
                for h in orch.history(run_id)
            ] + [(h.event, None, None, h.at.timestamp()) for h in orch.history(ids[-1])]

    first = schedule(7, "a")
    assert first == schedule(7, "b")
    assert first != schedule(8, "c")
    assert any(e[0] == "failure" and e[3] is not None for e in first)


def test_hooks_log_every_attempt_and_feed_metrics(
    sqlite_url: str, clock: seawall.VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder()
    rec.script["charge"] = [ConnectionError("reset")]
    counters = Counters()
    hooks = (saga.logging_hook, saga.MetricsHook(counters))
    with saga.Orchestrator(sqlite_url, [order_saga(rec)], clock=clock, hooks=hooks) as orch:
        caplog.set_level("INFO", logger="seawall.saga")
        run_id = orch.run_until_settled(orch.start("order", {})).run_id
    lines = [r.getMessage() for r in caplog.records if r.name == "seawall.saga"]
    assert any(
        f"run {run_id} step charge attempt 1 failed: ConnectionError: reset; retry in" in m
        for m in lines
    )
    assert any(f"run {run_id} step charge attempt 2 succeeded" in m for m in lines)
    assert any(m.endswith(": SUCCEEDED") for m in lines)
    assert counters.get("attempts", "order.charge", "failure") == 1
    assert counters.get("attempts", "order.charge", "success") == 1
    assert counters.get("retries", "order.charge") == 1
    assert counters.get("saga_runs", "order", "SUCCEEDED") == 1


def test_history_is_append_only_json(sqlite_url: str, clock: seawall.VirtualClock) -> None:
    import sqlite3

    rec = Recorder()
    rec.script["charge"] = [ConnectionError("x"), seawall.Permanent("no")]
    with saga.Orchestrator(sqlite_url, [order_saga(rec)], clock=clock, hooks=()) as orch:
        orch.run_until_settled(orch.start("order", {}, run_id="h"))
    conn = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    rows = conn.execute(
        "SELECT id, event, detail FROM seawall_saga_history WHERE run_id = 'h' ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    assert all(r[2] is None or isinstance(json.loads(r[2]), dict) for r in rows)
    assert [r[1] for r in rows].count("attempt") == 4  # reserve, charge x2, undo reserve


async def test_async_actions_run_when_the_orchestrator_is_called_inside_a_running_loop(
    sqlite_url: str, clock: seawall.VirtualClock
) -> None:
    async def step(ctx: saga.StepContext) -> int:
        await asyncio.sleep(1.0)
        return ctx.attempt

    s = saga.Saga("aio", [saga.Step("a", step), saga.Step("b", step)])
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        run = orch.run_until_settled(orch.start("aio", {}))
    assert run.status is saga.Status.SUCCEEDED
    assert [st.result for st in run.steps] == [1, 1]


def test_an_operation_on_a_run_whose_attempt_is_running_applies_after_the_attempt(
    store_url: str, clock: seawall.VirtualClock
) -> None:
    rec = Recorder()
    flow = order_saga(rec)
    operator = saga.Orchestrator(store_url, [flow], clock=clock, hooks=())

    def charge(ctx: saga.StepContext) -> dict[str, str]:
        # While this attempt runs, its worker holds the run: the operation is a request.
        run = operator.compensate(ctx.run_id)
        assert run.status is saga.Status.RUNNING
        return {"charged": ctx.run_id}

    steps = list(flow.steps)
    steps[1] = saga.Step("charge", charge, compensate=rec.action("charge"), policy=policy(2))
    with saga.Orchestrator(store_url, [saga.Saga("order", steps)], clock=clock, hooks=()) as orch:
        run = orch.run_until_settled(orch.start("order", {}))
        events = [h.event for h in orch.history(run.run_id)]
    operator.close()
    # The attempt's success was recorded first, then the compensation ran: charge undone too.
    assert run.status is saga.Status.COMPENSATED
    assert run.step("charge").status is saga.Status.COMPENSATED
    assert run.step("ship").status is saga.Status.PENDING
    assert rec.names() == ["reserve", "undo charge", "undo reserve"]
    assert events.index("success") < events.index("operator")


def test_the_lease_is_renewed_while_a_long_attempt_runs(sqlite_url: str) -> None:
    # Real time: the renewal is a thread. A 0.3 s lease, an attempt of 1.2 s, and a second
    # worker polling all along: it never takes the run over.
    import threading
    import time

    runs: list[int] = []

    def slow(ctx: saga.StepContext) -> str:
        runs.append(ctx.attempt)
        time.sleep(1.2)
        return "done"

    flow = saga.Saga("slow", [saga.Step("s", slow)])
    with (
        saga.Orchestrator(sqlite_url, [flow], lease=0.3, hooks=()) as first,
        saga.Orchestrator(sqlite_url, [flow], lease=0.3, hooks=()) as second,
    ):
        run_id = first.start("slow", {})
        stop = threading.Event()
        stolen: list[int] = []

        def poll() -> None:
            while not runs:  # from the moment the first worker's attempt runs
                time.sleep(0.005)
            while not stop.is_set():
                stolen.append(second.run_due())
                time.sleep(0.02)

        thread = threading.Thread(target=poll)
        thread.start()
        try:
            first.run_until_settled(run_id)
        finally:
            stop.set()
            thread.join()
        assert first.get(run_id).status is saga.Status.SUCCEEDED
    assert runs == [1]
    assert sum(stolen) == 0

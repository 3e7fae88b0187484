"""Trust under store outages: a round ended by its store (a full disk, a lost connection, a
commit that failed, or landed with its answer lost) loses no outcome and runs no step twice;
the worker's next round, or its closing, reads the log back and goes on from what it holds."""

from __future__ import annotations

import contextlib
import errno
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import seawall
from seawall import saga

START = 1_700_000_000.0


def fill(store: Any) -> str:
    """Make *store* (SQLite) full, as a full disk would: SQLite's limit on the file's size,
    on its connection; returns a result that takes new pages (it cannot be recorded)."""
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")
    return "x" * 50_000


def put_right(store: Any) -> None:
    """*store* takes writes again (after :func:`fill`)."""
    store.execute("PRAGMA max_page_count = 1073741823")


def end_connection(store: Any, url: str) -> None:
    """End *store*'s PostgreSQL connection from another session, as a failover would."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (store._conn.info.backend_pid,))


#: Retried at once, up to 3 attempts.
FAST = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(0.0), hooks=())


def one_step(name: str, act: Any) -> saga.Saga:
    """A saga of the one step *act*, retried at once up to 3 attempts."""
    return saga.Saga(name, [saga.Step("act", act, policy=FAST)])


def held_back(
    held: str, result: str, other: Callable[[saga.StepContext], str]
) -> tuple[Callable[[saga.StepContext], str], list[tuple[str, int]], threading.Event]:
    """A step's action: for input *held*, it returns *result* once the event is set (its
    attempt outlives the round); for any other, what *other* (ctx) returns. Returns the
    action, the (input, attempt) of its calls, and the event."""
    calls: list[tuple[str, int]] = []
    may_end = threading.Event()

    def act(ctx: saga.StepContext) -> str:
        calls.append((ctx.input, ctx.attempt))
        if ctx.input == held:
            assert may_end.wait(60)
            return result
        return other(ctx)

    return act, calls, may_end


#: The history of a step run once, its outcome recorded.
ONCE = [("attempt", 1), ("success", 1)]


def test_a_round_ended_by_a_full_store_records_its_outcome_once_the_store_takes_writes(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Two attempts run at once. Run a's ends at once, having filled the store (SQLite's limit on
    # the file's size, as a full disk): its outcome cannot be recorded, and the round ends. Run
    # b's attempt still runs in its thread. Once the store takes writes again, the worker's next
    # round reads a's log back (the failed commit did not land), records the outcome it holds:
    # the step ran once. b keeps its lease: its attempt may still be under way.
    act, calls, b_may_end = held_back("b", "b", lambda ctx: fill(orch.store))
    with saga.Orchestrator(sqlite_url, [one_step("full", act)], concurrency=2, hooks=()) as orch:
        assert orch.lease == 30.0
        orch.start("full", "a", run_id="a")
        orch.start("full", "b", run_id="b")
        try:
            with pytest.raises(OSError) as info:
                orch.run_due()
            assert info.value.errno == errno.ENOSPC
            put_right(orch.store)  # the disk is put right
            with caplog.at_level(logging.INFO, logger="seawall.saga"):
                assert orch.run_due() == 1
            said = [r.getMessage() for r in caplog.records if "read back" in r.getMessage()]
            assert len(said) == 1 and "0 outcomes had landed, 1 to record again" in said[0]
            a = orch.get("a")
            assert a.status is saga.Status.SUCCEEDED
            assert a.step("act").attempt_count == 1 and a.step("act").result == "x" * 50_000
            assert [(h.event, h.attempt) for h in orch.history("a") if h.step == "act"] == ONCE
            b = orch.get("b")
            assert b.status is saga.Status.RUNNING
            due, owner = orch.store.execute(
                "SELECT due_at, lease_owner FROM seawall_saga_runs WHERE run_id = 'b'"
            ).fetchone()
            assert owner == orch.worker_id and due > time.time()  # still leased
            assert sorted(calls) == [("a", 1), ("b", 1)]
        finally:
            b_may_end.set()


def test_runs_a_failed_round_had_not_begun_are_claimed_again_at_once(sqlite_url: str) -> None:
    # One attempt at a time, three runs claimed: b and c wait in the round, leased, when a's
    # attempt fills the store and the round ends. Once the store takes writes, the worker's
    # next round records a's outcome and ends its own leases of b and c, which it claims at
    # once (not when their leases, 30 s, run out). Each step runs once.
    calls: list[str] = []

    def act(ctx: saga.StepContext) -> str:
        calls.append(ctx.input)
        return fill(orch.store) if ctx.input == "a" else ctx.input

    with saga.Orchestrator(sqlite_url, [one_step("q", act)], concurrency=1, hooks=()) as orch:
        for run_id in "abc":
            orch.start("q", run_id, run_id=run_id)
        with pytest.raises(OSError):
            orch.run_due()
        assert calls == ["a"]
        put_right(orch.store)
        assert orch.run_due() == 3
        for run_id in "abc":
            run = orch.get(run_id)
            assert run.status is saga.Status.SUCCEEDED, run
            assert [(h.event, h.attempt) for h in orch.history(run_id) if h.step == "act"] == ONCE
    assert calls == ["a", "b", "c"]


def taken_over_at_once(url: str, flow: saga.Saga) -> None:
    """Another worker takes runs a and b over at once, not after their leases: b's attempt
    runs, a only finishes, each step run once."""
    with saga.Orchestrator(url, [flow], hooks=()) as second:
        assert second.run_due() == 1  # b's attempt; a only finishes
        for run_id in "ab":
            run = second.get(run_id)
            assert run.status is saga.Status.SUCCEEDED, run
            assert [(h.event, h.attempt) for h in second.history(run_id) if h.step] == ONCE


def test_a_worker_closed_after_an_outage_hands_its_runs_back(sqlite_url: str) -> None:
    # One attempt at a time: a's fills the store while b waits in the round, claimed. The
    # store is put right and the worker closed (say it was told to stop) before another
    # round: closing, it records the outcome it holds and ends its lease of b. Another worker
    # takes both over at once: a's step does not run again, b's runs once.
    calls: list[str] = []

    def act(ctx: saga.StepContext) -> str:
        calls.append(ctx.input)
        return fill(first.store) if ctx.input == "a" else ctx.input

    flow = one_step("h", act)
    first = saga.Orchestrator(sqlite_url, [flow], concurrency=1, hooks=())
    with first:
        for run_id in "ab":
            first.start("h", run_id, run_id=run_id)
        with pytest.raises(OSError):
            first.run_due()
        put_right(first.store)
    taken_over_at_once(sqlite_url, flow)
    assert calls == ["a", "b"]


def test_a_worker_closed_after_a_lost_connection_hands_its_runs_back(pg_url: str) -> None:
    # As above on PostgreSQL, where the worker's connection was ended (a failover) while a's
    # attempt ran, and run_due raised: closing, the worker connects again, records a's
    # outcome and ends its lease of b. Another worker takes both over at once, not after the
    # leases (120 s).
    calls: list[str] = []

    def act(ctx: saga.StepContext) -> str:
        calls.append(ctx.input)
        if ctx.input == "a":
            end_connection(first.store, pg_url)
        return ctx.input

    flow = one_step("h", act)
    first = saga.Orchestrator(pg_url, [flow], lease=120.0, concurrency=1, hooks=())
    with first:
        for run_id in "ab":
            first.start("h", run_id, run_id=run_id)
        with pytest.raises(Exception) as info:
            first.run_due()
        assert first.store.unavailable(info.value)
    taken_over_at_once(pg_url, flow)
    assert calls == ["a", "b"]


class _FailingCommit:
    """Mixed into a SQLite store (:func:`failing`): the commit after :attr:`armed` is set
    fails. It is rolled back, as at a lost connection; or, with :attr:`lands`, it lands and
    then the store raises as if the connection had gone before its answer came (which no real
    SQLite or PostgreSQL failure can be made to do at a chosen commit)."""

    armed = False
    lands = False

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with super().transaction():  # type: ignore[misc]
            yield
            if self.armed and not self.lands:
                self.armed = False
                raise sqlite3.OperationalError("disk I/O error")
        if self.armed:
            self.armed = False
            raise sqlite3.OperationalError("the answer to the commit was lost")


def failing(store: Any, *, lands: bool) -> None:
    """Make *store* fail the commit after its ``armed`` is set (:class:`_FailingCommit`)."""
    mixin = type("FailingCommit", (_FailingCommit,), {"lands": lands})
    store.__class__ = type("FailingSQLiteStore", (mixin, type(store)), {})


def test_a_commit_that_landed_unanswered_goes_on_where_it_left_off(sqlite_url: str) -> None:
    # Step one's outcome is committed with the start of step two's first attempt, and the
    # worker hears an error instead of the commit's answer. Its next round reads the log back:
    # the commit landed, so step two's attempt, begun in it, runs now. No attempt is recorded
    # as lost, none charged that never ran, and the hooks hear of step one's outcome once.
    calls: list[tuple[str, int]] = []
    heard: list[tuple[str, str | None, int]] = []

    def one(ctx: saga.StepContext) -> str:
        calls.append((ctx.step, ctx.attempt))
        orch.store.armed = True  # type: ignore[attr-defined]
        return "one"

    def two(ctx: saga.StepContext) -> str:
        calls.append((ctx.step, ctx.attempt))
        return "two"

    policy = seawall.RetryPolicy(max_attempts=1, hooks=())
    flow = saga.Saga(
        "land", [saga.Step("one", one, policy=policy), saga.Step("two", two, policy=policy)]
    )
    hook = lambda e: heard.append((e.kind, e.step, e.attempt))  # noqa: E731
    with saga.Orchestrator(sqlite_url, [flow], hooks=(hook,)) as orch:
        store = orch.store
        failing(store, lands=True)
        run_id = orch.start("land", {})
        with pytest.raises(sqlite3.OperationalError, match="answer to the commit"):
            orch.run_due()
        assert calls == [("one", 1)]
        assert orch.run_due() == 2  # step one's outcome, recorded by the landed commit; two
        run = orch.get(run_id)
        assert run.status is saga.Status.SUCCEEDED
        assert [s.attempt_count for s in run.steps] == [1, 1]
        history = [(h.event, h.step, h.attempt) for h in orch.history(run_id) if h.step]
    assert calls == [("one", 1), ("two", 1)]
    assert history == [
        ("attempt", "one", 1),
        ("success", "one", 1),
        ("attempt", "two", 1),
        ("success", "two", 1),
    ]
    assert heard.count(("attempt", "one", 1)) == 1


class _Counting:
    """A budget that keeps what it is told, and allows retries or not (*allow*)."""

    def __init__(self, *, allow: bool) -> None:
        self.allow = allow
        self.told: list[str] = []

    def on_request(self) -> None:
        self.told.append("request")

    def allow_retry(self, error: BaseException) -> bool:
        self.told.append("allow_retry")
        return self.allow

    def on_success(self) -> None:
        self.told.append("success")

    def on_failure(self, error: BaseException) -> None:
        self.told.append("failure")


@pytest.mark.parametrize("allow", [True, False], ids=["allowed", "refused"])
def test_an_outcome_recorded_again_after_a_lost_commit_is_told_to_its_budget_once(
    sqlite_url: str, allow: bool
) -> None:
    # The first attempt fails; the commit that records the failure (its budget asked for the
    # retry) is rolled back, as at a lost connection. The next round records the failure
    # again: the budget and the policy's hooks hear of it once, and the budget's answer then
    # stands (a retry scheduled, or held back).
    clock = seawall.VirtualClock(start=START)
    budget = _Counting(allow=allow)
    heard: list[str] = []

    def charge(ctx: saga.StepContext) -> str:
        if ctx.attempt == 1:
            orch.store.armed = True  # type: ignore[attr-defined]
            raise ConnectionError("the bank is down")
        return "charged"

    policy = seawall.RetryPolicy(
        max_attempts=3,
        backoff=seawall.Backoff.constant(1.0),
        budget=budget,
        hooks=(lambda e: heard.append(e.kind),),
    )
    flow = saga.Saga("pay", [saga.Step("charge", charge, policy=policy)])
    first = ["request", "failure", "allow_retry"]
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        failing(orch.store, lands=False)
        run_id = orch.start("pay", {})
        with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
            orch.run_due()
        assert budget.told == first
        orch.run_due()  # the failure recorded again; nothing due yet
        assert budget.told == first
        assert heard == ["retry" if allow else "budget_exhausted"]
        history = [(h.event, h.attempt) for h in orch.history(run_id) if h.step]
        assert history == [("attempt", 1), ("failure", 1)] + ([] if allow else [("hold", 1)])
        budget.allow = True
        clock.advance(60.0)
        orch.run_until_settled(run_id)
        assert orch.get(run_id).status is saga.Status.SUCCEEDED
    assert budget.told == first + ([] if allow else ["allow_retry"]) + ["success"]


@pytest.mark.parametrize("force", [False, True], ids=["lease-ran-out", "force"])
@pytest.mark.parametrize("lands", [False, True], ids=["rolled-back", "landed"])
@pytest.mark.parametrize("then", ["run_due", "close"])
def test_an_outcome_fenced_by_an_operator_is_in_the_log_once_after_a_failed_commit(
    sqlite_url: str, force: bool, lands: bool, then: str
) -> None:
    # While a's attempt runs, an operator cancels the run: once a's lease ran out, or at once
    # with --force. a's commit finds its lease taken, and writes only a fenced line (what the
    # attempt did); that commit fails (rolled back, or landed with its answer lost). a's next
    # round, or its closing, reads the run back, taken: the fenced line is written then if it
    # is not in the log, once. The run stays cancelled; the hooks hear of the attempt once.
    clock = seawall.VirtualClock(start=START)
    heard: list[tuple[str, int | None]] = []

    def act(ctx: saga.StepContext) -> str:
        if not force:
            clock.advance(11.0)  # a's lease runs out
        assert a.cancel(ctx.run_id, force=force).status is saga.Status.FAILED
        a.store.armed = True  # type: ignore[attr-defined]
        return "charged"

    with saga.Orchestrator(
        sqlite_url,
        [one_step("s", act)],
        lease=10.0,
        clock=clock,
        store_clock=clock,
        hooks=[lambda e: heard.append((e.kind, e.attempt))],
        worker_id="a",
    ) as a:
        failing(a.store, lands=lands)
        run_id = a.start("s", {})
        with pytest.raises(sqlite3.OperationalError):
            a.run_due()
        assert heard.count(("attempt", 1)) == 0
        if then == "run_due":
            assert a.run_due() == 0
            assert a.run_due() == 0
    with saga.Orchestrator(sqlite_url, [one_step("s", act)], clock=clock, hooks=()) as reader:
        lines = [h for h in reader.history(run_id) if h.step == "act"]
        assert [(h.event, h.attempt) for h in lines] == [("attempt", 1), ("fenced", 1)]
        assert dict(lines[1].detail)["worker"] == "a"
        assert dict(lines[1].detail)["outcome"] == "success"
        assert reader.get(run_id).status is saga.Status.FAILED
    assert heard.count(("attempt", 1)) == 1


@pytest.mark.parametrize(
    ("operation", "status", "then"),
    [("cancel", saga.Status.FAILED, 0), ("compensate", saga.Status.COMPENSATED, 1)],
)
def test_a_worker_closing_after_a_failed_commit_applies_a_request_that_came_meanwhile(
    sqlite_url: str, operation: str, status: saga.Status, then: int
) -> None:
    # An operator asks to cancel (or compensate) the run while its attempt runs: a request to
    # the worker holding it. The commit of the attempt's outcome fails, and the worker is
    # closed before another round: closing, it records the outcome it holds and applies the
    # request (which begins no attempt), instead of leaving the outcome to be charged as lost
    # and the step to run again.
    calls: list[tuple[str, int]] = []

    def act(ctx: saga.StepContext) -> str:
        calls.append(("act", ctx.attempt))
        asked = getattr(first, operation)(ctx.run_id)
        assert asked.status is saga.Status.RUNNING  # (requested)
        first.store.armed = True  # type: ignore[attr-defined]
        return "done"

    def undo(ctx: saga.StepContext) -> None:
        calls.append(("undo", ctx.attempt))

    flow = saga.Saga("asked", [saga.Step("act", act, compensate=undo, policy=FAST)])
    first = saga.Orchestrator(sqlite_url, [flow], hooks=())
    with first:
        failing(first.store, lands=False)
        run_id = first.start("asked", {})
        with pytest.raises(sqlite3.OperationalError):
            first.run_due()
    with saga.Orchestrator(sqlite_url, [flow], hooks=()) as second:
        assert second.run_due() == then
        run = second.get(run_id)
        actions = [(h.event, h.attempt) for h in second.history(run_id) if h.phase == "action"]
    assert run.status is status
    assert run.step("act").attempt_count == 1
    assert actions == ONCE
    assert calls == [("act", 1)] + [("undo", 1)] * then


def test_a_landed_commit_that_began_a_compensation_on_the_same_step_runs_it(
    sqlite_url: str,
) -> None:
    # A compensate is requested while the step's action runs. The commit of the action's
    # outcome applies it and begins the step's compensation (its row marked running again);
    # the commit lands, its answer lost. The next round reads the log back: the action's
    # attempt has its outcome, and the compensation's first attempt runs, not a second one
    # with the first charged unbegun.
    calls: list[tuple[str, int]] = []

    def act(ctx: saga.StepContext) -> str:
        calls.append(("act", ctx.attempt))
        assert orch.compensate(ctx.run_id).status is saga.Status.RUNNING  # (requested)
        orch.store.armed = True  # type: ignore[attr-defined]
        return "done"

    def undo(ctx: saga.StepContext) -> None:
        calls.append(("undo", ctx.attempt))

    flow = saga.Saga("undo", [saga.Step("act", act, compensate=undo, policy=FAST)])
    with saga.Orchestrator(sqlite_url, [flow], hooks=()) as orch:
        failing(orch.store, lands=True)
        run_id = orch.start("undo", {})
        with pytest.raises(sqlite3.OperationalError, match="answer to the commit"):
            orch.run_due()
        assert orch.run_due() == 2  # the action's outcome, landed; the compensation
        run = orch.get(run_id)
        history = [(h.event, h.phase, h.attempt) for h in orch.history(run_id) if h.step]
    assert run.status is saga.Status.COMPENSATED
    assert calls == [("act", 1), ("undo", 1)]
    assert history == [
        ("attempt", "action", 1),
        ("success", "action", 1),
        ("attempt", "compensation", 1),
        ("success", "compensation", 1),
    ]


def test_a_queued_run_is_begun_only_with_its_operators_request_read(sqlite_url: str) -> None:
    # One attempt at a time; three runs claimed together: b and c wait, leased, not begun.
    # While a's step runs, an operator asks to compensate b (nothing of it to undo) and to
    # retry c now: requests, the runs being held. The commit of a's outcome begins the next
    # queued run: b, which the request ends at once, then c. c's first attempt is begun with
    # its request read (applied, it changes nothing), not charged as lost without running.
    calls: list[tuple[str, int]] = []

    def act(ctx: saga.StepContext) -> str:
        calls.append((ctx.input, ctx.attempt))
        if ctx.input == "a":
            assert orch.compensate("b").status is saga.Status.RUNNING  # (requested)
            assert orch.retry_now("c").status is saga.Status.RUNNING
        return ctx.input

    with saga.Orchestrator(sqlite_url, [one_step("q", act)], concurrency=1, hooks=()) as orch:
        for run_id in "abc":
            orch.start("q", run_id, run_id=run_id)
        orch.run_due()
        statuses = {r: orch.get(r).status for r in "abc"}
        c_history = [(h.event, h.attempt) for h in orch.history("c") if h.step]
    assert statuses == {
        "a": saga.Status.SUCCEEDED,
        "b": saga.Status.COMPENSATED,
        "c": saga.Status.SUCCEEDED,
    }
    assert calls == [("a", 1), ("c", 1)]
    assert c_history == ONCE


def test_a_commit_that_finished_a_run_unanswered_is_heard_of_once(sqlite_url: str) -> None:
    # The commit that records the last step's outcome finishes the run and releases it; its
    # answer is lost. The next round reads the run back (released, its lease token unchanged:
    # that commit landed): nothing runs again, and the hooks hear of the outcome and of the
    # run's success, once each.
    calls: list[int] = []
    heard: list[tuple[str, str | None, Any]] = []

    def act(ctx: saga.StepContext) -> str:
        calls.append(ctx.attempt)
        orch.store.armed = True  # type: ignore[attr-defined]
        return "done"

    def hook(e: saga.SagaEvent) -> None:
        heard.append((e.kind, e.step, e.status))

    with saga.Orchestrator(sqlite_url, [one_step("fin", act)], hooks=(hook,)) as orch:
        store = orch.store
        failing(store, lands=True)
        run_id = orch.start("fin", {})
        with pytest.raises(sqlite3.OperationalError, match="answer to the commit"):
            orch.run_due()
        assert heard == [("run", None, saga.Status.RUNNING)]  # (the start)
        assert orch.run_due() == 1  # the outcome the landed commit recorded
        assert orch.get(run_id).status is saga.Status.SUCCEEDED
        assert [(h.event, h.attempt) for h in orch.history(run_id) if h.step] == ONCE
    assert calls == [1]
    assert heard[1:] == [
        ("attempt", "act", saga.Status.RUNNING),
        ("run", None, saga.Status.SUCCEEDED),
    ]


def test_a_worker_back_from_a_lost_connection_records_the_outcome_it_held(pg_url: str) -> None:
    # The worker's connection is ended while an attempt runs (as by a failover): its outcome
    # cannot be recorded. The worker connects again, reads the run's log back (the commit did
    # not land) and records the outcome it holds, at once: the step runs once, and nothing
    # waits for its lease (here 120 s) to run out.
    attempts: list[int] = []

    def act(ctx: saga.StepContext) -> str:
        attempts.append(ctx.attempt)
        end_connection(orch.store, pg_url)
        return "ok"

    flow = one_step("cut", act)
    with saga.Orchestrator(pg_url, [flow], lease=120.0, poll=0.05, hooks=()) as orch:
        orch.start("cut", {}, run_id="r")
        stop = threading.Event()
        died: list[BaseException] = []

        def work() -> None:
            try:
                orch.work(stop)
            except BaseException as exc:  # pragma: no cover - shown by the assertion below
                died.append(exc)

        worker = threading.Thread(target=work)
        worker.start()
        try:
            with saga.Orchestrator(pg_url, [flow], hooks=()) as reader:
                deadline = time.monotonic() + 60  # half the lease
                while reader.get("r").status is not saga.Status.SUCCEEDED:
                    assert time.monotonic() < deadline, reader.get("r")
                    time.sleep(0.05)
                events = [(h.event, h.attempt) for h in reader.history("r") if h.step == "act"]
        finally:
            stop.set()
            worker.join(30)
        assert died == []
        assert attempts == [1]
        assert events == ONCE


def test_a_lease_taken_over_meanwhile_is_not_ended_by_the_worker_that_lost_it(
    sqlite_url: str,
) -> None:
    # Worker a's round ends with its store full, its outcome not recorded. The store takes
    # writes again only after a's lease ran out and b took the run over. While b's attempt
    # runs, a claims again: it ends only its own leases (by token), not b's, and takes nothing.
    clock = seawall.VirtualClock(start=START)
    calls: list[tuple[str, int]] = []
    workers: dict[str, saga.Orchestrator] = {}

    def act(ctx: saga.StepContext) -> str:
        who = "a" if ctx.attempt == 1 else "b"
        calls.append((who, ctx.attempt))
        if who == "a":
            return fill(workers["a"].store)
        assert workers["a"].run_due() == 0  # b's lease is live
        return "b"

    flow = one_step("s", act)
    common: dict[str, Any] = {"lease": 10.0, "clock": clock, "store_clock": clock, "hooks": ()}
    with (
        saga.Orchestrator(sqlite_url, [flow], worker_id="a", **common) as a,
        saga.Orchestrator(sqlite_url, [flow], worker_id="b", **common) as b,
    ):
        workers["a"] = a
        run_id = a.start("s", {})
        with pytest.raises(OSError):
            a.run_due()
        put_right(a.store)  # a's store takes writes again
        clock.advance(11.0)  # ... once a's lease ran out
        assert b.run_due() == 1
        assert b.get(run_id).status is saga.Status.SUCCEEDED
    assert calls == [("a", 1), ("b", 2)]


@pytest.mark.slow
def test_a_round_ended_by_its_store_keeps_its_leases_and_records_its_outcomes(
    sqlite_url: str,
) -> None:
    # Worker a's round ends (its store full) while run r2's attempt still runs in a's thread;
    # r1's attempt had ended, its outcome not recorded. Both leases are renewed until the
    # outcomes are recorded: worker b, claiming all along for more than two leases, takes
    # neither. Once r2's attempt ends, a's next round records both outcomes (no commit held
    # them before): no step runs again.
    workers: dict[str, saga.Orchestrator] = {}
    act, calls, r2_may_end = held_back("r2", "late", lambda ctx: fill(workers["a"].store))
    flow = one_step("s", act)
    lease = 3.0
    with (
        saga.Orchestrator(sqlite_url, [flow], lease=lease, concurrency=2, hooks=()) as a,
        saga.Orchestrator(sqlite_url, [flow], lease=lease, hooks=()) as b,
    ):
        workers["a"] = a
        a.start("s", "r1", run_id="r1")
        a.start("s", "r2", run_id="r2")
        try:
            with pytest.raises(OSError):
                a.run_due()
            put_right(a.store)
            watched = time.monotonic() + 2.5 * lease
            while time.monotonic() < watched:
                assert b.run_due() == 0
                time.sleep(0.05)
            for run_id in ("r1", "r2"):
                due, owner = b.store.execute(
                    "SELECT due_at, lease_owner FROM seawall_saga_runs WHERE run_id = ?",
                    (run_id,),
                ).fetchone()
                assert owner == a.worker_id and due > time.time()
        finally:
            r2_may_end.set()
        deadline = time.monotonic() + 30
        while not a._worker._carryover._late:  # the attempt's thread is done with it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert a.run_due() == 2
        for run_id, result in (("r1", "x" * 50_000), ("r2", "late")):
            run = a.get(run_id)
            assert run.status is saga.Status.SUCCEEDED and run.step("act").result == result
            assert run.step("act").attempt_count == 1
            assert [(h.event, h.attempt) for h in a.history(run_id) if h.step == "act"] == ONCE
    assert sorted(calls) == [("r1", 1), ("r2", 1)]


def test_an_attempt_outliving_a_lost_connection_has_its_outcome_recorded(pg_url: str) -> None:
    # Two attempts at once. r1's ends the worker's connection (as a failover would) and the
    # round ends on its commit, while r2's attempt runs on. The worker connects again, records
    # r1's outcome at once (the commit did not land) and, once r2's attempt ends, r2's: each
    # step runs once. The lease (120 s) never runs out meanwhile.

    def cut(ctx: saga.StepContext) -> str:
        end_connection(orch.store, pg_url)
        return "ok"

    act, calls, r2_may_end = held_back("r2", "late", cut)
    flow = one_step("cut", act)
    options: dict[str, Any] = {"lease": 120.0, "poll": 0.05, "concurrency": 2, "hooks": ()}
    with saga.Orchestrator(pg_url, [flow], **options) as orch:
        orch.start("cut", "r1", run_id="r1")
        orch.start("cut", "r2", run_id="r2")
        stop = threading.Event()
        worker = threading.Thread(target=orch.work, args=(stop,))
        worker.start()
        try:
            with saga.Orchestrator(pg_url, [flow], hooks=()) as reader:

                def settled(run_id: str) -> None:
                    deadline = time.monotonic() + 60  # half the lease
                    while reader.get(run_id).status is not saga.Status.SUCCEEDED:
                        assert time.monotonic() < deadline, reader.get(run_id)
                        time.sleep(0.05)

                settled("r1")
                assert reader.get("r2").status is saga.Status.RUNNING
                r2_may_end.set()
                settled("r2")
                r1 = [(h.event, h.attempt) for h in reader.history("r1") if h.step == "act"]
                r2 = [(h.event, h.attempt) for h in reader.history("r2") if h.step == "act"]
                result = reader.get("r2").step("act").result
        finally:
            r2_may_end.set()
            stop.set()
            worker.join(30)
    assert r1 == ONCE
    assert r2 == ONCE and result == "late"
    assert sorted(calls) == [("r1", 1), ("r2", 1)]

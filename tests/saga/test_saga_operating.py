"""Operating a store: runs found by status, stuck, age and error text; counts by saga; a
worker's lease broken on purpose (and its late outcome fenced off); stores opened for reading
are never created nor migrated."""

from __future__ import annotations

from typing import Any

import pytest

import seawall
from seawall import saga
from seawall.saga._operations import is_overdue, lease_of, operate, parse_duration
from seawall.saga._stores import open_store

START = 1_700_000_000.0


class Crash(BaseException):
    """The worker process dies here (escapes the orchestrator, as a kill would end it)."""


def _policy(**kwargs: Any) -> seawall.RetryPolicy:
    return seawall.RetryPolicy(backoff=seawall.Backoff.constant(600.0), hooks=(), **kwargs)


def populate(url: str, clock: seawall.VirtualClock) -> saga.Orchestrator:
    """Runs in every state an operator looks for, at START on *clock*:

    - ``parked``: NEEDS_ATTENTION, its charge declined (``Permanent: card declined``);
    - ``waiting``: RETRYING, its next attempt 600 s away (``ConnectionError: gateway reset``);
    - ``done``: SUCCEEDED;
    - ``orphan``: a run of a saga no worker here runs: due at START, never claimed;
    - ``late``: SUCCEEDED, 50 s after the others.
    """

    def charge(ctx: saga.StepContext) -> str:
        if ctx.input.get("decline"):
            raise seawall.Permanent("card declined")
        if ctx.input.get("flaky"):
            raise ConnectionError("gateway reset")
        return "paid"

    order = saga.Saga(
        "order",
        [saga.Step("charge", charge, policy=_policy(max_attempts=3), on_exhausted="park")],
    )
    other = saga.Saga("other", [saga.Step("only", lambda ctx: None)])
    with saga.Orchestrator(url, [other], clock=clock, hooks=()) as elsewhere:
        elsewhere.start("other", {}, run_id="orphan")  # its workers are gone
    orch = saga.Orchestrator(url, [order], clock=clock, hooks=())
    orch.start("order", {"decline": True}, run_id="parked")
    orch.start("order", {"flaky": True}, run_id="waiting")
    orch.start("order", {}, run_id="done")
    orch.run_due()
    clock.advance(50.0)
    orch.start("order", {}, run_id="late")
    orch.run_due()
    clock.advance(70.0)  # START + 120
    return orch


def ids(runs: list[saga.Run]) -> set[str]:
    return {r.run_id for r in runs}


def test_runs_filters_combine(store_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    with populate(store_url, clock) as orch:
        assert ids(orch.runs()) == {"parked", "waiting", "done", "orphan", "late"}
        # Stuck: a person's (parked) or a worker's (orphan: due 120 s ago, unclaimed).
        assert ids(orch.runs(stuck=True)) == {"parked", "orphan"}
        assert ids(orch.runs(stuck=True, overdue_after=300.0)) == {"parked"}
        assert ids(orch.runs(stuck=True, saga="other")) == {"orphan"}
        assert ids(orch.runs(error_contains="GATEWAY")) == {"waiting"}
        assert ids(orch.runs(error_contains="card decl")) == {"parked"}
        # The wildcards of LIKE are plain characters.
        assert ids(orch.runs(error_contains="card%")) == set()
        assert ids(orch.runs(error_contains="card_declined")) == set()
        assert ids(orch.runs(error_contains="not_retryable")) == {"parked"}  # its reason
        assert ids(orch.runs(status="RETRYING", error_contains="card")) == set()
        assert ids(orch.runs(status=saga.Status.NEEDS_ATTENTION, error_contains="card")) == {
            "parked"
        }
        # Unchanged for 100 s: all but the late one.
        assert ids(orch.runs(older_than=100.0)) == {"parked", "waiting", "done", "orphan"}
        assert ids(orch.runs(older_than=100.0, stuck=True, error_contains="card")) == {"parked"}
        assert [r.run_id for r in orch.runs(limit=1)] == ["late"]
        clock.advance(480.0)  # START + 600: waiting's retry is due now; unclaimed for 60 s more
        assert "waiting" not in ids(orch.runs(stuck=True))
        clock.advance(61.0)
        assert "waiting" in ids(orch.runs(stuck=True))


def test_counts_by_saga_and_status_with_overdue(store_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    with populate(store_url, clock) as orch:
        counts = orch.counts_by_saga()
        assert counts == {
            "order": {"NEEDS_ATTENTION": 1, "RETRYING": 1, "SUCCEEDED": 2, "overdue": 0},
            "other": {"RUNNING": 1, "overdue": 1},
        }
        assert orch.counts_by_saga(overdue_after=500.0)["other"]["overdue"] == 0
        assert orch.counts()[saga.Status.SUCCEEDED] == 2  # the first signature still works


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"older_than": -1.0}, ValueError, "older_than"),
        ({"overdue_after": float("nan")}, ValueError, "overdue_after"),
        ({"error_contains": 3}, TypeError, "error_contains"),
        ({"saga": 3}, TypeError, "saga"),
        # A typo, or a step's status no run has: refused, not answered with no runs.
        ({"status": "BOGUS"}, ValueError, "status.*NEEDS_ATTENTION"),
        ({"status": "PENDING"}, ValueError, "status.*RETRYING"),
        ({"status": 3}, TypeError, "status"),
    ],
)
def test_bad_filters_are_refused_by_name(
    sqlite_url: str, kwargs: dict[str, Any], error: type[Exception], name: str
) -> None:
    flow = saga.Saga("s", [saga.Step("only", lambda ctx: None)])
    with (
        saga.Orchestrator(sqlite_url, [flow], hooks=()) as orch,
        pytest.raises(error, match=name),
    ):
        orch.runs(**kwargs)


def test_an_expired_lease_is_overdue_at_once(store_url: str) -> None:
    clock = seawall.VirtualClock(start=START)

    def dies(ctx: saga.StepContext) -> None:
        raise Crash

    flow = saga.Saga("crashy", [saga.Step("only", dies)])
    first = saga.Orchestrator(store_url, [flow], lease=30.0, clock=clock, hooks=(), worker_id="w-1")
    first.start("crashy", {}, run_id="held")
    with pytest.raises(Crash):
        first.run_due()
    first.close()
    store = open_store(store_url, clock.now, create=False)
    try:
        row = store.load("held")
        assert row is not None
        lease = lease_of(row.run, store.now())
        assert lease is not None and lease.owner == "w-1"
        assert lease.expires_at == pytest.approx(START + 30.0)
        assert not lease.expired and not is_overdue(row.run, store.now())
        assert store.find_runs(store.now(), stuck_after=60.0, limit=10) == []
        clock.advance(30.5)
        lease = lease_of(row.run, store.now())
        assert lease is not None and lease.expired
        assert is_overdue(row.run, store.now(), after=3600.0)  # the threshold is for unclaimed
        found = store.find_runs(store.now(), stuck_after=3600.0, limit=10)
        assert [f.run.run_id for f in found] == ["held"]
    finally:
        store.close()


def test_a_broken_lease_fences_the_worker_that_held_it(store_url: str) -> None:
    # Two workers on one store. The first is inside its attempt, its lease live; an operator
    # breaks it (a worker thought dead), the second claims the run at once and records its
    # outcome; the first's late outcome is never recorded.
    clock = seawall.VirtualClock(start=START)
    other: dict[str, saga.Orchestrator] = {}
    seen: dict[str, Any] = {}

    def slow(ctx: saga.StepContext) -> str:
        if ctx.attempt == 1:
            b = other["b"]
            # Without force, the operation waits for the holder: nothing can claim the run.
            assert operate(b.store, ctx.run_id, "retry_now") == "requested"
            assert b.run_due() == 0
            seen["forced"] = b.retry_now(ctx.run_id, force=True)
            row = b.store.load(ctx.run_id)
            assert row is not None and lease_of(row.run, b.store.now()) is None
            assert b.run_due() == 1  # claimed at once: no clock advanced
            seen["between"] = b.get(ctx.run_id)
        return f"worker {ctx.attempt}"

    pol = seawall.RetryPolicy(backoff=seawall.Backoff.constant(0.0), hooks=())
    flow = saga.Saga("slow", [saga.Step("s", slow, policy=pol)])
    with (
        saga.Orchestrator(store_url, [flow], lease=30.0, clock=clock, hooks=(), worker_id="a") as a,
        saga.Orchestrator(store_url, [flow], lease=30.0, clock=clock, hooks=(), worker_id="b") as b,
    ):
        other["b"] = b
        run_id = a.start("slow", {})
        a.run_due()
        run = a.get(run_id)
        history = a.history(run_id)
    assert seen["forced"].status is saga.Status.RUNNING  # due now, for anyone
    assert seen["between"].status is saga.Status.SUCCEEDED
    assert run.status is saga.Status.SUCCEEDED
    assert run.steps[0].result == "worker 2"  # the second worker's, not the first's
    assert run.steps[0].attempt_count == 2  # the broken attempt counts, as lost
    events = [(h.event, dict(h.detail).get("operation")) for h in history]
    assert ("operator", "break_lease") in events
    broken = next(h for h in history if dict(h.detail).get("operation") == "break_lease")
    assert dict(broken.detail)["worker"] == "a"
    assert any(h.event == "lost" for h in history)
    fenced = [h for h in history if h.event == "fenced"]
    assert len(fenced) == 1 and dict(fenced[0].detail)["worker"] == "a"


def test_cancel_force_stops_a_held_run_for_good(store_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    other: dict[str, saga.Orchestrator] = {}
    calls: list[int] = []

    def slow(ctx: saga.StepContext) -> str:
        calls.append(ctx.attempt)
        other["b"].cancel(ctx.run_id, force=True)
        return "late"

    flow = saga.Saga("slow", [saga.Step("s", slow)])
    with (
        saga.Orchestrator(store_url, [flow], clock=clock, hooks=(), worker_id="a") as a,
        saga.Orchestrator(store_url, [flow], clock=clock, hooks=(), worker_id="b") as b,
    ):
        other["b"] = b
        run_id = a.start("slow", {})
        a.run_due()
        clock.advance(3600.0)
        assert a.run_due() == 0 and b.run_due() == 0
        run = a.get(run_id)
    assert calls == [1]
    assert run.status is saga.Status.FAILED
    assert run.reason == "cancelled by an operator"
    assert run.steps[0].result is None  # the held attempt's outcome was fenced off


def test_force_must_be_a_bool(sqlite_url: str) -> None:
    flow = saga.Saga("s", [saga.Step("only", lambda ctx: None)])
    with saga.Orchestrator(sqlite_url, [flow], hooks=()) as orch:
        run_id = orch.start("s", {})
        with pytest.raises(TypeError, match="force"):
            orch.cancel(run_id, force="yes")  # type: ignore[arg-type]


def test_reading_never_creates_a_sqlite_store(tmp_path: Any) -> None:
    path = tmp_path / "mistyped.db"
    with pytest.raises(ValueError, match=r"mistyped\.db"):
        open_store(f"sqlite:///{path}", create=False)
    assert not path.exists()
    path.write_bytes(b"")  # an empty file is an empty database, not a saga store
    with pytest.raises(ValueError, match="no saga store"):
        open_store(f"sqlite:///{path}", create=False)
    assert path.read_bytes() == b""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 100)
    with pytest.raises(ValueError, match=r"notes\.txt is not a saga store"):
        open_store(f"sqlite:///{notes}", create=False)


def test_reading_never_creates_a_postgresql_store(pg_url: str) -> None:
    import psycopg

    with pytest.raises(ValueError, match="no saga store"):
        open_store(pg_url, create=False)
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'seawall%%'"
        ).fetchone()
    assert tables == (0,)


def test_reading_refuses_a_store_of_another_schema_version(sqlite_url: str) -> None:
    open_store(sqlite_url).close()  # created at this version
    store = open_store(sqlite_url)
    with store.transaction():
        store.execute("UPDATE seawall_saga_schema SET version = version + 1")
    store.close()
    with pytest.raises(saga.SchemaVersionError, match="newer"):
        open_store(sqlite_url, create=False)
    import sqlite3

    conn = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with conn:
        conn.execute("UPDATE seawall_saga_schema SET version = version - 2")
    conn.close()
    with pytest.raises(saga.SchemaVersionError, match="older"):
        open_store(sqlite_url, create=False)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("1.5m", 90.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("250ms", 0.25),
        (" 5M ", 300.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "-5s", "5 weeks", "inf", "nan", "1e400", "s", "5" * 40])
def test_bad_durations_are_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="--older-than"):
        parse_duration(text, "--older-than")


def test_overdue_in_python_agrees_with_the_store(store_url: str) -> None:
    # One decision written twice (SQL for filters, Python for a row): they must agree.
    clock = seawall.VirtualClock(start=START)
    with populate(store_url, clock) as orch:
        store = orch.store
        for advance in (0.0, 500.0, 200.0, 3600.0):
            clock.advance(advance)
            now = store.now()
            for after in (0.0, 60.0, 700.0):
                everything = store.find_runs(now, limit=100)
                by_python = {r.run.run_id for r in everything if is_overdue(r.run, now, after)}
                clause, values = store.overdue_clause(now, after)
                rows = store.execute(
                    f"SELECT run_id FROM seawall_saga_runs WHERE {clause}", values
                ).fetchall()
                assert {r[0] for r in rows} == by_python


def test_a_reader_sees_what_a_worker_wrote_after_it_opened(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    flow = saga.Saga("s", [saga.Step("only", lambda ctx: "ok")])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        run_id = orch.start("s", {})
        reader = open_store(sqlite_url, clock.now, create=False)
        try:
            orch.run_due()
            loaded = reader.load(run_id)
            assert loaded is not None and loaded.run.status == "SUCCEEDED"
        finally:
            reader.close()


def test_many_runs_are_listed_and_operated_in_chunks(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # More runs than one query of their steps takes (500): every run keeps its own steps.
    from seawall.cli import main

    clock = seawall.VirtualClock(start=START)
    flow = saga.Saga("bulk", [saga.Step("a", lambda ctx: None), saga.Step("b", lambda ctx: None)])
    with saga.Orchestrator(store_url, [flow], clock=clock, hooks=()) as orch:
        orch.start_many("bulk", [{"k": k} for k in range(620)], [f"r{k:04}" for k in range(620)])
        runs = orch.runs(limit=1000)
        assert len(runs) == 620
        assert all([s.name for s in r.steps] == ["a", "b"] for r in runs)
        assert {r.input["k"] for r in runs} == set(range(620))
    argv = ["saga", "cancel", "--store", store_url, "--saga", "bulk", "--yes"]
    assert main(argv) == 0
    assert "620 runs matched: 620 applied" in capsys.readouterr().out
    store = open_store(store_url, create=False)
    try:
        assert store.counts() == {"FAILED": 620}
    finally:
        store.close()


def test_error_text_with_a_backslash_matches_as_written(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)

    def fails(ctx: saga.StepContext) -> None:
        raise seawall.Permanent(ctx.input["message"])

    flow = saga.Saga("s", [saga.Step("only", fails, on_exhausted="park")])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        orch.start("s", {"message": r"C:\temp\x_1 100%"}, run_id="windows")
        orch.start("s", {"message": "C:/temp/xy1 1000"}, run_id="unix")
        orch.run_due()
        assert ids(orch.runs(error_contains=r"\temp\x_1 100%")) == {"windows"}
        assert ids(orch.runs(error_contains="temp")) == {"windows", "unix"}


def test_compensate_force_compensates_while_the_old_worker_is_fenced(store_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    other: dict[str, saga.Orchestrator] = {}
    released: list[str] = []

    def charge(ctx: saga.StepContext) -> str:
        b = other["b"]
        b.compensate(ctx.run_id, force=True)
        assert b.run_due() >= 1  # the second worker compensates the reservation now
        return "charged late"

    flow = saga.Saga(
        "order",
        [
            saga.Step("reserve", lambda ctx: "r", compensate=lambda ctx: released.append("r")),
            saga.Step("charge", charge),
        ],
    )
    with (
        saga.Orchestrator(store_url, [flow], clock=clock, hooks=(), worker_id="a") as a,
        saga.Orchestrator(store_url, [flow], clock=clock, hooks=(), worker_id="b") as b,
    ):
        other["b"] = b
        run_id = a.start("order", {})
        a.run_due()
        run = a.get(run_id)
        history = a.history(run_id)
    assert run.status is saga.Status.COMPENSATED
    assert released == ["r"]
    assert run.step("charge").result is None  # the late outcome was not recorded
    assert any(h.event == "fenced" for h in history)

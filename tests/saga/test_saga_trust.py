"""Trust under faults: a step's row is run only by its own function (deploys, versions), a
status a newer seawall wrote is never rewritten, leases are judged on the store's clock, and a
fenced worker's outcome shows in the history without being recorded."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from typing import Any

import pytest

import seawall
from seawall import saga
from seawall.cli import main

START = 1_700_000_000.0
ZERO = seawall.RetryPolicy(max_attempts=5, backoff=seawall.Backoff.constant(10.0), hooks=())


class Ledger:
    """What each step function did: (function name, the row's step, the key it was given)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.fail_charge_once = True

    def step(self, name: str, *, fail_first: bool = False) -> Any:
        def action(ctx: saga.StepContext) -> str:
            self.calls.append((name, ctx.step, ctx.idempotency_key))
            if fail_first and ctx.attempt == 1:
                raise ConnectionError(f"{name} is down")
            return name

        action.__name__ = name
        return action

    def wrong(self) -> list[tuple[str, str, str]]:
        """Calls of a function for another step's row or key."""
        return [c for c in self.calls if c[0] != c[1] or not c[2].endswith(":" + c[0])]


def order(ledger: Ledger, names: list[str], version: int = 1) -> saga.Saga:
    return saga.Saga(
        "order",
        [saga.Step(n, ledger.step(n, fail_first=n == "charge"), policy=ZERO) for n in names],
        version=version,
    )


def waiting_run(url: str, ledger: Ledger, clock: seawall.VirtualClock) -> str:
    """A run of order v1 (charge, ship) whose charge failed once and waits for its retry."""
    with saga.Orchestrator(url, [order(ledger, ["charge", "ship"])], clock=clock, hooks=()) as o:
        run_id = o.start("order", {"id": 1})
        assert o.run_due() == 1
        assert o.get(run_id).steps[0].status is saga.Status.RETRYING
    return run_id


def test_a_changed_definition_under_the_same_version_is_refused_at_start_up(
    store_url: str,
) -> None:
    ledger = Ledger()
    clock = seawall.VirtualClock(start=START)
    waiting_run(store_url, ledger, clock)
    changed = order(ledger, ["audit", "charge", "ship"])
    with pytest.raises(ValueError, match=r"'order' version 1 is registered .* version=2"):
        saga.Orchestrator(store_url, [changed], clock=clock, hooks=())
    # Two live orchestrators with different definitions: the second is refused.
    with (
        saga.Orchestrator(store_url, [order(ledger, ["charge", "ship"])], clock=clock) as first,
        pytest.raises(ValueError, match="registered"),
    ):
        assert first.sagas["order"].version == 1
        saga.Orchestrator(store_url, [order(ledger, ["ship", "charge"])], clock=clock)


def test_a_deploy_that_inserts_a_step_keeps_old_runs_on_their_version(store_url: str) -> None:
    ledger = Ledger()
    clock = seawall.VirtualClock(start=START)
    old = waiting_run(store_url, ledger, clock)
    v1 = order(ledger, ["charge", "ship"])
    v2 = order(ledger, ["audit", "charge", "ship"], version=2)
    with saga.Orchestrator(store_url, [v2, v1], clock=clock, hooks=()) as o:
        new = o.start("order", {"id": 2})
        clock.advance(60.0)
        o.run_due()
        clock.advance(60.0)
        o.run_due()
        old_run, new_run = o.get(old), o.get(new)
    assert ledger.wrong() == []
    assert old_run.status is saga.Status.SUCCEEDED
    assert [s.name for s in old_run.steps] == ["charge", "ship"]
    assert old_run.step("ship").result == "ship"
    assert new_run.status is saga.Status.SUCCEEDED
    assert [s.name for s in new_run.steps] == ["audit", "charge", "ship"]
    assert [c[0] for c in ledger.calls].count("audit") == 1  # only for the new run


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (["audit", "charge", "ship"], "step 'charge' is now at position 2"),
        (
            ["ship", "charge"],
            "step 'charge' is now at position 2; step 'ship' is now at position 1",
        ),
        (["charge", "deliver"], "step 'ship' is gone; step 'deliver' is new"),
        (["charge"], "step 'ship' is gone"),
    ],
)
def test_a_run_whose_definition_is_gone_parks_with_what_changed(
    sqlite_url: str, names: list[str], said: str
) -> None:
    ledger = Ledger()
    clock = seawall.VirtualClock(start=START)
    run_id = waiting_run(sqlite_url, ledger, clock)
    before = list(ledger.calls)
    with saga.Orchestrator(
        sqlite_url, [order(ledger, names, version=2)], clock=clock, hooks=()
    ) as o:
        clock.advance(60.0)
        o.run_due()
        run = o.get(run_id)
        # An operator's retry brings it back to a worker, which parks it again: still no call.
        o.retry_now(run_id)
        o.run_due()
        again = o.get(run_id)
    assert ledger.calls == before  # no function ran for the old run
    assert run.status is saga.Status.NEEDS_ATTENTION
    assert run.reason is not None
    assert f"saga 'order' changed under run {run_id!r}: {said}" in run.reason
    assert "started under version 1" in run.reason
    assert [s.name for s in run.steps] == ["charge", "ship"]  # the rows are as they were
    assert run.steps[0].status is saga.Status.RETRYING
    assert again.status is saga.Status.NEEDS_ATTENTION
    # Registering version 1 again lets it finish, on its own functions.
    with saga.Orchestrator(
        sqlite_url,
        [order(ledger, names, version=2), order(ledger, ["charge", "ship"])],
        clock=clock,
        hooks=(),
    ) as o:
        o.retry_now(run_id)
        o.run_due()
        done = o.get(run_id)
    assert done.status is saga.Status.SUCCEEDED
    assert ledger.wrong() == []


def test_two_versions_of_one_saga_in_one_orchestrator_must_differ(sqlite_url: str) -> None:
    ledger = Ledger()
    with pytest.raises(ValueError, match="two sagas are named 'order' with version 1"):
        saga.Orchestrator(
            sqlite_url, [order(ledger, ["charge"]), order(ledger, ["ship"])], hooks=()
        )
    with pytest.raises(ValueError, match="version must be an int from 1"):
        saga.Saga("order", [saga.Step("a", ledger.step("a"))], version=0)


FIRST_SCHEMA = [
    "CREATE TABLE seawall_saga_schema (version INTEGER NOT NULL)",
    """CREATE TABLE seawall_saga_runs (run_id TEXT PRIMARY KEY, saga TEXT NOT NULL,
    status TEXT NOT NULL, input TEXT NOT NULL, reason TEXT, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, due_at REAL, lease_owner TEXT,
    lease_token INTEGER NOT NULL DEFAULT 0, requested TEXT)""",
    """CREATE TABLE seawall_saga_steps (run_id TEXT NOT NULL, position INTEGER NOT NULL,
    name TEXT NOT NULL, status TEXT NOT NULL, running INTEGER NOT NULL DEFAULT 0,
    attempt_count INTEGER NOT NULL DEFAULT 0,
    compensation_attempt_count INTEGER NOT NULL DEFAULT 0, next_retry_at REAL,
    last_error TEXT, result TEXT, retry_state TEXT, idempotency_key TEXT NOT NULL,
    started_at REAL, finished_at REAL, updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, position))""",
    """CREATE TABLE seawall_saga_history (id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL, at REAL NOT NULL, step TEXT, phase TEXT, event TEXT NOT NULL,
    attempt INTEGER, delay REAL, error TEXT, detail TEXT)""",
    "INSERT INTO seawall_saga_schema (version) VALUES (1)",
]


def first_schema_store(path: str, steps: list[str]) -> None:
    """A store as the first schema wrote it, with one run due now."""
    conn = sqlite3.connect(path)
    for statement in FIRST_SCHEMA:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO seawall_saga_runs VALUES ('r1', 'order', 'RUNNING', '{}', NULL, ?, ?, ?, "
        "NULL, 0, NULL)",
        (START, START, START),
    )
    for i, name in enumerate(steps):
        conn.execute(
            "INSERT INTO seawall_saga_steps (run_id, position, name, status, idempotency_key, "
            "updated_at) VALUES ('r1', ?, ?, 'PENDING', ?, ?)",
            (i, name, f"r1:{name}", START),
        )
    conn.commit()
    conn.close()


def test_runs_of_the_first_schema_are_matched_by_their_step_names(tmp_path: Any) -> None:
    path = str(tmp_path / "old.db")
    first_schema_store(path, ["charge", "ship"])
    ledger = Ledger()
    clock = seawall.VirtualClock(start=START)
    # The code now has version 2 with a new step, and version 1 as the runs started.
    v1 = order(ledger, ["charge", "ship"])
    v2 = order(ledger, ["audit", "charge", "ship"], version=2)
    with saga.Orchestrator(f"sqlite:///{path}", [v1, v2], clock=clock, hooks=()) as o:
        o.run_due()
        clock.advance(60.0)
        o.run_due()
        run = o.get("r1")
    assert run.status is saga.Status.SUCCEEDED
    assert ledger.wrong() == []
    assert [c[0] for c in ledger.calls] == ["charge", "charge", "ship"]
    conn = sqlite3.connect(path)
    row = conn.execute("SELECT saga_version, fingerprint FROM seawall_saga_runs").fetchone()
    conn.close()
    assert row == (1, v1.fingerprint)


def test_a_first_schema_run_with_other_steps_parks(tmp_path: Any) -> None:
    path = str(tmp_path / "old.db")
    first_schema_store(path, ["charge", "ship"])
    ledger = Ledger()
    clock = seawall.VirtualClock(start=START)
    v2 = order(ledger, ["audit", "charge", "ship"], version=2)
    with saga.Orchestrator(f"sqlite:///{path}", [v2], clock=clock, hooks=()) as o:
        o.run_due()
        run = o.get("r1")
    assert ledger.calls == []
    assert run.status is saga.Status.NEEDS_ATTENTION
    assert run.reason is not None and "started under its first version" in run.reason


# -- statuses a newer seawall wrote ---------------------------------------------------------------


def set_status(path: str, sql: str, *params: Any) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql, params)
    conn.commit()
    conn.close()


def test_an_unknown_run_status_is_shown_and_never_rewritten(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "s.db")
    url = f"sqlite:///{path}"
    ledger = Ledger()
    clock = seawall.VirtualClock(start=START)
    run_id = waiting_run(url, ledger, clock)
    set_status(path, "UPDATE seawall_saga_runs SET status = 'PAUSED'")
    calls = len(ledger.calls)
    with saga.Orchestrator(url, [order(ledger, ["charge", "ship"])], clock=clock, hooks=()) as o:
        clock.advance(3600.0)
        assert o.run_due() == 0
        run = o.get(run_id)
        assert o.run_until_settled(run_id).status.value == "PAUSED"
        listed = o.runs()
        counts = o.counts()
        with pytest.raises(ValueError, match="'PAUSED', unknown to this seawall"):
            o.retry_now(run_id)
    assert len(ledger.calls) == calls
    assert run.status.value == "PAUSED" and not run.status.known and not run.status.final
    assert [r.status.value for r in listed] == ["PAUSED"]
    assert {k.value: v for k, v in counts.items()} == {"PAUSED": 1}
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT status FROM seawall_saga_runs").fetchone() == ("PAUSED",)
    conn.close()
    assert main(["saga", "list", "--store", url]) == 0
    assert "PAUSED" in capsys.readouterr().out


def test_an_unknown_step_status_parks_the_run_and_keeps_the_row(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    ledger = Ledger()
    clock = seawall.VirtualClock(start=START)
    run_id = waiting_run(sqlite_url, ledger, clock)
    set_status(path, "UPDATE seawall_saga_steps SET status = 'SKIPPED' WHERE name = 'charge'")
    calls = len(ledger.calls)
    with saga.Orchestrator(
        sqlite_url, [order(ledger, ["charge", "ship"])], clock=clock, hooks=()
    ) as o:
        clock.advance(60.0)
        o.run_due()
        run = o.get(run_id)
    assert len(ledger.calls) == calls
    assert run.status is saga.Status.NEEDS_ATTENTION
    assert run.reason is not None and "'SKIPPED', unknown to this seawall" in run.reason
    assert run.steps[0].status.value == "SKIPPED"


# -- one clock for leases --------------------------------------------------------------------------


class Skewed(seawall.VirtualClock):
    """A worker's clock: the shared virtual time plus an offset."""

    def __init__(self, base: seawall.VirtualClock, offset: float) -> None:
        super().__init__(start=base.now() + offset)
        self.base, self.offset = base, offset

    def now(self) -> float:
        return self.base.now() + self.offset

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)


def test_a_worker_ahead_of_the_store_does_not_take_a_live_lease(sqlite_url: str) -> None:
    store = seawall.VirtualClock(start=START)
    calls: list[str] = []
    others: dict[str, saga.Orchestrator] = {}

    def step(ctx: saga.StepContext) -> int:
        calls.append(ctx.step)
        store.advance(1.0)  # within the 2 s lease
        assert others["ahead"].run_due() == 0  # 5 s ahead, and still no take-over
        return 1

    flow = saga.Saga("s", [saga.Step("only", step)])
    with (
        saga.Orchestrator(
            sqlite_url, [flow], lease=2.0, clock=Skewed(store, 0.0), store_clock=store, hooks=()
        ) as behind,
        saga.Orchestrator(
            sqlite_url, [flow], lease=2.0, clock=Skewed(store, 5.0), store_clock=store, hooks=()
        ) as ahead,
    ):
        others["ahead"] = ahead
        run_id = behind.start("s", {})
        assert behind.run_due() == 1
        assert behind.get(run_id).status is saga.Status.SUCCEEDED
    assert calls == ["only"]


def test_leases_on_postgresql_are_judged_on_its_clock(pg_url: str) -> None:
    class Ahead(seawall.SystemClock):
        def now(self) -> float:
            return time.time() + 3600.0

    import psycopg

    seen: dict[str, float] = {}

    def step(ctx: saga.StepContext) -> int:
        with psycopg.connect(pg_url) as conn:
            due, now = conn.execute(
                "SELECT due_at, extract(epoch FROM clock_timestamp())::float8 "
                "FROM seawall_saga_runs WHERE run_id = %s",
                (ctx.run_id,),
            ).fetchone()  # type: ignore[misc]
        seen["lease_left"] = due - now
        return 1

    flow = saga.Saga("s", [saga.Step("only", step)])
    with saga.Orchestrator(pg_url, [flow], lease=30.0, clock=Ahead(), hooks=()) as o:
        run_id = o.start("s", {})
        o.run_due()
        run = o.get(run_id)
    assert run.status is saga.Status.SUCCEEDED
    # An hour ahead on the worker's clock; the lease runs out 30 s after the store's now.
    assert 0.0 < seen["lease_left"] <= 30.0
    assert abs(run.created_at.timestamp() - time.time()) < 600.0


def test_a_fenced_worker_leaves_its_outcome_in_the_history(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    other: dict[str, saga.Orchestrator] = {}

    def slow(ctx: saga.StepContext) -> int:
        if ctx.attempt == 1:
            clock.advance(31.0)
            assert other["b"].run_due() == 1
        return ctx.attempt

    pol = seawall.RetryPolicy(backoff=seawall.Backoff.constant(0.0), hooks=())
    flow = saga.Saga("slow", [saga.Step("s", slow, policy=pol)])
    with (
        saga.Orchestrator(
            sqlite_url, [flow], lease=30.0, clock=clock, hooks=(), worker_id="a"
        ) as a,
        saga.Orchestrator(
            sqlite_url, [flow], lease=30.0, clock=clock, hooks=(), worker_id="b"
        ) as b,
    ):
        other["b"] = b
        run_id = a.start("slow", {})
        a.run_due()
        history = a.history(run_id)
        run = a.get(run_id)
    fenced = [h for h in history if h.event == "fenced"]
    assert len(fenced) == 1
    assert fenced[0].attempt == 1 and fenced[0].step == "s"
    assert dict(fenced[0].detail)["worker"] == "a"
    assert dict(fenced[0].detail)["outcome"] == "success"
    assert run.steps[0].result == 2  # the recorded outcome is the new holder's
    assert json.loads(json.dumps(dict(fenced[0].detail)))["outcome"] == "success"


# -- a crash charges only the attempts that began ----------------------------------------------


class Crash(BaseException):
    """The worker process dies here (escapes the orchestrator, as a kill would end it)."""


def test_a_crash_charges_each_run_only_the_attempt_that_began(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    began: dict[str, int] = {}
    crash = {"armed": True}

    def step(ctx: saga.StepContext) -> str:
        began[ctx.run_id] = began.get(ctx.run_id, 0) + 1
        if crash["armed"] and ctx.input["k"] == 2:
            crash["armed"] = False
            raise Crash
        return "ok"

    pol = seawall.RetryPolicy(max_attempts=2, backoff=seawall.Backoff.constant(0.0), hooks=())
    flow = saga.Saga("batch", [saga.Step("only", step, policy=pol)])
    first = saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, batch=8, hooks=())
    ids = first.start_many("batch", [{"k": k} for k in range(8)])
    with pytest.raises(Crash):
        first.run_due()
    first.close()  # the process is gone; its leases lapse
    clock.advance(31.0)
    with saga.Orchestrator(sqlite_url, [flow], lease=30.0, clock=clock, hooks=()) as second:
        second.run_due()
        runs = [second.get(r) for r in ids]
    # Every claimed attempt began before the crash (they run at once), so each charge is one
    # that began; none of the runs gave up on attempts that never started.
    for run in runs:
        assert run.status is saga.Status.SUCCEEDED
        assert run.steps[0].attempt_count == began[run.run_id]


def test_a_renewal_that_races_the_release_changes_no_due_time(sqlite_url: str) -> None:
    # A lease keeper's renewal can arrive just after its worker released the run (it finished,
    # or waits for a retry): the run's due time stays what the worker wrote.
    clock = seawall.VirtualClock(start=START)
    flow = saga.Saga(
        "r",
        [
            saga.Step("a", lambda ctx: 1),
            saga.Step("b", Ledger().step("b", fail_first=True), policy=ZERO),
        ],
    )
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        run_id = orch.start("r", {})
        orch.run_due()
        waiting = orch.get(run_id)
        token = orch.store.execute(
            "SELECT lease_token FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
        before = orch.store.execute(
            "SELECT due_at FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
        orch.store.renew([(run_id, token)], 30.0)  # the stale renewal
        after = orch.store.execute(
            "SELECT due_at FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
        assert waiting.status is saga.Status.RETRYING
        assert after == before == START + 10.0
        clock.advance(10.0)
        done = orch.run_until_settled(run_id)
        orch.store.renew([(run_id, token)], 30.0)
        final_due = orch.store.execute(
            "SELECT due_at FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
    assert done.status is saga.Status.SUCCEEDED
    assert final_due is None  # a finished run never gets a due time back


def test_a_renewal_never_waits_for_a_row_its_worker_is_writing(pg_url: str) -> None:
    # A worker's commit writes several runs it holds (an outcome, then the next queued run's
    # attempt); its lease keeper renews the same runs in a transaction of its own. Had the
    # renewal waited for the row the commit holds, the two would wait for each other, and
    # PostgreSQL would abort one: the worker's, which then abandons its batch, whose finished
    # attempts run again elsewhere once the leases lapse. A renewal skips a row being written
    # (its writer sets the due time itself) and never waits.

    import psycopg

    flow = saga.Saga("r", [saga.Step("a", lambda ctx: 1)])
    with saga.Orchestrator(pg_url, [flow], hooks=()) as orch:
        first, second = orch.start("r", {}), orch.start("r", {})
        orch.store.execute(
            "UPDATE seawall_saga_runs SET lease_owner = 'w', lease_token = 7, due_at = ?",
            (orch.store.now() + 30.0,),
        )

        def due(run_id: str) -> float:
            row = orch.store.execute(
                "SELECT due_at FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return float(row[0])

        before = due(first)
        keeper = orch.store.clone()
        errors: list[BaseException] = []

        def renew() -> None:
            try:
                keeper.renew([(first, 7), (second, 7)], 60.0)
            except BaseException as exc:
                errors.append(exc)

        with psycopg.connect(pg_url) as worker:  # the worker's commit, in progress
            worker.execute(
                "UPDATE seawall_saga_runs SET updated_at = updated_at WHERE run_id = %s",
                (second,),
            )
            thread = threading.Thread(target=renew)
            thread.start()
            # Until the renewal is done, or waits for a lock (as it did).
            watcher = orch.store.clone()
            limit = time.monotonic() + 60.0
            while thread.is_alive() and time.monotonic() < limit:
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                ).fetchone()[0]
                if waiting:
                    break
                time.sleep(0.01)
            worker.execute(  # the commit goes on with the first run: no deadlock
                "UPDATE seawall_saga_runs SET updated_at = updated_at WHERE run_id = %s",
                (first,),
            )
            worker.commit()
            thread.join(60.0)
            watcher.close()
        keeper.close()
        assert not thread.is_alive()
        assert errors == []
        assert due(first) > before  # renewed; the row being written was skipped


def test_the_default_log_escapes_a_step_errors_control_characters(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A step's error text comes from a downstream service: in the worker's log it must not
    # forge a line (CR/LF) or act on the terminal (ESC, BEL).
    hostile = "down\x1b[2J\x07\r\nseawall.saga: all healthy"

    def fails(ctx: saga.StepContext) -> None:
        raise seawall.Permanent(hostile)

    flow = saga.Saga("h", [saga.Step("a", fails)])
    with (
        caplog.at_level(logging.INFO, logger="seawall.saga"),
        saga.Orchestrator(sqlite_url, [flow]) as orch,
    ):
        run_id = orch.start("h", {})
        orch.run_until_settled(run_id)
    lines = [r.getMessage() for r in caplog.records if r.name == "seawall.saga"]
    assert any("down" in line for line in lines), lines
    for line in lines:
        assert not any(c in line for c in "\x1b\x07\r\n"), line
    assert any("\\x1b[2J\\x07\\r\\n" in line for line in lines), lines

"""PostgreSQL: a commit that loses a conflict (a serialization failure, a deadlock, a lock
timeout) is tried again at once, so the attempts it records are recorded, once; it is not taken
for an outage, which abandons the round and leaves its finished attempts to run again after
their leases.

Every conflict is real: another session writes or locks the runs' rows while their attempts
run, and the worker's commit meets it (in a lock cycle, or with a ``lock_timeout``, as a
database may be configured). A database whose default is ``SERIALIZABLE`` gives no conflict:
the worker's transactions run at ``READ COMMITTED``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import seawall
from seawall import saga

START = 1_767_225_600.0
LEASE = 30.0


class Watchdog(seawall.VirtualClock):
    """Virtual time that calls *at_limit* once it passes *limit* seconds (a worker loop that
    would otherwise go on for good ends)."""

    def __init__(self, limit: float, at_limit: Callable[[], None]) -> None:
        super().__init__(start=START)
        self.limit = limit
        self.at_limit = at_limit
        self.fired = False

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if not self.fired and self.now() - START > self.limit:
            self.fired = True
            self.at_limit()


def with_settings(url: str, **settings: str) -> str:
    """*url* with server settings for its sessions (libpq's ``options``)."""
    options = " ".join(f"-c {name}={value}" for name, value in settings.items())
    return f"{url}?options={urllib.parse.quote(options)}"


def wait_for_a_lock_wait(url: str) -> None:
    """Until a session of the database waits for a row lock (or a minute passed)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as watcher:
        limit = time.monotonic() + 60.0
        while time.monotonic() < limit:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()
            if waiting and waiting[0]:
                return
            time.sleep(0.01)


@contextlib.contextmanager
def retries_logged(on_retry: Callable[[], None]) -> Iterator[list[str]]:
    """The worker's log lines of conflicts it tries again; *on_retry* called at each."""
    lines: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "conflict" in message:
                lines.append(message)
                on_retry()

    handler = Handler(logging.INFO)
    log = logging.getLogger("seawall.saga")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def settled(stop: threading.Event) -> Callable[[saga.SagaEvent], None]:
    def hook(event: saga.SagaEvent) -> None:
        if event.kind == "run" and event.status in (saga.Status.SUCCEEDED, saga.Status.FAILED):
            stop.set()

    return hook


def locks_its_row_once(holder: Any, calls: list[int]) -> saga.Saga:
    """A one-step saga whose first attempt has *holder* (another session) lock the run's row
    before it returns; *calls* gets each attempt's number."""

    def charge(ctx: saga.StepContext) -> str:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            holder.execute(
                "SELECT 1 FROM seawall_saga_runs WHERE run_id = %s FOR UPDATE", (ctx.run_id,)
            )
        return "charged"

    return saga.Saga("pay", [saga.Step("charge", charge)])


def attempts_of(orch: saga.Orchestrator, run_id: str) -> list[tuple[str, Any]]:
    return [(h.event, h.attempt) for h in orch.history(run_id) if h.event != "status"]


def test_a_serializable_database_default_is_not_the_workers(pg_url: str) -> None:
    """A database whose sessions default to SERIALIZABLE: another transaction writes the run's
    row while its attempt runs, and commits while the worker's commit waits for that row. At
    SERIALIZABLE the worker's commit would fail (40001) and abandon the attempt's outcome; its
    transactions run at READ COMMITTED whatever the default, so it waits, reads the newer row,
    and records the attempt, which ran once, with no conflict to try again."""
    import psycopg

    url = with_settings(pg_url, default_transaction_isolation="serializable")
    stop = threading.Event()
    calls: list[int] = []
    other = psycopg.connect(pg_url)  # READ COMMITTED, the server's default

    def commit_once_waited_for() -> None:
        wait_for_a_lock_wait(pg_url)
        other.commit()

    helper = threading.Thread(target=commit_once_waited_for, daemon=True)

    def charge(ctx: saga.StepContext) -> str:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            # The run's row, written by another session (a write that changes nothing), which
            # commits once the worker's commit waits for the row.
            other.execute(
                "UPDATE seawall_saga_runs SET due_at = due_at WHERE run_id = %s", (ctx.run_id,)
            )
            helper.start()
        return "charged"

    flow = saga.Saga("pay", [saga.Step("charge", charge)])
    clock = Watchdog(20 * LEASE, stop.set)
    try:
        with (
            retries_logged(lambda: None) as retried,
            saga.Orchestrator(
                url, [flow], clock=clock, lease=LEASE, hooks=(settled(stop),)
            ) as orch,
        ):
            with psycopg.connect(url) as session:  # the default, as the database gives it
                shown = session.execute("SHOW transaction_isolation").fetchone()
            run_id = orch.start("pay")
            orch.work(stop)
            run = orch.get(run_id)
            history = attempts_of(orch, run_id)
    finally:
        # The server committed before the worker went on, but the thread may not have read
        # the answer yet: closing the connection under it would break its commit.
        if helper.is_alive():
            helper.join(60.0)
        other.close()
    assert shown == ("serializable",)
    assert not helper.is_alive()  # the worker's commit did wait for the other's row
    assert calls == [1], f"the attempt ran {len(calls)} times; history {history}"
    assert run.status is saga.Status.SUCCEEDED
    assert run.step("charge").attempt_count == 1
    assert not any(event == "lost" for event, _ in history), history
    assert retried == [], retried  # nothing lost to a serialization failure


def test_a_lock_timeout_in_a_commit_is_tried_again(pg_url: str) -> None:
    """With a ``lock_timeout``, another session holds the run's row lock while its attempt
    runs: the worker's commit gives up waiting (55P03), releases nothing it wrote (it wrote
    nothing), and tries again; the holder lets go at the first retry, and the attempt is
    recorded once."""
    import psycopg

    url = with_settings(pg_url, lock_timeout="50ms")
    stop = threading.Event()
    calls: list[int] = []
    holder = psycopg.connect(pg_url)
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            holder.rollback()

    flow = locks_its_row_once(holder, calls)
    # Without the retry, nothing would release the row: the watchdog does, later.
    clock = Watchdog(10 * LEASE, release)
    try:
        with (
            retries_logged(release) as retried,
            saga.Orchestrator(
                url, [flow], clock=clock, lease=LEASE, hooks=(settled(stop),)
            ) as orch,
        ):
            run_id = orch.start("pay")
            orch.work(stop)
            run = orch.get(run_id)
            history = attempts_of(orch, run_id)
    finally:
        holder.close()
    assert calls == [1], f"the attempt ran {len(calls)} times; history {history}"
    assert run.status is saga.Status.SUCCEEDED
    assert run.step("charge").attempt_count == 1
    assert retried, "the commit met no conflict"
    assert any("LockNotAvailable" in line for line in retried), retried
    assert not clock.fired  # released by the retry, not by the watchdog


@pytest.mark.parametrize(
    ("sqlstate", "conflict"),
    [("40001", True), ("40P01", True), ("55P03", True), ("57P01", False), ("08006", False)],
)
def test_which_errors_are_conflicts(pg_url: str, sqlstate: str, conflict: bool) -> None:
    """The error classes as the server raises them: a conflict is tried again, never taken for
    an outage; a server shutting down (57P01) or a lost connection (08006) is an outage."""
    import psycopg

    from seawall.saga._stores import open_store

    store = open_store(pg_url)
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn, pytest.raises(psycopg.Error) as info:
            conn.execute(f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{sqlstate}'; END $$")
        assert info.value.sqlstate == sqlstate
        assert store.conflict(info.value) is conflict
        assert store.unavailable(info.value) is (not conflict)
    finally:
        store.close()


def test_a_conflict_that_outlasts_its_retries_ends_the_round_not_the_connection(
    pg_url: str,
) -> None:
    """A row held for longer than every retry waits: the worker loop logs it and goes on with
    the same connection (no outage to reconnect from), trying again each round; once the row
    is free, the outcome the failed commit held is recorded. The step does not run again."""
    import psycopg

    url = with_settings(pg_url, lock_timeout="20ms")
    stop = threading.Event()
    calls: list[int] = []
    holder = psycopg.connect(pg_url)

    flow = locks_its_row_once(holder, calls)
    # The holder lets go soon after the lease lapsed (until then, the worker finds the run due
    # and skipped by its claim, held by another session, at most every MAX_HELD_IDLE).
    lease = 5.0
    clock = Watchdog(1.2 * lease, holder.rollback)
    try:
        with (
            retries_logged(lambda: None) as logged,
            saga.Orchestrator(
                url, [flow], clock=clock, lease=lease, hooks=(settled(stop),)
            ) as orch,
        ):
            store = orch.store
            run_id = orch.start("pay")
            orch.work(stop)
            assert orch.store is store  # not reconnected
            run = orch.get(run_id)
            history = attempts_of(orch, run_id)
    finally:
        holder.close()
    retried = [line for line in logged if "trying again in 0." in line]
    assert len(retried) >= 5, logged  # CONFLICT_RETRIES, a round at a time
    assert len(retried) % 5 == 0, logged
    assert any("kept losing conflicts" in line for line in logged), logged
    assert clock.fired
    assert calls == [1]
    assert [e for e, _ in history if e == "lost"] == [], history
    assert ("success", 1) in history, history
    assert run.status is saga.Status.SUCCEEDED


def test_sqlite_database_is_locked_stays_an_outage(tmp_path: Any) -> None:
    """SQLite's "database is locked" comes only after a writer waited its whole busy timeout
    (60 s for the store) at ``BEGIN IMMEDIATE``, before it did anything: the file was held all
    that time, which a worker treats as an outage, as before; it is no conflict to retry at
    once. (Here the error is SQLite's own, from a connection that does not wait.)"""
    import sqlite3

    from seawall.saga._stores import open_store

    path = tmp_path / "saga.db"
    store = open_store(f"sqlite:///{path}")
    holder = sqlite3.connect(path, isolation_level=None)
    impatient = sqlite3.connect(path, isolation_level=None, timeout=0.0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match="database is locked") as info:
            impatient.execute("BEGIN IMMEDIATE")
        assert not store.conflict(info.value)
        assert store.unavailable(info.value)
    finally:
        holder.close()
        impatient.close()
        store.close()


def test_a_deadlock_in_a_commit_is_tried_again(pg_url: str) -> None:
    """Another session locks the runs' rows in the opposite order to the worker's commit, which
    records two outcomes together: a real deadlock (40P01). The worker's session detects it
    (its ``deadlock_timeout`` is the shorter of the two) and is the one aborted; it tries
    again once the other session is through, and records both attempts, which ran once each.

    The other session must ask for its second row within the worker's ``deadlock_timeout``
    (8 s: a margin for a loaded machine) of the worker's wait: it does so as soon as it sees
    that wait (a few milliseconds).
    """
    import psycopg

    url = with_settings(pg_url, deadlock_timeout="8s")
    stop = threading.Event()
    calls: list[str] = []
    other = psycopg.connect(pg_url)
    other.execute("SET deadlock_timeout = '10min'")  # the worker's session detects the cycle
    other.execute("SET lock_timeout = '60s'")  # (should it not: fail, not hang)
    other_error: list[BaseException] = []

    def lock_a_once_the_worker_waits() -> None:
        wait_for_a_lock_wait(pg_url)
        try:
            other.execute("SELECT 1 FROM seawall_saga_runs WHERE run_id = 'a' FOR UPDATE")
            other.commit()
        except psycopg.Error as err:
            other_error.append(err)
            other.rollback()

    locker = threading.Thread(target=lock_a_once_the_worker_waits, daemon=True)

    def charge(ctx: saga.StepContext) -> str:
        calls.append(ctx.run_id)
        if ctx.run_id == "a" and calls.count("a") == 1:
            # b first, then (in the thread) a: the worker's commit locks a, then b.
            other.execute("SELECT 1 FROM seawall_saga_runs WHERE run_id = 'b' FOR UPDATE")
            locker.start()
        return "charged"

    flow = saga.Saga("pay", [saga.Step("charge", charge)])
    clock = Watchdog(20 * LEASE, stop.set)
    settled_runs: set[str] = set()

    def both_settled(event: saga.SagaEvent) -> None:
        if event.kind == "run" and event.status is saga.Status.SUCCEEDED:
            settled_runs.add(event.run_id)
            if settled_runs == {"a", "b"}:
                stop.set()

    try:
        with (
            retries_logged(lambda: None) as retried,
            saga.Orchestrator(
                url, [flow], clock=clock, lease=LEASE, concurrency=2, hooks=(both_settled,)
            ) as orch,
        ):
            orch.start("pay", run_id="a")
            orch.start("pay", run_id="b")
            orch.work(stop)
            runs = [orch.get(run_id) for run_id in ("a", "b")]
            histories = [attempts_of(orch, run_id) for run_id in ("a", "b")]
    finally:
        if locker.is_alive():  # its commit may be answered but not yet read
            locker.join(60.0)
        other.close()
    assert other_error == [], other_error  # the worker's session was the one aborted
    assert sorted(calls) == ["a", "b"], f"attempts ran {calls}; histories {histories}"
    assert all(run.status is saga.Status.SUCCEEDED for run in runs)
    assert any("DeadlockDetected" in line for line in retried), retried


def test_the_worker_log_escapes_a_database_errors_control_characters(pg_url: str) -> None:
    """A database's error text is untrusted (a trigger, an extension or a proxy writes it): the
    worker's warning shows its control characters as escapes, never raw to a terminal."""
    import psycopg

    stop = threading.Event()
    flow = saga.Saga("pay", [saga.Step("charge", lambda ctx: "charged")])
    with saga.Orchestrator(pg_url, [flow], clock=seawall.VirtualClock(start=START)) as orch:
        orch.start("pay")
        with psycopg.connect(pg_url, autocommit=True) as admin:
            # Every claim meets a "serialization failure" whose message clears the screen.
            admin.execute(
                "CREATE FUNCTION hostile() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION USING ERRCODE = '40001', "
                "MESSAGE = E'busy\\x1b[2J\\x1b]0;pwned\\x07\\nFAKE LINE'; END $$"
            )
            admin.execute(
                "CREATE TRIGGER hostile BEFORE UPDATE ON seawall_saga_runs "
                "FOR EACH ROW EXECUTE FUNCTION hostile()"
            )

        def enough() -> None:  # the worker loop gave the round up once: stop it
            if any("kept losing conflicts" in line for line in logged):
                stop.set()

        with retries_logged(enough) as logged:
            orch.work(stop)
    assert any("kept losing conflicts" in line for line in logged), logged
    for line in logged:
        assert "busy\\x1b[2J" in line, line
        assert not any(c in line for c in "\x1b\x07\n"), repr(line)


def test_a_worker_finding_due_runs_held_waits_longer_each_time(pg_url: str) -> None:
    """An open transaction holds a due run's row (an operator's session, say): the worker's
    claims skip it, and it waits twice as long after each (up to MAX_HELD_IDLE), not MIN_IDLE
    every time; once the row is free the run is claimed within MAX_HELD_IDLE."""
    import psycopg

    from seawall.saga._worker import MAX_HELD_IDLE, MIN_IDLE

    stop = threading.Event()
    holder = psycopg.connect(pg_url)
    waits: list[float] = []

    class Counting(Watchdog):
        def sleep(self, seconds: float) -> None:
            waits.append(seconds)
            super().sleep(seconds)

    flow = saga.Saga("pay", [saga.Step("charge", lambda ctx: "charged")])
    clock = Counting(10.0, holder.rollback)  # 10 s held, in the worker's time
    try:
        with saga.Orchestrator(pg_url, [flow], clock=clock, hooks=(settled(stop),)) as orch:
            run_id = orch.start("pay")
            holder.execute(
                "SELECT 1 FROM seawall_saga_runs WHERE run_id = %s FOR UPDATE", (run_id,)
            )
            orch.work(stop)
            run = orch.get(run_id)
    finally:
        holder.close()
    assert run.status is saga.Status.SUCCEEDED
    assert clock.fired
    # 10 s of held rows: about 10 / MAX_HELD_IDLE claims, where MIN_IDLE each made 1,000.
    assert waits[:5] == [MIN_IDLE, 2 * MIN_IDLE, 4 * MIN_IDLE, 8 * MIN_IDLE, MAX_HELD_IDLE], waits
    assert len(waits) < 10.0 / MAX_HELD_IDLE + 10, len(waits)
    assert max(waits) == MAX_HELD_IDLE
    assert clock.now() - START < 10.0 + 2 * MAX_HELD_IDLE

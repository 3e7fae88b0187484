"""The durable log: runs, steps and history in SQL, with leases; the SQL of both stores, whose
dialects are in :mod:`seawall.saga._sqlite` and :mod:`seawall.saga._postgres`.

Every change to a run is one transaction that rewrites the run's row, the step rows that
changed, and appends to its history. A worker holds a run through a lease: ``lease_owner`` and
a ``lease_token`` that every claim increments. Each write of a run is conditional on the token
the writer holds (a fencing token), so a worker whose lease expired and was taken over cannot
overwrite the new holder's record. ``due_at`` is the one scheduling column: when the run next
has work (a step to start, a retry wait's end, a compensation) or, while it is leased, when the
lease expires; final and parked runs have none.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from seawall._core.redact import redact_text
from seawall.saga._model import SchemaVersionError, Status
from seawall.saga._rows import (
    HISTORY_COLUMNS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    HistoryRow,
    Loaded,
    RunRow,
    StepRow,
)

#: The run statuses a worker of this version claims and runs.
ACTIVE_STATUSES: Final = (
    Status.RUNNING.value,
    Status.RETRYING.value,
    Status.COMPENSATING.value,
    Status.WAITING.value,
)

__all__ = ["SCHEMA_VERSION", "ColumnTypes", "Store"]

#: The run statuses after which a signal is refused (the run is over).
_OVER: Final = frozenset({Status.SUCCEEDED.value, Status.COMPENSATED.value, Status.FAILED.value})
#: The statuses of a step whose wait has not ended (a signal for it is kept).
_OPEN: Final = frozenset(
    {Status.PENDING.value, Status.WAITING.value, Status.RETRYING.value, Status.RUNNING.value}
)

#: The version of the tables this seawall writes; a store of a newer version is refused.
#: Version 2 adds the definition a run started under (``saga_version``, ``fingerprint``) and
#: the table of registered definitions; version 3 the run's ``deadline`` and the table of
#: signals (``seawall_saga_signals``).
SCHEMA_VERSION: Final = 3


class ColumnTypes(NamedTuple):
    """A dialect's column types."""

    real: str  # a float
    serial: str  # an auto-increment primary key
    big: str  # a 64-bit int


_UPDATE_RUN: Final = (
    "UPDATE seawall_saga_runs SET status = ?, reason = ?, updated_at = ?, due_at = ?, "
    "lease_owner = ?, lease_token = ?, requested = NULL, saga_version = ?, fingerprint = ? "
    "WHERE run_id = ? AND lease_token = ? AND COALESCE(requested, '') = ?"
)
_UPDATE_STEP: Final = (
    "UPDATE seawall_saga_steps SET status = ?, running = ?, attempt_count = ?, "
    "compensation_attempt_count = ?, next_retry_at = ?, last_error = ?, result = ?, "
    "retry_state = ?, started_at = ?, finished_at = ?, updated_at = ? "
    "WHERE run_id = ? AND position = ?"
)
#: Run ids per query of their steps.
_STEPS_CHUNK: Final = 500
_INSERT_HISTORY: Final = (
    f"INSERT INTO seawall_saga_history ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class Store:
    """The SQL shared by both stores, with SQLite as the base dialect (``?`` placeholders).

    Not thread-safe: one connection; an orchestrator uses it from one thread, and opens a second
    store for the thread that renews its leases.
    """

    scheme: str = "sqlite"
    #: Appended to the claim query: PostgreSQL skips rows other workers hold locked.
    lock_clause: str = ""

    def __init__(self, url: str, clock: Callable[[], float] | None = None) -> None:
        self.url = url
        #: Transactions committed through this store (for benchmarks: commits per run).
        self.commits = 0
        self._given_clock = clock
        self._clock: Callable[[], float] = time.time if clock is None else clock

    # -- the dialect --------------------------------------------------------------------------

    def q(self, sql: str) -> str:
        """*sql* in this store's placeholder style."""
        return sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def send_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """:meth:`executemany` for writes whose answers the caller does not read: a dialect may
        send them without waiting (an error then fails the transaction's commit)."""
        self.executemany(sql, rows)

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def unavailable(self, exc: BaseException) -> bool:
        """Whether *exc* says the store cannot be reached now (worth reconnecting), rather than
        a bug or bad data."""
        return isinstance(exc, sqlite3.OperationalError)

    def conflict(self, exc: BaseException) -> bool:
        """Whether *exc* says the transaction lost a conflict with another one (a serialization
        failure, a deadlock, a lock it could not have in time): nothing of it was written, and
        the same transaction tried again at once may well succeed. Never an outage.

        SQLite has none: a transaction takes the file's write lock at its ``BEGIN IMMEDIATE``,
        before it reads or writes anything, waiting up to its ``busy_timeout`` for the writer
        before it (a retry of its own); "database is locked" after that wait says the file was
        held for the whole of it, which a worker treats as an outage (:meth:`unavailable`)."""
        return False

    def clone(self) -> Store:
        """Another connection to the same store (for another thread), on the same clock."""
        raise NotImplementedError

    # -- the log ------------------------------------------------------------------------------

    def insert(self, loaded: Loaded) -> RunRow | None:
        """Inside a transaction: write a new run; ``None`` if it was written, else the existing
        run of that id (nothing of it is written then)."""
        run = loaded.run
        cur = self.execute(
            f"INSERT INTO seawall_saga_runs ({RUN_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            run.values(),
        )
        if cur.rowcount != 1:
            rows = self.execute(
                f"SELECT {RUN_COLUMNS} FROM seawall_saga_runs WHERE run_id = ?", (run.run_id,)
            ).fetchall()
            return RunRow.from_row(rows[0])
        self.send_many(
            f"INSERT INTO seawall_saga_steps ({STEP_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [s.values() for s in loaded.steps],
        )
        if loaded.history:
            self.send_many(_INSERT_HISTORY, loaded.history)
            loaded.history = []
        return None

    def _steps(self, run_ids: Sequence[str]) -> dict[str, list[StepRow]]:
        found: dict[str, list[StepRow]] = {r: [] for r in run_ids}
        # In chunks: a statement takes a bounded number of parameters (SQLite's limit was 999
        # before 3.32; PostgreSQL's is 65,535), and an operator may list many runs.
        for start in range(0, len(run_ids), _STEPS_CHUNK):
            chunk = tuple(run_ids[start : start + _STEPS_CHUNK])
            marks = ", ".join("?" * len(chunk))
            rows = self.execute(
                f"SELECT {STEP_COLUMNS} FROM seawall_saga_steps WHERE run_id IN ({marks}) "
                "ORDER BY run_id, position",
                chunk,
            ).fetchall()
            for row in rows:
                found[row[0]].append(StepRow.from_row(row))
        return found

    def _with_steps(self, rows: Sequence[Sequence[Any]]) -> list[Loaded]:
        runs = [RunRow.from_row(r) for r in rows]
        steps = self._steps([r.run_id for r in runs])
        return [Loaded(r, steps[r.run_id]) for r in runs]

    def claim(
        self, now: float, limit: int, sagas: Sequence[str], run_id: str | None = None
    ) -> list[Loaded]:
        """Inside a transaction: lock and load up to *limit* runs of *sagas* due at *now* (or
        just *run_id*, if due). The caller saves them with a new token in the same
        transaction."""
        if not sagas:
            return []
        sql, params = self.claim_query("?", limit, sagas, run_id)
        rows = self.execute(sql, (now, *params)).fetchall()
        return self._with_steps(rows)

    def claim_query(
        self, now: str, limit: int, sagas: Sequence[str], run_id: str | None
    ) -> tuple[str, tuple[Any, ...]]:
        """The claim's ``SELECT`` with the time as the SQL expression *now* (first in the
        query, before the parameters returned)."""
        marks = ", ".join("?" * len(sagas))
        # Only the statuses this version runs: a run in a status a newer version wrote is left
        # as it is (never claimed, never rewritten), and shown by list, runs() and counts().
        active = f"status IN ({', '.join(repr(s) for s in ACTIVE_STATUSES)})"
        if run_id is None:
            return (
                f"SELECT {RUN_COLUMNS} FROM seawall_saga_runs WHERE due_at <= {now} AND {active} "
                f"AND saga IN ({marks}) ORDER BY due_at LIMIT ?{self.lock_clause}",
                (*sagas, limit),
            )
        return (
            f"SELECT {RUN_COLUMNS} FROM seawall_saga_runs WHERE due_at <= {now} AND "
            f"run_id = ? AND {active} AND saga IN ({marks}){self.lock_clause}",
            (run_id, *sagas),
        )

    def claim_due(
        self, limit: int, sagas: Sequence[str], run_id: str | None = None
    ) -> tuple[float, list[Loaded]]:
        """Inside a transaction: the store's time, and the runs :meth:`claim` claims at it."""
        now = self.now()
        return now, self.claim(now, limit, sagas, run_id)

    def lock_runs(self, run_ids: Sequence[str]) -> tuple[float, dict[str, str]]:
        """Inside a transaction: the store's time, and :meth:`requested` of *run_ids* with
        their rows locked (in the order of their ids)."""
        now = self.now()
        return now, self.requested(run_ids, lock=True)

    def requested(self, run_ids: Sequence[str], *, lock: bool = False) -> dict[str, str]:
        """Inside a transaction: the operations requested for these runs, by run id. With
        *lock*, the rows are locked first, in the order of their ids: a transaction that writes
        several runs takes their locks in one order, as every other such transaction does, so
        that no two wait for each other (a deadlock, which the database ends by aborting one)."""
        if not run_ids:
            return {}
        marks = ", ".join("?" * len(run_ids))
        if lock and self.lock_clause:
            rows = self.execute(
                f"SELECT run_id, requested FROM seawall_saga_runs WHERE run_id IN ({marks}) "
                "ORDER BY run_id FOR UPDATE",
                tuple(run_ids),
            ).fetchall()
            return {r[0]: r[1] for r in rows if r[1] is not None}
        rows = self.execute(
            f"SELECT run_id, requested FROM seawall_saga_runs WHERE run_id IN ({marks}) "
            "AND requested IS NOT NULL",
            tuple(run_ids),
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def lock(self, run_id: str) -> Loaded | None:
        """Inside a transaction: lock and load one run, whoever holds it."""
        lock = " FOR UPDATE" if self.lock_clause else ""
        rows = self.execute(
            f"SELECT {RUN_COLUMNS} FROM seawall_saga_runs WHERE run_id = ?{lock}", (run_id,)
        ).fetchall()
        loaded = self._with_steps(rows)
        return loaded[0] if loaded else None

    def save(self, loaded: Loaded, token: int) -> str | None:
        """Inside a transaction: write *loaded* as holder of the lease *token* (the run row's
        ``token`` becomes its new token). Returns ``None`` when written; ``"lost"`` when another
        worker holds the run now; else the operation an operator requested meanwhile (nothing
        is written then: apply it and save again)."""
        run = loaded.run
        cur = self.execute(_UPDATE_RUN, self.run_values(run, token))
        if cur.rowcount != 1:
            rows = self.execute(
                "SELECT lease_token, requested FROM seawall_saga_runs WHERE run_id = ?",
                (run.run_id,),
            ).fetchall()
            if not rows or rows[0][0] != token or not rows[0][1]:
                return "lost"
            run.requested = rows[0][1]
            return str(rows[0][1])
        self.save_rest(loaded, self.executemany)
        return None

    @staticmethod
    def run_values(run: RunRow, token: int) -> tuple[Any, ...]:
        """The parameters of the fenced ``UPDATE`` of *run* by the holder of *token*."""
        return (
            run.status,
            run.reason,
            run.updated_at,
            run.due_at,
            run.lease_owner,
            run.token,
            run.version,
            run.fingerprint,
            run.run_id,
            token,
            run.requested or "",
        )

    def save_rest(
        self, loaded: Loaded, many: Callable[[str, Sequence[Sequence[Any]]], None]
    ) -> None:
        """Inside a transaction, once the run's row is written: its changed steps and its new
        history lines, each batch of rows through *many* (:meth:`executemany`, or a dialect's
        way of sending them without waiting)."""
        run = loaded.run
        run.requested = None
        dirty = [s for s in loaded.steps if s.dirty]
        waiting = loaded.waiting_for
        loaded.waiting_for = None
        if dirty:
            many(
                _UPDATE_STEP,
                [
                    (
                        s.status,
                        int(s.running),
                        s.attempt_count,
                        s.compensation_attempt_count,
                        s.next_retry_at,
                        s.last_error,
                        s.result,
                        s.retry_state,
                        s.started_at,
                        s.finished_at,
                        s.updated_at,
                        s.run_id,
                        s.position,
                    )
                    for s in dirty
                ],
            )
            for s in dirty:
                s.dirty = False
        if waiting is not None and run.lease_owner is None:
            self.wake_if_signalled(run, waiting)
        if loaded.history:
            many(_INSERT_HISTORY, loaded.history)
            loaded.history = []

    def wake_if_signalled(self, run: RunRow, name: str) -> None:
        """Inside a transaction, after :meth:`save` released *run* waiting for the signal
        *name*: make it due now if that signal is in (one that arrived while this worker held
        the run, which the sender saw leased and so left to the holder)."""
        cur = self.execute(
            "UPDATE seawall_saga_runs SET due_at = ? WHERE run_id = ? AND status = ? "
            "AND lease_owner IS NULL AND EXISTS (SELECT 1 FROM seawall_saga_signals "
            "WHERE run_id = ? AND name = ?)",
            (run.updated_at, run.run_id, Status.WAITING.value, run.run_id, name),
        )
        if cur.rowcount == 1:
            run.due_at = run.updated_at

    def signal_data(self, run_id: str, name: str) -> str | None:
        """The data (JSON text) of the signal *name* sent to *run_id*, or ``None``."""
        rows = self.execute(
            "SELECT data FROM seawall_saga_signals WHERE run_id = ? AND name = ?", (run_id, name)
        ).fetchall()
        return None if not rows else str(rows[0][0])

    def signal(self, run_id: str, name: str, data: str, now: float) -> bool:
        """Inside a transaction: keep the signal *name* (*data*: JSON text) for *run_id*, and
        wake the run if it is waiting for it. Returns ``False`` for a duplicate: the first
        signal of a name is kept, and a second changes nothing (a history line says so).

        Raises:
            KeyError: no such run.
            ValueError: the run is over, has no step *name*, or that step's wait is over.
        """
        loaded = self.lock(run_id)
        if loaded is None:
            raise KeyError(f"no run {run_id!r} in {self.redacted()}")
        run = loaded.run
        if run.status in _OVER:
            raise ValueError(
                f"run {run_id!r} is {run.status}: it is over and takes no signal ({name!r})"
            )
        row = next((s for s in loaded.steps if s.name == name), None)
        if row is None:
            raise ValueError(
                f"name: run {run_id!r} has no step {name!r} to signal (its steps: "
                f"{', '.join(repr(s.name) for s in loaded.steps)})"
            )
        line = HistoryRow(run_id=run_id, at=now, event="signal", step=name)
        if self.signal_data(run_id, name) is not None:
            self.append_history([line._replace(detail=json.dumps({"duplicate": True}))])
            return False
        if row.status not in _OPEN and run.status != Status.NEEDS_ATTENTION.value:
            raise ValueError(
                f"run {run_id!r}: the wait for {name!r} is over (the step is {row.status}); "
                "the signal is not kept"
            )
        self.execute(
            "INSERT INTO seawall_saga_signals (run_id, name, data, received_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (run_id, name) DO NOTHING",
            (run_id, name, data, now),
        )
        self.append_history([line._replace(detail=json.dumps({"bytes": len(data)}))])
        if (
            run.status == Status.WAITING.value
            and row.status == Status.WAITING.value
            and run.lease_owner is None
        ):
            # Waiting for it, and no worker holds the run: due now. A worker holding it finds
            # the signal itself (it looks when the wait begins, and once more as it releases
            # the run: wake_if_signalled).
            self.execute(
                "UPDATE seawall_saga_runs SET due_at = ? WHERE run_id = ? AND lease_owner IS NULL",
                (now, run_id),
            )
        return True

    def request(self, run_id: str, operation: str) -> None:
        """Inside a transaction: ask the worker holding *run_id* to apply *operation*."""
        self.execute(
            "UPDATE seawall_saga_runs SET requested = ? WHERE run_id = ?", (operation, run_id)
        )

    def renew(self, leases: Sequence[tuple[str, int]], lease: float) -> None:
        """Extend the leases held (run id, token) to *lease* seconds from now on the store's
        clock. A run its worker has released meanwhile (``lease_owner`` cleared: final, parked,
        or waiting for a retry) keeps its due time: a renewal that races the release is a
        no-op, never a later retry or a due time on a finished run."""
        with self.transaction():
            due_at = self.now() + lease
            self.executemany(
                "UPDATE seawall_saga_runs SET due_at = ? WHERE run_id = ? AND lease_token = ? "
                "AND lease_owner IS NOT NULL",
                [(due_at, run_id, token) for run_id, token in leases],
            )

    def append_history(self, rows: Sequence[HistoryRow]) -> None:
        """Inside a transaction: append history lines whatever the lease (a fenced worker's
        account of what it did)."""
        self.executemany(_INSERT_HISTORY, rows)

    def register(self, saga: str, version: int, fingerprint: str, names: Sequence[str]) -> None:
        """Inside a transaction: record the definition (*saga*, *version*) with its step
        *names*, or check it against the one recorded.

        Raises:
            ValueError: the store holds another step list under this name and version.
        """
        rows = self.execute(
            "SELECT fingerprint, steps FROM seawall_saga_definitions "
            "WHERE saga = ? AND version = ?",
            (saga, version),
        ).fetchall()
        if not rows:
            self.execute(
                "INSERT INTO seawall_saga_definitions (saga, version, fingerprint, steps, "
                "registered_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (saga, version) DO NOTHING",
                (saga, version, fingerprint, json.dumps(list(names)), self.now()),
            )
            return
        if rows[0][0] == fingerprint:
            return
        try:
            known = json.loads(rows[0][1])
        except (TypeError, ValueError):
            known = "?"
        raise ValueError(
            f"saga {saga!r} version {version} is registered in {self.redacted()} with the steps "
            f"{known!r}, and this definition has {list(names)!r}: a changed saga needs a new "
            f"version (saga.Saga({saga!r}, steps, version={version + 1})); register the old "
            "one beside it until its runs have finished"
        )

    def definitions(self, saga: str) -> dict[int, list[str]]:
        """The step names of every registered version of *saga*."""
        rows = self.execute(
            "SELECT version, steps FROM seawall_saga_definitions WHERE saga = ?", (saga,)
        ).fetchall()
        found: dict[int, list[str]] = {}
        for version, steps in rows:
            with contextlib.suppress(TypeError, ValueError):
                names = json.loads(steps)
                if isinstance(names, list):
                    found[int(version)] = [str(n) for n in names]
        return found

    # -- the store's clock ----------------------------------------------------------------------

    def now(self) -> float:
        """The store's time, in seconds since the epoch: every lease and due time is judged on
        it, never on a worker's clock (see :func:`open_store`'s *clock*)."""
        return self._clock()

    # -- reading ------------------------------------------------------------------------------

    def load(self, run_id: str) -> Loaded | None:
        rows = self.execute(
            f"SELECT {RUN_COLUMNS} FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
        ).fetchall()
        loaded = self._with_steps(rows)
        return loaded[0] if loaded else None

    def find_runs(
        self,
        now: float,
        *,
        status: str | None = None,
        saga: str | None = None,
        stuck_after: float | None = None,
        older_than: float | None = None,
        error_contains: str | None = None,
        limit: int,
    ) -> list[Loaded]:
        """The latest runs (most recently changed first) that match every filter given, judged
        at the store's time *now*.

        Args:
            now: the store's time (:meth:`now`).
            status: only runs in this status.
            saga: only runs of this saga.
            stuck_after: only stuck runs: NEEDS_ATTENTION, or overdue by this many seconds
                (see :meth:`overdue_clause`).
            older_than: only runs unchanged for at least this many seconds.
            error_contains: only runs whose reason or a step's last error contains this text
                (case-insensitive for ASCII letters; ``%`` and ``_`` are plain characters).
            limit: at most this many runs.
        """
        clause, params = self._filters(now, status, saga, stuck_after, older_than, error_contains)
        return self._with_steps(self._latest(RUN_COLUMNS, clause, params, limit))

    def find_run_ids(
        self,
        now: float,
        *,
        status: str | None = None,
        saga: str | None = None,
        stuck_after: float | None = None,
        older_than: float | None = None,
        error_contains: str | None = None,
        limit: int,
    ) -> list[str]:
        """The ids of the runs :meth:`find_runs` finds, in its order (without their rows: for
        bulk operations, which load each run as they change it)."""
        clause, params = self._filters(now, status, saga, stuck_after, older_than, error_contains)
        return [str(r[0]) for r in self._latest("run_id", clause, params, limit)]

    def _latest(self, columns: str, clause: str, params: list[Any], limit: int) -> list[Any]:
        """Rows (*columns*) of the runs that match *clause*, most recently changed first."""
        return list(
            self.execute(
                f"SELECT {columns} FROM seawall_saga_runs{clause} "
                "ORDER BY updated_at DESC, run_id LIMIT ?",
                (*params, limit),
            ).fetchall()
        )

    def _filters(
        self,
        now: float,
        status: str | None,
        saga: str | None,
        stuck_after: float | None,
        older_than: float | None,
        error_contains: str | None,
    ) -> tuple[str, list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if saga is not None:
            where.append("saga = ?")
            params.append(saga)
        if stuck_after is not None:
            clause, values = self.overdue_clause(now, stuck_after)
            where.append(f"(status = ? OR {clause})")
            params += [Status.NEEDS_ATTENTION.value, *values]
        if older_than is not None:
            where.append("updated_at <= ?")
            params.append(now - older_than)
        if error_contains:
            # LIKE with its wildcards escaped: the operator's text matches as written.
            escaped = error_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            pattern = f"%{escaped}%"
            where.append(
                "(LOWER(COALESCE(reason, '')) LIKE LOWER(?) ESCAPE '\\' OR EXISTS "
                "(SELECT 1 FROM seawall_saga_steps AS s WHERE s.run_id = seawall_saga_runs.run_id "
                "AND LOWER(s.last_error) LIKE LOWER(?) ESCAPE '\\'))"
            )
            params += [pattern, pattern]
        return (f" WHERE {' AND '.join(where)}" if where else ""), params

    def overdue_clause(self, now: float, after: float) -> tuple[str, tuple[Any, ...]]:
        """The SQL condition (and its parameters) of an overdue run at the store's time *now*:
        an active run whose lease expired, or whose work has been due, unclaimed, for more
        than *after* seconds. :func:`seawall.saga._operations.is_overdue` is the same test on
        a row in memory."""
        active = ", ".join(repr(s) for s in ACTIVE_STATUSES)
        return (
            f"(status IN ({active}) AND due_at IS NOT NULL AND ("
            "(lease_owner IS NOT NULL AND due_at <= ?) OR "
            "(lease_owner IS NULL AND due_at < ?)))",
            (now, now - after),
        )

    def counts_by_saga(self, now: float, overdue_after: float) -> dict[str, dict[str, int]]:
        """How many runs each saga has in each status, and, under the key ``"overdue"`` of
        each saga, how many of its active runs are overdue by *overdue_after* seconds at the
        store's time *now* (a status is never spelled so: statuses are upper-case)."""
        found: dict[str, dict[str, int]] = {}
        rows = self.execute(
            "SELECT saga, status, COUNT(*) FROM seawall_saga_runs GROUP BY saga, status"
        ).fetchall()
        for saga, status, n in rows:
            found.setdefault(str(saga), {"overdue": 0})[str(status)] = int(n)
        clause, values = self.overdue_clause(now, overdue_after)
        rows = self.execute(
            f"SELECT saga, COUNT(*) FROM seawall_saga_runs WHERE {clause} GROUP BY saga", values
        ).fetchall()
        for saga, n in rows:
            found.setdefault(str(saga), {"overdue": 0})["overdue"] = int(n)
        return found

    def check_schema(self) -> None:
        """Check, without writing, that the store holds saga tables of this seawall's schema
        version (for reads and operators' tools, which never create or migrate a store).

        Raises:
            ValueError: the database holds no saga store.
            SchemaVersionError: the schema is of another version.
        """
        if not self.has_schema_table():
            raise ValueError(f"url: no saga store in {self.redacted()} (no seawall_saga tables)")
        rows = self.execute("SELECT MAX(version) FROM seawall_saga_schema").fetchall()
        version = int(rows[0][0] or 0) if rows else 0
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the saga store {self.redacted()} has schema version {version}, newer than "
                f"this seawall's ({SCHEMA_VERSION}); upgrade seawall"
            )
        if version < SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the saga store {self.redacted()} has schema version {version}, older than "
                f"this seawall's ({SCHEMA_VERSION}); a worker (saga.Orchestrator) of this "
                "version migrates it when it starts"
            )

    def counts(self) -> dict[str, int]:
        rows = self.execute(
            "SELECT status, COUNT(*) FROM seawall_saga_runs GROUP BY status"
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def history(self, run_id: str) -> list[HistoryRow]:
        rows = self.execute(
            f"SELECT {HISTORY_COLUMNS} FROM seawall_saga_history WHERE run_id = ? ORDER BY id",
            (run_id,),
        ).fetchall()
        return [HistoryRow(*row) for row in rows]

    def latest_history(self, run_id: str, limit: int) -> tuple[list[HistoryRow], int]:
        """The run's last *limit* history lines, oldest first, and how many it has in all."""
        rows = self.execute(
            f"SELECT {HISTORY_COLUMNS} FROM seawall_saga_history WHERE run_id = ? "
            "ORDER BY id DESC LIMIT ?",
            (run_id, limit),
        ).fetchall()
        total = self.execute(
            "SELECT COUNT(*) FROM seawall_saga_history WHERE run_id = ?", (run_id,)
        ).fetchall()
        return [HistoryRow(*row) for row in reversed(rows)], int(total[0][0])

    def next_due_now(self, sagas: Sequence[str]) -> tuple[float | None, float]:
        """:meth:`next_due`, and the store's time (:meth:`now`) read with it."""
        return self.next_due(sagas), self.now()

    def next_due(self, sagas: Sequence[str]) -> float | None:
        """The earliest due time of a run of *sagas* (``None`` if none has work)."""
        if not sagas:
            return None
        marks = ", ".join("?" * len(sagas))
        rows = self.execute(
            "SELECT MIN(due_at) FROM seawall_saga_runs WHERE due_at IS NOT NULL "
            f"AND status IN ({', '.join(repr(x) for x in ACTIVE_STATUSES)}) "
            f"AND saga IN ({marks})",
            tuple(sagas),
        ).fetchall()
        value = rows[0][0] if rows else None
        return None if value is None else float(value)

    # -- the schema ---------------------------------------------------------------------------

    def ddl(self) -> list[str]:
        """The statements that create the schema of :data:`SCHEMA_VERSION` (types in this
        dialect)."""
        real, serial, big = self.types()
        return [
            "CREATE TABLE IF NOT EXISTS seawall_saga_schema (version INTEGER NOT NULL)",
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_runs (
                run_id TEXT PRIMARY KEY,
                saga TEXT NOT NULL,
                status TEXT NOT NULL,
                input TEXT NOT NULL,
                reason TEXT,
                created_at {real} NOT NULL,
                updated_at {real} NOT NULL,
                due_at {real},
                lease_owner TEXT,
                lease_token {big} NOT NULL DEFAULT 0,
                requested TEXT,
                saga_version INTEGER,
                fingerprint TEXT,
                deadline {real})""",
            "CREATE INDEX IF NOT EXISTS seawall_saga_runs_due ON seawall_saga_runs (due_at) "
            "WHERE due_at IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS seawall_saga_runs_updated ON seawall_saga_runs "
            "(updated_at)",
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_steps (
                run_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                name TEXT NOT NULL,
                status TEXT NOT NULL,
                running INTEGER NOT NULL DEFAULT 0,
                attempt_count INTEGER NOT NULL DEFAULT 0,
                compensation_attempt_count INTEGER NOT NULL DEFAULT 0,
                next_retry_at {real},
                last_error TEXT,
                result TEXT,
                retry_state TEXT,
                idempotency_key TEXT NOT NULL,
                started_at {real},
                finished_at {real},
                updated_at {real} NOT NULL,
                PRIMARY KEY (run_id, position))""",
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_history (
                id {serial},
                run_id TEXT NOT NULL,
                at {real} NOT NULL,
                step TEXT,
                phase TEXT,
                event TEXT NOT NULL,
                attempt INTEGER,
                delay {real},
                error TEXT,
                detail TEXT)""",
            "CREATE INDEX IF NOT EXISTS seawall_saga_history_run ON seawall_saga_history "
            "(run_id, id)",
            *self.ddl_definitions(),
            *self.ddl_signals(),
        ]

    def ddl_definitions(self) -> list[str]:
        """The table of registered definitions (schema version 2)."""
        real = self.types().real
        return [
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_definitions (
                saga TEXT NOT NULL,
                version INTEGER NOT NULL,
                fingerprint TEXT NOT NULL,
                steps TEXT NOT NULL,
                registered_at {real} NOT NULL,
                PRIMARY KEY (saga, version))"""
        ]

    def ddl_signals(self) -> list[str]:
        """The table of signals (schema version 3): one row per run and name, the first one
        sent (a duplicate changes nothing); kept until the run is deleted."""
        real = self.types().real
        return [
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_signals (
                run_id TEXT NOT NULL,
                name TEXT NOT NULL,
                data TEXT NOT NULL,
                received_at {real} NOT NULL,
                PRIMARY KEY (run_id, name))"""
        ]

    def types(self) -> ColumnTypes:
        """The column types of this dialect."""
        return ColumnTypes(real="REAL", serial="INTEGER PRIMARY KEY AUTOINCREMENT", big="INTEGER")

    def has_schema_table(self) -> bool:
        raise NotImplementedError

    def migration_lock(self) -> None:
        """Inside the migration's transaction: keep other processes from migrating at once."""

    def migrate(self) -> None:
        """Create the tables, or bring them to :data:`SCHEMA_VERSION`; refuse a newer one.

        Raises:
            SchemaVersionError: the store's schema is newer than this seawall's (nothing is
                written).
        """
        with self.transaction():
            self.migration_lock()
            version = 0
            if self.has_schema_table():
                rows = self.execute("SELECT MAX(version) FROM seawall_saga_schema").fetchall()
                version = int(rows[0][0] or 0) if rows else 0
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"the saga store {self.redacted()} has schema version {version}, newer than "
                    f"this seawall's ({SCHEMA_VERSION}); upgrade seawall"
                )
            if version == SCHEMA_VERSION:
                return
            if version == 0:
                for statement in self.ddl():
                    self.execute(statement)
            if version == 1:
                # Runs of version 1 have no definition recorded: workers match them by their
                # step names (see the orchestrator), and record it then.
                self.execute("ALTER TABLE seawall_saga_runs ADD COLUMN saga_version INTEGER")
                self.execute("ALTER TABLE seawall_saga_runs ADD COLUMN fingerprint TEXT")
                for statement in self.ddl_definitions():
                    self.execute(statement)
                version = 2
            if version == 2:
                # Runs of version 2 have no deadline; waits and signals are new.
                real = self.types().real
                self.execute(f"ALTER TABLE seawall_saga_runs ADD COLUMN deadline {real}")
                for statement in self.ddl_signals():
                    self.execute(statement)
            self.execute("DELETE FROM seawall_saga_schema")
            self.execute("INSERT INTO seawall_saga_schema (version) VALUES (?)", (SCHEMA_VERSION,))

    def redacted(self) -> str:
        """The URL without its secrets (user info, query string: a ``password=`` or
        ``sslpassword=`` there), for messages: :func:`~seawall.instrumentation.redact_text`."""
        return redact_text(self.url)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.redacted()}>"

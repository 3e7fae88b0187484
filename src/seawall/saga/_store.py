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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from seawall.saga._model import Status
from seawall.saga._reads import ACTIVE_STATUSES, Reads
from seawall.saga._rows import (
    HISTORY_COLUMNS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    HistoryRow,
    Loaded,
    RunRow,
)
from seawall.saga._schema import Schema
from seawall.saga._starts import Check, start_together

__all__ = ["Store"]

#: The run statuses after which a signal is refused (the run is over).
_OVER: Final = frozenset({Status.SUCCEEDED.value, Status.COMPENSATED.value, Status.FAILED.value})
#: The statuses of a step whose wait has not ended (a signal for it is kept).
_OPEN: Final = frozenset(
    {Status.PENDING.value, Status.WAITING.value, Status.RETRYING.value, Status.RUNNING.value}
)

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
_INSERT_HISTORY: Final = (
    f"INSERT INTO seawall_saga_history ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class Store(Schema, Reads):
    """The log shared by both stores: a run's start, a worker's claims, locks and fenced
    writes, leases, signals, operators' requests and registered definitions, on a
    :class:`~seawall.saga._sql.Connection` that reads (:class:`~seawall.saga._reads.Reads`)
    and keeps its tables (:class:`~seawall.saga._schema.Schema`).

    Not thread-safe: one connection; an orchestrator uses it from one thread, and opens a second
    store for the thread that renews its leases.
    """

    def clone(self) -> Store:
        """Another connection to the same store (for another thread), on the same clock."""
        raise NotImplementedError

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

    def start_runs(self, items: Sequence[Loaded], check: Check) -> list[RunRow | None]:
        """Write the new runs *items* (:meth:`insert` each); returns what :meth:`insert`
        returned for each. *check* sees that before the commit: what it raises rolls every one
        of them back, and no other call's. Concurrent calls of this process's threads on the
        same store share a commit (:mod:`._starts`)."""
        return start_together(self, self.group_key(), items, check)

    def group_key(self) -> str:
        """What names this store for the starts that share a commit: its URL."""
        return self.url

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
        self,
        limit: int,
        sagas: Sequence[str],
        run_id: str | None = None,
        *,
        expire: tuple[str, Mapping[str, int]] | None = None,
    ) -> tuple[float, list[Loaded]]:
        """Inside a transaction: the store's time, and the runs :meth:`claim` claims at it;
        first, with *expire* (a worker's id, and run ids with its tokens), the leases it holds
        of those runs end now (:meth:`expire_leases`)."""
        now = self.now()
        if expire:
            self.expire_leases(*expire, now)
        return now, self.claim(now, limit, sagas, run_id)

    def expire_leases(self, owner: str, leases: Mapping[str, int], now: float) -> None:
        """Inside a transaction: the leases *owner* holds of these runs (run id -> token) end
        at *now*, as if they had run out: the run is due, and whoever claims it next finds
        what its log holds (an attempt begun and not recorded is recorded as lost). A run
        released meanwhile, or taken over, is left as it is; so is one whose row another
        session holds (an operator's open transaction): its lease runs out as it would have,
        and no claim waits for that row."""
        self.executemany(
            "UPDATE seawall_saga_runs SET due_at = ? WHERE run_id IN (SELECT run_id FROM "
            "seawall_saga_runs WHERE run_id = ? AND lease_owner = ? AND lease_token = ? "
            f"AND due_at > ?{self.lock_clause})",
            [(now, run_id, owner, leases[run_id], now) for run_id in sorted(leases)],
        )

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

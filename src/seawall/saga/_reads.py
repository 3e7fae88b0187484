"""Reads of the log: a run with its steps, the runs an operator's filters find, counts,
history, and when the next run is due."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from seawall.saga._model import Status
from seawall.saga._rows import (
    HISTORY_COLUMNS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    HistoryRow,
    Loaded,
    RunRow,
    StepRow,
)
from seawall.saga._sql import Connection

__all__ = ["ACTIVE_STATUSES", "Reads"]

#: The run statuses a worker of this version claims and runs.
ACTIVE_STATUSES: Final = (
    Status.RUNNING.value,
    Status.RETRYING.value,
    Status.COMPENSATING.value,
    Status.WAITING.value,
)


#: Run ids per query of their steps.
_STEPS_CHUNK: Final = 500


class Reads(Connection):
    """What the worker, the operators' tools and the web view read (no writes)."""

    def load(self, run_id: str) -> Loaded | None:
        rows = self.execute(
            f"SELECT {RUN_COLUMNS} FROM seawall_saga_runs WHERE run_id = ?", (run_id,)
        ).fetchall()
        loaded = self._with_steps(rows)
        return loaded[0] if loaded else None

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

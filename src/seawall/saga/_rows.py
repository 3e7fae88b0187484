"""A run's rows in memory: the run, its steps, and the history lines to append.

Workers read a run into these records, change them while they hold the run's lease, and write
back what changed (:meth:`seawall.saga._store.Store.save`); the column lists give the order of
the values in SQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from seawall.saga._model import HistoryEntry, Run, Status, StepRecord, utc

__all__ = [
    "HISTORY_COLUMNS",
    "RUN_COLUMNS",
    "STEP_COLUMNS",
    "HistoryRow",
    "Loaded",
    "RunRow",
    "StepRow",
    "dumps",
    "to_history",
    "to_run",
]

RUN_COLUMNS: Final = (
    "run_id, saga, status, input, reason, created_at, updated_at, due_at, lease_owner, "
    "lease_token, requested, saga_version, fingerprint"
)
STEP_COLUMNS: Final = (
    "run_id, position, name, status, running, attempt_count, compensation_attempt_count, "
    "next_retry_at, last_error, result, retry_state, idempotency_key, started_at, finished_at, "
    "updated_at"
)
HISTORY_COLUMNS: Final = "run_id, at, step, phase, event, attempt, delay, error, detail"


class RunRow:
    """A run's row in memory (mutable while a worker holds it)."""

    __slots__ = (
        "created_at",
        "due_at",
        "fingerprint",
        "input",
        "lease_owner",
        "reason",
        "requested",
        "run_id",
        "saga",
        "status",
        "token",
        "updated_at",
        "version",
    )

    def __init__(self, row: Sequence[Any]) -> None:
        (
            self.run_id,
            self.saga,
            self.status,
            self.input,
            self.reason,
            self.created_at,
            self.updated_at,
            self.due_at,
            self.lease_owner,
            self.token,
            self.requested,
            self.version,
            self.fingerprint,
        ) = row


class StepRow:
    """A step's row in memory; ``dirty`` once changed and not yet written."""

    __slots__ = (
        "attempt_count",
        "compensation_attempt_count",
        "dirty",
        "finished_at",
        "idempotency_key",
        "last_error",
        "name",
        "next_retry_at",
        "position",
        "result",
        "retry_state",
        "run_id",
        "running",
        "started_at",
        "status",
        "updated_at",
    )

    def __init__(self, row: Sequence[Any]) -> None:
        (
            self.run_id,
            self.position,
            self.name,
            self.status,
            running,
            self.attempt_count,
            self.compensation_attempt_count,
            self.next_retry_at,
            self.last_error,
            self.result,
            self.retry_state,
            self.idempotency_key,
            self.started_at,
            self.finished_at,
            self.updated_at,
        ) = row
        self.running = bool(running)
        self.dirty = False

    def values(self) -> tuple[Any, ...]:
        return (
            self.run_id,
            self.position,
            self.name,
            self.status,
            int(self.running),
            self.attempt_count,
            self.compensation_attempt_count,
            self.next_retry_at,
            self.last_error,
            self.result,
            self.retry_state,
            self.idempotency_key,
            self.started_at,
            self.finished_at,
            self.updated_at,
        )


#: One history line: run_id, at, step, phase, event, attempt, delay, error, detail (JSON text).
HistoryRow = tuple[
    str, float, str | None, str | None, str, int | None, float | None, str | None, str | None
]


class Loaded:
    """A run with its steps, and the history lines to append when it is saved."""

    __slots__ = ("history", "run", "steps")

    def __init__(self, run: RunRow, steps: list[StepRow]) -> None:
        self.run = run
        self.steps = steps
        self.history: list[HistoryRow] = []


def dumps(value: Any) -> str:
    """*value* as the JSON text of a column (compact; no NaN or infinity)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


# -- reading the log ----------------------------------------------------------------------------


def to_run(loaded: Loaded) -> Run:
    """The public :class:`Run` for rows read from a store."""
    run = loaded.run
    steps = tuple(
        StepRecord(
            name=s.name,
            status=Status(s.status),
            attempt_count=int(s.attempt_count),
            next_retry_at=utc(s.next_retry_at),
            last_error=s.last_error,
            result=None if s.result is None else json.loads(s.result),
            compensation_attempt_count=int(s.compensation_attempt_count),
            idempotency_key=s.idempotency_key,
            started_at=utc(s.started_at),
            finished_at=utc(s.finished_at),
        )
        for s in loaded.steps
    )
    created = utc(run.created_at)
    updated = utc(run.updated_at)
    assert created is not None and updated is not None
    return Run(
        run_id=run.run_id,
        saga=run.saga,
        status=Status(run.status),
        input=json.loads(run.input),
        steps=steps,
        created_at=created,
        updated_at=updated,
        reason=run.reason,
    )


def to_history(rows: Iterable[Sequence[Any]]) -> tuple[HistoryEntry, ...]:
    entries = []
    for _run_id, at, step, phase, event, attempt, delay, error, detail in rows:
        at_utc = utc(at)
        assert at_utc is not None
        entries.append(
            HistoryEntry(
                at=at_utc,
                event=event,
                step=step,
                phase=phase,
                attempt=attempt,
                delay=delay,
                error=error,
                detail=json.loads(detail) if detail else {},
            )
        )
    return tuple(entries)

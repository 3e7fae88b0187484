"""A run's rows in memory: the run, its steps, and the history lines to append.

Workers read a run into these records, change them while they hold the run's lease, and write
back what changed (:meth:`seawall.saga._store.Store.save`); the column lists give the order of
the values in SQL.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

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

#: The columns of a run's row, in the order of :class:`RunRow`'s fields.
RUN_COLUMNS: Final = (
    "run_id, saga, status, input, reason, created_at, updated_at, due_at, lease_owner, "
    "lease_token, requested, saga_version, fingerprint, deadline"
)
#: The columns of a step's row, in the order of :class:`StepRow`'s fields.
STEP_COLUMNS: Final = (
    "run_id, position, name, status, running, attempt_count, compensation_attempt_count, "
    "next_retry_at, last_error, result, retry_state, idempotency_key, started_at, finished_at, "
    "updated_at"
)
#: The columns of a history line, in the order of :class:`HistoryRow`'s fields.
HISTORY_COLUMNS: Final = "run_id, at, event, step, phase, attempt, delay, error, detail"


@dataclasses.dataclass(slots=True, eq=False)
class RunRow:
    """A run's row in memory (mutable while a worker holds it)."""

    run_id: str
    saga: str
    status: str
    input: str  # JSON text
    reason: str | None
    created_at: float
    updated_at: float
    due_at: float | None
    lease_owner: str | None
    token: int  # the lease token (column lease_token)
    requested: str | None
    version: int | None  # the definition's version (column saga_version)
    fingerprint: str | None
    deadline: float | None = None  # the run's deadline (Saga(timeout=)), on the store's clock

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> RunRow:
        """The run of a row selected as :data:`RUN_COLUMNS`."""
        return cls(*row)

    def values(self) -> tuple[Any, ...]:
        """The row's values, in the order of :data:`RUN_COLUMNS`."""
        return (
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
            self.deadline,
        )


@dataclasses.dataclass(slots=True, eq=False)
class StepRow:
    """A step's row in memory; ``dirty`` once changed and not yet written."""

    run_id: str
    position: int
    name: str
    status: str
    running: bool  # an attempt is running (the log says it started, and no outcome yet)
    attempt_count: int
    compensation_attempt_count: int
    next_retry_at: float | None
    last_error: str | None
    result: str | None  # JSON text
    retry_state: str | None  # JSON text of RetryState.snapshot()
    idempotency_key: str
    started_at: float | None
    finished_at: float | None
    updated_at: float
    dirty: bool = False

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StepRow:
        """The step of a row selected as :data:`STEP_COLUMNS`."""
        step = cls(*row)
        step.running = bool(step.running)  # an INTEGER column
        return step

    def values(self) -> tuple[Any, ...]:
        """The row's values, in the order of :data:`STEP_COLUMNS`."""
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


class HistoryRow(NamedTuple):
    """One history line (appended, never changed), in the order of :data:`HISTORY_COLUMNS`."""

    run_id: str
    at: float
    event: str
    step: str | None = None
    phase: str | None = None
    attempt: int | None = None
    delay: float | None = None
    error: str | None = None
    detail: str | None = None  # JSON text


class Loaded:
    """A run with its steps, and the history lines to append when it is saved."""

    __slots__ = ("history", "run", "steps", "waiting_for")

    def __init__(self, run: RunRow, steps: list[StepRow]) -> None:
        self.run = run
        self.steps = steps
        self.history: list[HistoryRow] = []
        #: The signal the run is released waiting for (the store checks, as it saves the run,
        #: that it did not arrive meanwhile).
        self.waiting_for: str | None = None


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
        deadline=utc(run.deadline),
    )


def to_history(rows: Iterable[HistoryRow]) -> tuple[HistoryEntry, ...]:
    """The public :class:`HistoryEntry` of each history line."""
    entries = []
    for row in rows:
        at = utc(row.at)
        assert at is not None
        entries.append(
            HistoryEntry(
                at=at,
                event=row.event,
                step=row.step,
                phase=row.phase,
                attempt=row.attempt,
                delay=row.delay,
                error=row.error,
                detail=json.loads(row.detail) if row.detail else {},
            )
        )
    return tuple(entries)

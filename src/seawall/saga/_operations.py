"""Operations on a run that need no saga definition: an operator's retry, compensate or cancel
(the CLI and the store's web view apply them too), what an operator reads of a run's lease, and
the statuses this version knows."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, NamedTuple

from seawall._core.redact import escape_controls
from seawall.saga._model import Status
from seawall.saga._rows import HistoryRow, Loaded, RunRow, StepRow, dumps
from seawall.saga._store import Store

__all__ = [
    "ACTIVE",
    "OPERATIONS",
    "OVERDUE_AFTER",
    "SETTLED",
    "Lease",
    "apply_operation",
    "is_overdue",
    "lease_of",
    "operate",
    "parse_duration",
    "run_status",
    "unknown_status",
    "without_holds",
]

S = Status
#: The run statuses a worker runs (the run has work: a step, a wait, a compensation).
ACTIVE: Final = frozenset(
    {S.RUNNING.value, S.RETRYING.value, S.COMPENSATING.value, S.WAITING.value}
)
#: The run statuses no worker changes: over, or parked for a person.
SETTLED: Final = frozenset(
    {S.SUCCEEDED.value, S.COMPENSATED.value, S.FAILED.value, S.NEEDS_ATTENTION.value}
)
#: What an operator can do to a run.
OPERATIONS: Final = ("retry_now", "compensate", "cancel")
#: Seconds a run's due work may wait unclaimed before it counts as overdue (by default).
OVERDUE_AFTER: Final = 60.0

_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*", re.IGNORECASE)
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


#: The statuses a run can be in, in the order a run meets them (for messages).
_RUN_STATUS_ORDER: Final = (
    S.RUNNING,
    S.RETRYING,
    S.WAITING,
    S.SUCCEEDED,
    S.COMPENSATING,
    S.COMPENSATED,
    S.FAILED,
    S.NEEDS_ATTENTION,
)


def run_status(value: object, name: str = "status") -> Status:
    """The run status a filter names (a :class:`Status` or its name, in any case).

    Raises:
        TypeError: naming *name*, for a value that is not a str.
        ValueError: naming *name* and the run statuses, for one that no run of this version
            can be in: a typo, or a step's status such as PENDING. (A filter that matches
            nothing because of a typo would read as "no such runs".)
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a run status (str), got {value!r}")
    text = value.value if isinstance(value, Status) else value.strip().upper()
    for status in _RUN_STATUS_ORDER:
        if status.value == text:
            return status
    valid = ", ".join(s.value for s in _RUN_STATUS_ORDER)
    shown = value.value if isinstance(value, Status) else value
    raise ValueError(f"{name} must be one of {valid}, got {escape_controls(repr(shown[:64]))}")


def parse_duration(text: str, name: str = "duration") -> float:
    """Seconds from ``"90"``, ``"90s"``, ``"1.5m"``, ``"2h"``, ``"1d"`` or ``"250ms"``.

    Raises:
        ValueError: naming *name*, for anything else (negative, infinite, a unit unknown).
    """
    match = _DURATION.fullmatch(text) if isinstance(text, str) and len(text) <= 32 else None
    if match is None:
        raise ValueError(f"{name} must be a duration such as 90s, 5m, 2h or 1d, got {text!r}")
    value = float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {text!r}")
    return value


class Lease(NamedTuple):
    """Who holds a run and until when, on the store's clock (seconds since the epoch)."""

    owner: str
    expires_at: float
    expired: bool


def lease_of(run: RunRow, now: float) -> Lease | None:
    """The run's lease at the store's time *now* (``None`` when no worker holds it): while a
    run is leased, its ``due_at`` is when the lease expires."""
    if run.lease_owner is None or run.due_at is None:
        return None
    return Lease(run.lease_owner, float(run.due_at), float(run.due_at) <= now)


def is_overdue(run: RunRow, now: float, after: float = OVERDUE_AFTER) -> bool:
    """Whether an active run is overdue at the store's time *now*: its lease expired (its
    worker stopped), or its work has been due, unclaimed, for more than *after* seconds (no
    worker runs its saga, or the workers are behind). The same test as the store's
    :meth:`~seawall.saga._store.Store.overdue_clause`, on a row in memory."""
    if run.status not in ACTIVE or run.due_at is None:
        return False
    if run.lease_owner is not None:
        return run.due_at <= now
    return run.due_at < now - after


def apply_operation(loaded: Loaded, operation: str, now: float) -> None:
    """Apply an operator's *operation* to a run in memory (the caller saves it).

    Raises:
        ValueError: the operation does not apply to the run's status.
    """
    run = loaded.run
    status = run.status
    if status in (S.SUCCEEDED.value, S.COMPENSATED.value, S.FAILED.value):
        raise ValueError(f"run {run.run_id!r} is {status}: {operation} does not apply to it")
    unknown = unknown_status(loaded)
    if unknown is not None:
        raise ValueError(f"{unknown}: {operation} is left to the seawall that wrote it")

    def note(**detail: Any) -> None:
        loaded.history.append(
            HistoryRow(run_id=run.run_id, at=now, event="operator", detail=dumps(detail))
        )

    def touch(step: StepRow) -> None:
        step.updated_at = now
        step.dirty = True

    if operation == "retry_now":
        note(operation="retry_now")
        compensating = (
            any(s.status == S.COMPENSATING.value for s in loaded.steps)
            or status == S.COMPENSATING.value
        )
        for step in loaded.steps:
            if step.running:
                continue  # a lost attempt: the next worker records it and retries
            if step.status == S.COMPENSATING.value:
                if status == S.NEEDS_ATTENTION.value:
                    step.retry_state = None  # a new try of the compensation: a fresh state
                step.next_retry_at = now
                touch(step)
            elif compensating:
                continue
            elif step.status in (S.RETRYING.value, S.PENDING.value) and step.next_retry_at:
                step.next_retry_at = now
                step.retry_state = without_holds(step.retry_state)
                touch(step)
            elif step.status == S.FAILED.value and status == S.NEEDS_ATTENTION.value:
                # A parked step: a new try of its action, with a fresh retry state.
                step.status = S.RETRYING.value
                step.retry_state = None
                step.next_retry_at = now
                step.finished_at = None
                touch(step)
        if status == S.NEEDS_ATTENTION.value:
            run.status = S.COMPENSATING.value if compensating else S.RETRYING.value
            run.reason = None
        run.due_at = now
    elif operation == "compensate":
        note(operation="compensate")
        for step in loaded.steps:
            if step.running or step.status in (S.RETRYING.value, S.RUNNING.value):
                step.status = S.FAILED.value
                step.running = False
                step.next_retry_at = None
                step.finished_at = now
                touch(step)
            elif step.status == S.PENDING.value and step.next_retry_at is not None:
                step.next_retry_at = None
                touch(step)
            elif step.status == S.COMPENSATING.value and not step.running:
                step.retry_state = None
                step.next_retry_at = now
                touch(step)
        run.status = S.COMPENSATING.value
        run.reason = "compensation requested by an operator"
        run.due_at = now
    elif operation == "cancel":
        note(operation="cancel")
        for step in loaded.steps:
            if step.running or step.status in (S.RETRYING.value, S.RUNNING.value):
                step.status = S.FAILED.value
                step.running = False
                step.next_retry_at = None
                step.finished_at = now
                touch(step)
            elif step.next_retry_at is not None:
                step.next_retry_at = None
                touch(step)
        run.status = S.FAILED.value
        run.reason = "cancelled by an operator"
        run.due_at = None
        loaded.history.append(
            HistoryRow(
                run_id=run.run_id, at=now, event="status", detail=dumps({"status": "FAILED"})
            )
        )
    else:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    if operation in ("compensate", "cancel"):
        for step in loaded.steps:
            if step.status == S.WAITING.value:  # a wait or a timer stops with its run
                step.status = S.FAILED.value
                step.next_retry_at = None
                step.finished_at = now
                touch(step)
    run.updated_at = now


_STEP_STATUSES: Final = frozenset(
    {
        S.PENDING.value,
        S.RUNNING.value,
        S.RETRYING.value,
        S.SUCCEEDED.value,
        S.FAILED.value,
        S.COMPENSATING.value,
        S.COMPENSATED.value,
        S.WAITING.value,
    }
)
_RUN_STATUSES: Final = ACTIVE | SETTLED


def unknown_status(loaded: Loaded) -> str | None:
    """Why this version must not act on the run: a run or step status it does not know (a newer
    seawall wrote it), else ``None``."""
    run = loaded.run
    if run.status not in _RUN_STATUSES:
        return f"run {run.run_id!r} has the status {run.status!r}, unknown to this seawall"
    for row in loaded.steps:
        if row.status not in _STEP_STATUSES:
            return (
                f"step {row.name!r} of run {run.run_id!r} has the status {row.status!r}, "
                "unknown to this seawall"
            )
    return None


def without_holds(text: str | None) -> str | None:
    """The retry state with its budget holds cleared: an operator's retry does not ask the
    budget first (the holds are the core's, in the snapshot; the first schema kept them beside
    it)."""
    if text is None:
        return None
    data = json.loads(text)
    if not isinstance(data, dict):
        return text
    retry = data.get("retry")
    if data.get("holds") or (isinstance(retry, dict) and retry.get("holds")):
        data.pop("holds", None)
        if isinstance(retry, dict):
            retry["holds"] = 0
        return dumps(data)
    return text


def operate(
    store: Store, run_id: str, operation: str, now: float | None = None, *, force: bool = False
) -> str:
    """Apply *operation* to *run_id* in *store*: at once when no worker holds the run, else as
    a request its worker applies after the attempt it is running. Returns ``"applied"`` or
    ``"requested"``. Times are the store's (*now* is not used: kept for callers of the first
    version).

    With *force*, a worker's live lease is broken (for a worker known to be dead, or hung):
    the operation is applied at once and the run can be claimed by another worker now. The
    lease token moves on, so the old worker, should it still be running, records nothing of
    its attempt but a ``fenced`` line in the history; the attempt it was running counts as
    lost, and its step is tried again with the same idempotency key.

    Raises:
        KeyError: no such run.
        ValueError: the operation does not apply to the run's status.
    """
    if operation not in OPERATIONS:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    with store.transaction():
        now = store.now()  # the store's clock judges the lease, not the caller's
        loaded = store.lock(run_id)
        if loaded is None:
            raise KeyError(f"no run {run_id!r} in {store.redacted()}")
        run = loaded.run
        held = run.lease_owner is not None and run.due_at is not None and run.due_at > now
        if held and run.status in ACTIVE:
            if not force:
                store.request(run_id, operation)
                return "requested"
            loaded.history.append(
                HistoryRow(
                    run_id=run_id,
                    at=now,
                    event="operator",
                    detail=dumps({"operation": "break_lease", "worker": run.lease_owner}),
                )
            )
        token = run.token
        apply_operation(loaded, operation, now)
        run.token = token + 1  # fences out a worker whose lease expired
        run.lease_owner = None
        if store.save(loaded, token) is not None:  # pragma: no cover - the row is locked
            raise RuntimeError(f"run {run_id!r} changed while locked")
    return "applied"

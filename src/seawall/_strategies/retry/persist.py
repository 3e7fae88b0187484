"""A RetryState as stored data: a durable driver snapshots it and restores it elsewhere, later."""

from __future__ import annotations

import math
import time
from collections.abc import (
    Mapping,
)
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    ParamSpec,
    TypeVar,
)

from seawall._core.errors import (
    SUMMARY_LIMIT,
    error_summary,
)
from seawall._strategies.retry.events import _GIVE_UP_REASONS

if TYPE_CHECKING:
    from seawall._strategies.retry.policy import RetryPolicy
    from seawall._strategies.retry.state import RetryState

__all__ = ["SNAPSHOT_VERSION", "restore", "snapshot"]


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


#: The version of :func:`snapshot`'s format; :func:`restore` refuses newer.
SNAPSHOT_VERSION: Final = 2


def snapshot(
    state: RetryState, *, now: float | None = None, wall_now: float | None = None
) -> dict[str, Any]:
    """The data of :meth:`RetryState.snapshot`."""
    if now is None:
        now = state.policy._clock.now()
    if wall_now is None:
        wall_now = time.time()
    offset = wall_now - now
    error = state.last_error
    return {
        "version": SNAPSHOT_VERSION,
        "attempts": state.attempts,
        "total_delay": state.total_delay,
        "previous_delay": state._previous_delay,
        "started_at": state.started + offset,
        "deadline_at": None if state.deadline == math.inf else state.deadline + offset,
        "next_retry_at": None if state.next_retry is None else state.next_retry + offset,
        "last_error": error_summary(error) if isinstance(error, BaseException) else error,
        "reason": state.reason,
        "holds": state.holds,
    }


def restore(
    cls: type[RetryState],
    policy: RetryPolicy,
    data: Mapping[str, Any],
    *,
    now: float | None = None,
    wall_now: float | None = None,
    defer_refusals: bool = False,
) -> RetryState:
    """The state of :meth:`RetryState.restore`; *data* is untrusted, every field checked."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a retry state snapshot must be a mapping, got {data!r}")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"snapshot version must be an int >= 1, got {version!r}")
    if version > SNAPSHOT_VERSION:
        raise ValueError(
            f"snapshot version {version} is newer than this seawall reads "
            f"({SNAPSHOT_VERSION}); upgrade seawall"
        )
    if now is None:
        now = policy._clock.now()
    if wall_now is None:
        wall_now = time.time()
    offset = wall_now - now

    def number(key: str, *, optional: bool) -> float | None:
        value = data.get(key)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"snapshot field {key} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"snapshot field {key} must be finite, got {value!r}")
        return float(value)

    attempts = data.get("attempts")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise ValueError(f"snapshot field attempts must be an int >= 0, got {attempts!r}")
    started_at = number("started_at", optional=False)
    assert started_at is not None
    deadline_at = number("deadline_at", optional=True)
    next_retry_at = number("next_retry_at", optional=True)
    total_delay = number("total_delay", optional=False)
    previous_delay = number("previous_delay", optional=True)
    error = data.get("last_error")
    if error is not None and not isinstance(error, str):
        raise ValueError(f"snapshot field last_error must be a str or None, got {error!r}")
    reason = data.get("reason")
    if reason is not None and reason not in _GIVE_UP_REASONS:
        raise ValueError(f"snapshot field reason is not a known reason, got {reason!r}")
    holds = data.get("holds", 0)  # version 1 had none
    if isinstance(holds, bool) or not isinstance(holds, int) or holds < 0:
        raise ValueError(f"snapshot field holds must be an int >= 0, got {holds!r}")
    state = cls(
        policy,
        started_at - offset,
        math.inf if deadline_at is None else deadline_at - offset,
        defer_refusals=defer_refusals,
    )
    state.holds = holds
    state.attempts = attempts
    state.total_delay = max(0.0, total_delay or 0.0)
    state._previous_delay = None if previous_delay is None else max(0.0, previous_delay)
    state.next_retry = None if next_retry_at is None else next_retry_at - offset
    state.last_error = None if error is None else error[:SUMMARY_LIMIT]
    state.reason = reason
    return state

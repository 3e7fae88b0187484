"""The operator's kill switch: turn retries off everywhere, or for one policy name, at runtime."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from seawall._core.public import public
from seawall._core.runtime import ISOLATED, SWITCH

__all__ = ["ISOLATED", "SWITCH", "is_enabled", "one_attempt", "set_enabled"]


# The switch itself, and ISOLATED, are process-wide state: kept in the runtime module.


@public("seawall")
def set_enabled(enabled: bool, *, name: str | None = None) -> None:
    """Turn retries on or off at runtime.

    When off, every policy (or every policy called *name*) makes exactly one attempt: errors
    propagate at once, nothing waits. Setting the environment variable ``SEAWALL_RETRIES=off``
    before import turns retries off globally.

    Args:
        enabled: ``False`` to turn retries off.
        name: apply to policies with this ``name`` only; ``None`` for the global switch.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    if name is None:
        SWITCH.enabled = enabled
        return
    if not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {name!r}")
    names = set(SWITCH.disabled_names)
    if enabled:
        names.discard(name)
    else:
        names.add(name)
    # Replace, never mutate: readers in other threads see either the old set or the new one.
    SWITCH.disabled_names = frozenset(names)


@public("seawall")
def is_enabled(name: str | None = None) -> bool:
    """Whether retries are on globally and, if *name* is given, for policies of that name."""
    if not SWITCH.enabled:
        return False
    return name is None or name not in SWITCH.disabled_names


# True inside one_attempt(): an enclosing layer (a saga orchestrator, a task queue) owns the
# retries. Read on the failure path only.
ONE_ATTEMPT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "seawall_one_attempt", default=False
)


@contextlib.contextmanager
def one_attempt() -> Iterator[None]:
    """Inside the block (this thread or task only), every policy makes one attempt.

    For a layer that owns the retries of the code it runs, such as a durable orchestrator or a
    task queue with its own redelivery: the policies inside give up after their first attempt
    (reason ``"delegated"``) and leave the error unmarked, so the owner retries it, once, at its
    own layer (retry at one layer).
    """
    SWITCH.delegating = True  # set once, never reset: readers in any thread stay correct
    token = ONE_ATTEMPT.set(True)
    try:
        yield
    finally:
        ONE_ATTEMPT.reset(token)

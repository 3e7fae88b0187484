"""The operator's kill switch: turn retries off everywhere, or for one policy name, at runtime."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

__all__ = ["is_enabled", "one_attempt", "set_enabled"]


class _Switch:
    # Read on the failure path only; the success path never looks at the switch.
    __slots__ = ("_disabled_names", "delegating", "on")

    def __init__(self) -> None:
        #: The operator's setting, as set (the hot path reads it with ISOLATED: see enabled).
        self.on = os.environ.get("SEAWALL_RETRIES", "").strip().lower() not in {
            "off",
            "0",
            "false",
            "no",
            "disabled",
        }
        self._disabled_names: frozenset[str] = frozenset()
        #: Whether one_attempt() has ever been entered in this process. Until then ONE_ATTEMPT
        #: holds its default everywhere and the failure path need not read it (a context
        #: variable never set costs a lookup in the context's map on every read).
        self.delegating = False

    # Inside isolated() (a simulated run) the operator's switch does not apply: it governs the
    # process's real calls, not a model of other processes.
    @property
    def enabled(self) -> bool:
        return self.on or ISOLATED.get()

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.on = value

    @property
    def disabled_names(self) -> frozenset[str]:
        return frozenset() if ISOLATED.get() else self._disabled_names

    @disabled_names.setter
    def disabled_names(self, value: frozenset[str]) -> None:
        self._disabled_names = value


ISOLATED: contextvars.ContextVar[bool] = contextvars.ContextVar("seawall_isolated", default=False)
"""True in a simulated run (this context only): the kill switch is ignored there."""

SWITCH = _Switch()


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

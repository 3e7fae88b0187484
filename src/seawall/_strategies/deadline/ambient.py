"""The ambient deadline: :class:`Deadline`, the context variable that carries it, and the one
place where it meets a call's timeout and an attempt's timeout."""

from __future__ import annotations

import contextvars
import math
from typing import Final, NamedTuple

from seawall._core import runtime as _runtime
from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.public import public

__all__ = [
    "SCOPES",
    "Deadline",
    "attempt_deadline",
    "call_deadline",
    "current_deadline",
    "install",
    "remaining",
]


def _relative(seconds: object) -> float:
    """A relative deadline in seconds: any number but NaN (negative: already passed; ``inf``:
    none), finite ones at most ``MAX_SECONDS`` (longer ones overflow the waits that enforce
    them)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, got {_validate.shown(seconds)}")
    if isinstance(seconds, float) and math.isnan(seconds):
        raise ValueError("seconds must not be NaN")
    return _validate.number("seconds", seconds, maximum=_validate.MAX_SECONDS)


@public("seawall.propagation")
class Deadline(NamedTuple):
    """An absolute point in time on a clock; ``at = math.inf`` means no deadline.

    Immutable, and cheap to create (a named tuple): retry loops make one per attempt.
    Relative timeouts are resolved once, on entry, into a ``Deadline``: every hop and every retry
    below then reads the *same* instant instead of starting its own timer.
    """

    at: float
    clock: Clock = SYSTEM_CLOCK

    @classmethod
    def after(cls, seconds: float, clock: Clock | None = None) -> Deadline:
        """The deadline *seconds* from now on *clock* (the system clock by default)."""
        s = _relative(seconds)
        if clock is None:
            clock = SYSTEM_CLOCK
        elif not callable(getattr(clock, "now", None)):  # cheaper than isinstance(, Clock)
            raise TypeError(f"clock must implement seawall.Clock, got {_validate.shown(clock)}")
        return cls(clock.now() + s, clock)

    def remaining(self) -> float:
        """Seconds left (negative once passed, ``inf`` for no deadline)."""
        return self.at - self.clock.now()

    @property
    def expired(self) -> bool:
        return self.clock.now() >= self.at


# The ambient deadline: process-wide state, kept in the runtime module.
_DEADLINE: contextvars.ContextVar[Deadline | None] = _runtime.DEADLINE
# Bound once: policies call this on every call to see whether an ambient deadline applies.
current_deadline = _DEADLINE.get


# Whether a deadline has ever been made ambient (install() sets it): a latch of the runtime.
SCOPES: Final = _runtime.SCOPES


@public("seawall")
def remaining() -> float:
    """Seconds left in the ambient deadline (``math.inf`` if none is set)."""
    d = _DEADLINE.get()
    return math.inf if d is None else d.at - d.clock.now()


# -- deadline composition: the one place where the ambient deadline, a call's timeout and an
# attempt's timeout meet. Every strategy and driver uses these three functions.

_new_deadline = tuple.__new__  # skips the named tuple's Python-level __new__: half the cost


def call_deadline(now: float, timeout: float | None) -> float:
    """A call's absolute deadline on the clock read as *now*: the earlier of the ambient
    deadline (converted to this clock through its time left) and ``now + timeout``."""
    ambient = _DEADLINE.get()
    at = math.inf if ambient is None else now + (ambient.at - ambient.clock.now())
    if timeout is not None and now + timeout < at:
        return now + timeout
    return at


def attempt_deadline(now: float, call_at: float, attempt_timeout: float | None) -> float:
    """An attempt's absolute deadline: the earlier of the call's and ``now + attempt_timeout``."""
    if attempt_timeout is not None and now + attempt_timeout < call_at:
        return now + attempt_timeout
    return call_at


def install(at: float, now: float, clock: Clock) -> contextvars.Token[Deadline | None] | None:
    """Make *at* (on *clock*, which reads *now*) the ambient deadline if it is earlier than the
    one in force: nested scopes keep the earlier deadline, and an inner one can only shorten
    the time left. Returns the token to reset, or ``None`` when nothing was installed."""
    if at == math.inf:
        return None
    outer = _DEADLINE.get()
    if outer is not None and outer.at - outer.clock.now() <= at - now:
        return None
    SCOPES.used = True
    return _DEADLINE.set(_new_deadline(Deadline, (at, clock)))

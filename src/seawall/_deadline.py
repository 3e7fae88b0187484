"""One deadline for the whole call: an ambient, absolute deadline carried in a context variable."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import math
import sys
from types import TracebackType
from typing import Any

from seawall._clock import SYSTEM_CLOCK, Clock
from seawall._errors import DeadlineExceeded

__all__ = ["Deadline", "current_deadline", "deadline", "remaining"]


@dataclasses.dataclass(frozen=True, slots=True)
class Deadline:
    """An absolute point in time on a clock; ``at = math.inf`` means no deadline.

    Relative timeouts are resolved once, on entry, into a ``Deadline``: every hop and every retry
    below then reads the *same* instant instead of starting its own timer.
    """

    at: float
    clock: Clock = SYSTEM_CLOCK

    @classmethod
    def after(cls, seconds: float, clock: Clock | None = None) -> Deadline:
        """The deadline *seconds* from now on *clock* (the system clock by default)."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"seconds must be a number, got {seconds!r}")
        if math.isnan(seconds):
            raise ValueError("seconds must not be NaN")
        clock = clock if clock is not None else SYSTEM_CLOCK
        return cls(clock.now() + float(seconds), clock)

    def remaining(self) -> float:
        """Seconds left (negative once passed, ``inf`` for no deadline)."""
        return self.at - self.clock.now()

    @property
    def expired(self) -> bool:
        return self.clock.now() >= self.at


_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "seawall_deadline", default=None
)
# Bound once: policies call this on every call to see whether an ambient deadline applies.
current_deadline = _DEADLINE.get


def remaining() -> float:
    """Seconds left in the ambient deadline (``math.inf`` if none is set)."""
    d = _DEADLINE.get()
    return math.inf if d is None else d.at - d.clock.now()


class deadline:
    """Set an ambient deadline for the block: ``with deadline(2.0):`` or ``async with``.

    Nested scopes keep the earlier deadline: an inner scope can shorten the time left but never
    extend it. Every :class:`~seawall.RetryPolicy` called inside respects it: attempts get at most
    the time left, no wait crosses it, and no attempt starts with too little time left.

    In ``async with``, work still running at the deadline is cancelled (Python 3.11+) and the
    block raises :class:`~seawall.DeadlineExceeded`. Synchronous code cannot be interrupted; the
    deadline is visible to everything it calls through :func:`remaining`.

    Args:
        seconds: time allowed from entry; resolved to an absolute :class:`Deadline` on entry.
        clock: the clock to measure on (the system clock by default).
        at: an absolute :class:`Deadline` to use instead of *seconds*.
    """

    __slots__ = ("_at", "_clock", "_seconds", "_timeout", "_token", "deadline")

    def __init__(
        self,
        seconds: float | None = None,
        *,
        clock: Clock | None = None,
        at: Deadline | None = None,
    ) -> None:
        if (seconds is None) == (at is None):
            raise TypeError("deadline() takes exactly one of seconds or at=")
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise TypeError(f"seconds must be a number, got {seconds!r}")
            if math.isnan(seconds):
                raise ValueError("seconds must not be NaN")
        self._seconds = seconds
        self._at = at
        self._clock = clock
        self._token: contextvars.Token[Deadline | None] | None = None
        self._timeout: Any = None
        self.deadline: Deadline | None = None

    def _enter(self) -> Deadline:
        if self._at is not None:
            new = self._at
        else:
            assert self._seconds is not None
            new = Deadline.after(self._seconds, self._clock)
        outer = _DEADLINE.get()
        if outer is not None and outer.remaining() <= new.remaining():
            new = outer  # nested scopes keep the earlier deadline
        self.deadline = new
        self._token = _DEADLINE.set(new)
        return new

    def _exit(self) -> None:
        if self._token is not None:
            _DEADLINE.reset(self._token)
            self._token = None

    def __enter__(self) -> Deadline:
        return self._enter()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit()

    async def __aenter__(self) -> Deadline:
        new = self._enter()
        left = new.remaining()
        if math.isfinite(left) and sys.version_info >= (3, 11):
            loop = asyncio.get_running_loop()
            self._timeout = asyncio.timeout_at(loop.time() + max(0.0, left))
            await self._timeout.__aenter__()
        return new

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timeout, self._timeout = self._timeout, None
        try:
            if timeout is not None:
                try:
                    await timeout.__aexit__(exc_type, exc, tb)
                except TimeoutError as err:
                    if isinstance(exc, DeadlineExceeded):
                        raise exc from None
                    raise DeadlineExceeded(
                        f"deadline of {self.deadline!r} passed; the work was cancelled"
                    ) from err
        finally:
            self._exit()

"""Time as an injected dependency: the system clock in production, virtual time in tests.

Every policy reads time and waits only through a :class:`Clock`, so the same policy object runs
on wall-clock time in production and on virtual time in tests and in the simulator, where a wait
of an hour costs nothing.
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from seawall._core import validate as _validate
from seawall._core.public import public
from seawall._core.runtime import DEFAULT_GRACE, TESTING

if TYPE_CHECKING:
    from seawall._core.aio import VirtualEventLoop

__all__ = ["DEFAULT_GRACE", "TESTING", "Clock", "SystemClock", "VirtualClock"]


@public("seawall")
@runtime_checkable
class Clock(Protocol):
    """What a policy needs from time: a monotonic reading and two ways to wait."""

    def now(self) -> float:
        """Seconds on a monotonic scale (only differences are meaningful)."""

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for *seconds*."""

    async def asleep(self, seconds: float) -> None:
        """Suspend the calling task for *seconds*."""


# The state of seawall.testing.instant() is process-wide: kept in the runtime module.


@public("seawall")
class SystemClock:
    """The real monotonic clock (:func:`time.monotonic`), the same scale asyncio uses.

    Inside :func:`seawall.testing.instant`, its waits pass at once and its reading moves on by
    what they skipped (instant time).
    """

    __slots__ = ()

    def now(self) -> float:
        return time.monotonic() + TESTING.skipped

    def sleep(self, seconds: float) -> None:
        if TESTING.instant:
            TESTING.skip(seconds)
        elif seconds > 0:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        # Here, not at import: code that never awaits never loads asyncio (or trio).
        from seawall._core.compat import sleep

        if TESTING.instant:
            TESTING.skip(seconds)
            seconds = 0.0
        await sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()

#: How many of its latest waits a :class:`VirtualClock` keeps by default.
DEFAULT_KEEP_SLEEPS: Final = 1000
_MAX_KEEP: Final = 1_000_000
_MAX_START: Final = 1e12


@public("seawall")
class VirtualClock:
    """Virtual time: ``sleep`` jumps the clock forward instead of waiting.

    Synchronous code sees time advance by exactly what it slept. Asynchronous code should run on
    :class:`VirtualEventLoop` (see :func:`seawall.testing.run`), whose timers follow this clock
    and which jumps to the next timer whenever every task is waiting, so many concurrent tasks
    share one consistent virtual timeline.

    The clock remembers the latest *keep_sleeps* waits (:attr:`sleeps`) and counts all of them
    (:attr:`sleep_count`, :attr:`slept`), so its memory stays bounded however long it runs: a
    simulation of a million retried calls keeps a few kilobytes, not every wait.

    Args:
        start: the initial reading of :meth:`now` (a finite number, at most 1e12 in size).
        keep_sleeps: how many of the latest waits :attr:`sleeps` holds (0: none).
    """

    __slots__ = ("_loop", "_now", "_sleeps", "sleep_count", "slept")

    def __init__(self, start: float = 0.0, *, keep_sleeps: int = DEFAULT_KEEP_SLEEPS) -> None:
        if isinstance(start, bool) or not isinstance(start, (int, float)):
            raise TypeError(f"start must be a finite number, got {_validate.shown(start)}")
        # Bounded: clock readings are divided by window slices of 0.1 ms, which must stay finite.
        self._now = _validate.number("start", start, finite=True, minimum=-_MAX_START)
        if self._now > _MAX_START:
            raise ValueError(f"start must be <= {_MAX_START:g}, got {_validate.shown(start)}")
        size = _validate.count("keep_sleeps", keep_sleeps, maximum=_MAX_KEEP)
        self._loop: VirtualEventLoop | None = None
        self._sleeps: collections.deque[float] = collections.deque(maxlen=size)
        #: How many waits were requested through :meth:`sleep` or :meth:`asleep`.
        self.sleep_count = 0
        #: The sum of those waits, in seconds.
        self.slept = 0.0

    @property
    def sleeps(self) -> list[float]:
        """The latest waits requested through :meth:`sleep` or :meth:`asleep`, oldest first
        (at most ``keep_sleeps`` of them; a new list on each read)."""
        return list(self._sleeps)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by *seconds* (never backward)."""
        self._now += _validate.seconds("seconds", seconds)

    def _count(self, seconds: float) -> float:
        seconds = max(0.0, seconds)
        self._sleeps.append(seconds)
        self.sleep_count += 1
        self.slept += seconds
        return seconds

    def sleep(self, seconds: float) -> None:
        self._now += self._count(seconds)

    async def asleep(self, seconds: float) -> None:
        seconds = self._count(seconds)
        from seawall._core.compat import running_trio

        if running_trio():
            import trio

            if getattr(trio.lowlevel.current_clock(), "virtual", None) is self:
                # trio's time is this clock (seawall.testing.trio_clock): it jumps when every
                # task waits.
                await trio.sleep(seconds)
            else:
                # Jump at once, as on a plain asyncio loop (fine for one task at a time).
                self._now += seconds
                await trio.lowlevel.checkpoint()
            return
        import asyncio

        loop = asyncio.get_running_loop()
        if loop is self._loop:
            # The loop's timers run on this clock: it will jump when every task waits.
            await asyncio.sleep(seconds)
        else:
            # A plain loop: jump at once (fine for one task at a time).
            self._now += seconds
            await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now!r})"

"""Time as an injected dependency: the system clock in production, virtual time in tests.

Every policy reads time and waits only through a :class:`Clock`, so the same policy object runs
on wall-clock time in production and on virtual time in tests and in the simulator, where a wait
of an hour costs nothing.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from seawall._core import validate as _validate
from seawall._core.public import public

if TYPE_CHECKING:
    from seawall._core.aio import VirtualEventLoop

__all__ = ["Clock", "SystemClock", "VirtualClock"]


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


@public("seawall")
class SystemClock:
    """The real monotonic clock (:func:`time.monotonic`), the same scale asyncio uses."""

    __slots__ = ()

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        # Here, not at import: code that never awaits never loads asyncio (or trio).
        from seawall._core.compat import sleep

        await sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


@public("seawall")
class VirtualClock:
    """Virtual time: ``sleep`` jumps the clock forward instead of waiting.

    Synchronous code sees time advance by exactly what it slept. Asynchronous code should run on
    :class:`VirtualEventLoop` (see :func:`seawall.testing.run`), whose timers follow this clock
    and which jumps to the next timer whenever every task is waiting, so many concurrent tasks
    share one consistent virtual timeline.

    Args:
        start: the initial reading of :meth:`now`.
    """

    __slots__ = ("_loop", "_now", "sleeps")

    def __init__(self, start: float = 0.0) -> None:
        if isinstance(start, bool) or not isinstance(start, (int, float)) or math.isnan(start):
            raise TypeError(f"start must be a finite number, got {start!r}")
        self._now = float(start)
        self._loop: VirtualEventLoop | None = None
        #: Every wait requested through :meth:`sleep` or :meth:`asleep`, in order.
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by *seconds* (never backward)."""
        self._now += _validate.seconds("seconds", seconds)

    def sleep(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.sleeps.append(seconds)
        self._now += seconds

    async def asleep(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.sleeps.append(seconds)
        from seawall._core.compat import running_trio

        if running_trio():
            # Jump at once, as on a plain asyncio loop (fine for one task at a time).
            import trio

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

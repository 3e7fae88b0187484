"""asyncio on virtual time: an event loop whose timers follow a :class:`VirtualClock`."""

from __future__ import annotations

import asyncio
import math
import selectors
from typing import Any

from seawall._core.clock import VirtualClock
from seawall._core.public import public

__all__ = ["VirtualEventLoop"]


class _JumpingSelector(selectors.BaseSelector):
    """Wraps a real selector; instead of blocking until a timer is due, it moves the clock there."""

    def __init__(self, inner: selectors.BaseSelector, clock: VirtualClock) -> None:
        self._inner = inner
        self._clock = clock

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            # No timer pending: only real I/O can wake us.
            return self._inner.select(None)
        ready = self._inner.select(0)
        if not ready and timeout > 0:
            self._clock._now += timeout
        return ready

    def close(self) -> None:
        self._inner.close()

    def get_map(self) -> Any:
        return self._inner.get_map()


@public("seawall.testing")
class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose time is a :class:`VirtualClock`.

    ``loop.time()`` reads the virtual clock; when no callback is ready, the loop jumps the clock to
    the next timer instead of waiting. ``asyncio.sleep``, ``asyncio.timeout`` and ``wait_for``
    therefore all run on virtual time, and a test of an hour of retries takes milliseconds.
    """

    def __init__(self, clock: VirtualClock | None = None) -> None:
        self.clock = clock if clock is not None else VirtualClock()
        super().__init__(_JumpingSelector(selectors.DefaultSelector(), self.clock))
        self.clock._loop = self

    # asyncio runs the timers due before time() + _clock_resolution. A fixed 1e-9 vanishes in
    # the rounding of a large reading (at 1.5e9 s a float moves in steps of 2.4e-7): a timer
    # reached exactly would never be due, and the loop would spin. A few units in the last place
    # of the reading instead.
    @property
    def _clock_resolution(self) -> float:
        return max(1e-9, 4.0 * math.ulp(self.clock._now))

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass  # asyncio sets the real clock's resolution in __init__: not ours

    def time(self) -> float:
        return self.clock._now

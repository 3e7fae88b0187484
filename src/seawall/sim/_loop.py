"""An asyncio event loop for simulations: virtual time, and no I/O at all.

:class:`seawall._core.aio.VirtualEventLoop` is a full selector loop whose selector jumps the
clock: it suits tests, which may mix virtual time with real sockets. A simulation has no
sockets, and there each turn of that loop pays for a poll of the operating system's selector
and for asyncio's generic timer bookkeeping. :class:`SimEventLoop` runs the callbacks as
asyncio does (each turn, the callbacks ready at its start in FIFO order, then the timers that
have become due) without either: when nothing is ready it moves the clock to the earliest
timer, and timers due at the same instant run in the order they were set (asyncio's heap
leaves that order to its layout). Coroutines, tasks, ``asyncio.wait``, ``asyncio.sleep`` and
cancellation are asyncio's own, so the code driven on it (``Hedge.acall``) runs unchanged.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from contextvars import Context
from typing import Any

from seawall._core.clock import VirtualClock

__all__ = ["SimEventLoop"]

# asyncio's own threshold for sweeping cancelled timers out of the heap (base_events.py).
_MIN_SCHEDULED = 100
_CANCELLED_FRACTION = 0.5


class SimEventLoop(asyncio.BaseEventLoop):
    """An asyncio loop on a :class:`~seawall.VirtualClock` that jumps from timer to timer.

    It has no selector: file descriptors, sockets, subprocesses and signal handlers are not
    available, and a loop with nothing ready and no timer left raises ``RuntimeError`` (every
    task waits on something that can never happen) instead of blocking for ever. Timers due at
    the same instant run in the order they were set (asyncio leaves that order to its heap).
    """

    def __init__(self, clock: VirtualClock | None = None) -> None:
        super().__init__()
        self.clock = clock if clock is not None else VirtualClock()
        # clock.asleep() waits on this loop's timers, as on VirtualEventLoop.
        self.clock._loop = self  # type: ignore[assignment]
        # Timers are compared with the exact reading of the clock, which jumps to them exactly.
        self._clock_resolution = 0.0
        # (when, sequence, handle): tuples compare in C, where TimerHandle compares in Python.
        self._timers: list[tuple[float, int, Any]] = []  # the handles are TimerHandles
        self._sequence = itertools.count()

    def time(self) -> float:
        return self.clock._now

    def call_soon(  # type: ignore[override]  # asyncio's signature, less its TypeVarTuple
        self, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.Handle:
        # asyncio's, less the closed-loop and debug checks (a simulation never runs in debug
        # mode, and nothing schedules on it once closed); futures and tasks call this for
        # every wake-up.
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle

    def call_at(  # type: ignore[override]  # asyncio's signature, less its TypeVarTuple
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        timer: Any = asyncio.TimerHandle(when, callback, args, self, context)
        heapq.heappush(self._timers, (when, next(self._sequence), timer))
        timer._scheduled = True
        return timer  # type: ignore[no-any-return]

    def close(self) -> None:
        super().close()
        self._timers.clear()

    def _write_to_self(self) -> None:
        # Only call_soon_threadsafe needs to wake a loop blocked in a selector; this one never
        # blocks, so there is nothing to wake.
        pass

    def _process_events(self, event_list: Any) -> None:  # pragma: no cover - no selector
        pass

    def _run_once(self) -> None:
        timers = self._timers
        ready: Any = self._ready  # type: ignore[attr-defined]
        count = len(timers)
        cancelled: int = self._timer_cancelled_count  # type: ignore[has-type]
        pop = heapq.heappop
        if count > _MIN_SCHEDULED and cancelled / count > _CANCELLED_FRACTION:
            kept = []
            for entry in timers:
                if entry[2]._cancelled:
                    entry[2]._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._timers = timers = kept
            self._timer_cancelled_count = 0
        else:
            while timers and timers[0][2]._cancelled:
                self._timer_cancelled_count -= 1
                pop(timers)[2]._scheduled = False
        clock = self.clock
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            if not timers:
                raise RuntimeError("the simulation deadlocked: every task waits, no timer is set")
            when = timers[0][0]
            if when > clock._now:
                clock._now = when  # nothing to do until then: jump
        now = clock._now
        while timers and timers[0][0] <= now:
            handle = pop(timers)[2]
            handle._scheduled = False
            ready.append(handle)
        popleft = ready.popleft
        for _ in range(len(ready)):
            handle = popleft()
            if not handle._cancelled:
                handle._run()

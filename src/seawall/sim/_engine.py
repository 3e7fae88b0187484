"""A heap-based discrete-event engine on virtual time.

The engine only orders callbacks in time. Retry decisions are made by the real policy objects
(:class:`~seawall.lowlevel.RetryState`, :class:`~seawall.Backoff`, budgets) that the scenarios
drive, and
budgets read the engine's time through :class:`SimClock`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

__all__ = ["Engine", "SimClock"]

Callback = Callable[[Any], None]


class Engine:
    """Run callbacks in virtual-time order.

    Events at the same instant run in the order they were scheduled (a sequence number breaks
    ties), so a run is a pure function of its inputs and its random seeds.

    Attributes:
        now: the current virtual time in seconds.
        events: how many events have run.
    """

    __slots__ = ("_heap", "_seq", "events", "now")

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)
        self.events = 0
        self._heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = 0

    def at(self, when: float, callback: Callback, arg: Any = None) -> None:
        """Run ``callback(arg)`` at virtual time *when* (never before :attr:`now`)."""
        if when < self.now:
            when = self.now
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, callback, arg))

    def after(self, delay: float, callback: Callback, arg: Any = None) -> None:
        """Run ``callback(arg)`` *delay* seconds from now."""
        self.at(self.now + delay, callback, arg)

    def run(self, until: float = math.inf) -> None:
        """Run events in time order until none is left or the next one is after *until*."""
        heap = self._heap
        pop = heapq.heappop
        count = 0
        while heap:
            if heap[0][0] > until:
                self.now = until
                break
            when, _, callback, arg = pop(heap)
            self.now = when
            callback(arg)
            count += 1
        self.events += count

    def __len__(self) -> int:
        return len(self._heap)


class SimClock:
    """A :class:`~seawall.Clock` that reads an :class:`Engine`'s virtual time.

    Budgets and policies read time from it. Waiting is the engine's job (a wait is an event), so
    ``sleep`` and ``asleep`` refuse to run.
    """

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def now(self) -> float:
        return self._engine.now

    def sleep(self, seconds: float) -> None:
        raise RuntimeError("in the simulator, waits are scheduled as engine events")

    async def asleep(self, seconds: float) -> None:
        raise RuntimeError("in the simulator, waits are scheduled as engine events")

    def __repr__(self) -> str:
        return f"SimClock(now={self._engine.now!r})"

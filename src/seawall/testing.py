"""Helpers for testing code that uses seawall: virtual time and instant retries."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from seawall._core import runtime as _runtime
from seawall._core import validate as _validate
from seawall._core.aio import VirtualEventLoop
from seawall._core.clock import DEFAULT_GRACE, TESTING, VirtualClock

__all__ = ["VirtualClock", "VirtualEventLoop", "instant", "reset", "run", "trio_clock"]

T = TypeVar("T")
_INSTANT_LOCK = _runtime.INSTANT_LOCK


@contextlib.contextmanager
def instant(*, grace: float = DEFAULT_GRACE) -> Iterator[None]:
    """Inside the block, every policy's waits pass at once (attempts and decisions unchanged).

    For users' own test suites: code under test keeps its real policies, and the suite does not
    sleep. Policies on the system clock (the default) run on *instant time*: a wait adds to the
    clock's reading instead of sleeping, so ``timeout``, ``attempt_timeout`` and
    :func:`seawall.deadline` see it pass and allow the attempts they allow in production. The
    timers seawall enforces on blocked async code (``attempt_timeout``, ``timeout``, an async
    or in-coroutine :func:`seawall.deadline`; asyncio and trio) fire after at most *grace* real
    seconds, and instant time jumps to their deadline: an attempt that hangs until its
    timeout costs the test *grace*, not the timeout. Code that waits longer than *grace* in
    real time inside such a timer (a slow test server) sees it fire; raise *grace* for it. A
    policy with a clock of its own (a :class:`VirtualClock`) waits zero seconds instead.

    Nests (the innermost *grace* applies); process-wide.

    Args:
        grace: real seconds that blocked code may wait before an enforced timeout fires.
    """
    grace = _validate.seconds("grace", grace, finite=True)
    with _INSTANT_LOCK:  # `+= 1` is a read and a write: threads entering together must not lose one
        TESTING.instant += 1
        outer, TESTING.grace = TESTING.grace, grace
    try:
        yield
    finally:
        with _INSTANT_LOCK:
            TESTING.instant -= 1
            TESTING.grace = outer


def reset() -> None:
    """Put seawall's process-wide state back as a fresh process has it.

    The kill switch (retries on, no name switched off, whatever ``SEAWALL_RETRIES`` said),
    :func:`instant` blocks left open, the per-host HTTP retry budgets (so that each test's
    server starts with a fresh budget: without this, retries to one test server dwindle over a
    long suite as the shared budget fills), and the counters of deadline headers read by
    servers. The pytest plugin's ``seawall_reset`` fixture calls it around a test.
    """
    # Not the latches: another thread may rely on them (seawall._core.runtime.reset).
    _runtime.reset(latches=False)


def run(
    main: Coroutine[Any, Any, T], clock: VirtualClock | None = None, *, backend: str = "asyncio"
) -> T:
    """Run a coroutine on virtual time: on a :class:`VirtualEventLoop` (asyncio), or on trio
    with :func:`trio_clock`; either way the library's timers follow *clock*.

    Example:
        ``clock = VirtualClock(); seawall.testing.run(main(clock), clock)`` runs an hour of
        retries, timeouts and sleeps in milliseconds, with consistent virtual time across tasks;
        ``backend="trio"`` does the same under trio.

    Args:
        main: the coroutine (not started).
        clock: the virtual time to follow (a new :class:`VirtualClock` when ``None``).
        backend: ``"asyncio"`` or ``"trio"``.

    Raises:
        ValueError: an unknown *backend*.
    """
    if backend == "trio":
        import trio

        async def _main() -> T:
            return await main

        return trio.run(_main, clock=trio_clock(clock if clock is not None else VirtualClock()))
    if backend != "asyncio":
        main.close()
        raise ValueError(f"backend must be 'asyncio' or 'trio', got {backend!r}")
    loop = VirtualEventLoop(clock)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


_TRIO_CLOCK: Any = None


def trio_clock(clock: VirtualClock) -> Any:
    """A trio clock (``trio.abc.Clock``) whose time is *clock*: ``trio.run(main,
    clock=trio_clock(vclock))``.

    Like ``trio.testing.MockClock(autojump_threshold=0)``, it jumps to the next deadline whenever
    every task waits, and it moves *clock* with it, so that trio's timeouts and sleeps and the
    policies' :meth:`VirtualClock.asleep` share one virtual timeline.
    """
    global _TRIO_CLOCK
    if not isinstance(clock, VirtualClock):
        raise TypeError(f"clock must be a seawall.VirtualClock, got {clock!r}")
    if _TRIO_CLOCK is None:
        import trio

        class _Clock(trio.abc.Clock):
            """trio's clock on the time of a :class:`VirtualClock`, jumping when idle."""

            def __init__(self, virtual: VirtualClock) -> None:
                self.virtual = virtual  # read by VirtualClock.asleep: this run follows it

            def start_clock(self) -> None:
                pass

            def current_time(self) -> float:
                return self.virtual._now

            def deadline_to_sleep_time(self, deadline: float) -> float:
                # trio asks only when no task can run: every task waits, so time moves on to
                # the next deadline at once (I/O that is ready is still polled, with no wait),
                # as seawall's VirtualEventLoop does for asyncio.
                if deadline == math.inf:
                    return math.inf  # no timer: only real I/O can wake a task
                if deadline > self.virtual._now:
                    self.virtual._now = deadline
                return 0.0

            def __repr__(self) -> str:
                return f"trio_clock({self.virtual!r})"

        _TRIO_CLOCK = _Clock
    return _TRIO_CLOCK(clock)

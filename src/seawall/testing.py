"""Helpers for testing code that uses seawall: virtual time and instant retries."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from seawall._core import validate as _validate
from seawall._core.aio import VirtualEventLoop
from seawall._core.clock import DEFAULT_GRACE, TESTING, VirtualClock

__all__ = ["VirtualClock", "VirtualEventLoop", "instant", "reset", "run"]

T = TypeVar("T")
_INSTANT_LOCK = threading.Lock()


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
    from seawall._core.switch import SWITCH
    from seawall._policy import http as _http
    from seawall._strategies import deadline as _deadline

    SWITCH.enabled = True
    SWITCH.disabled_names = frozenset()
    with _INSTANT_LOCK:
        TESTING.instant = 0
        TESTING.skipped = 0.0
        TESTING.grace = DEFAULT_GRACE
    with _http._HOST_BUDGETS_LOCK:
        _http._HOST_BUDGETS.clear()
    counters = _deadline._COUNTERS
    with counters.lock:
        counters.accepted = counters.invalid = counters.clamped = 0


def run(main: Coroutine[Any, Any, T], clock: VirtualClock | None = None) -> T:
    """Run a coroutine on a :class:`VirtualEventLoop`: asyncio timers follow *clock*.

    Example:
        ``clock = VirtualClock(); seawall.testing.run(main(clock), clock)`` runs an hour of
        retries, timeouts and sleeps in milliseconds, with consistent virtual time across tasks.
    """
    loop = VirtualEventLoop(clock)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

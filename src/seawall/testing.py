"""Helpers for testing code that uses seawall: virtual time and instant retries."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from seawall._core.aio import VirtualEventLoop
from seawall._core.clock import VirtualClock
from seawall._strategies.retry import TESTING

__all__ = ["VirtualClock", "VirtualEventLoop", "instant", "reset", "run"]

T = TypeVar("T")
_INSTANT_LOCK = threading.Lock()


@contextlib.contextmanager
def instant() -> Iterator[None]:
    """Inside the block, every policy's waits are zero (attempts and decisions are unchanged).

    For users' own test suites: code under test keeps its real policies, and the suite does not
    sleep. Nests; process-wide.
    """
    with _INSTANT_LOCK:  # `+= 1` is a read and a write: threads entering together must not lose one
        TESTING.instant += 1
    try:
        yield
    finally:
        with _INSTANT_LOCK:
            TESTING.instant -= 1


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

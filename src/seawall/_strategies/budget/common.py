"""What the budgets share: the validation of their parameters, atomic counters, slices."""

from __future__ import annotations

import itertools
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final

from seawall._core import validate as _validate
from seawall._core.clock import Clock

__all__ = ["milli_tokens"]

# -- validation --------------------------------------------------------------------------------

# The largest rate, ratio or token count accepted: far beyond any real one, and small enough that
# the arithmetic on it (tokens in thousandths, a floor of retries per window) stays finite.
_LARGEST: Final = 1e12


def _number(name: str, value: object) -> float:
    return _validate.number(name, value)  # refuses bools, and ints too large for a float


def _positive(name: str, value: object, maximum: float = _LARGEST) -> float:
    v = _number(name, value)
    if not (math.isfinite(v) and 0 < v <= maximum):
        raise ValueError(f"{name} must be a finite number > 0 and <= {maximum:g}, got {v!r}")
    return v


def milli_tokens(value: float) -> int:
    """*value* in thousandths, the further digits of its decimal form cut off, as gRPC
    parses ``maxTokens`` and ``tokenRatio`` (0.5466 is 546): exact where ``value * 1000``
    is not (1.005 * 1000 is 1004.999...)."""
    from decimal import Decimal  # here, not at import: only a bucket's construction needs it

    return int(Decimal(repr(value)).scaleb(3))


def _window(value: object) -> float:
    # A window is cut into slices that the clock reading is divided by: a tiny one would divide
    # by zero (5e-324 / 10) or overflow.
    return _validate.seconds("window", value, finite=True, minimum=_validate.MIN_WINDOW)


def _non_negative(name: str, value: object) -> float:
    v = _number(name, value)
    if not (math.isfinite(v) and 0 <= v <= _LARGEST):
        raise ValueError(f"{name} must be a finite number >= 0 and <= {_LARGEST:g}, got {v!r}")
    return v


def _clock_now(clock: Clock | None) -> Callable[[], float]:
    if clock is None:
        # Read the monotonic clock directly: one call less on every request.
        return time.monotonic
    if not isinstance(clock, Clock):
        raise TypeError(f"clock must implement seawall.Clock or be None, got {clock!r}")
    return clock.now


# -- counters ----------------------------------------------------------------------------------


class _LockedCounter:
    """``itertools.count()`` behind a lock, for interpreters without a GIL."""

    __slots__ = ("_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        with self._lock:
            value = self._value
            self._value = value + 1
            return value


def _atomic_counter() -> Iterator[int]:
    """A counter whose ``next()`` never loses an increment when threads race.

    With the GIL, ``next()`` on :func:`itertools.count` is a single C call that no other thread
    can interleave: the usual lock-free counter in CPython, and much cheaper than a lock. A
    free-threaded interpreter gets a locked counter instead.
    """
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        return itertools.count()
    return _LockedCounter()  # pragma: no cover - free-threaded builds only


# Finagle's WindowedAdder splits its window into 10 slices: memory stays bounded (short lists of
# marks), and the window slides in steps of window/10.
_SLICES: Final = 10

# Counters read the clock on every call until a slice holds this many calls, then once every
# 1/1024 of a slice's calls: exact for a quiet client, ~0.1% of a slice at worst for a busy one.
_BUSY: Final = 2048


def _count(name: str, value: object, *, minimum: int) -> int:
    return _validate.count(name, value, minimum=minimum)

"""RetryBudget: retries may add at most a ratio of the requests over a sliding window."""

from __future__ import annotations

import math
import threading
from typing import Any, Final

from seawall._core.clock import Clock
from seawall._core.public import public
from seawall._strategies.budget.common import (
    _BUSY,
    _SLICES,
    _atomic_counter,
    _clock_now,
    _non_negative,
    _positive,
    _window,
)
from seawall._strategies.budget.protocol import FirstAttempt

__all__ = [
    "DEFAULT_MIN_PER_SECOND",
    "DEFAULT_RATIO",
    "DEFAULT_WINDOW",
    "RetryBudget",
    "budget_state",
]

# -- RetryBudget -------------------------------------------------------------------------------


# RetryBudget's defaults. The floor is small on purpose: at 10 requests a second, a floor of
# 10 retries a second (Linkerd's) lets every request retry twice, and the ratio says nothing.
DEFAULT_RATIO: Final = 0.1
DEFAULT_MIN_PER_SECOND: Final = 1.0
DEFAULT_WINDOW: Final = 10.0


@public("seawall")
class RetryBudget:
    """Retries may add at most ``ratio`` of the requests, plus a floor, over a sliding window.

    Every logical call deposits (:meth:`on_request`); every retry withdraws (:meth:`allow_retry`).
    A retry is allowed while the retries in the window stay within
    ``ratio * requests + min_per_second * window``. Deposits and withdrawals expire with the
    window, which slides in ten slices: memory is bounded and each call is O(1).

    So over a run of ``T`` seconds in which ``requests`` calls start, retries are at most
    ``ratio * requests + min_per_second * (T + window)``: the floor's reserve renews with every
    window. With the defaults, 300 calls at 10 a second to a dependency that always fails get at
    most 30 + 40 = 70 retries (370 attempts with ``max_attempts=3``; 900 without a budget);
    10,000 calls at 100 a second, at most 1,000 + 110 retries.

    A deposit takes no lock (it bumps an atomic counter), so a budget shared by every call adds
    little to the success path; withdrawals, on the failure path, take a short lock.

    Args:
        ratio: retries allowed per request, e.g. ``0.1`` for at most 10% extra load.
        min_per_second: retries always allowed per second (a reserve of ``min_per_second *
            window`` per window), so that a client with little traffic can still retry. ``0``
            turns the floor off.
        window: seconds over which requests and retries are counted.
        clock: where time comes from (``None``: the system's monotonic clock).

    Raises:
        ValueError: ``ratio`` not > 0 (or NaN), ``min_per_second`` < 0, ``window`` not > 0.
    """

    # Finagle RetryBudget(ttl, minRetriesPerSec, percentCanRetry), ttl 10 s as Finagle's and
    # Linkerd's; a ratio of 0.1 where they use 0.2, and a floor of 1 retry/s where they use 10.

    __slots__ = (
        "_busy_at",
        "_check_at",
        "_clock",
        "_deposits",
        "_index",
        "_lock",
        "_marks",
        "_now",
        "_peeks",
        "_reserve",
        "_retries",
        "_retries_total",
        "_slice",
        "_slice_end",
        "_slot",
        "_stride",
        "min_per_second",
        "ratio",
        "window",
    )

    def __init__(
        self,
        ratio: float = DEFAULT_RATIO,
        min_per_second: float = DEFAULT_MIN_PER_SECOND,
        window: float = DEFAULT_WINDOW,
        clock: Clock | None = None,
    ) -> None:
        self.ratio = _positive("ratio", ratio)
        self.min_per_second = _non_negative("min_per_second", min_per_second)
        self.window = _window(window)
        self._now = _clock_now(clock)
        self._clock = clock
        # The floor is a reserve of retries per window that needs no deposit.
        self._reserve = self.min_per_second * self.window
        self._lock = threading.Lock()
        # Deposits: one running count; each slice remembers the count when it began, so the
        # deposits in the window are the count now minus the mark of the oldest slice.
        self._deposits = _atomic_counter()
        self._peeks = 0  # reads of the counter (under the lock), which also advance it
        self._marks = [0] * _SLICES
        self._retries = [0] * _SLICES
        self._retries_total = 0
        self._slice = self.window / _SLICES
        self._index = math.floor(self._now() / self._slice)
        self._slot = self._index % _SLICES
        self._slice_end = (self._index + 1) * self._slice
        # Deposits (raw counter values) below _check_at skip the clock; from _busy_at on, each
        # one calls _check. _stride: the previous slice's deposits / 1024. See on_request.
        self._stride = 1
        self._check_at = 0
        self._busy_at = _BUSY

    def on_request(self) -> None:
        """Deposit: a logical call starts (its first attempt).

        Until the current slice holds 2048 deposits, every deposit reads the clock (to see
        whether the slice moved): the count is exact. Beyond that, a deposit reads the clock
        only once every ``stride`` deposits, where ``stride`` is 1/1024 of the larger of the
        previous slice's deposits and the current slice's so far. So at most one stride of
        deposits made just after a slice ended is counted in the slice before: they leave the
        window one slice early, which can only refuse a retry, never allow one, and is at most
        ~0.1% of a slice's deposits.
        """
        # No lock: a deposit racing with a slice change lands in one slice or its neighbour.
        number = next(self._deposits)
        if number >= self._check_at and (number >= self._busy_at or self._now() >= self._slice_end):
            self._check(number)

    def _check(self, number: int) -> None:
        """After deposit *number*: move to a new slice if the clock says so, else set when the
        next deposit must look at the clock again."""
        index = self._index
        if self._now() >= self._slice_end:
            with self._lock:
                self._refresh(pending=1)
            return
        # Deposits in this slice before this one (racy reads: off by a few at worst).
        in_slice = number - self._peeks - self._marks[self._slot]
        stride = max(self._stride, in_slice >> 10)
        if self._index != index:
            return  # a racing refresh moved the slice: keep the bounds it set
        if stride > 1:
            self._busy_at = 0
            self._check_at = number + stride
        else:
            self._check_at = 0
            self._busy_at = number + max(1, _BUSY - in_slice)

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """Withdraw one retry; ``False`` when the budget is spent (nothing is withdrawn then)."""
        with self._lock:
            self._refresh()
            # A tiny tolerance so that e.g. 0.1 * 30 deposits allows exactly 3 retries.
            room = self._requests() * self.ratio + self._reserve + 1e-9
            if self._retries_total + 1 > room:
                return False
            self._retries[self._slot] += 1
            self._retries_total += 1
            return True

    def on_success(self) -> None:
        """Nothing to do: the budget counts requests and retries, not outcomes."""

    def on_answer(self, error: BaseException) -> None:
        """Nothing to do: the budget counts requests and retries, not outcomes."""

    def on_failure(self, error: BaseException) -> None:
        """Nothing to do: the budget counts requests and retries, not outcomes."""

    def first_attempt(self) -> FirstAttempt:
        """A deposit before the first attempt; nothing after it."""
        return self.on_request, None

    def __reduce__(self) -> tuple[Any, ...]:
        # The configuration travels; counts and locks do not (a fresh budget on the other side).
        return (type(self), (self.ratio, self.min_per_second, self.window, self._clock))

    @property
    def requests(self) -> int:
        """Logical calls counted in the current window."""
        with self._lock:
            self._refresh()
            return self._requests()

    @property
    def retries(self) -> int:
        """Retries withdrawn in the current window."""
        with self._lock:
            self._refresh()
            return self._retries_total

    def available(self) -> int:
        """How many retries would be allowed now."""
        with self._lock:
            self._refresh()
            room = self._requests() * self.ratio + self._reserve - self._retries_total + 1e-9
            return max(0, math.floor(room))

    # The methods below run under the lock.

    def _count(self) -> int:
        """Deposits ever made. Reading the counter advances it, so count the reads too."""
        value = next(self._deposits) - self._peeks
        self._peeks += 1
        return value

    def _requests(self) -> int:
        # The oldest slice of the window is _SLICES - 1 before the current one, i.e. slot + 1.
        return self._count() - self._marks[(self._slot + 1) % _SLICES]

    def _refresh(self, pending: int = 0) -> None:
        """Move to the current slice; *pending* deposits just made belong to it."""
        now = self._now()
        if now < self._slice_end:
            return
        # Always move forward at least one slice: float rounding must not make us roll forever.
        index = max(math.floor(now / self._slice), self._index + 1)
        count = self._count() - pending
        marks, retries = self._marks, self._retries
        # The stride between clock reads: 1/1024 of the deposits of the slice that ended, or a
        # clock read per deposit until this slice holds _BUSY of them.
        stride = (count - marks[self._slot]) >> 10
        self._stride = stride if stride > 1 else 1
        if stride > 1:
            self._busy_at = 0
            self._check_at = count + self._peeks + stride
        else:
            self._check_at = 0
            self._busy_at = count + self._peeks + _BUSY
        for i in range(max(self._index + 1, index - _SLICES + 1), index + 1):
            slot = i % _SLICES
            marks[slot] = count
            self._retries_total -= retries[slot]
            retries[slot] = 0
        self._index = index
        self._slot = index % _SLICES
        self._slice_end = (index + 1) * self._slice

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self.ratio!r}, min_per_second={self.min_per_second!r}, "
            f"window={self.window!r})"
        )


def budget_state(budget: object) -> str:
    """*budget* and how much of it is left, for a message: the retries a :class:`RetryBudget`
    allowed in its window and for how many calls, a bucket's tokens. Never raises."""
    try:
        if isinstance(budget, RetryBudget):
            return (
                f"{budget!r}, in the last {budget.window:g} s: calls {budget.requests}, "
                f"retries {budget.retries}, more retries allowed {budget.available()}"
            )
        return repr(budget)  # the other budgets show their state in their repr
    except Exception:  # a budget whose repr fails must not hide the refusal
        return f"<{type(budget).__name__}>"

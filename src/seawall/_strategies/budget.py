"""Retry budgets: bound the total load that retries add when a dependency is sick.

A per-call attempt cap does not bound load: when every call fails, ``max_attempts=3`` triples
the traffic exactly when the dependency is weakest. The objects here are shared by every policy
that talks to one dependency and bound the extra load system-wide:

* :class:`RetryBudget`: retries may add at most ``ratio`` of the requests over a sliding window,
  plus a small floor (Finagle and Linkerd retry budgets).
* :class:`TokenBucket`: gRPC retry throttling; retries stop while most recent attempts fail.
* :class:`RetryQuota`: the AWS SDKs' "standard" retry quota (:meth:`RetryQuota.aws_standard`).
* :class:`AdaptiveThrottle`: client-side adaptive throttling (Google SRE book): when the
  dependency rejects most requests, reject some first attempts locally, with :class:`Throttled`.

Every one implements :class:`Budget`, so each works as ``RetryPolicy(budget=...)``; each can also
be driven by hand. All are thread-safe: a short lock guards a few counters and is never held
around the caller's function.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol, runtime_checkable

from seawall._core import validate as _validate
from seawall._core.clock import Clock
from seawall._core.errors import Overloaded
from seawall._core.public import public

__all__ = [
    "DEFAULT_MIN_PER_SECOND",
    "DEFAULT_RATIO",
    "DEFAULT_WINDOW",
    "AdaptiveThrottle",
    "Budget",
    "RetryBudget",
    "RetryQuota",
    "Throttled",
    "TokenBucket",
    "answer_callback",
    "budget_state",
    "first_attempt_callables",
]

# What a budget's first_attempt() capability returns: (before, after), each None for nothing.
FirstAttempt = tuple[Callable[[], None] | None, Callable[[], None] | None]


def answer_callback(budget: Budget) -> Callable[[BaseException], None]:
    """What *budget* is told when the dependency answered, not healthily: its ``on_answer``, or
    (for a budget that predates the third outcome) its ``on_success``."""
    on_answer = getattr(budget, "on_answer", None)
    if callable(on_answer):
        return on_answer  # type: ignore[no-any-return]
    on_success = budget.on_success

    def answered(error: BaseException) -> None:
        on_success()

    return answered


def first_attempt_callables(budget: Budget) -> FirstAttempt:
    """*budget*'s cheapest callables for a first attempt (its ``first_attempt()`` capability),
    or its ``on_request`` and ``on_success``."""
    offer = getattr(budget, "first_attempt", None)
    if callable(offer):
        before, after = offer()
        return before, after
    return budget.on_request, budget.on_success


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


@public("seawall")
@runtime_checkable
class Budget(Protocol):
    """What a policy asks of a shared budget. One budget may serve many policies and threads.

    A policy calls :meth:`on_request` before the first attempt of each logical call, then
    :meth:`on_success` or :meth:`on_failure` after every attempt, and :meth:`allow_retry` before
    each retry (only when it would otherwise retry). A failure is an error the policy would retry
    (or ``Overloaded``).

    Two optional capabilities, looked up on the object (a budget without them works as before):

    * ``on_answer(error)``: the dependency answered, but not with a success (a permanent error,
      a 4xx, a fatal gRPC status; :attr:`seawall.lowlevel.Verdict.ANSWERED`). Without it, such
      an answer is reported to :meth:`on_success`.
    * ``first_attempt() -> (before, after)``: the cheapest callables a first attempt needs,
      called in place of :meth:`on_request` before it and of :meth:`on_success` after it
      succeeds; ``None`` for "nothing to do". They must do exactly what those methods do.

    The calls for one logical call are made from the caller's thread or task, so an
    implementation may keep per-call state in a :class:`contextvars.ContextVar` (as
    :class:`RetryQuota` does). Implementations must be thread-safe and should be cheap:
    :meth:`on_request` and :meth:`on_success` run on every successful call.
    """

    def on_request(self) -> None:
        """A logical call starts. May raise :class:`~seawall.Overloaded` to reject it locally."""

    def allow_retry(self, error: BaseException) -> bool:
        """Withdraw for one retry (or hedge) after *error*; ``False`` refuses it."""

    def on_success(self) -> None:
        """An attempt succeeded (or failed permanently: the dependency answered)."""

    def on_failure(self, error: BaseException) -> None:
        """An attempt failed with a transient error or an overload signal."""


@public("seawall")
class Throttled(Overloaded):
    """A call rejected locally by :class:`AdaptiveThrottle`, before touching the network.

    A subclass of :class:`~seawall.Overloaded`, so no policy retries it and it propagates up.

    Attributes:
        probability: the rejection probability in force when the call was rejected.
    """

    def __init__(self, probability: float) -> None:
        super().__init__(
            f"throttled locally: the dependency rejects most requests, so this client drops "
            f"{probability:.0%} of new calls without sending them (adaptive throttling)"
        )
        self.probability = probability


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


# -- TokenBucket -------------------------------------------------------------------------------


@public("seawall")
class TokenBucket:
    """gRPC retry throttling: retries stop while more than about half the attempts fail.

    The bucket starts full with ``max_tokens``. Each failed attempt takes one token, each
    successful attempt gives back ``token_ratio``; retries (and hedges) are refused while the
    bucket holds ``max_tokens / 2`` tokens or fewer. Tokens are kept in thousandths, as gRPC
    does, so the arithmetic is exact; digits beyond the third decimal are cut off, as gRPC
    does (``token_ratio=0.5466`` gives back 0.546).

    Args:
        max_tokens: the bucket's size, e.g. ``10``.
        token_ratio: tokens given back per success, e.g. ``0.1``: with ``max_tokens=10``,
            retrying stops after about five net failures and resumes after ten successes per
            failure beyond that.

    Raises:
        ValueError: ``max_tokens`` or ``token_ratio`` not > 0 (``token_ratio`` at least 0.001).
    """

    # gRPC proposal A6 (client-side retries), "Throttling retry attempts and hedged RPCs".

    __slots__ = ("_lock", "_max", "_milli", "_ratio", "max_tokens", "token_ratio")

    def __init__(self, max_tokens: float = 10.0, token_ratio: float = 0.1) -> None:
        self.max_tokens = _positive("max_tokens", max_tokens)
        self.token_ratio = _positive("token_ratio", token_ratio)
        self._max = milli_tokens(self.max_tokens)
        self._ratio = milli_tokens(self.token_ratio)
        if self._ratio < 1:
            raise ValueError(f"token_ratio must be >= 0.001, got {token_ratio!r}")
        if self._max < 1:
            raise ValueError(f"max_tokens must be >= 0.001, got {max_tokens!r}")
        self._milli = self._max
        self._lock = threading.Lock()

    @property
    def tokens(self) -> float:
        """Tokens in the bucket now."""
        return self._milli / 1000

    def on_request(self) -> None:
        """Nothing to do: only outcomes move tokens."""

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """Whether a retry may go out: the bucket holds more than half its tokens."""
        # A read of one int: no lock needed, and no token is taken (gRPC A6).
        return self._milli * 2 > self._max

    def on_success(self) -> None:
        """Give back ``token_ratio`` tokens."""
        if self._milli >= self._max:
            return  # full, as it is while the dependency is healthy: no lock needed
        with self._lock:
            self._milli = min(self._max, self._milli + self._ratio)

    def on_answer(self, error: BaseException) -> None:
        """An answer that is not a success (a fatal status) moves no token, as in gRPC: only
        successes refill the bucket, so a run of fatal answers cannot reopen retries."""

    def on_failure(self, error: BaseException) -> None:
        """Take one token."""
        with self._lock:
            self._milli = max(0, self._milli - 1000)

    def first_attempt(self) -> FirstAttempt:
        """Nothing before the first attempt; a refill after its success."""
        return None, self.on_success

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.max_tokens, self.token_ratio))

    def __repr__(self) -> str:
        return (
            f"TokenBucket(max_tokens={self.max_tokens!r}, token_ratio={self.token_ratio!r}, "
            f"tokens={self.tokens!r})"
        )


# -- RetryQuota (AWS SDK "standard" retry mode) ------------------------------------------------


def _looks_like_timeout(error: BaseException) -> bool:
    """Whether *error* is a timeout: a ``TimeoutError``, or a class named like one.

    Client libraries have their own timeout classes (``httpx.ReadTimeout``,
    ``requests.Timeout``) that do not derive from ``TimeoutError``; matching the class names in
    the MRO recognises them without importing those libraries.
    """
    if isinstance(error, TimeoutError):
        return True
    return any("Timeout" in cls.__name__ for cls in type(error).__mro__)


@public("seawall")
def _looks_like_throttling(error: BaseException) -> bool:
    """Whether *error* says "slow down": an HTTP 429, or a class named like throttling
    (``ThrottlingException``, ``TooManyRequestsException``, ...)."""
    if getattr(error, "status", None) == 429 or getattr(error, "status_code", None) == 429:
        return True
    return any(
        "Throttl" in cls.__name__ or "TooManyRequests" in cls.__name__
        for cls in type(error).__mro__
    )


def _aws_standard_cost(error: BaseException) -> int:
    """botocore's standard-mode retry cost: 5 after throttling, 14 otherwise."""
    return 5 if _looks_like_throttling(error) else 14


@public("seawall")
class RetryQuota:
    """A retry quota in the style of the AWS SDKs: each retry costs tokens; successes refund.

    The quota starts full. A retry costs ``retry_cost`` tokens, or ``timeout_cost`` after a
    timeout, and is refused when the quota holds fewer. When the call then succeeds, the cost
    of its latest retry is refunded; a call that succeeds at its first attempt adds
    ``success_reward``. Tokens spent by calls that end in failure come back only through later
    successes, so a long outage stops retries after ``capacity / retry_cost`` of them.

    Use :meth:`aws_standard` for the SDKs' defaults.

    Args:
        capacity: tokens in a full quota.
        retry_cost: tokens one retry costs.
        timeout_cost: tokens a retry after a timeout costs (timeouts hold resources longer).
        success_reward: tokens a first-attempt success adds (up to ``capacity``).
        is_timeout: a predicate telling timeouts; by default ``TimeoutError`` and any exception
            class whose name contains ``Timeout`` (such as ``httpx.ReadTimeout``).
        cost: a function ``(error) -> int`` giving what a retry after *error* costs, replacing
            ``retry_cost`` and ``timeout_cost`` (:meth:`aws_standard` charges less after
            throttling this way).

    Raises:
        ValueError: ``capacity`` not > 0, or a cost or reward < 0.
    """

    __slots__ = (
        "_available",
        "_cost",
        "_held",
        "_is_timeout",
        "_lock",
        "capacity",
        "retry_cost",
        "success_reward",
        "timeout_cost",
    )

    def __init__(
        self,
        capacity: int = 500,
        retry_cost: int = 5,
        timeout_cost: int = 10,
        success_reward: int = 1,
        is_timeout: Callable[[BaseException], bool] | None = None,
        cost: Callable[[BaseException], int] | None = None,
    ) -> None:
        self.capacity = _count("capacity", capacity, minimum=1)
        self.retry_cost = _count("retry_cost", retry_cost, minimum=0)
        self.timeout_cost = _count("timeout_cost", timeout_cost, minimum=0)
        self.success_reward = _count("success_reward", success_reward, minimum=0)
        if is_timeout is not None and not callable(is_timeout):
            raise TypeError(f"is_timeout must be callable or None, got {is_timeout!r}")
        self._is_timeout = is_timeout or _looks_like_timeout
        if cost is not None and not callable(cost):
            raise TypeError(f"cost must be callable or None, got {cost!r}")
        self._cost = cost
        self._available = self.capacity
        self._lock = threading.Lock()
        # The cost withdrawn by the latest retry of the call running in this thread or task, so
        # that its success refunds exactly that amount (None: no retry cost held). One variable
        # per quota: a call on another quota nested in this call's retry has its own, and
        # cannot overwrite (or take) this one. Each thread and asyncio task sees its own value.
        self._held: contextvars.ContextVar[int | None] = contextvars.ContextVar(
            "seawall_retry_quota_cost", default=None
        )

    @classmethod
    def aws_standard(cls) -> RetryQuota:
        """The AWS SDKs' "standard" retry mode quota as botocore ships it today: 500 tokens, a
        retry costs 14, or 5 after throttling; no separate timeout cost.

        A first-attempt success adds 1 token; a success after retries refunds the latest
        retry's cost; an answer that is not a success (a 404) refunds nothing.
        """
        # botocore retries/standard.py, RetryQuotaChecker: _RETRY_COST = 14,
        # _THROTTLING_RETRY_COST = 5, _NO_RETRY_INCREMENT = 1; quota.py INITIAL_CAPACITY = 500.
        return cls(
            capacity=500, retry_cost=14, timeout_cost=14, success_reward=1, cost=_aws_standard_cost
        )

    @classmethod
    def aws_standard_legacy(cls) -> RetryQuota:
        """The earlier "standard" mode costs (the AWS SDKs before 2026): 500 tokens, a retry
        costs 5, or 10 after a timeout; a first-attempt success adds 1 token."""
        # botocore retries/standard.py of that time: RETRY_COST 5, TIMEOUT_RETRY_COST 10.
        return cls(capacity=500, retry_cost=5, timeout_cost=10, success_reward=1)

    @property
    def available(self) -> int:
        """Tokens in the quota now."""
        return self._available

    def on_request(self) -> None:
        """A call starts: forget a cost left over by a call that ended without an outcome."""
        if self._held.get() is not None:
            self._held.set(None)

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """Take the cost of one retry after *error*; ``False`` when the quota cannot pay it."""
        if self._cost is not None and error is not None:
            cost = _count("cost(error)", self._cost(error), minimum=0)
        else:
            timeout = error is not None and self._is_timeout(error)
            cost = self.timeout_cost if timeout else self.retry_cost
        with self._lock:
            if self._available < cost:
                return False
            self._available -= cost
        self._held.set(cost)
        return True

    def on_success(self) -> None:
        """Refund the latest retry's cost, or add ``success_reward`` after a first attempt."""
        amount = self._held.get()
        if amount is not None:
            self._held.set(None)
        else:
            amount = self.success_reward
        if amount and self._available < self.capacity:  # full while healthy: no lock
            with self._lock:
                self._available = min(self.capacity, self._available + amount)

    def on_answer(self, error: BaseException) -> None:
        """An answer that is not a success (a 404): no refund and no reward, as in the AWS SDKs,
        which refund only after a successful response; the cost held stays spent."""
        if self._held.get() is not None:
            self._held.set(None)

    def on_failure(self, error: BaseException) -> None:
        """The retry failed: its cost stays spent."""
        if self._held.get() is not None:
            self._held.set(None)

    def first_attempt(self) -> FirstAttempt:
        return self.on_request, self.on_success

    def __reduce__(self) -> tuple[Any, ...]:
        custom = None if self._is_timeout is _looks_like_timeout else self._is_timeout
        return (
            type(self),
            (
                self.capacity,
                self.retry_cost,
                self.timeout_cost,
                self.success_reward,
                custom,
                self._cost,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"RetryQuota(capacity={self.capacity!r}, retry_cost={self.retry_cost!r}, "
            f"timeout_cost={self.timeout_cost!r}, success_reward={self.success_reward!r}, "
            f"available={self._available!r})"
        )


def _count(name: str, value: object, *, minimum: int) -> int:
    return _validate.count(name, value, minimum=minimum)


# -- AdaptiveThrottle --------------------------------------------------------------------------


@public("seawall")
class AdaptiveThrottle:
    """Client-side adaptive throttling: reject requests locally when the dependency rejects most.

    Over the sliding ``window`` the throttle counts *requests* (every attempt the application
    makes, including those it rejects locally) and *accepts* (attempts the dependency answered).
    A new call is rejected locally, with :class:`Throttled`, with probability
    ``max(0, (requests - k * accepts) / (requests + 1))``; a retry is refused with the same
    probability. While the dependency is healthy the probability is 0 and nothing is rejected;
    once it accepts fewer than ``1/k`` of the requests, the client sheds the excess itself
    instead of sending requests that would be rejected anyway. While the window holds fewer
    than ``min_requests`` requests the probability is 0: a handful of samples (a client that
    just started, or one back after a silence longer than the window) says nothing yet.

    Counting takes no lock (atomic counters, as in :class:`RetryBudget`): a healthy call costs
    two counter bumps and, on a busy client, a clock read once in a while (see
    :meth:`on_request`).

    Args:
        k: how many requests per accept the client tolerates; ``2`` by default. Lower is more
            aggressive; it must be at least 1.
        window: seconds over which requests and accepts are counted (two minutes by default).
        clock: where time comes from (``None``: the system's monotonic clock).
        rng: a seedable :class:`random.Random` for the rejection draws.
        min_requests: no local rejection while the window holds fewer requests than this
            (``0``: the plain formula, which rejects half of a second request sent before the
            first was answered). Set it above the number of calls the client has in flight
            when it starts.

    Raises:
        ValueError: ``k`` < 1 (or NaN), ``window`` not > 0, ``min_requests`` < 0.
    """

    # Google SRE book, chapter 21 "Handling Overload", "Client-side throttling" (K = 2, 2 min).
    # The request floor plays the part of Envoy's admission control rps_threshold.

    __slots__ = (
        "_acc_marks",
        "_acc_peeks",
        "_accepts",
        "_busy_at",
        "_check_at",
        "_clock",
        "_index",
        "_lock",
        "_now",
        "_random",
        "_req_marks",
        "_req_peeks",
        "_requests",
        "_rng",
        "_slice",
        "_slice_end",
        "_slot",
        "_stride",
        "k",
        "min_requests",
        "window",
    )

    def __init__(
        self,
        k: float = 2.0,
        window: float = 120.0,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        min_requests: int = 20,
    ) -> None:
        k = _number("k", k)
        if not (math.isfinite(k) and 1 <= k <= _LARGEST):
            raise ValueError(f"k must be a finite number >= 1 and <= {_LARGEST:g}, got {k!r}")
        self.k = k
        self.window = _window(window)
        self.min_requests = _count("min_requests", min_requests, minimum=0)
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random or None, got {rng!r}")
        self._random = (rng if rng is not None else random.Random()).random
        self._rng = rng
        self._now = _clock_now(clock)
        self._clock = clock
        self._lock = threading.Lock()  # for decisions with arithmetic and for moving slices
        # Running counts; each slice remembers both counts when it began (see RetryBudget).
        self._requests = _atomic_counter()
        self._accepts = _atomic_counter()
        self._req_peeks = 0
        self._acc_peeks = 0
        self._req_marks = [0] * _SLICES
        self._acc_marks = [0] * _SLICES
        self._slice = self.window / _SLICES
        self._index = math.floor(self._now() / self._slice)
        self._slot = self._index % _SLICES
        self._slice_end = (self._index + 1) * self._slice
        # Requests (raw counter values) below _check_at are admitted without looking at the
        # clock or computing anything; from _busy_at on, each one calls _decide; in between
        # they read the clock. Both are set by _decide from the counts (see on_request).
        # _stride: the previous slice's requests / 1024.
        self._stride = 1
        self._check_at = 0
        self._busy_at = 0

    def on_request(self) -> None:
        """A new call: admit it, or raise :class:`Throttled` without sending it.

        Within a slice, requests grow by one each and accepts never fall, so once the window
        holds *h* requests fewer than ``k`` times its accepts (or fewer than ``min_requests``),
        the next *h* requests are admitted without arithmetic. Until a slice holds 2048
        requests each request also reads the clock: the decisions are exactly the formula's.
        Beyond that, the clock is read once every ``stride`` requests (1/1024 of the larger of
        the previous slice's requests and the current one's so far): the requests of up to one
        stride after a slice ends, and the accepts made meanwhile, are counted in the slice
        before and decided as if it had not ended, at most ~0.1% of a slice's requests.

        Raises:
            Throttled: the call is rejected locally.
        """
        number = next(self._requests)
        if number >= self._check_at and (number >= self._busy_at or self._now() >= self._slice_end):
            self._check(number)

    def _check(self, number: int) -> None:
        p = self._decide(number)
        if p:
            raise Throttled(p)

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """A retry counts as a request too: ``False`` when it is rejected locally."""
        number = next(self._requests)
        if number >= self._check_at and (number >= self._busy_at or self._now() >= self._slice_end):
            return not self._decide(number)
        return True

    def on_success(self) -> None:
        """The dependency answered: count an accept."""
        # Exact while the client is quiet: an accept after the slice ended belongs to the next.
        if self._stride == 1 and self._now() >= self._slice_end:
            self._tick()
        next(self._accepts)

    def on_answer(self, error: BaseException) -> None:
        """The dependency answered (a 404 is an answer): an accept, as for a success."""
        self.on_success()

    def on_failure(self, error: BaseException) -> None:
        """The dependency did not answer (or shed the request): no accept."""

    def first_attempt(self) -> FirstAttempt:
        return self.on_request, self.on_success

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.k, self.window, self._clock, self._rng, self.min_requests))

    @property
    def requests(self) -> int:
        """Requests counted in the current window, local rejections included."""
        with self._lock:
            self._refresh()
            return self._window_counts()[0]

    @property
    def accepts(self) -> int:
        """Accepts counted in the current window."""
        with self._lock:
            self._refresh()
            return self._window_counts()[1]

    def rejection_probability(self) -> float:
        """The probability that a new call is rejected locally now."""
        with self._lock:
            self._refresh()
            requests, accepts = self._window_counts()
            return self._probability(requests, accepts)

    def _probability(self, requests: int, accepts: int) -> float:
        if requests < self.min_requests:
            return 0.0
        return max(0.0, (requests - self.k * accepts) / (requests + 1))

    def _tick(self) -> None:
        with self._lock:
            self._refresh()

    def _decide(self, number: int) -> float:
        """Request *number* (a raw counter value) was just counted: decide it, and set how
        many of the next ones need no decision. Returns the rejection probability it drew
        against (0: admitted)."""
        with self._lock:
            self._refresh(pending=1)
            total, accepted = self._counts()
            oldest = (self._slot + 1) % _SLICES
            before = total - self._req_marks[oldest] - 1  # requests in the window before this
            accepts = accepted - self._acc_marks[oldest]
            p = self._probability(before, accepts)
            # How many of the next requests are admitted whatever happens within this slice:
            # the j-th next one sees at most `before + j` requests and at least these accepts,
            # so it is admitted if `before + j < min_requests` or `before + j <= k * accepts`.
            excess = before - self.k * accepts
            free = max(0, self.min_requests - 1 - before, math.floor(-excess))
            in_slice = total - self._req_marks[self._slot]
            stride = max(self._stride, in_slice >> 10)
            self._stride = stride
            if stride > 1:
                self._busy_at = 0
                self._check_at = number + 1 + min(stride - 1, free)
            else:
                self._check_at = 0
                self._busy_at = number + 1 + min(max(0, _BUSY - in_slice), free)
        return p if p and self._random() < p else 0.0

    # The methods below run under the lock.

    def _counts(self) -> tuple[int, int]:
        """Requests and accepts ever made. Reading a counter advances it: count the reads."""
        requests = next(self._requests) - self._req_peeks
        self._req_peeks += 1
        accepts = next(self._accepts) - self._acc_peeks
        self._acc_peeks += 1
        return requests, accepts

    def _window_counts(self) -> tuple[int, int]:
        requests, accepts = self._counts()
        oldest = (self._slot + 1) % _SLICES
        return requests - self._req_marks[oldest], accepts - self._acc_marks[oldest]

    def _refresh(self, pending: int = 0) -> None:
        """Move to the current slice; *pending* requests just counted belong to it."""
        now = self._now()
        if now < self._slice_end:
            return
        index = max(math.floor(now / self._slice), self._index + 1)
        requests, accepts = self._counts()
        requests -= pending
        # The previous slice's requests set the stride (none if slices went by empty).
        ended = requests - self._req_marks[self._slot] if index == self._index + 1 else 0
        for i in range(max(self._index + 1, index - _SLICES + 1), index + 1):
            self._req_marks[i % _SLICES] = requests
            self._acc_marks[i % _SLICES] = accepts
        self._slot = index % _SLICES
        self._slice_end = (index + 1) * self._slice
        self._index = index
        stride = ended >> 10
        self._stride = stride if stride > 1 else 1
        # Expired accepts may leave less room: the next request decides with arithmetic.
        self._check_at = 0
        self._busy_at = 0

    def __repr__(self) -> str:
        return (
            f"AdaptiveThrottle(k={self.k!r}, window={self.window!r}, "
            f"min_requests={self.min_requests!r})"
        )

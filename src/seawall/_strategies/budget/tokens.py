"""Token budgets: gRPC's retry throttling (:class:`TokenBucket`) and the AWS SDKs' retry
quota (:class:`RetryQuota`)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from seawall._core.known_errors import named_like_throttling, named_like_timeout
from seawall._core.public import public
from seawall._strategies.budget.common import _count, _positive, milli_tokens
from seawall._strategies.budget.protocol import FirstAttempt

__all__ = ["RetryQuota", "TokenBucket"]

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
    return isinstance(error, TimeoutError) or named_like_timeout(type(error))


def _looks_like_throttling(error: BaseException) -> bool:
    """Whether *error* says "slow down": an HTTP 429, or a class named like throttling
    (``ThrottlingException``, ``TooManyRequestsException``, ...)."""
    if getattr(error, "status", None) == 429 or getattr(error, "status_code", None) == 429:
        return True
    return named_like_throttling(type(error))


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

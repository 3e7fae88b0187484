"""The two retry limiters of Brooker's 2022 retry simulation, as budgets the real policy consults.

Marc Brooker, "Fixing retries with token buckets and circuit breakers" (2022,
brooker.co.za/blog/2022/02/28/retries.html) compares, beside no retries and N retries:

- *adaptive retries*, a retry token bucket: every success drops part of a token (0.1) into a
  bucket of limited size; a failed call is retried (up to N times) only while the bucket holds a
  whole token, and each retry takes one. First tries are always sent.
- a *circuit breaker that breaks retries only*: first tries are always sent; retries are sent
  only while the failure rate the client itself has seen recently is below a threshold (10%).

These are not seawall's :class:`~seawall.TokenBucket` (gRPC's retry throttling: failures drain
the bucket too, and retries stop below half of it) nor its :class:`~seawall.CircuitBreaker`
(which refuses first tries as well). Both are written here from the post's descriptions as
:class:`~seawall.lowlevel.Budget` objects, so the real :class:`~seawall.RetryPolicy` runs them.
"""

from __future__ import annotations

import collections

from seawall._core import validate as _validate

__all__ = ["RetryBreaker", "RetryTokenBucket"]


class RetryTokenBucket:
    """Brooker's adaptive retries: successes deposit *deposit* tokens (at most *capacity*);
    a retry needs and takes one whole token."""

    __slots__ = ("_capacity", "_deposit", "tokens")

    def __init__(self, *, capacity: float = 10.0, deposit: float = 0.1) -> None:
        self._capacity = _validate.number("capacity", capacity, minimum=1.0, finite=True)
        self._deposit = _validate.number("deposit", deposit, minimum=0.0, finite=True)
        self.tokens = self._capacity  # a fresh client starts with a full bucket

    def on_request(self) -> None:
        return None

    def on_success(self) -> None:
        self.tokens = min(self._capacity, self.tokens + self._deposit)

    def on_failure(self, error: BaseException) -> None:
        return None

    def allow_retry(self, error: BaseException) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class RetryBreaker:
    """Brooker's retry-only breaker: retry while the failure rate of the last *window* attempts
    this client saw is below *threshold*; first tries always go."""

    __slots__ = ("_failures", "_outcomes", "_threshold")

    def __init__(self, *, threshold: float = 0.1, window: int = 100) -> None:
        self._threshold = _validate.ratio("threshold", threshold)
        size = _validate.count("window", window, minimum=1)
        self._outcomes: collections.deque[bool] = collections.deque(maxlen=size)
        self._failures = 0

    def _record(self, failed: bool) -> None:
        outcomes = self._outcomes
        if len(outcomes) == outcomes.maxlen and outcomes[0]:
            self._failures -= 1
        outcomes.append(failed)
        self._failures += failed

    def on_request(self) -> None:
        return None

    def on_success(self) -> None:
        self._record(False)

    def on_failure(self, error: BaseException) -> None:
        self._record(True)

    @property
    def failure_rate(self) -> float:
        return self._failures / len(self._outcomes) if self._outcomes else 0.0

    def allow_retry(self, error: BaseException) -> bool:
        return self.failure_rate < self._threshold

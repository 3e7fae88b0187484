"""The two retry limiters of Brooker's 2022 retry simulation, as budgets the real policy consults.

Marc Brooker, "Fixing retries with token buckets and circuit breakers" (2022,
brooker.co.za/blog/2022/02/28/retries.html) compares, beside no retries and N retries:

- *adaptive retries*, a retry token bucket: calls drop part of a token (0.1) into a bucket of
  limited size; a failed call is retried only while the bucket holds more than one token, and
  each retry takes one. First tries are always sent.
- a *circuit breaker that breaks retries only*: first tries are always sent; retries are sent
  only while the failure rate the client itself has seen recently is below a threshold (10%).

The bucket is the one of the simulator behind the post's figures
(github.com/mbrooker/simulator_example, ``retry_sim/retry_strategy.py``,
``AdaptiveRetryStrategy`` as ``run_sims`` builds it): 5 tokens, full at the start, 0.1 token
added at each call's first try (not at each success), a retry only while more than one token is
left, and no limit on retries but the tokens. With it, the sweep's cells are the source
simulator's (``docs/simulator.md``).

These are not seawall's :class:`~seawall.TokenBucket` (gRPC's retry throttling: failures drain
the bucket too, and retries stop below half of it) nor its :class:`~seawall.CircuitBreaker`
(which refuses first tries as well), which run beside them as strategies of their own. Both are
written here from the post and its simulator as :class:`~seawall.lowlevel.Budget` objects, so
the real :class:`~seawall.RetryPolicy` runs them.
"""

from __future__ import annotations

import collections

from seawall._core import validate as _validate

__all__ = ["RetryBreaker", "RetryTokenBucket"]


class RetryTokenBucket:
    """Brooker's adaptive retries: each call's first try adds *deposit* tokens (at most
    *capacity*); a retry needs more than one token and takes one."""

    __slots__ = ("_capacity", "_deposit", "tokens")

    def __init__(self, *, capacity: float = 5.0, deposit: float = 0.1) -> None:
        self._capacity = _validate.number("capacity", capacity, minimum=1.0, finite=True)
        self._deposit = _validate.number("deposit", deposit, minimum=0.0, finite=True)
        self.tokens = self._capacity  # a fresh client starts with a full bucket

    def on_request(self) -> None:
        # The source fills the bucket as each call starts (AdaptiveRetryStrategy.start).
        self.tokens = min(self._capacity, self.tokens + self._deposit)

    def on_success(self) -> None:
        return None

    def on_failure(self, error: BaseException) -> None:
        return None

    def allow_retry(self, error: BaseException) -> bool:
        if self.tokens > 1.0:  # strictly more than one, as in the source (bucket > 1.0)
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

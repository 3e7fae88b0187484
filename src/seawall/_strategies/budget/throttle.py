"""AdaptiveThrottle: client-side adaptive throttling (Google SRE book)."""

from __future__ import annotations

import math
import random
import threading
from typing import Any

from seawall._core.clock import Clock
from seawall._core.public import public
from seawall._strategies.budget.common import (
    _BUSY,
    _LARGEST,
    _SLICES,
    _atomic_counter,
    _clock_now,
    _count,
    _number,
    _window,
)
from seawall._strategies.budget.protocol import FirstAttempt, Throttled

__all__ = ["AdaptiveThrottle"]


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

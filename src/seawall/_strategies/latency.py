"""Timeouts from data: streaming latency quantiles with bounded memory and relative error.

:class:`LatencyTracker` is a log-bucketed sketch in the manner of DDSketch (Masson, Rim and Lee,
"DDSketch: A Fast and Fully-Mergeable Quantile Sketch with Relative-Error Guarantees", VLDB
2019): a value ``x`` lands in bucket ``ceil(log(x) / log(gamma))`` with
``gamma = (1 + alpha) / (1 - alpha)``, so every quantile it answers is within a relative error
``alpha`` of the true one, with a number of buckets that grows only with the logarithm of the
value range, never with the number of samples.

To follow the live distribution it forgets old samples by exponential *forward decay* (Cormode,
Shkapenyuk, Srivastava and Xu, "Forward Decay: A Practical Time Decay Model for Streaming
Systems", ICDE 2009): a sample recorded at time ``t`` weighs ``exp(lambda * (t - landmark))``.
Quantiles are ratios of weights, so the weights never need to shrink as time passes; they are
rescaled now and then only to stay within floating-point range.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.public import public

__all__ = ["LatencyTracker"]

_INF = math.inf
_log = math.log
_ceil = math.ceil

# Rescale the weights when their exponent passes this (e**60 ~ 1e26: far from overflow, and
# adding a weight of 1 to a sum of 1e26 still moves it in double precision for our purposes).
_RESCALE_EXPONENT = 60.0
# After rescaling, buckets that weigh less than this share of the total are dropped: they are
# samples the decay has already forgotten.
_FORGOTTEN = 1e-12
# The shortest half-life accepted (seconds).
_MIN_HALF_LIFE = 1e-3


@public("seawall")
class LatencyTracker:
    """Record latencies; answer quantiles (p50, p95, p99, p99.9) from a bounded-memory sketch.

    Thread-safe. ``record`` costs one logarithm and one dict update; ``quantile`` walks the
    buckets (a few hundred for latencies from 1 ms to 10 s at 1% accuracy).

    Example:
        >>> tracker = LatencyTracker(half_life=None)
        >>> for ms in range(1, 1001):
        ...     tracker.record(ms / 1000)
        >>> round(tracker.p99(), 2)
        0.99

    Args:
        relative_accuracy: the bound ``alpha`` on the relative error of every quantile,
            ``0 < alpha < 1`` (1% by default, as in DDSketch's evaluation).
        half_life: seconds after which a sample counts half as much as a new one, so that
            quantiles follow the live distribution; ``None`` never forgets.
        max_buckets: memory bound. When exceeded, the lowest buckets are merged: the low
            quantiles lose accuracy first, the tail that timeouts are made of never does.
        min_latency: values below this (seconds) are counted as zero-latency samples.
        clock: where time comes from, for the decay (the system clock by default).
    """

    __slots__ = (
        "_buckets",
        "_clock",
        "_count",
        "_decay",
        "_keys",
        "_landmark",
        "_lock",
        "_log_gamma",
        "_max_buckets",
        "_min_latency",
        "_total",
        "_zero",
        "half_life",
        "relative_accuracy",
    )

    def __init__(
        self,
        relative_accuracy: float = 0.01,
        *,
        half_life: float | None = 60.0,
        max_buckets: int = 2048,
        min_latency: float = 1e-9,
        clock: Clock | None = None,
    ) -> None:
        alpha = _validate.number("relative_accuracy", relative_accuracy)
        # Not below 1e-6: a subnormal alpha makes log(gamma) zero, and keys are divided by it.
        if not 1e-6 <= alpha < 1.0:
            shown = _validate.shown(relative_accuracy)
            raise ValueError(f"relative_accuracy must be >= 1e-06 and < 1, got {shown}")
        hl = _validate.optional_seconds("half_life", half_life)
        if hl is not None and hl < _MIN_HALF_LIFE:
            # Shorter, and two samples a clock tick apart differ in weight by more than a float
            # can hold: the sketch would remember only the latest sample.
            shown = _validate.shown(half_life)
            raise ValueError(f"half_life must be >= {_MIN_HALF_LIFE:g} s or None, got {shown}")
        decay = math.log(2.0) / hl if hl is not None and math.isfinite(hl) else 0.0
        _validate.count("max_buckets", max_buckets, minimum=2)
        lo = _validate.seconds("min_latency", min_latency, zero=False, finite=True)
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self.relative_accuracy = alpha
        self.half_life = half_life
        self._log_gamma = math.log((1.0 + alpha) / (1.0 - alpha))
        self._decay = decay
        self._max_buckets = max_buckets
        self._min_latency = lo
        self._clock = clock if clock is not None else SYSTEM_CLOCK
        self._lock = threading.Lock()
        self._buckets: dict[int, float] = {}
        self._keys: list[int] | None = []  # sorted bucket keys; None when stale
        self._zero = 0.0  # weight of samples below min_latency
        self._total = 0.0
        self._count = 0
        self._landmark = self._clock.now()

    # -- recording ------------------------------------------------------------------------

    def record(self, seconds: float) -> None:
        """Record one latency in seconds (a finite number >= 0)."""
        if type(seconds) is not float:  # the common case skips the slower checks
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise TypeError(f"seconds must be a number, got {_validate.shown(seconds)}")
            try:
                seconds = float(seconds)
            except OverflowError:  # an int beyond any float (10**400)
                shown = _validate.shown(seconds)
                raise ValueError(f"seconds must be finite and >= 0, got {shown}") from None
        if not 0.0 <= seconds < _INF:  # also rejects NaN
            raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
        key = _ceil(_log(seconds) / self._log_gamma) if seconds >= self._min_latency else None
        with self._lock:
            if self._decay:
                now = self._clock.now()
                exponent = self._decay * (now - self._landmark)
                if exponent > _RESCALE_EXPONENT:
                    # Rescaled to this very instant: the new weight is exactly 1, whatever time
                    # passed since (a second clock reading could overflow exp()).
                    self._rescale(now)
                    exponent = 0.0
                weight = math.exp(exponent)
            else:
                weight = 1.0
            self._count += 1
            self._total += weight
            if key is None:
                self._zero += weight
                return
            buckets = self._buckets
            old = buckets.get(key)
            if old is not None:
                buckets[key] = old + weight
                return
            buckets[key] = weight
            self._keys = None
            if len(buckets) > self._max_buckets:
                self._collapse()

    @contextlib.contextmanager
    def time(self) -> Iterator[None]:
        """Record how long the block takes, on the tracker's clock (also when it raises)."""
        start = self._clock.now()
        try:
            yield
        finally:
            self.record(max(0.0, self._clock.now() - start))

    def _sorted_keys(self) -> list[int]:
        keys = self._keys
        if keys is None:
            keys = self._keys = sorted(self._buckets)
        return keys

    def _collapse(self) -> None:
        # DDSketch's "collapsing lowest buckets": fold the lowest keys into the lowest kept one.
        keys = self._sorted_keys()
        excess = len(keys) - self._max_buckets
        target = keys[excess]
        buckets = self._buckets
        for k in keys[:excess]:
            buckets[target] += buckets.pop(k)
        self._keys = keys[excess:]

    def _rescale(self, now: float) -> None:
        # Move the landmark to now: every weight shrinks by the same factor, quantiles keep.
        factor = math.exp(-self._decay * (now - self._landmark))
        self._landmark = now
        floor = self._total * factor * _FORGOTTEN
        kept = {k: w * factor for k, w in self._buckets.items() if w * factor > floor}
        if len(kept) != len(self._buckets):
            self._keys = None
        self._buckets = kept
        self._zero = self._zero * factor if self._zero * factor > floor else 0.0
        self._total = sum(kept.values()) + self._zero

    def reset(self) -> None:
        """Forget every sample."""
        with self._lock:
            self._buckets = {}
            self._keys = []
            self._zero = self._total = 0.0
            self._count = 0
            self._landmark = self._clock.now()

    # -- queries --------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """How many samples were recorded (since creation or :meth:`reset`), decay aside."""
        return self._count

    @property
    def bucket_count(self) -> int:
        """How many buckets the sketch holds now (at most ``max_buckets``): its memory."""
        return len(self._buckets) + (1 if self._zero else 0)

    def quantile(self, q: float) -> float | None:
        """The latency below which a fraction *q* of the (decay-weighted) samples fall.

        Within ``relative_accuracy`` of the exact quantile of the samples. ``None`` when nothing
        was recorded.

        Args:
            q: between 0 and 1 (0.99 for p99).
        """
        qv = _validate.ratio("q", q)
        with self._lock:
            if self._count == 0:
                return None
            # The rank of the lower of the exact quantile's neighbours, as in DDSketch: with
            # unit weights the answer is the bucket holding sorted(samples)[floor(q * (n - 1))].
            total = self._total
            unit = total / self._count if not self._decay else 0.0
            rank = qv * (total - unit)
            seen = self._zero
            if seen > rank:
                return 0.0
            buckets = self._buckets
            keys = self._sorted_keys()
            # One walk up the buckets (a few hundred at most): walking down from the top for tail
            # quantiles was measured no faster on heavy tails, where most buckets lie above p99.
            key = keys[-1] if keys else None
            for k in keys:
                seen += buckets[k]
                if seen > rank:
                    key = k
                    break
        if key is None:
            return 0.0
        # The bucket's value with the least relative error to anything in it.
        gamma_k = math.exp(key * self._log_gamma)
        return 2.0 * gamma_k / (1.0 + math.exp(self._log_gamma))

    def p50(self) -> float | None:
        """The median (``quantile(0.5)``)."""
        return self.quantile(0.5)

    def p95(self) -> float | None:
        """``quantile(0.95)``."""
        return self.quantile(0.95)

    def p99(self) -> float | None:
        """``quantile(0.99)``."""
        return self.quantile(0.99)

    def p999(self) -> float | None:
        """``quantile(0.999)``."""
        return self.quantile(0.999)

    def suggest_timeout(
        self,
        q: float = 0.999,
        *,
        margin: float = 0.2,
        minimum: float = 0.0,
        maximum: float = math.inf,
        min_samples: int = 100,
        default: float | None = None,
    ) -> float | None:
        """A timeout derived from measured latency: ``quantile(q) * (1 + margin)``, bounded.

        A timeout below p99 turns the slow percent of healthy answers into failures (and
        retries); ten times p99 waits for answers that are not coming. The default follows the
        AWS Builders' Library ("Timeouts, retries and backoff with jitter"): pick the rate of
        false timeouts you accept (0.1%) and use that percentile of the callee's latency.

        Args:
            q: the percentile as a fraction (0.999 = p99.9: about 1 in 1000 good answers lost).
            margin: headroom as a fraction of the quantile (0.2 = 20% above it).
            minimum: never suggest less (seconds).
            maximum: never suggest more (seconds).
            min_samples: with fewer samples recorded, return *default*: a tail estimate from a
                handful of samples is noise.
            default: what to return before there is enough data.

        Returns:
            Seconds, or *default* when fewer than *min_samples* samples were recorded.
        """
        m = _validate.seconds("margin", margin, finite=True)
        lo = _validate.number("minimum", minimum)
        hi = _validate.number("maximum", maximum)
        if not 0.0 <= lo <= hi:
            raise ValueError(
                f"minimum and maximum must satisfy 0 <= minimum <= maximum, got "
                f"minimum={minimum!r}, maximum={maximum!r}"
            )
        _validate.count("min_samples", min_samples, minimum=1)
        if self._count < min_samples:
            return default
        value = self.quantile(q)
        if value is None:  # pragma: no cover - count >= min_samples >= 1
            return default
        return min(hi, max(lo, value * (1.0 + m)))

    def __repr__(self) -> str:
        return (
            f"LatencyTracker(relative_accuracy={self.relative_accuracy!r}, "
            f"half_life={self.half_life!r}, count={self._count})"
        )

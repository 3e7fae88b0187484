"""Backoff: pure delay math. Knows nothing of clocks, errors or policies."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator
from typing import Literal

from seawall._core import validate as _validate
from seawall._core.public import public

__all__ = ["JITTERS", "Backoff", "Jitter"]

#: The least ``base`` with ``immediate_first``: a shorter wait is no wait (seconds).
_MIN_WAIT_AFTER_IMMEDIATE = 0.001

Jitter = Literal["none", "full", "equal", "decorrelated"]
JITTERS: tuple[Jitter, ...] = ("none", "full", "equal", "decorrelated")

# Raw delays worth keeping in a table: past a few dozen retries a policy has long reached its cap.
_TABLE = 64

# One process-wide generator for policies that are not given their own; never the `random` module's.
_DEFAULT_RNG = random.Random()


@public("seawall")
@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before retry number *n* (``n = 0`` is the first retry).

    The un-jittered delay is ``raw(n) = min(cap, base * multiplier**n + step * n)``. Jitter is then
    applied to that *capped* value, so clients that have all reached the cap keep spreading out
    instead of retrying in lockstep. With ``cumulative=True`` the exponential part is the sum
    ``base * (1 + multiplier + ... + multiplier**n)``: Envoy's curve (see :meth:`envoy`).

    Jitter kinds (Marc Brooker, "Exponential Backoff And Jitter", AWS Architecture Blog, 2015):

    - ``"none"``: ``raw(n)``.
    - ``"full"``: uniform in ``[0, raw(n)]``. The default: least total work under contention.
    - ``"equal"``: uniform in ``[raw(n)/2, raw(n)]``.
    - ``"decorrelated"``: ``min(cap, uniform(base, 3 * previous))``, from ``previous = base``.

    Args:
        base: the first delay, in seconds.
        multiplier: growth factor per retry (>= 1; 1 gives constant or linear backoff).
        cap: the largest un-jittered delay, in seconds.
        jitter: one of ``"none"``, ``"full"``, ``"equal"``, ``"decorrelated"``.
        step: seconds added per retry (linear backoff); 0 for pure exponential backoff.
        immediate_first: make the first retry immediate, then back off from ``base`` (the common
            rule "at most one immediate retry"); ``base`` must then be at least a millisecond,
            so that no second retry follows at once.
        cumulative: grow as the sum of the exponential delays so far, ``base * (1 + multiplier
            + ... + multiplier**n)``; with ``multiplier=2`` that is ``(2**(n+1) - 1) * base``.

    Raises:
        TypeError: a parameter is not a number (or *jitter* not a string).
        ValueError: a parameter is out of range; the message names it.
    """

    base: float = 0.1
    multiplier: float = 2.0
    cap: float = 20.0
    jitter: Jitter = "full"
    step: float = 0.0
    immediate_first: bool = False
    cumulative: bool = False
    # raw(n) for n = 0, 1, 2, ..., filled on demand up to _TABLE entries: a retry loop then
    # looks its delay up instead of taking logarithms on every failure.
    _raws: tuple[float, ...] = dataclasses.field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        # Durations: finite, and at most MAX_SECONDS, so that no wait overflows a sleep.
        set_(self, "base", _validate.seconds("base", self.base, finite=True))
        set_(self, "cap", _validate.seconds("cap", self.cap, finite=True))
        set_(self, "step", _validate.seconds("step", self.step, finite=True))
        set_(
            self,
            "multiplier",
            _validate.number("multiplier", self.multiplier, minimum=1.0, finite=True),
        )
        if self.cap < self.base:
            raise ValueError(f"cap must be >= base ({self.base!r}), got {self.cap!r}")
        if not isinstance(self.jitter, str):
            raise TypeError(f"jitter must be a string, got {self.jitter!r}")
        if self.jitter not in JITTERS:
            raise ValueError(f"jitter must be one of {', '.join(JITTERS)}; got {self.jitter!r}")
        if not isinstance(self.immediate_first, bool):
            raise TypeError(f"immediate_first must be a bool, got {self.immediate_first!r}")
        if self.immediate_first and self.base < _MIN_WAIT_AFTER_IMMEDIATE:
            # One immediate retry catches a blip; a second in a row is a hammer. With base 0
            # (or a base of a billionth of a second: no wait either) the retry after the
            # immediate one would not wait, nor would the next.
            raise ValueError(
                "immediate_first=True allows one immediate retry, then a backoff that waits: "
                f"base must be >= {_MIN_WAIT_AFTER_IMMEDIATE:g} s with it, got {self.base!r}"
            )
        if not isinstance(self.cumulative, bool):
            raise TypeError(f"cumulative must be a bool, got {self.cumulative!r}")

    @classmethod
    def constant(cls, delay: float, jitter: Jitter = "none") -> Backoff:
        """The same delay before every retry (with optional jitter)."""
        d = _validate.seconds("delay", delay, finite=True)
        return cls(base=d, multiplier=1.0, cap=d, jitter=jitter)

    @classmethod
    def linear(
        cls, base: float = 0.1, step: float = 0.1, cap: float = 20.0, jitter: Jitter = "full"
    ) -> Backoff:
        """Delays ``base, base + step, base + 2*step, ...`` up to *cap*."""
        return cls(base=base, multiplier=1.0, cap=cap, jitter=jitter, step=step)

    @classmethod
    def envoy(cls, base_interval: float = 0.025, max_interval: float | None = None) -> Backoff:
        """Envoy's route retry back-off, fully jittered.

        Retry N (from 1) waits ``U(0, (2**N - 1) * base_interval)``, the range capped at
        *max_interval* (10 x *base_interval* by default): 0-25 ms, 0-75 ms, 0-175 ms, then
        0-250 ms with the defaults.
        """
        # Envoy router filter docs (x-envoy-max-retries, "fully jittered exponential back-off"):
        # retry N waits in [0, (2^N - 1) * B), default B = 25 ms, capped at max_interval = 10 B.
        base = _validate.seconds("base_interval", base_interval, finite=True)
        if base == 0.0:
            raise ValueError(f"base_interval must be > 0, got {base_interval!r}")
        cap = (
            min(10.0 * base, _validate.MAX_SECONDS)
            if max_interval is None
            else _validate.seconds("max_interval", max_interval, finite=True)
        )
        if cap < base:
            raise ValueError(f"max_interval must be >= base_interval ({base!r}), got {cap!r}")
        return cls(base=base, multiplier=2.0, cap=cap, jitter="full", cumulative=True)

    def replace(self, **changes: object) -> Backoff:
        """A copy with some fields changed (validated like the constructor)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def raw(self, n: int) -> float:
        """The capped, un-jittered delay before retry *n*; safe for any ``n >= 0``."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n!r}")
        if self.immediate_first:
            if n == 0:
                return 0.0
            n -= 1
        return self._raw(n)

    def _raw(self, n: int) -> float:
        base, multiplier, cap = self.base, self.multiplier, self.cap
        if base == 0.0 and self.step == 0.0:
            return 0.0
        growth = base
        if multiplier > 1.0 and base > 0.0:
            # Compare exponents instead of computing multiplier**n, which overflows for large n.
            exponent = n * math.log(multiplier)
            if exponent >= math.log(cap) - math.log(base):
                return cap  # the sum, when cumulative, is larger still
            # multiplier**n alone can overflow for a tiny base; work in logs there.
            growth = base * multiplier**n if exponent < 700 else math.exp(math.log(base) + exponent)
            if self.cumulative:
                # base * (1 + m + ... + m**n) = (base * m**(n+1) - base) / (m - 1); base * m**n is
                # below cap here, so the product is finite or inf, and inf compares as the cap.
                growth = (growth * multiplier - base) / (multiplier - 1.0)
        elif self.cumulative:
            growth = base * (n + 1)  # a multiplier of 1: n + 1 equal terms
        value = growth + self.step * n
        return cap if value >= cap else value

    def compute(
        self, n: int, rng: random.Random | None = None, previous: float | None = None
    ) -> float:
        """The jittered delay before retry *n*.

        Args:
            n: the retry index, from 0.
            rng: the source of randomness (a seedable :class:`random.Random`).
            previous: the delay before the previous retry; only ``"decorrelated"`` uses it.
        """
        raws = self._raws
        raw = raws[n] if 0 <= n < len(raws) else self._lookup(n)
        jitter = self.jitter
        # U(a, b) is drawn as a + (b - a) * random(), the very expression of
        # random.Random.uniform, so the delays are the same for a given seed, one call cheaper.
        if jitter == "full":
            return raw * (rng or _DEFAULT_RNG).random()
        if jitter == "none" or raw == 0.0:
            return raw
        if jitter == "equal":
            half = raw / 2.0
            return half + (raw - half) * (rng or _DEFAULT_RNG).random()
        # Decorrelated jitter: min(cap, U(base, 3 * previous)), previous starting at base.
        base = self.base
        prev = base if previous is None or previous < base else previous
        delay = base + (3.0 * prev - base) * (rng or _DEFAULT_RNG).random()
        return delay if delay < self.cap else self.cap

    def _lookup(self, n: int) -> float:
        """``raw(n)``, growing the table of raw delays when *n* is just past its end."""
        raws = self._raws
        if n < 0 or n >= _TABLE:
            return self.raw(n)  # raises for n < 0
        # Grow by doubling, and replace the tuple in one assignment: threads racing here build
        # equal tuples, and a reader never sees a half-built one.
        size = min(_TABLE, max(n + 1, 2 * len(raws), 8))
        raws += tuple(self.raw(i) for i in range(len(raws), size))
        object.__setattr__(self, "_raws", raws)
        return raws[n]

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The endless sequence of jittered delays for retries 0, 1, 2, ..."""
        previous: float | None = None
        n = 0
        while True:
            previous = self.compute(n, rng, previous)
            yield previous
            n += 1


DEFAULT_BACKOFF = Backoff()

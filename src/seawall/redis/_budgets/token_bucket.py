"""SharedTokenBucket: :class:`~seawall.TokenBucket` for a whole fleet."""

from __future__ import annotations

import threading
from typing import Any

from seawall._core.public import public
from seawall._strategies.budget import (
    FirstAttempt,
    TokenBucket,
    milli_tokens,
)
from seawall.redis import _lua
from seawall.redis._budgets.common import (
    _check_fleet,
    _Counter,
    _int,
    _Late,
    _no_pickle,
    _once_ids,
)
from seawall.redis._fleet import Fleet, Op

__all__ = ["SharedTokenBucket"]

# -- TokenBucket -------------------------------------------------------------------------------


@public("seawall.redis")
class SharedTokenBucket:
    """:class:`~seawall.TokenBucket` (gRPC retry throttling) for a whole fleet.

    Successes and failures are counted locally and applied to the fleet's bucket every sync; a
    retry decision reads the fleet's tokens as of the latest sync, corrected by this process's
    own outcomes since then: no round trip at all. While the bucket is full (a healthy fleet) a
    success costs one attribute read.

    Args:
        fleet: the :class:`Fleet` that syncs it.
        name: the bucket's name; every process using the same name shares it.
        max_tokens: as :class:`~seawall.TokenBucket`, for the whole fleet.
        token_ratio: as :class:`~seawall.TokenBucket`, for the whole fleet.
    """

    def __init__(
        self, fleet: Fleet, name: str, max_tokens: float = 10.0, token_ratio: float = 0.1
    ) -> None:
        self._fleet = _check_fleet(fleet)
        local = TokenBucket(max_tokens, token_ratio)
        self.name = name
        self.max_tokens, self.token_ratio = local.max_tokens, local.token_ratio
        self._max = milli_tokens(self.max_tokens)
        self._ratio = milli_tokens(self.token_ratio)
        self._keys = [*fleet.keys("tokens", name, "bucket"), fleet.once_key("tokens", name)]
        self._script = fleet.script(_lua.TOKENS)
        self._lock = threading.Lock()
        self._successes = _Counter()
        self._bump = self._successes.bump
        self._failures = 0
        self._extra = 0  # successes an estimate took out of the counter, kept for the sync
        self._late = _Late()  # calls to send again: (failures, successes)
        self._once = _once_ids()
        self._milli = self._max
        self._full = True
        self._degraded = False
        self._fallback = local
        fleet.add(self)

    @property
    def tokens(self) -> float:
        """The fleet's tokens as of the latest sync, with this process's outcomes since."""
        if self._degraded:
            return self._fallback.tokens
        return self._estimate() / 1000

    def _estimate(self) -> int:
        with self._lock:
            pending = self._failures + self._late.total(0)
            successes = self._successes.take()
            self._extra += successes
            successes = self._extra + self._late.total(1)
        milli = max(0, self._milli - 1000 * pending)
        return min(self._max, milli + self._ratio * successes)

    def on_request(self) -> None:
        """Nothing to do: only outcomes move tokens."""

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """Whether a retry may go out: the fleet's bucket holds more than half its tokens."""
        if self._degraded:
            return self._fallback.allow_retry(error)
        return self._estimate() * 2 > self._max

    def on_success(self) -> None:
        """Give back ``token_ratio`` tokens (nothing to do while the fleet's bucket is full)."""
        if self._full:
            return
        if self._degraded:
            self._fallback.on_success()  # and the fleet's bucket hears it when Redis is back
        self._bump()

    def on_answer(self, error: BaseException) -> None:
        """An answer that is not a success moves no token, as in gRPC."""

    def on_failure(self, error: BaseException) -> None:
        """Take one token."""
        if self._degraded:
            self._fallback.on_failure(error)  # and the fleet's bucket hears it when Redis is back
        with self._lock:
            self._failures += 1
            self._full = False

    def first_attempt(self) -> FirstAttempt:
        """Nothing before the first attempt; a refill after its success."""
        return None, self.on_success

    def _collect(self) -> Op:
        with self._lock:
            failures = self._failures
            successes = self._successes.take() + self._extra
            self._extra = 0
            self._failures = 0
        once = self._once()
        args = (self._fleet.now_arg(), self._max, self._ratio, failures, successes, once)
        return Op(self._script, self._keys, args, (failures, successes))

    def _apply(self, op: Op, answer: Any) -> None:
        milli = min(self._max, max(0, _int(answer)))
        with self._lock:
            self._late.drop(op)
            self._milli = milli
            self._full = milli >= self._max and not self._failures and not self._degraded

    def _restore(self, op: Op) -> None:
        failures, successes = op.sent
        with self._lock:
            self._late.drop(op)
            self._failures += failures
            self._extra += successes

    def _wait(self, op: Op) -> Op:
        return self._late.wait(op, self._lock)

    def _set_degraded(self, degraded: bool) -> None:
        if degraded and not self._degraded:
            # Start the local bucket where the fleet's was last seen, with this process's
            # outcomes since (the outcomes of degraded periods reach the fleet's bucket too, so
            # a flapping Redis never refills it).
            fallback = TokenBucket(self.max_tokens, self.token_ratio)
            for _ in range(round((self._max - self._estimate()) / 1000)):
                fallback.on_failure(RuntimeError())
            self._fallback = fallback
            self._full = False  # successes must reach the fallback
        self._degraded = degraded

    __reduce__ = _no_pickle

    def __repr__(self) -> str:
        return (
            f"SharedTokenBucket({self.name!r}, max_tokens={self.max_tokens!r}, "
            f"token_ratio={self.token_ratio!r})"
        )

"""SharedAdaptiveThrottle: :class:`~seawall.AdaptiveThrottle` for a whole fleet."""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Any

from seawall._core.public import public
from seawall._strategies.budget import (
    AdaptiveThrottle,
    FirstAttempt,
    Throttled,
)
from seawall.redis import _lua
from seawall.redis._budgets.common import (
    _SEED,
    _SLICES,
    _check_fleet,
    _Counter,
    _int,
    _Late,
    _no_pickle,
    _once_ids,
)
from seawall.redis._fleet import Fleet, Op

__all__ = ["SharedAdaptiveThrottle"]

# -- AdaptiveThrottle --------------------------------------------------------------------------


@public("seawall.redis")
class SharedAdaptiveThrottle:
    """:class:`~seawall.AdaptiveThrottle` (client-side adaptive throttling) for a whole fleet.

    Requests and accepts are counted locally and added to the fleet's window every sync. The
    rejection probability is computed from the fleet's window at each sync (and again after
    each failure, with this process's counts since): while it is 0, a call costs one counter
    bump.

    Args:
        fleet: the :class:`Fleet` that syncs it.
        name: the throttle's name; every process using the same name shares it.
        k: as :class:`~seawall.AdaptiveThrottle`, for the fleet.
        window: as :class:`~seawall.AdaptiveThrottle`, for the fleet.
        rng: as :class:`~seawall.AdaptiveThrottle`, for the fleet.
        min_requests: as :class:`~seawall.AdaptiveThrottle`, for the fleet.
    """

    def __init__(
        self,
        fleet: Fleet,
        name: str,
        k: float = 2.0,
        window: float = 120.0,
        rng: random.Random | None = None,
        min_requests: int = 20,
    ) -> None:
        self._fleet = _check_fleet(fleet)
        local = AdaptiveThrottle(k, window, rng=rng, min_requests=min_requests)
        self.name = name
        self.k, self.window, self.min_requests = local.k, local.window, local.min_requests
        self._rng = rng
        self._random = (rng if rng is not None else random.Random()).random
        self._keys = [*fleet.keys("throttle", name, "window"), fleet.once_key("throttle", name)]
        self._script = fleet.script(_lua.THROTTLE)
        self._slice = self.window / _SLICES
        self._lock = threading.Lock()
        self._requests = _Counter()
        self._bump = self._requests.bump
        self._accepts = _Counter()
        self._accept = self._accepts.bump
        self._pending = (0, 0)  # counts taken for a sync, not yet in the view
        self._late = _Late()  # calls to send again: (requests, accepts)
        self._once = _once_ids()
        self._view = (0, 0)
        self._p = 0.0
        self._degraded = False
        self._fallback = local
        fleet.add(self)

    @property
    def requests(self) -> int:
        """The fleet's requests in the window as of the latest sync."""
        return self._view[0]

    @property
    def accepts(self) -> int:
        """The fleet's accepts in the window as of the latest sync."""
        return self._view[1]

    def rejection_probability(self) -> float:
        """The probability that a new call is rejected locally now."""
        if self._degraded:
            return self._fallback.rejection_probability()
        return self._p

    def _probability(self, requests: int, accepts: int) -> float:
        # Google SRE book, chapter 21: max(0, (requests - K * accepts) / (requests + 1)).
        if requests < self.min_requests:
            return 0.0
        return max(0.0, (requests - self.k * accepts) / (requests + 1))

    def on_request(self) -> None:
        """A new call: admit it, or raise :class:`~seawall.Throttled` without sending it.

        Raises:
            Throttled: the call is rejected locally.
        """
        self._bump()
        if self._p:
            self._check()

    def _check(self) -> None:
        if self._degraded:
            self._fallback.on_request()
            return
        p = self._p
        if p and self._random() < p:
            raise Throttled(p)

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """A retry counts as a request too: ``False`` when it is rejected locally."""
        self._bump()
        if self._degraded:
            return self._fallback.allow_retry(error)
        p = self._p
        return not (p and self._random() < p)

    def on_success(self) -> None:
        """The dependency answered: count an accept."""
        self._accept()
        if self._degraded:
            self._fallback.on_success()

    def on_answer(self, error: BaseException) -> None:
        """The dependency answered (a 404 is an answer): an accept, as for a success."""
        self.on_success()

    def on_failure(self, error: BaseException) -> None:
        """No accept; the probability is computed again with this process's latest counts."""
        if self._degraded:
            self._fallback.on_failure(error)
            return
        with self._lock:
            q, a = self._pending
            q += self._requests.take()
            a += self._accepts.take()
            self._pending = (q, a)
            self._p = self._probability(self._view[0] + q, self._view[1] + a)

    def first_attempt(self) -> FirstAttempt:
        return self.on_request, self.on_success

    def _collect(self) -> Op:
        with self._lock:
            q, a = self._pending
            q += self._requests.take()
            a += self._accepts.take()
            self._pending = (0, 0)
        args = (self._fleet.now_arg(), repr(self._slice), _SLICES, q, a, self._once())
        return Op(self._script, self._keys, args, (q, a))

    def _apply(self, op: Op, answer: Any) -> None:
        q, a = (_int(v) for v in answer)
        with self._lock:
            self._late.drop(op)
            self._view = (max(0, q), max(0, a))
            pq, pa = self._unsent()
            self._p = self._probability(self._view[0] + pq, self._view[1] + pa)
            if self._degraded:
                self._p = 1.0  # keeps on_request on the path that consults the fallback

    def _restore(self, op: Op) -> None:
        q, a = op.sent
        with self._lock:
            self._late.drop(op)
            pq, pa = self._pending
            self._pending = (pq + q, pa + a)

    def _unsent(self) -> tuple[int, int]:
        """Under the lock: the counts not in the view yet (taken for a sync, or sent again)."""
        pq, pa = self._pending
        return pq + self._late.total(0), pa + self._late.total(1)

    def _wait(self, op: Op) -> Op:
        return self._late.wait(op, self._lock)

    def _set_degraded(self, degraded: bool) -> None:
        with self._lock:
            if degraded and not self._degraded:
                fallback = AdaptiveThrottle(
                    self.k,
                    self.window,
                    clock=self._fleet._clock,
                    rng=self._rng,
                    min_requests=self.min_requests,
                )
                # Start from the fleet's window as last seen (with this process's counts since),
                # scaled down to at most _SEED requests: the same rejection probability, so a
                # flapping Redis never admits a fresh throttle's first requests each time.
                pq, pa = self._unsent()
                q = self._view[0] + pq + self._requests.pending()
                a = self._view[1] + pa + self._accepts.pending()
                n = min(q, _SEED)
                for _ in range(round(a * n / q) if q else 0):
                    fallback.on_success()
                for _ in range(n):
                    with contextlib.suppress(Throttled):
                        fallback.on_request()
                self._fallback = fallback
            self._degraded = degraded
            # A non-zero probability routes on_request to _check, which asks the fallback.
            if degraded:
                self._p = 1.0
            else:
                pq, pa = self._unsent()
                self._p = self._probability(self._view[0] + pq, self._view[1] + pa)

    __reduce__ = _no_pickle

    def __repr__(self) -> str:
        return (
            f"SharedAdaptiveThrottle({self.name!r}, k={self.k!r}, window={self.window!r}, "
            f"min_requests={self.min_requests!r})"
        )

"""SharedRetryQuota: :class:`~seawall.RetryQuota` for a whole fleet."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from seawall._core.public import public
from seawall._strategies.budget import (
    FirstAttempt,
    RetryQuota,
    _aws_standard_cost,
)
from seawall.redis import _lua
from seawall.redis._budgets.common import (
    _check_fleet,
    _Counter,
    _int,
    _Late,
    _lease,
    _no_pickle,
    _once_ids,
)
from seawall.redis._fleet import Fleet, Op, _in_event_loop

__all__ = ["SharedRetryQuota"]

# -- RetryQuota --------------------------------------------------------------------------------


@public("seawall.redis")
class SharedRetryQuota:
    """:class:`~seawall.RetryQuota` (the AWS SDKs' retry quota) for a whole fleet.

    Costs are paid from a lease of tokens held by a process that retries (renewed every sync
    while it does); rewards and refunds are counted locally and given to the fleet's quota
    every sync. An empty lease
    costs one round trip (none in an asyncio event loop: the retry is refused and the sync
    thread brings a lease within one interval).

    Args:
        fleet: the :class:`Fleet` that syncs it.
        name: the quota's name; every process using the same name shares it.
        capacity: as :class:`~seawall.RetryQuota`, for the whole fleet.
        retry_cost: as :class:`~seawall.RetryQuota`, for the whole fleet.
        timeout_cost: as :class:`~seawall.RetryQuota`, for the whole fleet.
        success_reward: as :class:`~seawall.RetryQuota`, for the whole fleet.
        is_timeout: as :class:`~seawall.RetryQuota`, for the whole fleet.
        cost: as :class:`~seawall.RetryQuota`, for the whole fleet (:meth:`aws_standard` for the
            AWS SDKs' costs).
        lease: tokens a process holds at once (default: two retries' cost).
    """

    def __init__(
        self,
        fleet: Fleet,
        name: str,
        capacity: int = 500,
        retry_cost: int = 5,
        timeout_cost: int = 10,
        success_reward: int = 1,
        is_timeout: Callable[[BaseException], bool] | None = None,
        cost: Callable[[BaseException], int] | None = None,
        *,
        lease: int | None = None,
    ) -> None:
        self._fleet = _check_fleet(fleet)
        local = RetryQuota(capacity, retry_cost, timeout_cost, success_reward, is_timeout, cost)
        self._cost = cost
        self.name = name
        self.capacity, self.retry_cost = local.capacity, local.retry_cost
        self.timeout_cost, self.success_reward = local.timeout_cost, local.success_reward
        self._is_timeout = local._is_timeout
        self._custom_timeout = is_timeout
        self.lease = (
            _lease(lease)
            if lease is not None
            else max(1, 2 * max(self.retry_cost, self.timeout_cost))
        )
        self._keys = [*fleet.keys("quota", name, "tokens"), fleet.once_key("quota", name)]
        self._script = fleet.script(_lua.QUOTA)
        self._lock = threading.Lock()
        self._rewards = _Counter()
        self._bump = self._rewards.bump
        self._credit = 0  # refunds, and what failed round trips carried
        self._late = _Late()  # calls to send again: (credit, lease)
        self._once = _once_ids()
        self._tokens = 0  # the lease
        self._available = self.capacity
        self._full = True
        self._demand = False  # a retry was asked for since the last sync
        self._in_loop = False  # one was asked for from an event loop, ever
        self._held: contextvars.ContextVar[int | None] = contextvars.ContextVar(
            "seawall_shared_quota_cost", default=None
        )
        self._degraded = False
        self._fallback = local
        self._seeded = local.available  # the local quota's tokens when it took over
        fleet.add(self)

    @property
    def available(self) -> int:
        """The fleet's tokens as of the latest sync, plus this process's lease."""
        if self._degraded:
            return self._fallback.available
        return self._available + self._tokens

    def on_request(self) -> None:
        """A call starts: forget a cost left over by a call that ended without an outcome."""
        if self._held.get() is not None:
            self._held.set(None)
        if self._degraded:
            self._fallback.on_request()

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """Pay one retry's cost from the lease; with too little, one round trip for more."""
        if self._degraded:
            return self._fallback.allow_retry(error)
        cost = self._cost_of(error)
        with self._lock:
            self._demand = True
            if self._tokens >= cost:
                self._tokens -= cost
                self._full = False
                self._held.set(cost)
                return True
            if _in_event_loop():
                # No round trip here: the sync thread brings a lease (and keeps one from now on).
                self._in_loop = True
                self._fleet.wake()
                return False
            # Give the lease back and ask for this cost plus a fresh lease, in one trip.
            lease = self._tokens
            credit = self._take() + lease
            self._tokens = 0
            op = self._op(credit, cost + self.lease, cost, lease)
        answer = self._fleet.call(op, member=self)
        if answer is None:
            # The fleet took the call back (this process's to send again) or sends it again.
            if self._degraded:
                return self._fallback.allow_retry(error)
            return False
        try:
            granted, available = (_int(v) for v in answer)
        except (TypeError, ValueError):
            return False
        with self._lock:
            self._available = available
            self._full = False
            if granted < cost:
                self._credit += max(0, granted)
                return False
            self._tokens += granted - cost
        self._held.set(cost)
        return True

    @classmethod
    def aws_standard(cls, fleet: Fleet, name: str) -> SharedRetryQuota:
        """:meth:`seawall.RetryQuota.aws_standard` for a whole fleet: 500 tokens, a retry costs
        14, or 5 after throttling; a first-attempt success adds 1 token."""
        # botocore retries/standard.py, as RetryQuota.aws_standard.
        return cls(
            fleet,
            name,
            capacity=500,
            retry_cost=14,
            timeout_cost=14,
            success_reward=1,
            cost=_aws_standard_cost,
        )

    def _cost_of(self, error: BaseException | None) -> int:
        if self._cost is not None and error is not None:
            cost = self._cost(error)
            if isinstance(cost, bool) or not isinstance(cost, int):
                raise TypeError(f"cost(error) must be an int, got {cost!r}")
            if cost < 0:
                raise ValueError(f"cost(error) must be >= 0, got {cost!r}")
            return cost
        timeout = error is not None and self._is_timeout(error)
        return self.timeout_cost if timeout else self.retry_cost

    def on_success(self) -> None:
        """Refund the latest retry's cost, or add ``success_reward`` after a first attempt."""
        if self._degraded:
            self._fallback.on_success()
            return
        amount = self._held.get()
        if amount is None:
            if not self._full:
                self._bump()
            return
        self._held.set(None)
        with self._lock:
            self._credit += amount

    def on_answer(self, error: BaseException) -> None:
        """An answer that is not a success: no refund and no reward, as in the AWS SDKs."""
        if self._degraded:
            self._fallback.on_answer(error)
        if self._held.get() is not None:
            self._held.set(None)

    def on_failure(self, error: BaseException) -> None:
        """The retry failed: its cost stays spent."""
        if self._degraded:
            self._fallback.on_failure(error)
        if self._held.get() is not None:
            self._held.set(None)

    def first_attempt(self) -> FirstAttempt:
        return self.on_request, self.on_success

    def _take(self) -> int:
        credit = self._credit + self._rewards.take() * self.success_reward
        self._credit = 0
        return credit

    def _op(self, credit: int, want: int, need: int, lease: int) -> Op:
        """One call of the script; it carries *credit*, of which *lease* tokens are the lease
        given back."""
        args = (self._fleet.now_arg(), self.capacity, credit, want, need, self._once())
        return Op(self._script, self._keys, args, (credit, lease))

    def _collect(self) -> Op:
        with self._lock:
            lease = self._tokens
            credit = self._take() + lease
            self._tokens = 0
            # A lease only for a process that retries (see SharedRetryBudget._collect).
            most = max(self.retry_cost, self.timeout_cost)
            want = self.lease if self._demand else most * self._in_loop
            self._demand = False
            return self._op(credit, want, 0, lease)

    def _apply(self, op: Op, answer: Any) -> None:
        granted, available = (_int(v) for v in answer)
        with self._lock:
            self._late.drop(op)
            self._available = max(0, min(self.capacity, available))
            self._tokens += max(0, granted)
            self._full = self._available + self._tokens >= self.capacity

    def _restore(self, op: Op) -> None:
        credit, tokens = op.sent
        with self._lock:
            self._late.drop(op)
            self._credit += credit - tokens
            self._tokens += tokens

    def _wait(self, op: Op) -> Op:
        return self._late.wait(op, self._lock, lease=(3, 4))

    def _set_degraded(self, degraded: bool) -> None:
        if degraded and not self._degraded:
            fallback = RetryQuota(
                self.capacity,
                self.retry_cost,
                self.timeout_cost,
                self.success_reward,
                self._custom_timeout,
                self._cost,
            )
            # Start the local quota where the fleet's was last seen (with this lease, and what
            # this process has not sent yet; of a call to send again only what it spent: the
            # tokens it gives back may be the fleet's already, its answer lost).
            with self._lock:
                late = min(0, self._late.total(0))
                level = self._available + self._tokens + self._credit + late
            spend = self.capacity - max(0, min(self.capacity, level))
            if spend and fallback.retry_cost:
                for _ in range(spend // fallback.retry_cost):
                    fallback.allow_retry(None)
                fallback.on_failure(RuntimeError())
            self._fallback = fallback
            self._seeded = fallback.available
        elif not degraded and self._degraded:
            # What the local quota spent (or earned) meanwhile is the fleet's to hear: a
            # flapping Redis never hands the same tokens out twice.
            with self._lock:
                self._credit += self._fallback.available - self._seeded
        self._degraded = degraded

    __reduce__ = _no_pickle

    def __repr__(self) -> str:
        return (
            f"SharedRetryQuota({self.name!r}, capacity={self.capacity!r}, "
            f"retry_cost={self.retry_cost!r}, timeout_cost={self.timeout_cost!r}, "
            f"success_reward={self.success_reward!r})"
        )

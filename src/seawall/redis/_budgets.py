"""Retry budgets shared by a fleet: the local budgets' semantics, with the counts on Redis.

The hot path only bumps local counters (``next()`` on an ``itertools.count``: one C call under
the GIL); the fleet's sync thread sends the counts in batches and brings back the fleet's view.
Retry tokens are taken in leases, so most retry decisions need no round trip, and none needs
more than one.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import random
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

from seawall._core.public import public
from seawall._strategies.budget import (
    AdaptiveThrottle,
    FirstAttempt,
    RetryBudget,
    RetryQuota,
    Throttled,
    TokenBucket,
    _aws_standard_cost,
    milli_tokens,
)
from seawall.redis import _lua
from seawall.redis._fleet import Fleet, Op, _in_event_loop

__all__ = ["SharedAdaptiveThrottle", "SharedRetryBudget", "SharedRetryQuota", "SharedTokenBucket"]

# Slices per window, as the local budgets (Finagle's WindowedAdder).
_SLICES = 10
# The most requests a throttle's local fallback is started with (the fleet's, scaled down).
_SEED = 1000


class _Counter:
    """A lock-free event counter whose accrued count the sync thread takes in one read."""

    __slots__ = ("_count", "_reads", "_taken", "bump")

    def __init__(self) -> None:
        self._count: Iterator[int] = itertools.count()
        self.bump: Callable[[], int] = self._count.__next__
        self._reads = 0  # reads of the counter advance it too: count them
        self._taken = 0

    def take(self) -> int:
        """Events since the previous take (call under the owner's lock)."""
        total = next(self._count) - self._reads
        self._reads += 1
        delta = total - self._taken
        self._taken = total
        return delta

    def pending(self) -> int:
        """Events since the previous take, left for the next one (under the owner's lock)."""
        total = next(self._count) - self._reads
        self._reads += 1
        return total - self._taken


def _check_fleet(fleet: object) -> Fleet:
    if not isinstance(fleet, Fleet):
        raise TypeError(f"fleet must be a seawall.redis.Fleet, got {fleet!r}")
    return fleet


def _lease(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"lease must be an int, got {value!r}")
    if value < 1:
        raise ValueError(f"lease must be >= 1, got {value!r}")
    return value


def _no_pickle(obj: object) -> tuple[Any, ...]:
    raise TypeError(f"{type(obj).__name__} is bound to a Fleet: build one in each process")


def _int(value: object) -> int:
    """An integer from Redis (untrusted): a malformed one raises, and the answer is dropped."""
    return int(value)  # type: ignore[call-overload, no-any-return]


class _LocalWindow:
    """The local budget of a :class:`SharedRetryBudget`'s degraded periods: the script's
    sliding window (slices of the same width, on the fleet's clock), kept in this process.

    :meth:`close` leaves it no room of its own, to the fraction of a retry: what it had is
    the fleet's (this process's requests reached the fleet's window, or will).
    """

    __slots__ = ("_now", "_ratio", "_reserve", "_slice", "_slices")

    def __init__(self, ratio: float, reserve: float, width: float, now: Callable[[], float]):
        self._ratio, self._reserve, self._slice = ratio, reserve, width
        self._now = now
        self._slices: dict[int, list[float]] = {}  # slice index -> [deposits, retries]

    def _current(self) -> tuple[list[float], float]:
        """The current slice, and the room in the window (older slices dropped)."""
        index = math.floor(self._now() / self._slice)
        slices = self._slices
        for old in [at for at in slices if at <= index - _SLICES]:
            del slices[old]
        deposits = retries = 0.0
        for d, r in slices.values():
            deposits += d
            retries += r
        current = slices.setdefault(index, [0.0, 0.0])
        return current, deposits * self._ratio + self._reserve - retries

    def deposit(self, n: int = 1) -> None:
        self._current()[0][0] += n

    def allow(self) -> bool:
        current, room = self._current()
        if room < 1 - 1e-9:
            return False
        current[1] += 1
        return True

    def close(self) -> None:
        current, room = self._current()
        if room > 0:
            current[1] += room


# -- RetryBudget -------------------------------------------------------------------------------


@public("seawall.redis")
class SharedRetryBudget:
    """:class:`~seawall.RetryBudget` for a whole fleet: retries may add at most ``ratio`` of
    the fleet's requests, plus one floor for the whole fleet, over a sliding window.

    Deposits are counted locally and sent every sync. A process that retries holds a small
    lease of retry tokens (counted as spent on Redis while held, given back unused at the next
    sync, renewed while the process keeps retrying), so most retries are decided locally; an
    empty lease costs one round trip that sends the deposits and takes a new lease. Once the
    fleet's budget is spent, refusals cost no round trip: the process asks again only when its
    own deposits or the window's slices may have made room, or learns it at the next sync. In
    an asyncio event loop an empty lease refuses the retry instead of blocking, and the sync
    thread brings a new lease within one interval (and keeps one token leased from then on).

    While the fleet is degraded (Redis away, or this process cut off from it), the process
    spends its lease (counted on the fleet's window when granted), then decides with one local
    budget that it keeps for its whole life and that, each time Redis goes away, starts with
    no room of its own: it allows ``ratio`` of the requests made since. The room the fleet had
    left stays the fleet's (the processes that still reach Redis may spend it), so neither a
    flapping Redis nor a partition grants a fresh floor. After one window of outage the local
    bounds apply (one floor per process).

    Args:
        fleet: the :class:`Fleet` that syncs it.
        name: the budget's name; every process using the same name shares it.
        ratio: as :class:`~seawall.RetryBudget`, for the whole fleet.
        min_per_second: as :class:`~seawall.RetryBudget`, for the whole fleet.
        window: as :class:`~seawall.RetryBudget`, for the whole fleet.
        lease: retry tokens a process may hold at once.

    Raises:
        TypeError, ValueError: as :class:`~seawall.RetryBudget`; ``lease`` < 1.
    """

    def __init__(
        self,
        fleet: Fleet,
        name: str,
        ratio: float = 0.1,
        min_per_second: float = 10.0,
        window: float = 10.0,
        *,
        lease: int = 4,
    ) -> None:
        self._fleet = _check_fleet(fleet)
        local = RetryBudget(ratio, min_per_second, window)  # validates the parameters
        self.name = name
        self.ratio, self.min_per_second = local.ratio, local.min_per_second
        self.window = local.window
        self.lease = _lease(lease)
        self._keys = fleet.keys("budget", name, "window")
        self._script = fleet.script(_lua.BUDGET)
        self._reserve = self.min_per_second * self.window
        self._slice = self.window / _SLICES
        self._lock = threading.Lock()
        self._deposits = _Counter()
        self._bump = self._deposits.bump
        self._carry = 0  # deposits taken by a round trip that failed
        self._spent = 0  # retries the fallback allowed while degraded
        self._tokens = 0  # the lease
        self._lease_at = 0  # the slice index the lease was granted in
        # What the sync in flight carries: deposits, spent, back, the lease's slice, and the
        # slice its deposits go to.
        self._sent: tuple[int, int, int, int, int] = (0, 0, 0, 0, -1)
        # The fleet's window as last seen: slice index (-1: never seen), deposits, retries.
        self._view = (-1, 0, 0)
        # This process's own part of the window, by slice index: [deposits, retries]. When
        # Redis loses the window (a restart, a FLUSHALL: a new lineage), every live process
        # puts its own part back, once, with its next round trip.
        self._own: dict[int, list[int]] = {}
        self._lineage = ""
        self._id = secrets.token_hex(8)
        # No room left as of the last answer: refuse without asking until then (fleet time).
        self._spent_until = -math.inf
        self._demand = False  # a retry was asked for since the last sync
        self._in_loop = False  # one was asked for from an event loop, ever
        self._degraded = False
        self._fallback = _LocalWindow(self.ratio, self._reserve, self._slice, fleet._now)
        fleet.add(self)

    # -- the Budget protocol ----------------------------------------------------------------

    def on_request(self) -> None:
        """Deposit: a logical call starts."""
        self._bump()
        if self._degraded:
            with self._lock:
                self._fallback.deposit()

    def allow_retry(self, error: BaseException | None = None) -> bool:
        """Spend a leased token; with none left, one round trip for a new lease (none while
        the fleet's budget is known to be spent)."""
        if self._degraded:
            return self._fallback_retry(error)
        with self._lock:
            self._demand = True
            if self._tokens > 0:
                self._tokens -= 1
                return True
            if self._known_spent():
                return False
            if _in_event_loop():
                # No round trip here: the sync thread brings a lease (and keeps one from now on).
                self._in_loop = True
                self._fleet.wake()
                return False
            deposits, spent = self._take()
            op = self._op(deposits, spent, 0, need=1)
            made = self._view[0]
        answer = self._fleet.call(op, member=self)
        if answer is None:
            with self._lock:
                self._carry += deposits
                self._spent += spent
            if self._degraded:
                with self._lock:  # taken for the round trip: not counted by Redis
                    self._fallback.deposit(deposits)
                return self._fallback_retry(error)
            return False
        try:
            granted, index, d, r, wait, lineage = _budget_answer(answer)
        except (TypeError, ValueError, IndexError):
            return False
        with self._lock:
            self._count(index, made, lineage, deposits, spent + max(0, granted))
            self._seen(index, d, r, wait)
            if granted < 1:
                return False
            self._tokens += granted - 1
            self._lease_at = index
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

    def _fallback_retry(self, error: BaseException | None) -> bool:
        with self._lock:
            if self._tokens > 0:
                self._tokens -= 1  # the lease was counted on the fleet's window when granted
                return True
            if not self._fallback.allow():
                return False
            self._spent += 1  # counted on the fleet's window at the next sync
            return True

    # -- the fleet's view -------------------------------------------------------------------

    @property
    def requests(self) -> int:
        """The fleet's requests in the window, as of the latest round trip."""
        return self._view[1]

    @property
    def retries(self) -> int:
        """The fleet's retries in the window (leases held included), as of the latest trip."""
        return self._view[2]

    def available(self) -> int:
        """Retries this process could take now: its lease plus the fleet's room last seen."""
        _, d, r = self._view
        room = math.floor(d * self.ratio + self._reserve - r + 1e-9)
        return self._tokens + max(0, room)

    def _room(self) -> float:
        """The fleet's room as last seen (not floored)."""
        _, d, r = self._view
        return d * self.ratio + self._reserve - r

    def _known_spent(self) -> bool:
        """Under the lock: the fleet had no room at the last answer, the window's slices have
        not freed any since, and this process's own deposits since do not make one."""
        if self._fleet._now() >= self._spent_until:
            return False
        unsent = self._deposits.pending() + self._carry
        return self._room() + self.ratio * unsent < 1 - 1e-9

    def _count(
        self,
        index: int,
        made: int,
        lineage: str,
        deposits: int,
        retries: int,
        back: int = 0,
        at: int = 0,
    ) -> None:
        """Under the lock: what a round trip added to the window (this process's part): its
        deposits in slice *made* (as the script clamps it), its retries in slice *index*."""
        own = self._own
        if made < 0 or made > index:
            made = index
        made = max(made, index - _SLICES + 1)
        if deposits:
            own.setdefault(made, [0, 0])[0] += deposits
        if retries:
            own.setdefault(index, [0, 0])[1] += retries
        if back and at in own:
            own[at][1] -= back
        for old in [old for old in own if old <= index - _SLICES]:
            del own[old]
        self._lineage = lineage

    def _seen(self, index: int, d: int, r: int, wait: float) -> None:
        """Under the lock: a round trip's answer."""
        self._view = (index, max(0, d), max(0, r))
        if self._room() < 1 - 1e-9 and math.isfinite(wait) and wait > 0:
            # Untrusted: never longer than one window.
            self._spent_until = self._fleet._now() + min(wait, self.window)
        else:
            self._spent_until = -math.inf

    # -- sync -------------------------------------------------------------------------------

    def _take(self) -> tuple[int, int]:
        deposits = self._deposits.take() + self._carry
        spent = self._spent
        self._carry = self._spent = 0
        return deposits, spent

    def _op(self, deposits: int, spent: int, back: int, need: int, want: int | None = None) -> Op:
        # Under the lock.
        part = ",".join(f"{at}:{d}:{r}" for at, (d, r) in self._own.items() if d or r)
        args = (
            self._fleet.now_arg(),
            repr(self._slice),
            _SLICES,
            repr(self.ratio),
            repr(self._reserve),
            deposits,
            spent,
            self._lease_at,
            back,
            self.lease if want is None else want,
            need,
            self._lineage,
            secrets.token_hex(8),  # the lineage of a window created by this call
            self._id,
            part,
            self._view[0],
            self._view[2],
            self._view[0],  # the slice of the previous answer: where the deposits go
        )
        return self._script, self._keys, args

    def _collect(self) -> Op:
        with self._lock:
            deposits, spent = self._take()
            back = self._tokens
            self._tokens = 0
            self._sent = (deposits, spent, back, self._lease_at, self._view[0])
            # A lease only for a process that retries: idle leases would shrink the fleet's
            # room. An event loop, which cannot wait for a round trip, keeps one token.
            want = self.lease if self._demand else int(self._in_loop)
            self._demand = False
            return self._op(deposits, spent, back, need=0, want=want)

    def _apply(self, answer: Any) -> None:
        granted, index, d, r, wait, lineage = _budget_answer(answer)
        deposits, spent, back, at, made = self._sent
        with self._lock:
            self._count(index, made, lineage, deposits, spent + max(0, granted), back, at)
            self._seen(index, d, r, wait)
            self._tokens += max(0, granted)
            self._lease_at = index

    def _restore(self) -> None:
        deposits, spent, back, _, _ = self._sent
        with self._lock:
            self._carry += deposits
            self._spent += spent
            self._tokens += back  # still counted on Redis: still ours

    def _set_degraded(self, degraded: bool) -> None:
        if degraded and not self._degraded:
            # The one local budget of this process's degraded periods goes on where it was,
            # with nothing left of its own room: the fleet's room, as last seen, is the
            # fleet's (processes still reaching Redis may spend it meanwhile), and what this
            # process may take of it is its lease. It is spent in the current slice, so that
            # after one window of outage the local bounds apply again.
            with self._lock:
                self._fallback.close()
                # The requests Redis has not counted yet are this process's own to retry on.
                self._fallback.deposit(self._deposits.pending() + self._carry)
        self._degraded = degraded

    __reduce__ = _no_pickle

    def __repr__(self) -> str:
        return (
            f"SharedRetryBudget({self.name!r}, ratio={self.ratio!r}, "
            f"min_per_second={self.min_per_second!r}, window={self.window!r})"
        )


def _budget_answer(answer: Any) -> tuple[int, int, int, int, float, str]:
    """The BUDGET script's answer (untrusted): a malformed one raises, and is dropped."""
    granted, index, d, r = (_int(v) for v in answer[:4])
    wait = float(_str(answer[4]))
    return granted, index, d, r, wait, _str(answer[5])


def _str(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


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
        self._keys = fleet.keys("tokens", name, "bucket")
        self._script = fleet.script(_lua.TOKENS)
        self._lock = threading.Lock()
        self._successes = _Counter()
        self._bump = self._successes.bump
        self._failures = 0
        self._extra = 0  # successes an estimate took out of the counter, kept for the sync
        self._sent = (0, 0)
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
            pending = self._failures
            successes = self._successes.take()
            self._extra += successes
            successes = self._extra
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
            self._sent = (failures, successes)
        args = (self._fleet.now_arg(), self._max, self._ratio, failures, successes)
        return self._script, self._keys, args

    def _apply(self, answer: Any) -> None:
        milli = min(self._max, max(0, _int(answer)))
        with self._lock:
            self._milli = milli
            self._full = milli >= self._max and not self._failures and not self._degraded

    def _restore(self) -> None:
        failures, successes = self._sent
        with self._lock:
            self._failures += failures
            self._extra += successes

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
        self._keys = fleet.keys("quota", name, "tokens")
        self._script = fleet.script(_lua.QUOTA)
        self._lock = threading.Lock()
        self._rewards = _Counter()
        self._bump = self._rewards.bump
        self._credit = 0  # refunds, and what failed round trips carried
        self._tokens = 0  # the lease
        self._sent = (0, 0)
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
            credit = self._take()
            # Give the lease back and ask for this cost plus a fresh lease, in one trip.
            credit += self._tokens
            self._tokens = 0
        answer = self._fleet.call(self._op(credit, cost + self.lease, cost))
        if answer is None:
            with self._lock:
                self._credit += credit
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

    def _op(self, credit: int, want: int, need: int) -> Op:
        args = (self._fleet.now_arg(), self.capacity, credit, want, need)
        return self._script, self._keys, args

    def _collect(self) -> Op:
        with self._lock:
            credit = self._take() + self._tokens
            self._sent = (credit, self._tokens)
            self._tokens = 0
            # A lease only for a process that retries (see SharedRetryBudget._collect).
            most = max(self.retry_cost, self.timeout_cost)
            want = self.lease if self._demand else most * self._in_loop
            self._demand = False
            return self._op(credit, want, 0)

    def _apply(self, answer: Any) -> None:
        granted, available = (_int(v) for v in answer)
        with self._lock:
            self._available = max(0, min(self.capacity, available))
            self._tokens += max(0, granted)
            self._full = self._available + self._tokens >= self.capacity

    def _restore(self) -> None:
        credit, tokens = self._sent
        with self._lock:
            self._credit += credit - tokens
            self._tokens += tokens

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
            # this process has not sent yet).
            with self._lock:
                level = self._available + self._tokens + self._credit
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
        self._keys = fleet.keys("throttle", name, "window")
        self._script = fleet.script(_lua.THROTTLE)
        self._slice = self.window / _SLICES
        self._lock = threading.Lock()
        self._requests = _Counter()
        self._bump = self._requests.bump
        self._accepts = _Counter()
        self._accept = self._accepts.bump
        self._pending = (0, 0)  # counts taken for a sync, not yet in the view
        self._sent = (0, 0)
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
            self._sent = (q, a)
        args = (self._fleet.now_arg(), repr(self._slice), _SLICES, q, a)
        return self._script, self._keys, args

    def _apply(self, answer: Any) -> None:
        q, a = (_int(v) for v in answer)
        with self._lock:
            self._view = (max(0, q), max(0, a))
            pq, pa = self._pending
            self._p = self._probability(self._view[0] + pq, self._view[1] + pa)
            if self._degraded:
                self._p = 1.0  # keeps on_request on the path that consults the fallback

    def _restore(self) -> None:
        q, a = self._sent
        with self._lock:
            pq, pa = self._pending
            self._pending = (pq + q, pa + a)

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
                pq, pa = self._pending
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
                pq, pa = self._pending
                self._p = self._probability(self._view[0] + pq, self._view[1] + pa)

    __reduce__ = _no_pickle

    def __repr__(self) -> str:
        return (
            f"SharedAdaptiveThrottle({self.name!r}, k={self.k!r}, window={self.window!r}, "
            f"min_requests={self.min_requests!r})"
        )

"""SharedRetryBudget: :class:`~seawall.RetryBudget` for a whole fleet, with the local window of
its degraded periods."""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Callable
from typing import Any

from seawall._core.public import public
from seawall._strategies.budget import (
    FirstAttempt,
    RetryBudget,
)
from seawall.redis import _lua
from seawall.redis._budgets.common import (
    _SLICES,
    _budget_answer,
    _check_fleet,
    _Counter,
    _Late,
    _lease,
    _no_pickle,
    _once_ids,
)
from seawall.redis._fleet import Fleet, Op, _in_event_loop

__all__ = ["SharedRetryBudget"]


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
        self._keys = [*fleet.keys("budget", name, "window"), fleet.once_key("budget", name)]
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
        self._late = _Late()  # calls to send again (see _op)
        self._once = _once_ids()
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
        answer = self._fleet.call(op, member=self)
        if answer is None:
            # The fleet took the call back (this process's to send again) or sends it again;
            # the fallback counted its deposits as it took over (see _set_degraded).
            if self._degraded:
                return self._fallback_retry(error)
            return False
        try:
            granted, index, d, r, wait, lineage = _budget_answer(answer)
        except (TypeError, ValueError, IndexError):
            return False
        with self._lock:
            self._count(index, op.sent[4], lineage, deposits, spent + max(0, granted))
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
        """Under the lock: one call of the script. What it carries (``Op.sent``): deposits,
        retries spent, lease tokens given back, the lease's slice, and the slice its deposits
        go to (that of the previous answer)."""
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
            self._once(),
        )
        sent = (deposits, spent, back, self._lease_at, self._view[0])
        return Op(self._script, self._keys, args, sent)

    def _collect(self) -> Op:
        with self._lock:
            deposits, spent = self._take()
            back = self._tokens
            self._tokens = 0
            # A lease only for a process that retries: idle leases would shrink the fleet's
            # room. An event loop, which cannot wait for a round trip, keeps one token.
            want = self.lease if self._demand else int(self._in_loop)
            self._demand = False
            return self._op(deposits, spent, back, need=0, want=want)

    def _apply(self, op: Op, answer: Any) -> None:
        granted, index, d, r, wait, lineage = _budget_answer(answer)
        deposits, spent, back, at, made = op.sent
        with self._lock:
            self._late.drop(op)
            self._count(index, made, lineage, deposits, spent + max(0, granted), back, at)
            self._seen(index, d, r, wait)
            self._tokens += max(0, granted)
            self._lease_at = index

    def _restore(self, op: Op) -> None:
        deposits, spent, back, _, _ = op.sent
        with self._lock:
            self._late.drop(op)
            self._carry += deposits
            self._spent += spent
            self._tokens += back  # still counted on Redis: still ours

    def _wait(self, op: Op) -> Op:
        return self._late.wait(op, self._lock, lease=(9, 10))

    def _set_degraded(self, degraded: bool) -> None:
        if degraded and not self._degraded:
            # The one local budget of this process's degraded periods goes on where it was,
            # with nothing left of its own room: the fleet's room, as last seen, is the
            # fleet's (processes still reaching Redis may spend it meanwhile), and what this
            # process may take of it is its lease. It is spent in the current slice, so that
            # after one window of outage the local bounds apply again.
            with self._lock:
                self._fallback.close()
                # The requests Redis has not counted yet are this process's own to retry on;
                # not those of a call to send again: Redis may have counted them (its answer
                # was lost), and the fleet's room from them is the fleet's.
                self._fallback.deposit(self._deposits.pending() + self._carry)
        self._degraded = degraded

    __reduce__ = _no_pickle

    def __repr__(self) -> str:
        return (
            f"SharedRetryBudget({self.name!r}, ratio={self.ratio!r}, "
            f"min_per_second={self.min_per_second!r}, window={self.window!r})"
        )

"""RetryStatistics: the live counts of a decorated function's calls."""

from __future__ import annotations

import itertools
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    ParamSpec,
    TypeVar,
)

from seawall._core.public import public

if TYPE_CHECKING:
    from seawall._strategies.retry.state import RetryState

__all__ = ["RetryStatistics"]


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


@public("seawall.lowlevel")
class RetryStatistics:
    """What the calls of a decorated function did, counted as they end:
    ``fn.statistics`` on a function decorated by a :class:`RetryPolicy`.

    Live counters: read them at any time, all at once with :meth:`as_dict`, and start again
    from zero with :meth:`reset`. A call that succeeds at its first attempt costs one counter
    tick (``itertools.count``, atomic); a call that failed at least once adds its figures on
    its way out, under a lock. Threads calling one function share its counters and lose none.
    Counting is off unless the policy has ``statistics=True``: the tick is a measurable share
    of a decorated call that succeeds at once.

    Attributes (read-only):
        calls: calls that ended (returned or raised).
        attempts: attempts made by those calls.
        retries: attempts after each call's first.
        give_ups: calls that gave up, by reason (a :data:`GiveUpReason`), as a new dict.
        total_delay: seconds waited between attempts, over all calls.
    """

    __slots__ = ("_counter", "_give_ups", "_lock", "_offset", "_totals")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # for the retried calls and reset(): not the first path
        # First attempts that succeeded: itertools.count ticks atomically; its repr,
        # "count(N)", says how far it has counted (_offset: where reset() left it).
        self._counter = itertools.count()
        self._offset = 0
        # The calls that failed at least once: [calls, attempts, total_delay, calls that made
        # no attempt (the deadline or the budget stopped them first)].
        self._totals: list[Any] = [0, 0, 0.0, 0]
        self._give_ups: dict[str, int] = {}

    def _first_successes(self) -> int:
        return int(repr(self._counter)[6:-1]) - self._offset

    def _ended(self, state: RetryState | None) -> None:
        """A call that did not succeed at its first attempt ended with *state* (``None``: its
        budget refused it before any attempt)."""
        with self._lock:
            totals = self._totals
            totals[0] += 1
            attempts = 0 if state is None else state.attempts
            if state is not None:
                totals[1] += attempts
                totals[2] += state.total_delay
                reason = state.reason
                if reason is not None:
                    self._give_ups[reason] = self._give_ups.get(reason, 0) + 1
            if attempts == 0:
                totals[3] += 1

    def as_dict(self) -> dict[str, Any]:
        """All the counters at one moment: ``{"calls", "attempts", "retries", "give_ups",
        "total_delay"}``."""
        with self._lock:
            first = self._first_successes()
            calls, attempts, total_delay, none_made = self._totals
            return {
                "calls": first + calls,
                "attempts": first + attempts,
                "retries": attempts - (calls - none_made),
                "give_ups": dict(self._give_ups),
                "total_delay": total_delay,
            }

    @property
    def calls(self) -> int:
        return int(self.as_dict()["calls"])

    @property
    def attempts(self) -> int:
        return int(self.as_dict()["attempts"])

    @property
    def retries(self) -> int:
        return int(self.as_dict()["retries"])

    @property
    def give_ups(self) -> dict[str, int]:
        return dict(self.as_dict()["give_ups"])

    @property
    def total_delay(self) -> float:
        return float(self.as_dict()["total_delay"])

    def reset(self) -> None:
        """Start counting again from zero."""
        with self._lock:
            self._offset += self._first_successes()
            self._totals = [0, 0, 0.0, 0]
            self._give_ups = {}

    def __repr__(self) -> str:
        d = self.as_dict()
        return (
            f"RetryStatistics(calls={d['calls']}, attempts={d['attempts']}, "
            f"retries={d['retries']}, give_ups={d['give_ups']}, "
            f"total_delay={d['total_delay']:.3f})"
        )

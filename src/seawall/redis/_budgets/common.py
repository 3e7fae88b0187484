"""What the fleet's shared budgets have in common: a lock-free counter, checks of their
arguments, and the reading of Redis's (untrusted) answers."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from seawall.redis._fleet import Fleet, Op

__all__ = [
    "_Counter",
    "_Late",
    "_SEED",
    "_SLICES",
    "_budget_answer",
    "_check_fleet",
    "_int",
    "_lease",
    "_once_ids",
    "_no_pickle",
    "_str",
]

# Slices per window, as the local budgets (Finagle's WindowedAdder).
_SLICES = 10
# The most requests a throttle's local fallback is started with (the fleet's, scaled down).
_SEED = 1000


def _once_ids() -> Callable[[], str]:
    """The ids of one shared object's calls in its fleet: 1, 2, 3, ... (the record on Redis,
    :meth:`Fleet.once_key`, keeps the last 64)."""
    ids = itertools.count(1)
    return lambda: str(next(ids))  # next() on a count is atomic in CPython


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


class _Late:
    """A shared object's calls that Redis may have applied without its answer reaching this
    process (a timeout): the fleet sends them again, unchanged, and until they are answered
    what they carry still counts in the object's local view (its fallback's start)."""

    __slots__ = ("_ops",)

    def __init__(self) -> None:
        self._ops: list[Op] = []

    def add(self, op: Op) -> None:
        """Under the owner's lock: *op* waits to be sent again (once more, if it failed
        again)."""
        self.drop(op)
        self._ops.append(op)

    def wait(self, op: Op, lock: Any, lease: tuple[int, int] | None = None) -> Op:
        """A member's ``_wait`` (see :class:`~seawall.redis._fleet.Fleet`): under the owner's
        *lock*, *op* waits to be sent again; returns it as it is sent again: unchanged, or, for
        a script that asks for a lease, asking for none (its "want" and "need" arguments, at
        the positions *lease*, are 0)."""
        with lock:
            self.add(op)
        if lease is None:
            return op
        args = list(op.args)
        want, need = lease
        args[want] = args[need] = 0
        return op._replace(args=tuple(args))

    def drop(self, op: Op) -> None:
        """Under the owner's lock: *op* was answered, or taken back (known by its id, the
        last of its arguments: the fleet sends it again with the time brought up to date)."""
        for i, late in enumerate(self._ops):
            if late.args[-1] == op.args[-1]:
                del self._ops[i]
                return

    def total(self, field: int) -> int:
        """The sum of one field of what the waiting calls carry (``Op.sent``)."""
        return sum(op.sent[field] for op in self._ops)


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


def _budget_answer(answer: Any) -> tuple[int, int, int, int, float, str]:
    """The BUDGET script's answer (untrusted): a malformed one raises, and is dropped."""
    granted, index, d, r = (_int(v) for v in answer[:4])
    wait = float(_str(answer[4]))
    return granted, index, d, r, wait, _str(answer[5])


def _str(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

"""Starts that share a commit (group commit): runs started at once by several threads of one
process on one store, the way a web application's request threads start them, each with an
orchestrator of its own.

One thread at a time leads: in its transaction, once it holds what the store makes writers wait
for, it takes every start waiting by then, writes their runs, and hands the lead on once they
are committed. While one commit waits for the disk, the next one's starts gather. When the
shared transaction fails, nothing of it is written: a call refused (a run id taken by another
saga or input) has its error, an error of the transaction as a whole is the leader's, and every
other call commits on its own, to meet its own error, if any. (Not savepoints: a rollback to one
drops the statements PostgreSQL's driver prepared after it, and a refusal is rare.)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from seawall.saga._per_process import PerProcess
from seawall.saga._rows import Loaded, RunRow

__all__ = ["Check", "start_together", "waiting"]

Check = Callable[[list[RunRow | None]], None]


class Store(Protocol):
    """What of a store (:class:`~seawall.saga._store.Store`) the starts use."""

    def transaction(self) -> contextlib.AbstractContextManager[None]: ...

    def insert(self, loaded: Loaded) -> RunRow | None: ...


class _Start:
    """One call's new runs, waiting for a commit."""

    __slots__ = ("alone", "check", "done", "error", "found", "items")

    def __init__(self, items: Sequence[Loaded], check: Check) -> None:
        self.items = items
        self.check = check
        self.done = False  # committed, refused, or left to commit alone (under the mutex)
        self.found: list[RunRow | None] | None = None
        self.error: Exception | None = None  # what this call's own runs raised
        self.alone = False  # the commit that took it failed: this call commits on its own


class _Starts:
    """The starts of one store waiting in this process, and whether a thread leads them."""

    __slots__ = ("cond", "leading", "waiting")

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.leading = False
        self.waiting: list[_Start] = []

    def join(self, start: _Start) -> bool:
        """Wait until *start* is done (``False``) or this thread is to lead (``True``)."""
        with self.cond:
            self.waiting.append(start)
            while self.leading and not start.done:
                self.cond.wait()
            if not start.done:
                self.leading = True
            return not start.done

    def take(self) -> list[_Start]:
        """The starts waiting (the leader's among them), for the leader to write."""
        with self.cond:
            taken, self.waiting = self.waiting, []
        return taken

    def hand_on(self, taken: list[_Start]) -> None:
        """The leader's commit of *taken* is over: wake their threads and the next leader."""
        with self.cond:
            for start in taken:
                start.done = True
            # (the leader's own, when it failed before it took them)
            self.waiting = [w for w in self.waiting if not w.done]
            self.leading = False
            self.cond.notify_all()


#: The starts of each store in this process (a forked child's are none: those waiting, and a
#: lead, are the parent's).
_STARTS: PerProcess[_Starts] = PerProcess(lambda key: _Starts())


def waiting(key: str) -> _Starts:
    """The starts waiting for a commit of the store *key* in this process."""
    return _STARTS.get(key)


def _drop_if_idle(key: str, starts: _Starts) -> None:
    """Forget the starts of *key* while none waits: a process that opens many stores in turn
    keeps nothing of each. (A thread that looked them up just before leads them on its own:
    its start is committed all the same.)"""
    with _STARTS.lock, starts.cond:
        if not starts.waiting and not starts.leading:
            _STARTS.drop_locked(key, starts)


def start_together(
    store: Store, key: str, items: Sequence[Loaded], check: Check
) -> list[RunRow | None]:
    """Write *items* (:meth:`Store.insert` each) in a transaction of *store* shared with the
    starts of this process's other threads on the store *key*; *check* sees what was found
    before the commit, and what it raises fails this call only."""
    mine = _Start(items, check)
    starts = waiting(key)
    if starts.join(mine):
        taken: list[_Start] = []
        try:
            with store.transaction():
                taken = starts.take()  # those that came while it waited for the store too
                _write(store, taken)
        except BaseException as exc:
            for start in taken:
                start.found, start.error, start.alone = None, None, True
            if not isinstance(exc, Exception):
                raise  # an interrupt of this thread: the others commit on their own
            # A call refused has its error; an error of the transaction as a whole is this
            # thread's. Every other call commits on its own.
            failed, error = (exc.start, exc.error) if isinstance(exc, _Refused) else (mine, exc)
            failed.error, failed.alone = error, False
        finally:
            starts.hand_on(taken or [mine])
            _drop_if_idle(key, starts)
    if mine.alone:
        return alone(store, items, check)
    if mine.error is not None:
        raise mine.error
    assert mine.found is not None
    return mine.found


def alone(store: Store, items: Sequence[Loaded], check: Check) -> list[RunRow | None]:
    """Write *items* in a transaction of their own; what *check* raises rolls them back."""
    with store.transaction():
        found = [store.insert(item) for item in items]
        check(found)
    return found


class _Refused(Exception):
    """A call's *check* refused its runs (carried out of the shared transaction)."""

    def __init__(self, start: _Start, error: Exception) -> None:
        super().__init__(str(error))
        self.start = start
        self.error = error


def _write(store: Store, taken: list[_Start]) -> None:
    """Inside a transaction: write the calls *taken*; a call's refusal fails it all."""
    for start in taken:
        found = [store.insert(item) for item in start.items]
        try:
            start.check(found)
        except Exception as exc:
            raise _Refused(start, exc) from None
        start.found = found

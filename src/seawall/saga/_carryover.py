"""What a worker's round ended by an error leaves to the worker's next round.

A round ends early when the store goes away (a restart, a failover, a full disk) or a commit
fails. The worker lives on (``work`` reconnects), and its runs are not left leased until their
leases run out:

- a run with nothing under way (claimed, not begun) has its lease ended by the next claim, and
  is taken over at once as after an expired lease (:meth:`Carryover.expire_later`);
- a run whose attempt still runs in a thread keeps its lease, renewed, until the attempt ends
  and the next round records its outcome (:meth:`Carryover.abandon`);
- a run of the failed commit, which may have landed all the same (the connection went before
  its answer came), keeps its lease too; the next round reads its log back and goes on from
  what the log holds (:meth:`Carryover.settle`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Sequence
from typing import NamedTuple

from seawall.saga._execution import Executor, Heartbeat
from seawall.saga._model import SagaEvent
from seawall.saga._outcomes import ENDED
from seawall.saga._store import Store
from seawall.saga._transitions import Transitions
from seawall.saga._work import Outcome, Pending, Work

__all__ = ["Carryover", "Doubt", "Settling"]

logger = logging.getLogger("seawall.saga")


class Doubt(NamedTuple):
    """A run of a commit that failed, which may have landed or not; ``work`` is as that
    commit would have left it."""

    work: Work
    done: Pending | None  # the attempt whose outcome the commit recorded; None: none
    outcome: Outcome | None  # that attempt's outcome


class Settling(NamedTuple):
    """What :meth:`Carryover.settle` found in the log."""

    redo: list[Work]  # commits that did not land: each outcome to record again
    begun: list[Work]  # commits that landed: the attempts they began, to run now
    landed: int  # outcomes those commits recorded
    events: list[SagaEvent]  # what they recorded, for the hooks
    fenced: list[Doubt]  # runs taken over: outcomes the log lacks, for a fenced line each


class Carryover:
    """The runs a worker's ended rounds left (see the module), until its next rounds take
    them. Thread-safe: an attempt that outlived its round adds itself from its thread."""

    def __init__(self, worker_id: str, execution: Executor, transitions: Transitions) -> None:
        self.worker_id = worker_id
        self._execution = execution  # (its heartbeat looked up each time: a test may swap it)
        self._transitions = transitions
        self._lock = threading.Lock()
        self._expiring: dict[str, int] = {}  # leases to end at the next claim: run id -> token
        self._late: list[Work] = []  # attempts that ended since their rounds did
        self._doubts: list[Doubt] = []

    @staticmethod
    def _ended(store: Store, done: Pending, run_id: str) -> bool:
        """Whether the log of *run_id* says how the attempt *done* ended."""
        step, phase, attempt = done.ctx.step, done.phase, done.ctx.attempt
        return any(
            h.event in ENDED and (h.step, h.phase, h.attempt) == (step, phase, attempt)
            for h in store.history(run_id)
        )

    def _heartbeat(self) -> Heartbeat:
        return self._execution.heartbeat

    # -- runs with nothing under way ------------------------------------------------------------

    def expire_later(self, works: Sequence[Work]) -> None:
        """The leases of *works* end at this worker's next claim (:meth:`expiring`), once the
        store answers; the claim takes the runs over as any worker would after an expired
        lease. Runs in doubt are left to :meth:`settle`."""
        with self._lock:
            doubted = {id(d.work) for d in self._doubts}
            for w in works:
                if not w.lost and id(w) not in doubted:
                    self._expiring[w.loaded.run.run_id] = w.loaded.run.token

    def expiring(self) -> dict[str, int]:
        """The leases for the next claim to end (run id -> token)."""
        with self._lock:
            return dict(self._expiring)

    def expired(self, leases: dict[str, int]) -> None:
        """A claim that committed ended *leases* (from :meth:`expiring`)."""
        with self._lock:
            for run_id, token in leases.items():
                if self._expiring.get(run_id) == token:
                    del self._expiring[run_id]

    # -- attempts that outlive their rounds -----------------------------------------------------

    def abandon(self, future: concurrent.futures.Future[Outcome], w: Work) -> None:
        """An attempt still runs in its thread when its round ends: its lease is renewed
        until its outcome is recorded, so that no other worker runs the step meanwhile. The
        worker's next round after it ended records it (:meth:`take_late`), fenced by the
        lease's token as any outcome: no commit held it before, so it is recorded once."""
        run_id = w.loaded.run.run_id
        self._heartbeat().keep(run_id, w.loaded.run.token)

        def ended(f: concurrent.futures.Future[Outcome]) -> None:
            try:
                w.outcome = f.result()
            except BaseException:  # (an attempt's errors are outcomes: only a kill is here)
                self._heartbeat().let_go(run_id)
                self.expire_later([w])
                return
            with self._lock:
                self._late.append(w)

        future.add_done_callback(ended)

    def take_late(self) -> list[Work]:
        """The attempts that ended since their rounds did, their outcomes to record (then
        :meth:`recorded`)."""
        with self._lock:
            late, self._late = self._late, []
        return late

    def recorded(self, works: Sequence[Work]) -> None:
        """The outcomes of *works* (from :meth:`take_late`) are recorded: their leases are
        no longer kept. (Should that commit fail, its runs are in doubt, their leases kept.)"""
        for w in works:
            self._heartbeat().let_go(w.loaded.run.run_id)

    # -- commits that failed --------------------------------------------------------------------

    def in_doubt(self, doubts: Sequence[Doubt]) -> None:
        """A commit failed, which may have landed all the same: its runs are settled at the
        next round (:meth:`settle`), their leases renewed meanwhile."""
        for d in doubts:
            if d.work.lost and d.done is None:
                continue
            with self._lock:
                self._doubts.append(d)
            if not d.work.lost:  # (a lease lost is not renewed: its fenced line is settled)
                self._heartbeat().keep(d.work.loaded.run.run_id, d.work.loaded.run.token)

    def settle(self, store: Store, lease: float) -> Settling | None:
        """Settle the runs in doubt, once the store answers: renew their leases, then read
        each one's log back. ``None`` when there are none.

        - The run is held by another worker now (the lease ran out meanwhile), or an operator
          acted on it (broke the lease, or applied an operation once it ran out): the run is
          left as it is; the new holder records the attempt as lost, as after any expired
          lease. The outcome this worker held, if the log does not have it, is for a
          ``fenced`` line (:attr:`Settling.fenced`), as a commit that found its lease taken
          writes; the hooks hear of the attempt.
        - The commit landed: the log is as this worker left it. The attempt it began (if any)
          runs now, as if the commit had answered; the hooks hear of what it recorded (a run it
          released, the token unchanged, landed too).
        - It did not: the outcome it held is to be recorded again, on the log as it is (the
          attempt's retry state read back from its row: :meth:`Transitions.resumed`), with the
          next move. The step does not run again, and no attempt is charged that never began.
          The policy's budget and hooks are not told of it again (:meth:`Transitions.resumed`).
        - It began a run's attempt and did not land: the run is claimed, nothing begun; its
          lease ends at the next claim.

        Should the store fail here, the runs not settled stay in doubt, each as this left it.
        """
        with self._lock:
            doubts, self._doubts = self._doubts, []
        if not doubts:
            return None
        running = Transitions.running
        found = Settling([], [], 0, [], [])
        settled: set[int] = set()  # works done with
        taken = 0
        try:
            store.renew(
                [(d.work.loaded.run.run_id, d.work.loaded.run.token) for d in doubts], lease
            )
            now = store.now()
            for d in doubts:
                w, run = d.work, d.work.loaded.run
                fresh = store.load(run.run_id)
                self._heartbeat().let_go(run.run_id)
                settled.add(id(w))
                if (
                    fresh is None
                    or fresh.run.token != run.token
                    or fresh.run.lease_owner not in (None, self.worker_id)
                ):
                    taken += 1  # taken over (by another worker, or an operator)
                    if d.done is not None and d.outcome is not None:
                        found.events.extend(e for e in w.events if e.kind == "attempt")
                        if fresh is not None and not self._ended(store, d.done, run.run_id):
                            found.fenced.append(d)
                    w.events = []
                    continue
                w.token = run.token
                if fresh.run.lease_owner is None:
                    # Released, the token unchanged: by the commit in doubt, which landed (a
                    # run finished, or waiting for a retry); nothing of it runs here.
                    found = found._replace(landed=found.landed + (d.done is not None))
                    found.events.extend(w.events)
                    w.events = []
                elif d.done is not None and running(fresh, d.done):
                    # Not landed: its outcome is recorded again, on the log as it is.
                    resumed = self._transitions.resumed(Work(fresh, w.saga, w.problem), d.done, now)
                    if resumed is None:  # pragma: no cover - a row this worker just wrote
                        self.expire_later([w])
                        continue
                    w.loaded, w.pending, w.outcome, w.events = fresh, resumed, d.outcome, []
                    found.redo.append(w)
                    settled.discard(id(w))
                elif d.done is None and (w.pending is None or not running(fresh, w.pending)):
                    self.expire_later([w])  # a run claimed, nothing begun
                else:
                    # Landed: the log is as the commit left it; what it began runs now.
                    found = found._replace(landed=found.landed + (d.done is not None))
                    found.events.extend(w.events)
                    w.events = []
                    if w.pending is not None and running(fresh, w.pending):
                        found.begun.append(w)
                        settled.discard(id(w))
                    elif w.pending is not None:  # pragma: no cover - the log is as written
                        self.expire_later([w])
        except Exception:
            self.in_doubt([d for d in doubts if id(d.work) not in settled])
            raise
        logger.info(
            "saga worker %s: %d runs of commits that failed read back: %d outcomes had landed, "
            "%d to record again, %d attempts begun by them to run, %d runs taken over meanwhile",
            self.worker_id,
            len(doubts),
            found.landed,
            len(found.redo),
            len(found.begun),
            taken,
        )
        return found

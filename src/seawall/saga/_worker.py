"""The worker: claims due runs, runs their attempts, and records the outcomes.

A round claims up to ``batch`` due runs in one transaction, decides the next move of up to
``concurrency`` of them (:mod:`._transitions`) and saves it before anything runs; then it runs
the attempts those moves started, at once (:mod:`._execution`), and records each outcome with
the move that follows as the attempts end, those that ended together (or while the commit waited
its turn for the store) in one transaction (group commit), where the claimed runs still waiting
begin as slots free, until every claimed run is released. Each write is fenced by the run's
lease token: a worker whose lease was taken records nothing but a ``fenced`` line in the
history. What a round ended by an error leaves (a commit that failed may have landed) is taken
up by the next round (:mod:`._carryover`).

Times in the log are wall-clock seconds since the epoch: ``time.time()`` with the system
clock, or a :class:`~seawall.VirtualClock`'s ``now()`` (read as seconds since the epoch). The
retry states run on that same timeline, so their deadlines and retry times need no conversion.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import itertools
import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Final, NamedTuple, TypeVar

from seawall._core.clock import Clock, SystemClock, VirtualClock
from seawall._core.errors import error_summary
from seawall._core.redact import escape_controls
from seawall.saga._carryover import Carryover, Doubt
from seawall.saga._definitions import definition_of
from seawall.saga._execution import Executor, Heartbeat
from seawall.saga._hooks import Hook, emit
from seawall.saga._model import MAX_PAYLOAD_BYTES, Run, Saga, SagaEvent, Status
from seawall.saga._operations import ACTIVE, SETTLED, unknown_status
from seawall.saga._outcomes import Outcomes, fenced_line
from seawall.saga._rows import to_run
from seawall.saga._store import Store
from seawall.saga._transitions import Transitions
from seawall.saga._work import Outcome, Work

__all__ = [
    "CONFLICT_PAUSE",
    "CONFLICT_RETRIES",
    "MAX_HELD_IDLE",
    "MIN_IDLE",
    "Round",
    "Worker",
]

logger = logging.getLogger("seawall.saga")

#: The shortest idle wait of a worker that found due work it could not claim (seconds).
MIN_IDLE: Final = 0.01
#: The longest such wait, reached by doubling MIN_IDLE while claims keep finding due work
#: held (seconds; at most the worker's poll).
MAX_HELD_IDLE: Final = 0.16
#: How many times a transaction that lost a conflict while taking its rows is tried again.
CONFLICT_RETRIES: Final = 5
#: The first pause before such a retry, at most (seconds): doubled at each, full jitter.
CONFLICT_PAUSE: Final = 0.02

_T = TypeVar("_T")


class Round(NamedTuple):
    """What one round did."""

    claimed: int  # runs claimed
    ran: int  # attempts run


class Worker:
    """Runs the sagas of *versions* (name -> version -> definition) from *store*.

    Args:
        store: the store (replaced by a new connection after an outage).
        versions: every definition this worker runs, by name and version.
        lease: seconds a claimed run stays claimed, renewed while its attempt runs.
        batch: runs claimed together.
        concurrency: attempts run at once (the other claimed runs wait, leased, for a slot).
        clock: the worker's clock (its waits, each attempt's time limit).
        worker_id: how leases name this worker.
        hooks: told of every attempt and run status change, once it is in the log.
        keeper: renew leases from a process of its own too (system clock only).
        max_payload_bytes: the largest step result, in bytes of JSON.
    """

    def __init__(
        self,
        store: Store,
        versions: dict[str, dict[int, Saga]],
        *,
        lease: float,
        batch: int,
        concurrency: int,
        clock: Clock,
        worker_id: str,
        hooks: tuple[Hook, ...],
        keeper: bool,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
    ) -> None:
        self.store = store
        self.lease = lease
        self.batch = batch
        self.concurrency = concurrency
        self.clock = clock
        self.worker_id = worker_id
        self.hooks = hooks
        self._versions = versions
        self._saga_names = tuple(versions)
        heartbeat = Heartbeat(lambda: self.store, lease, use_process=keeper)
        self._execution = Executor(clock, concurrency, heartbeat)
        self._outcomes = Outcomes(notify=bool(hooks), max_payload_bytes=max_payload_bytes)
        self._transitions = Transitions(
            lease,
            worker_id,
            self._outcomes,
            signal_data=lambda run_id, name: self.store.signal_data(run_id, name),
        )
        # Decisions and attempts run in a context of the orchestrator's own: a durable run does
        # not inherit the ambient deadline or one_attempt() of whoever called run_due().
        self._context = contextvars.Context()
        self._rng = random.Random()  # the jitter of the pauses before a conflict's retry
        # What rounds ended by an error leave to the next (the store went away, a commit
        # failed): leases to end, attempts that outlived their rounds, commits in doubt.
        self._carryover = Carryover(worker_id, self._execution, self._transitions)

    @property
    def versions(self) -> dict[str, dict[int, Saga]]:
        """Every definition this worker runs, by name and version."""
        return self._versions

    def close(self, *, hand_back: bool = True) -> None:
        """Stop renewing leases, stop the threads and event loops (an attempt still running
        is waited for), hand back what ended rounds left (:meth:`_hand_back`), close the
        store."""
        self._execution.close()
        for last in (False, True) if hand_back else ():
            try:
                self._hand_back()
            except Exception as exc:
                if not last and self.store.unavailable(exc):
                    self._reconnect()  # (its connection lost with the store: a new one, once)
                    continue
                logger.warning(
                    "saga worker %s: closing, could not record what its last rounds left "
                    "(%s); other workers take those runs over once their leases run out",
                    self.worker_id,
                    escape_controls(error_summary(exc)),
                )
            break
        self.store.close()

    def _hand_back(self) -> None:
        """On closing, what rounds ended by an error left (:mod:`._carryover`), settled if the
        store answers, with no attempt begun: the outcomes this worker holds are recorded (with
        an operator's request that came meanwhile applied), and their runs released, due at
        once (their next moves are another worker's); runs whose attempts it will not run
        (begun by a landed commit; claimed, not begun) have their leases ended, to be taken
        over at once."""
        store, carryover = self.store, self._carryover
        found = carryover.settle(store, self.lease)
        works = (found.redo if found else []) + carryover.take_late()
        ending = carryover.expiring()
        events = found.events if found else []
        fenced = found.fenced if found else []
        for w in found.begun if found else []:
            ending[w.loaded.run.run_id] = w.loaded.run.token
        if not works and not ending and not fenced:
            self.emit(events)
            return
        ids = [w.loaded.run.run_id for w in works]
        with self._transaction(lambda: store.lock_runs(ids)) as (now, asked):
            for w in works:
                w.loaded.run.requested = asked.get(w.loaded.run.run_id)
                self._record_one(w, now, go_on=False)
                events.extend(e for e in w.events if not w.lost or e.kind == "attempt")
                w.events = []
            self._write_fenced(fenced, now)
            store.expire_leases(self.worker_id, ending, now)
        self.emit(events)

    # -- the loops ------------------------------------------------------------------------------

    def run_due(self) -> int:
        """Rounds until one claims nothing; returns the attempts run."""
        ran = 0
        while True:
            claimed, count = self._round(None)
            ran += count
            if not claimed:
                return ran

    def run_until_settled(self, run_id: str, poll: float) -> Run:
        """Rounds of *run_id* alone until it settles, sleeping until it is due between them."""
        while True:
            loaded = self.store.load(run_id)
            if loaded is None:
                raise KeyError(f"no run {run_id!r} in {self.store.redacted()}")
            run = loaded.run
            if run.status in SETTLED or run.status not in ACTIVE:
                return to_run(loaded)  # over, or in a status only a newer seawall runs
            if run.saga not in self._versions:
                raise ValueError(f"run {run_id!r} is of saga {run.saga!r}, unknown here")
            claimed, _ = self._round(run_id)
            if claimed:
                continue
            if (
                run.status == Status.WAITING.value
                and run.due_at is None
                and isinstance(self.clock, VirtualClock)
            ):
                return to_run(loaded)  # only a signal would move it: none will on this clock
            now = self.store.now()
            due = run.due_at if run.due_at is not None else now + poll
            wait = due - now
            if type(self.clock) is SystemClock:
                wait = min(wait, poll)  # another process may change the run meanwhile
            if wait > 0:
                self.clock.sleep(wait)

    def work(self, stop: threading.Event | None, poll: float) -> int:
        """Rounds until *stop* is set, idle at most *poll* seconds between them; returns the
        attempts run. An unavailable store is reconnected to, not raised."""
        ran = 0
        held = 0  # rounds in a row that found due work held by another session
        while stop is None or not stop.is_set():
            try:
                claimed, count = self._round(None)
                ran += count
                if claimed:
                    held = 0
                    continue
                due, now = self.store.next_due_now(self._saga_names)
            except Exception as exc:
                conflict = self.store.conflict(exc)
                if not conflict and not self.store.unavailable(exc):
                    raise
                if conflict:
                    # A conflict that outlasted its retries (see _transaction), or one met by a
                    # transaction's writes: the connection is fine. This round's attempts not
                    # recorded are recorded as lost by whoever claims their runs next.
                    logger.warning(
                        "saga worker %s: a commit kept losing conflicts with other "
                        "transactions (%s); trying again in %.1f s",
                        self.worker_id,
                        escape_controls(error_summary(exc)),
                        poll,
                    )
                else:
                    # The store went away (a restart, a failover, a full disk): the log keeps
                    # every run; this worker reconnects and goes on. Its attempts in flight are
                    # recorded as lost by whoever claims their runs after the leases expire.
                    logger.warning(
                        "saga worker %s: the store is unavailable (%s); trying again in %.1f s",
                        self.worker_id,
                        escape_controls(error_summary(exc)),
                        poll,
                    )
                    self._reconnect()
                due = now = None
            wait = poll if due is None or now is None else min(poll, due - now)
            if wait <= 0:
                # Due but not claimed: another session holds those rows, a worker's commit for
                # a moment, an operator's open transaction maybe for minutes. Each time in a
                # row, wait twice as long, up to MAX_HELD_IDLE: not a claim every 10 ms.
                wait = max(MIN_IDLE, min(poll, MAX_HELD_IDLE, MIN_IDLE * 2 ** min(held, 10)))
                held += 1
            else:
                held = 0
                wait = max(wait, MIN_IDLE)
            if stop is not None and type(self.clock) is SystemClock:
                stop.wait(wait)
            else:
                self.clock.sleep(wait)
        return ran

    def _reconnect(self) -> None:
        try:
            store = self.store.clone()
        except Exception as exc:
            if not self.store.unavailable(exc):
                raise
            return  # still down: the next round tries again
        with contextlib.suppress(Exception):
            self.store.close()
        self.store = store

    # -- one round: claim, then run and record until every claimed run is released ------------

    def _round(self, run_id: str | None) -> Round:
        return self._context.run(self._claim_and_run, run_id)

    def _claim_and_run(self, run_id: str | None) -> Round:
        store = self.store
        self._execution.heartbeat.prepare()
        works: list[Work] = []
        # Claimed runs beyond `concurrency` wait here, leased but not begun: each one's attempt
        # begins (and counts) in the commit that records another's outcome, when a slot frees.
        queued: collections.deque[Work] = collections.deque()
        settled, begun = self._settle()
        works.extend(begun)
        try:
            late, begun = self._record_late()
            works.extend(begun)
            expiring = self._carryover.expiring()
            claim = functools.partial(
                store.claim_due,
                1 if run_id else self.batch,
                self._saga_names,
                run_id,
                expire=(self.worker_id, expiring) if expiring else None,
            )
            with self._transaction(claim) as (now, claimed):
                busy = len(works)
                for loaded in claimed:
                    problem = unknown_status(loaded)
                    saga = None
                    if problem is None:
                        saga, problem = definition_of(self._versions, loaded)
                    work = Work(loaded, saga, problem)
                    loaded.run.token = work.token + 1
                    loaded.run.lease_owner = self.worker_id
                    if busy < self.concurrency:
                        self._transitions.advance_safely(work, now)
                        busy += work.pending is not None
                    else:
                        loaded.run.due_at = now + self.lease
                        queued.append(work)
                    self._save(work)
                    works.append(work)
        except Exception:
            # The claim may have landed all the same: the attempts begun before it or in it
            # are settled at the next round (_settle); the other runs' leases end then.
            self._carryover.in_doubt([Doubt(w, None, None) for w in works if w.pending is not None])
            self._carryover.expire_later(works)
            raise
        self._carryover.expired(expiring)
        self.emit([e for w in works for e in w.events])
        for w in works:
            w.events = []
        ran = settled + late
        pending = [w for w in works if w.pending is not None and not w.lost]
        running: dict[concurrent.futures.Future[Outcome], Work] = {}
        try:
            while pending or running or queued:
                self._execution.start(pending, running, queued)
                finished = self._execution.finished(running) if running else []
                recorded, pending = self._record_all(finished, running, queued)
                ran += recorded  # (with those that ended while the commit waited its turn)
        except Exception:
            attempting = {id(w) for w in running.values()}
            self._carryover.expire_later([w for w in works if id(w) not in attempting])
            for future, w in running.items():
                self._carryover.abandon(future, w)
            raise
        finally:
            self._execution.heartbeat.release()
        return Round(claimed=len(works), ran=ran)

    def _settle(self) -> tuple[int, list[Work]]:
        """Settle the runs of commits that failed (:meth:`Carryover.settle`): record again the
        outcomes of those that did not land. Returns how many outcomes were recorded (by the
        commits that landed, and now), and the works whose attempts began (they run now)."""
        found = self._carryover.settle(self.store, self.lease)
        if found is None:
            return 0, []
        self.emit(found.events)
        try:
            recorded, begun = self._record_all(
                found.redo, {}, collections.deque(), fenced=found.fenced
            )
        except Exception:  # (it leaves its own runs in doubt)
            self._carryover.in_doubt([Doubt(w, None, None) for w in found.begun])
            raise
        return found.landed + recorded, found.begun + begun

    def _record_late(self) -> tuple[int, list[Work]]:
        """Record the outcomes of attempts that outlived their rounds (:meth:`Carryover.abandon`),
        in one transaction, with the moves that follow; returns how many were recorded, and the
        works whose next attempts began (they run in this round)."""
        late = self._carryover.take_late()
        if not late:
            return 0, []
        recorded, begun = self._record_all(late, {}, collections.deque())
        self._carryover.recorded(late)
        return recorded, begun

    def _record_all(
        self,
        pending: list[Work],
        running: dict[concurrent.futures.Future[Outcome], Work],
        queued: collections.deque[Work],
        *,
        fenced: Sequence[Doubt] = (),
    ) -> tuple[int, list[Work]]:
        """Record the outcomes of *pending* (``w.outcome``) and begin what follows, in one
        transaction: their runs' next attempts, then queued runs' while slots are free. The
        attempts of *running* that end before the transaction has its turn join *pending*
        (and are recorded in it). The transaction also writes the ``fenced`` lines of
        *fenced* (:attr:`Settling.fenced`). Returns how many outcomes were recorded, and the
        works whose attempts began."""
        if not pending and not fenced and not (queued and len(running) < self.concurrency):
            return 0, []
        store = self.store
        begun: list[Work] = []
        free = 0
        doubts: dict[int, Doubt] = {}  # what the commit records of each run (see _settle)

        def take() -> tuple[float, dict[str, str]]:
            # Once this transaction has its turn (on SQLite, the file's lock is held by now),
            # the attempts that ended while it waited are recorded in it too.
            nonlocal free
            pending.extend(self._execution.ended(running))
            free = self.concurrency - len(running)
            # Every run this commit may write, locked at once in one order (Store.requested).
            ids = [w.loaded.run.run_id for w in (*pending, *itertools.islice(queued, free))]
            return store.lock_runs(ids)

        try:
            with self._transaction(take) as (now, asked):
                recorded = self._record_in(pending, queued, free, now, asked, begun, doubts)
                self._write_fenced(fenced, now)
        except Exception:
            # The commit may have landed or not: its runs are settled at the next round.
            self._carryover.in_doubt(
                [doubts.get(id(w)) or Doubt(w, w.pending, w.outcome) for w in pending]
                + list(fenced)
            )
            raise
        # A fenced worker's hooks hear of the attempt it ran (it did run), never of a status
        # change or a hold its outcome would have made: the log does not hold those.
        self.emit([e for w in pending for e in w.events if not w.lost or e.kind == "attempt"])
        for w in pending:
            w.events = []
        return recorded, begun

    def _record_in(
        self,
        pending: list[Work],
        queued: collections.deque[Work],
        free: int,
        now: float,
        asked: dict[str, str],
        begun: list[Work],
        doubts: dict[int, Doubt],
    ) -> int:
        """(In :meth:`_record_all`'s transaction.) Record the outcomes of *pending*, then
        begin queued runs (appended to *pending*) while fewer than *free* attempts have begun,
        of the *free* first only (the runs the transaction locked, their requests read);
        returns how many outcomes were recorded. *begun* gets the works whose attempts began;
        *doubts*, what the transaction writes of each run."""
        for w in pending:
            w.loaded.run.requested = asked.get(w.loaded.run.run_id)
            doubts[id(w)] = Doubt(w, w.pending, w.outcome)
            self._record_one(w, now, go_on=True)
        recorded = len(pending)
        begun.extend(w for w in pending if w.pending is not None and not w.lost)
        taken = 0  # queued runs taken: at most the *free* first, whose rows take() locked
        while queued and len(begun) < free and taken < free:
            taken += 1
            w = queued.popleft()
            if w.lost:  # pragma: no cover - a queued run is written only at its claim
                continue
            doubts[id(w)] = Doubt(w, None, None)
            w.loaded.run.requested = asked.get(w.loaded.run.run_id)  # (one of *ids*)
            self._transitions.advance_safely(w, now)
            self._save(w)
            pending.append(w)
            if w.pending is not None and not w.lost:
                begun.append(w)
        return recorded

    def _write_fenced(self, doubts: Sequence[Doubt], now: float) -> None:
        """(In a transaction.) The ``fenced`` lines of the outcomes of *doubts*, held by this
        worker for runs taken over meanwhile (:attr:`Settling.fenced`)."""
        lines = []
        for d in doubts:
            assert d.done is not None and d.outcome is not None  # (as settle takes them)
            lines.append(fenced_line(self.worker_id, d.work, d.done, d.outcome, now))
        if lines:
            self.store.append_history(lines)

    def _record_one(self, w: Work, now: float, *, go_on: bool) -> None:
        """(In a transaction.) Record the outcome of *w*'s attempt and save the run: with
        *go_on*, with the run's next move (an attempt begun, maybe); else the run released,
        due at once if still active (its next move is another worker's), an operator's request
        applied (which begins no attempt). A fenced worker leaves a ``fenced`` line instead."""
        done, outcome, run = w.pending, w.outcome, w.loaded.run
        assert outcome is not None
        try:
            self._outcomes.record(w, outcome, now)
        except Exception as exc:
            self._outcomes.unreadable(w, exc, now)
        else:
            if go_on:
                self._transitions.advance_safely(w, now)
            else:
                self._transitions.apply_request(w.loaded, now)
        if not go_on and run.lease_owner is not None:
            self._outcomes.release(w, now if run.status in ACTIVE else None, now)
        self._save(w)
        if w.lost and done is not None:
            self.store.append_history([fenced_line(self.worker_id, w, done, outcome, now)])

    @contextlib.contextmanager
    def _transaction(self, take: Callable[[], _T]) -> Iterator[_T]:
        """A transaction whose first statement, *take*, takes the rows it writes (a claim, or
        the lock of :meth:`Store.lock_runs`) and reads the time; yields what *take* returned.

        A conflict there (:meth:`Store.conflict`: a deadlock, a serialization failure, a lock
        timeout) is not an outage: nothing is written and nothing in this worker has changed
        yet, so the transaction is tried again at once, up to :data:`CONFLICT_RETRIES` times,
        and the outcomes it records are recorded, not left to run again after their leases.
        PostgreSQL's documentation asks as much of its applications (section 13.4,
        "Serialization Failure Handling": retry the complete transaction on SQLSTATE 40001 or
        40P01). Each retry comes after a short pause with full jitter, so that two transactions
        that collided do not collide again in step. A conflict later (in the writes, or at the
        commit) raises.
        """
        store = self.store
        for retry in range(CONFLICT_RETRIES + 1):
            taking = True
            try:
                with store.transaction():
                    taken = take()
                    taking = False
                    yield taken
                return
            except Exception as exc:
                if not taking or retry == CONFLICT_RETRIES or not store.conflict(exc):
                    raise
                pause = self._rng.uniform(0.0, CONFLICT_PAUSE * 2**retry)
                logger.info(
                    "saga worker %s: a transaction lost a conflict with another (%s); "
                    "trying again in %.3f s",
                    self.worker_id,
                    escape_controls(error_summary(exc)),
                    pause,
                )
            self.clock.sleep(pause)

    def _save(self, w: Work) -> None:
        """Write the run (in the open transaction); apply an operator's request first if one
        arrived while the attempt ran."""
        loaded, run = w.loaded, w.loaded.run
        for _ in range(3):
            answer = self.store.save(loaded, w.token)
            if answer is None:
                w.token = run.token
                return
            if answer == "lost":
                w.lost = True
                w.pending = None
                logger.warning(
                    "saga %s run %s: the lease was lost (another worker holds the run); "
                    "this worker's outcome is not recorded",
                    run.saga,
                    run.run_id,
                )
                return
            # A request that arrived between the check and the write: the attempt just planned
            # stays in the history, and the operation applies on top (advance applies it).
            self._transitions.advance(w, self.store.now())
        raise RuntimeError(f"run {run.run_id!r}: could not save")  # pragma: no cover

    def emit(self, events: list[SagaEvent]) -> None:
        """Tell the hooks (a failing hook is logged and changes nothing)."""
        emit(self.hooks, events)

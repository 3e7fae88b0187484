"""The orchestrator: a durable driver over :class:`seawall.lowlevel.RetryState`.

For each step, the step's :class:`~seawall.RetryPolicy` decides (through the sans-I/O core):
whether an error is retried, after which delay, whether the step's time or the budget allows
it. The orchestrator stores each decision, then acts on it: an attempt starts only once the log
says it started, and a wait is a ``next_retry_at`` in the log, which any worker picks up when it
is due. The retry state itself travels in the step's row (``RetryState.snapshot`` /
``restore``), so a restart, a deploy or another worker continues the same backoff.

Times in the log are wall-clock seconds since the epoch: ``time.time()`` with the system
clock, or a :class:`~seawall.VirtualClock`'s ``now()`` (read as seconds since the epoch). The
retry states run on that same timeline, so their deadlines and retry times need no conversion.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock, SystemClock, VirtualClock
from seawall._core.errors import error_summary
from seawall.saga._execution import Executor, Heartbeat
from seawall.saga._hooks import Hook, emit, logging_hook
from seawall.saga._model import (
    HistoryEntry,
    Run,
    Saga,
    SagaEvent,
    Status,
    check_json,
)
from seawall.saga._operations import ACTIVE, SETTLED, operate, unknown_status
from seawall.saga._rows import HistoryRow, Loaded, RunRow, StepRow, dumps, to_history, to_run
from seawall.saga._store import Store
from seawall.saga._stores import open_store
from seawall.saga._transitions import Transitions
from seawall.saga._work import Outcome, Pending, Work

__all__ = ["Orchestrator"]

logger = logging.getLogger("seawall.saga")

S = Status
#: The shortest idle wait of a worker that found due work it could not claim (seconds).
MIN_IDLE: Final = 0.01
_MAX_RUN_ID = 200


def changed_reason(run: RunRow, names: Sequence[str], versions: dict[int, Saga]) -> str:
    """Why a run cannot go on here: what changed between the definition it started under (its
    step rows' *names*) and the newest one registered, in words a person can act on."""
    started = f"version {run.version}" if isinstance(run.version, int) else "its first version"
    if not versions:  # pragma: no cover - runs are claimed for registered sagas only
        return f"saga {run.saga!r} is not registered in this worker"
    newest = versions[max(versions)]
    new = list(newest.names)
    changes = []
    for i, name in enumerate(names):
        if name not in new:
            changes.append(f"step {name!r} is gone")
        elif new.index(name) != i:
            changes.append(f"step {name!r} is now at position {new.index(name) + 1}")
    changes += [f"step {name!r} is new" for name in new if name not in names]
    if not changes:
        changes.append(f"version {newest.version} has the same steps")
    shown = "; ".join(changes[:3]) + ("; ..." if len(changes) > 3 else "")
    registered = ", ".join(str(v) for v in sorted(versions))
    return (
        f"saga {run.saga!r} changed under run {run.run_id!r}: {shown} (the run started under "
        f"{started}; this worker has version {registered}). Register the definition it started "
        "under beside the new one to let it finish, or cancel it"
    )


# -- the orchestrator ---------------------------------------------------------------------------


class Orchestrator:
    """Runs sagas from a durable log; every process that runs steps creates one.

    Args:
        url: the store: ``"sqlite:///path.db"`` (the default kind, embedded) or
            ``"postgresql://user@host/db"`` (extra ``postgres``; many workers, many machines).
            The library creates and migrates its tables, and refuses a store of a newer schema.
        sagas: the sagas this process runs (runs of other sagas in the store are left alone).
            Several versions of one saga may be given (``Saga(..., version=2)``): a run goes on
            with the definition it started under, and new runs start with the highest
            version. A run whose definition is not given parks as NEEDS_ATTENTION with a
            reason; no function ever runs for another step's row.
        lease: seconds a claimed run stays claimed by its worker, on the store's clock
            (renewed while an attempt runs); after a crash, the run waits this long at most.
        clock: the worker's clock, for its waits and each attempt's time limit: the system
            clock (default), or a :class:`~seawall.VirtualClock` whose ``now()`` is read as
            seconds since the epoch.
        store_clock: the clock on which leases and due times are judged. By default the
            store's own: PostgreSQL's ``clock_timestamp()``; for SQLite (one machine)
            ``time.time()``; with a virtual *clock*, that clock. Give one only to simulate
            workers whose clocks disagree.
        batch: runs claimed together, in one commit.
        concurrency: attempts run at once (threads for ``def`` steps, tasks for ``async def``
            ones; default 1). Their outcomes share commits, each with the start of the next
            attempt, so a higher value runs fast steps several times faster; but an attempt
            counts once its start is committed, and a crash may repeat the side effects of as
            many attempts as ran at once (finished, not yet recorded).
        hooks: callables receiving a :class:`~seawall.saga.SagaEvent` after each attempt and
            run status change is in the log; ``None`` means the logging hook.
        poll: longest idle wait of :meth:`work` between looks at the store (seconds).
        worker_id: how leases name this worker (default: host, pid and a random suffix).

    Raises:
        TypeError, ValueError: a parameter is invalid, the store's scheme is unknown, two sagas
            share a name and version, or the store holds another step list under a name and
            version given here.
        SchemaVersionError: the store was written by a newer seawall.
    """

    def __init__(
        self,
        url: str,
        sagas: Sequence[Saga],
        *,
        lease: float = 30.0,
        clock: Clock | None = None,
        store_clock: Clock | None = None,
        batch: int = 32,
        concurrency: int = 1,
        hooks: Sequence[Hook] | None = None,
        poll: float = 1.0,
        worker_id: str | None = None,
    ) -> None:
        if isinstance(sagas, Saga) or not isinstance(sagas, Iterable):
            raise TypeError(f"sagas must be a sequence of saga.Saga, got {sagas!r}")
        versions: dict[str, dict[int, Saga]] = {}
        for s in sagas:
            if not isinstance(s, Saga):
                raise TypeError(f"sagas must be saga.Saga objects, got {s!r}")
            if s.version in versions.setdefault(s.name, {}):
                raise ValueError(f"sagas: two sagas are named {s.name!r} with version {s.version}")
            versions[s.name][s.version] = s
        # New runs start with the highest version of each saga.
        known = {name: by[max(by)] for name, by in versions.items()}
        self.lease = _validate.seconds("lease", lease, zero=False, finite=True)
        self.poll = _validate.seconds("poll", poll, zero=False, finite=True)
        self.batch = _validate.count("batch", batch, minimum=1)
        self.concurrency = _validate.count("concurrency", concurrency, minimum=1)
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        if store_clock is not None and not isinstance(store_clock, Clock):
            raise TypeError(f"store_clock must implement seawall.Clock, got {store_clock!r}")
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._wall: Callable[[], float] = (
            time.time if type(self.clock) is SystemClock else self.clock.now
        )
        if hooks is None:
            self._hooks: tuple[Hook, ...] = (logging_hook,)
        else:
            if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence):
                raise TypeError(f"hooks must be a sequence of callables, got {hooks!r}")
            for h in hooks:
                if not callable(h):
                    raise TypeError(f"hooks must be callables, got {h!r}")
            self._hooks = tuple(hooks)
        if worker_id is None:
            worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        elif not isinstance(worker_id, str) or not worker_id:
            raise TypeError(f"worker_id must be a non-empty str or None, got {worker_id!r}")
        self.worker_id = worker_id
        #: The newest version of each saga, by name (what :meth:`start` starts).
        self.sagas: dict[str, Saga] = known
        self._versions = versions
        self._saga_names = tuple(known)
        if store_clock is None and isinstance(self.clock, VirtualClock):
            store_clock = self.clock
        self._store = open_store(url, None if store_clock is None else store_clock.now)
        try:
            with self._store.transaction():
                for by in versions.values():
                    for s in by.values():
                        self._store.register(s.name, s.version, s.fingerprint, s.names)
        except BaseException:
            self._store.close()
            raise
        # A keeper process renews the leases on the system clock, with the store's own clock.
        heartbeat = Heartbeat(
            lambda: self._store,
            self.lease,
            use_process=type(self.clock) is SystemClock and store_clock is None,
        )
        self._execution = Executor(self.clock, self.concurrency, heartbeat)
        self._transitions = Transitions(self.lease, self.worker_id, bool(self._hooks))
        # Decisions and attempts run in a context of the orchestrator's own: a durable run does
        # not inherit the ambient deadline or one_attempt() of whoever called run_due().
        self._context = contextvars.Context()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store (its ``commits`` counts transactions committed through it)."""
        return self._store

    def close(self) -> None:
        """Close the store's connections (runs in progress are taken over once their leases
        expire)."""
        if self._closed:
            return
        self._closed = True
        self._execution.close()
        self._store.close()

    def __enter__(self) -> Orchestrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<saga.Orchestrator {self._store.redacted()} sagas={list(self.sagas)}>"

    # -- starting and reading -----------------------------------------------------------------

    def start(self, name: str, input: Any = None, run_id: str | None = None) -> str:
        """Start a run of the saga *name*; durable when this returns.

        Args:
            name: a saga given to this orchestrator.
            input: the run's input, JSON data (steps read it as ``ctx.input``).
            run_id: the run's id (default: a random one). Starting again with the same id,
                saga and input returns the id without starting a second run.

        Returns:
            The run's id.

        Raises:
            ValueError: unknown saga, or *run_id* names a run of another saga or input.
            TypeError: *input* is not JSON data, or *run_id* is not a str.
        """
        return self.start_many(name, [input], None if run_id is None else [run_id])[0]

    def start_many(
        self, name: str, inputs: Sequence[Any], run_ids: Sequence[str] | None = None
    ) -> list[str]:
        """Start several runs of the saga *name* in one transaction (one commit); durable when
        this returns. Like :meth:`start` for each, and all or nothing: when one input is not
        JSON or one run id is taken by another saga or input, no run is started.

        Returns:
            The runs' ids, in order.
        """
        saga = self.sagas.get(name) if isinstance(name, str) else None
        if saga is None:
            raise ValueError(
                f"name: unknown saga {name!r}; this orchestrator runs: "
                f"{', '.join(map(repr, self.sagas)) or 'none'}"
            )
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
            raise TypeError(f"inputs must be a sequence of JSON inputs, got {inputs!r}")
        if run_ids is not None and (
            isinstance(run_ids, (str, bytes))
            or not isinstance(run_ids, Sequence)
            or len(run_ids) != len(inputs)
        ):
            raise ValueError("run_ids must be None or a sequence as long as inputs")
        now = self._store.now()
        items: list[Loaded] = []
        for k, value in enumerate(inputs):
            what = "input" if len(inputs) == 1 else f"inputs[{k}]"
            check_json(value, what)
            run_id = None if run_ids is None else run_ids[k]
            items.append(self._new_run(saga, dumps(value), run_id, now))
        ids = [item.run.run_id for item in items]
        if len(set(ids)) != len(ids):
            raise ValueError("run_ids: the same run id is given twice")
        texts = [item.run.input for item in items]
        with self._store.transaction():
            found = [self._store.insert(item) for item in items]
            for existing, run_id, text in zip(found, ids, texts, strict=True):
                if existing is not None and (
                    existing.saga != name or json.loads(existing.input) != json.loads(text)
                ):
                    raise ValueError(  # rolls back the whole transaction: nothing is written
                        f"run_id {run_id!r} is already a run of saga {existing.saga!r} with "
                        "another saga or input"
                    )
        self._emit(
            [
                SagaEvent("run", saga.name, run_id, None, None, 0, None, None, None, S.RUNNING, 0.0)
                for run_id, existing in zip(ids, found, strict=True)
                if existing is None
            ]
        )
        return ids

    def _new_run(self, saga: Saga, text: str, run_id: str | None, now: float) -> Loaded:
        if run_id is None:
            run_id = uuid.uuid4().hex
        elif not isinstance(run_id, str):
            raise TypeError(f"run_id must be a str or None, got {run_id!r}")
        elif not run_id or len(run_id) > _MAX_RUN_ID or not run_id.isprintable():
            raise ValueError(
                f"run_id must be 1 to {_MAX_RUN_ID} printable characters, got {run_id!r}"
            )
        name = saga.name
        run = RunRow(
            (
                run_id,
                name,
                S.RUNNING.value,
                text,
                None,
                now,
                now,
                now,
                None,
                0,
                None,
                saga.version,
                saga.fingerprint,
            )
        )
        steps = [
            StepRow(
                (
                    run_id,
                    i,
                    step.name,
                    S.PENDING.value,
                    0,
                    0,
                    0,
                    None,
                    None,
                    None,
                    None,
                    f"{run_id}:{step.name}",
                    None,
                    None,
                    now,
                )
            )
            for i, step in enumerate(saga.steps)
        ]
        loaded = Loaded(run, steps)
        loaded.history.append(
            (
                run_id,
                now,
                None,
                None,
                "started",
                None,
                None,
                None,
                dumps({"saga": name, "version": saga.version, "fingerprint": saga.fingerprint}),
            )
        )
        return loaded

    def get(self, run_id: str) -> Run:
        """The run as the log has it now.

        Raises:
            KeyError: no such run.
        """
        loaded = self._store.load(run_id)
        if loaded is None:
            raise KeyError(f"no run {run_id!r} in {self._store.redacted()}")
        return to_run(loaded)

    def history(self, run_id: str) -> tuple[HistoryEntry, ...]:
        """The run's append-only history: every attempt, wait, compensation and operation."""
        return to_history(self._store.history(run_id))

    def runs(
        self, status: Status | str | None = None, *, saga: str | None = None, limit: int = 100
    ) -> list[Run]:
        """The latest runs (most recently changed first), optionally of one status or saga."""
        _validate.count("limit", limit, minimum=1)
        value = None if status is None else Status(status).value
        return [to_run(item) for item in self._store.runs(value, saga, limit)]

    def counts(self) -> dict[Status, int]:
        """How many runs the store holds in each status (of every saga)."""
        return {Status(k): v for k, v in self._store.counts().items()}

    # -- operations ---------------------------------------------------------------------------

    def retry_now(self, run_id: str) -> Run:
        """Make the run's waiting attempt due now; for a NEEDS_ATTENTION run, try the step (or
        compensation) that gave up again, with a fresh retry state."""
        return self._operate(run_id, "retry_now")

    def compensate(self, run_id: str) -> Run:
        """Stop the run's steps and compensate the finished ones, in reverse order."""
        return self._operate(run_id, "compensate")

    def cancel(self, run_id: str) -> Run:
        """Stop the run where it is: no step or compensation runs for it again (FAILED)."""
        return self._operate(run_id, "cancel")

    def _operate(self, run_id: str, operation: str) -> Run:
        operate(self._store, run_id, operation)
        return self.get(run_id)

    # -- running ------------------------------------------------------------------------------

    def run_due(self) -> int:
        """Run every attempt (of a step or a compensation) due now, until none is due.

        Returns:
            How many attempts ran.
        """
        ran = 0
        while True:
            claimed, count = self._round(None)
            ran += count
            if not claimed:
                return ran

    def run_until_settled(self, run_id: str) -> Run:
        """Drive one run until it is SUCCEEDED, COMPENSATED, FAILED or NEEDS_ATTENTION,
        sleeping on the orchestrator's clock between attempts.

        Raises:
            KeyError: no such run.
            ValueError: the run's saga is not one of this orchestrator's.
        """
        while True:
            loaded = self._store.load(run_id)
            if loaded is None:
                raise KeyError(f"no run {run_id!r} in {self._store.redacted()}")
            run = loaded.run
            if run.status in SETTLED or run.status not in ACTIVE:
                return to_run(loaded)  # over, or in a status only a newer seawall runs
            if run.saga not in self.sagas:
                raise ValueError(f"run {run_id!r} is of saga {run.saga!r}, unknown here")
            claimed, _ = self._round(run_id)
            if claimed:
                continue
            now = self._store.now()
            due = run.due_at if run.due_at is not None else now + self.poll
            wait = due - now
            if type(self.clock) is SystemClock:
                wait = min(wait, self.poll)  # another process may change the run meanwhile
            if wait > 0:
                self.clock.sleep(wait)

    def work(self, stop: threading.Event | None = None) -> int:
        """A worker loop: claim due work, run it, until *stop* is set; returns attempts run.

        Between claims it waits on *stop* (system clock) or sleeps on the virtual clock, until
        the next due time, at most ``poll`` seconds.
        """
        if stop is not None and not callable(getattr(stop, "is_set", None)):
            raise TypeError(f"stop must be a threading.Event or None, got {stop!r}")
        ran = 0
        while stop is None or not stop.is_set():
            try:
                claimed, count = self._round(None)
                ran += count
                if claimed:
                    continue
                due = self._next_due()
            except Exception as exc:
                # The store went away (a restart, a failover, a full disk): the log keeps every
                # run; this worker reconnects and goes on. Its attempts in flight are recorded as
                # lost by whoever claims their runs after the leases expire.
                if not self._store.unavailable(exc):
                    raise
                logger.warning(
                    "saga worker %s: the store is unavailable (%s); trying again in %.1f s",
                    self.worker_id,
                    error_summary(exc),
                    self.poll,
                )
                self._reconnect()
                due = None
            wait = self.poll if due is None else min(self.poll, due - self._store_now())
            # Due but not claimed: other workers hold those rows for a moment.
            wait = max(wait, MIN_IDLE)
            if stop is not None and type(self.clock) is SystemClock:
                stop.wait(wait)
            else:
                self.clock.sleep(wait)
        return ran

    def _reconnect(self) -> None:
        try:
            store = self._store.clone()
        except Exception as exc:
            if not self._store.unavailable(exc):
                raise
            return  # still down: the next round tries again
        with contextlib.suppress(Exception):
            self._store.close()
        self._store = store

    def _next_due(self) -> float | None:
        return self._store.next_due(self._saga_names)

    def _store_now(self) -> float:
        try:
            return self._store.now()
        except Exception as exc:
            if not self._store.unavailable(exc):
                raise
            return self._wall()  # only to size an idle wait while the store is away

    def _definition(self, loaded: Loaded) -> tuple[Saga | None, str | None]:
        """The definition *loaded* started under, or ``None`` and why it is not here."""
        run = loaded.run
        versions = self._versions.get(run.saga, {})
        names = [row.name for row in loaded.steps]
        if run.fingerprint is not None:
            saga = versions.get(run.version) if isinstance(run.version, int) else None
            if (
                saga is not None
                and saga.fingerprint == run.fingerprint
                and list(saga.names) == names
            ):
                return saga, None
        else:
            # A run of the first schema recorded no definition: the newest version with the
            # same step names is the one it started under (and is recorded now).
            for version in sorted(versions, reverse=True):
                saga = versions[version]
                if list(saga.names) == names:
                    run.version, run.fingerprint = saga.version, saga.fingerprint
                    return saga, None
        return None, changed_reason(run, names, versions)

    # -- one round: claim, then run and record until every claimed run is released ------------

    def _round(self, run_id: str | None) -> tuple[int, int]:
        return self._context.run(self._claim_and_run, run_id)

    def _claim_and_run(self, run_id: str | None) -> tuple[int, int]:
        store = self._store
        self._execution.heartbeat.prepare()
        works: list[Work] = []
        # Claimed runs beyond `concurrency` wait here, leased but not begun: each one's attempt
        # begins (and counts) in the commit that records another's outcome, when a slot frees.
        queued: collections.deque[Work] = collections.deque()
        with store.transaction():
            now = store.now()
            busy = 0
            for loaded in store.claim(now, 1 if run_id else self.batch, self._saga_names, run_id):
                problem = unknown_status(loaded)
                saga = None
                if problem is None:
                    saga, problem = self._definition(loaded)
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
        self._emit([e for w in works for e in w.events])
        for w in works:
            w.events = []
        ran = 0
        pending = [w for w in works if w.pending is not None and not w.lost]
        running: dict[concurrent.futures.Future[Outcome], Work] = {}
        try:
            while pending or running or queued:
                self._execution.start(pending, running, queued)
                finished = self._execution.finished(running) if running else []
                ran += len(finished)
                pending = self._record_all(finished, queued, self.concurrency - len(running))
        finally:
            self._execution.heartbeat.release()
        return len(works), ran

    def _record_all(
        self, pending: list[Work], queued: collections.deque[Work], free: int
    ) -> list[Work]:
        """Record the outcomes of *pending* (``w.outcome``) and begin what follows, in one
        transaction: their runs' next attempts, then queued runs' while fewer than *free*
        attempts began. Returns the works whose attempts began."""
        if not pending and not (queued and free > 0):
            return []
        store = self._store
        begun: list[Work] = []
        with store.transaction():
            now = store.now()
            asked = store.requested([w.loaded.run.run_id for w in pending])
            for w in pending:
                outcome = w.outcome
                assert outcome is not None
                w.loaded.run.requested = asked.get(w.loaded.run.run_id)
                done = w.pending
                try:
                    self._transitions.record(w, outcome, now)
                except Exception as exc:
                    self._transitions.unreadable(w, exc, now)
                else:
                    self._transitions.advance_safely(w, now)
                self._save(w)
                if w.lost and done is not None:
                    store.append_history([self._fenced(w, done, outcome, now)])
            begun = [w for w in pending if w.pending is not None and not w.lost]
            while queued and len(begun) < free:
                w = queued.popleft()
                if w.lost:  # pragma: no cover - a queued run is written only at its claim
                    continue
                w.loaded.run.requested = store.requested([w.loaded.run.run_id]).get(
                    w.loaded.run.run_id
                )
                self._transitions.advance_safely(w, now)
                self._save(w)
                pending.append(w)
                if w.pending is not None and not w.lost:
                    begun.append(w)
        self._emit([e for w in pending for e in w.events])
        for w in pending:
            w.events = []
        return begun

    def _save(self, w: Work) -> None:
        """Write the run (in the open transaction); apply an operator's request first if one
        arrived while the attempt ran."""
        loaded, run = w.loaded, w.loaded.run
        for _ in range(3):
            answer = self._store.save(loaded, w.token)
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
            self._transitions.advance(w, self._store.now())
        raise RuntimeError(f"run {run.run_id!r}: could not save")  # pragma: no cover

    def _fenced(
        self, w: Work, done: Pending, outcome: tuple[bool, Any, float], now: float
    ) -> HistoryRow:
        """The history line of an attempt whose outcome is not recorded: its worker's lease
        was taken (fencing); the log still says what it did."""
        ok, value, duration = outcome
        error = None if ok else error_summary(value)
        return (
            w.loaded.run.run_id,
            now,
            done.ctx.step,
            done.phase,
            "fenced",
            done.ctx.attempt,
            None,
            error,
            dumps(
                {
                    "worker": self.worker_id,
                    "outcome": "success" if ok else "failure",
                    "duration": round(duration, 6),
                }
            ),
        )

    def _emit(self, events: list[SagaEvent]) -> None:
        emit(self._hooks, events)

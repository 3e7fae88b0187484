"""The orchestrator: the public API of sagas (start runs, read them, operate on them), over a
worker (:mod:`._worker`) that runs them from the durable log.

Each step's :class:`~seawall.RetryPolicy` decides through the sans-I/O core
(:class:`seawall.lowlevel.RetryState`); each decision is in the log before it is acted on
(:mod:`._transitions`), so a restart, a deploy or another worker continues the same backoff.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock, SystemClock, VirtualClock
from seawall._core.compat import running_trio
from seawall.saga._hooks import Hook, logging_hook
from seawall.saga._model import (
    MAX_PAYLOAD_BYTES,
    HistoryEntry,
    Run,
    Saga,
    SagaEvent,
    Status,
    WaitFor,
    check_payload,
)
from seawall.saga._operations import OVERDUE_AFTER, operate, run_status
from seawall.saga._rows import HistoryRow, Loaded, RunRow, StepRow, dumps, to_history, to_run
from seawall.saga._signals import send_signal
from seawall.saga._store import Store
from seawall.saga._stores import open_store
from seawall.saga._worker import Worker

__all__ = ["Orchestrator"]

T = TypeVar("T")

S = Status
_MAX_RUN_ID = 200
#: The highest ``max_payload_bytes`` accepted: a row's JSON text is read whole into memory.
_MAX_PAYLOAD_LIMIT = 1 << 30


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
        max_payload_bytes: the largest run input, step result and signal data, in bytes of
            compact JSON (default :data:`~seawall.saga.MAX_PAYLOAD_BYTES`, 1 MiB). Over it,
            :meth:`start` and :meth:`signal` raise ``ValueError``, and a step's result is a
            permanent failure of the step. Lists and objects nest at most
            :data:`~seawall.saga.MAX_DEPTH` deep, checked the same way.

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
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
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
        #: The largest input, step result and signal data, in bytes of JSON.
        self.max_payload_bytes = _validate.count(
            "max_payload_bytes", max_payload_bytes, minimum=64, maximum=_MAX_PAYLOAD_LIMIT
        )
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        if store_clock is not None and not isinstance(store_clock, Clock):
            raise TypeError(f"store_clock must implement seawall.Clock, got {store_clock!r}")
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
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
        if store_clock is None and isinstance(self.clock, VirtualClock):
            store_clock = self.clock
        store = open_store(url, None if store_clock is None else store_clock.now)
        try:
            with store.transaction():
                for by in versions.values():
                    for s in by.values():
                        store.register(s.name, s.version, s.fingerprint, s.names)
        except BaseException:
            store.close()
            raise
        self._worker = Worker(
            store,
            versions,
            lease=self.lease,
            batch=self.batch,
            concurrency=self.concurrency,
            clock=self.clock,
            worker_id=self.worker_id,
            hooks=self._hooks,
            # A keeper process renews the leases on the system clock, with the store's own clock.
            keeper=type(self.clock) is SystemClock and store_clock is None,
            max_payload_bytes=self.max_payload_bytes,
        )
        self._closed = False
        # The thread of the async methods (made on first use): one, so that calls from many
        # tasks use the store one at a time, as the orchestrator's other callers do.
        self._async_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._async_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store (its ``commits`` counts transactions committed through it)."""
        return self._worker.store

    def close(self) -> None:
        """Close the store's connections. Should this worker's last round have ended with an
        error (the store away, a commit failed), what it left is recorded first if the store
        answers: outcomes it holds, and its leases of runs it will not run ended, so that other
        workers take them over at once (else once the leases expire)."""
        with self._async_lock:
            if self._closed:
                return
            self._closed = True
            thread, self._async_thread = self._async_thread, None
        if thread is not None:
            thread.shutdown(wait=True)  # the calls in flight finish before the store closes
        self._worker.close()

    def __enter__(self) -> Orchestrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<saga.Orchestrator {self.store.redacted()} sagas={list(self.sagas)}>"

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
            ValueError: unknown saga, *run_id* names a run of another saga or input, or
                *input* is larger than ``max_payload_bytes`` or nested too deep.
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
        now = self.store.now()
        items: list[Loaded] = []
        for k, value in enumerate(inputs):
            what = "input" if len(inputs) == 1 else f"inputs[{k}]"
            text = check_payload(value, what, self.max_payload_bytes)
            run_id = None if run_ids is None else run_ids[k]
            items.append(self._new_run(saga, text, run_id, now))
        ids = [item.run.run_id for item in items]
        if len(set(ids)) != len(ids):
            raise ValueError("run_ids: the same run id is given twice")
        texts = [item.run.input for item in items]

        def check(found: list[RunRow | None]) -> None:
            for existing, run_id, text in zip(found, ids, texts, strict=True):
                if existing is not None and (
                    existing.saga != name or json.loads(existing.input) != json.loads(text)
                ):
                    raise ValueError(  # rolls back every run of this call: nothing is written
                        f"run_id {run_id!r} is already a run of saga {existing.saga!r} with "
                        "another saga or input"
                    )

        found = self.store.start_runs(items, check)
        self._worker.emit(
            [
                SagaEvent(
                    kind="run",
                    saga=saga.name,
                    run_id=run_id,
                    step=None,
                    phase=None,
                    attempt=0,
                    error=None,
                    delay=None,
                    reason=None,
                    status=S.RUNNING,
                    duration=0.0,
                )
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
            run_id=run_id,
            saga=name,
            status=S.RUNNING.value,
            input=text,
            reason=None,
            created_at=now,
            updated_at=now,
            due_at=now,
            lease_owner=None,
            token=0,
            requested=None,
            version=saga.version,
            fingerprint=saga.fingerprint,
            deadline=None if saga.timeout is None else now + saga.timeout,
        )
        steps = [
            StepRow(
                run_id=run_id,
                position=i,
                name=step.name,
                status=S.PENDING.value,
                running=False,
                attempt_count=0,
                compensation_attempt_count=0,
                next_retry_at=None,
                last_error=None,
                result=None,
                retry_state=None,
                idempotency_key=f"{run_id}:{step.name}",
                started_at=None,
                finished_at=None,
                updated_at=now,
            )
            for i, step in enumerate(saga.steps)
        ]
        loaded = Loaded(run, steps)
        loaded.history.append(
            HistoryRow(
                run_id=run_id,
                at=now,
                event="started",
                detail=dumps(
                    {"saga": name, "version": saga.version, "fingerprint": saga.fingerprint}
                ),
            )
        )
        return loaded

    def get(self, run_id: str) -> Run:
        """The run as the log has it now.

        Raises:
            KeyError: no such run.
        """
        loaded = self.store.load(run_id)
        if loaded is None:
            raise KeyError(f"no run {run_id!r} in {self.store.redacted()}")
        return to_run(loaded)

    def history(self, run_id: str) -> tuple[HistoryEntry, ...]:
        """The run's append-only history: every attempt, wait, compensation and operation."""
        return to_history(self.store.history(run_id))

    def runs(
        self,
        status: Status | str | None = None,
        *,
        saga: str | None = None,
        limit: int = 100,
        stuck: bool = False,
        older_than: float | None = None,
        error_contains: str | None = None,
        overdue_after: float = OVERDUE_AFTER,
    ) -> list[Run]:
        """The latest runs (most recently changed first) that match every filter given.

        Args:
            status: only runs in this status (a :class:`Status` or its name, any case); one no
                run can be in (a typo, or a step's status such as PENDING) is a ``ValueError``
                that lists the run statuses.
            saga: only runs of this saga.
            limit: at most this many runs.
            stuck: only runs that wait for a person or a worker: NEEDS_ATTENTION, or overdue
                (see *overdue_after*).
            older_than: only runs unchanged for at least this many seconds.
            error_contains: only runs whose reason or a step's last error contains this text
                (case-insensitive for ASCII letters).
            overdue_after: seconds a run's due work may wait unclaimed before it is overdue;
                a run whose lease expired is overdue at once. Times are the store's.
        """
        _validate.count("limit", limit, minimum=1)
        value = None if status is None else run_status(status).value
        if saga is not None and not isinstance(saga, str):
            raise TypeError(f"saga must be a str or None, got {saga!r}")
        if error_contains is not None and not isinstance(error_contains, str):
            raise TypeError(f"error_contains must be a str or None, got {error_contains!r}")
        overdue_after = _validate.seconds("overdue_after", overdue_after, finite=True)
        if older_than is not None:
            older_than = _validate.seconds("older_than", older_than, finite=True)
        found = self.store.find_runs(
            self.store.now(),
            status=value,
            saga=saga,
            stuck_after=overdue_after if stuck else None,
            older_than=older_than,
            error_contains=error_contains or None,
            limit=limit,
        )
        return [to_run(item) for item in found]

    def counts(self) -> dict[Status, int]:
        """How many runs the store holds in each status (of every saga)."""
        return {Status(k): v for k, v in self.store.counts().items()}

    def counts_by_saga(self, overdue_after: float = OVERDUE_AFTER) -> dict[str, dict[str, int]]:
        """How many runs each saga has in each status (keys: the status values), and under
        ``"overdue"``, how many of its runs are overdue (see :meth:`runs`); sagas of every
        version and of other orchestrators included.
        """
        overdue_after = _validate.seconds("overdue_after", overdue_after, finite=True)
        return self.store.counts_by_saga(self.store.now(), overdue_after)

    # -- operations ---------------------------------------------------------------------------

    def retry_now(self, run_id: str, *, force: bool = False) -> Run:
        """Make the run's waiting attempt due now; for a NEEDS_ATTENTION run, try the step (or
        compensation) that gave up again, with a fresh retry state.

        While a worker holds the run, the retry is a request it applies after its attempt;
        *force* breaks its lease instead (a worker known to be dead or hung): the run can be
        claimed at once, and the old worker's outcome, if it ever comes, is not recorded.
        """
        return self._operate(run_id, "retry_now", force)

    def compensate(self, run_id: str, *, force: bool = False) -> Run:
        """Stop the run's steps and compensate the finished ones, in reverse order (*force*:
        as for :meth:`retry_now`)."""
        return self._operate(run_id, "compensate", force)

    def cancel(self, run_id: str, *, force: bool = False) -> Run:
        """Stop the run where it is: no step or compensation runs for it again (FAILED)
        (*force*: as for :meth:`retry_now`)."""
        return self._operate(run_id, "cancel", force)

    def signal(self, run_id: str, name: str, data: Any = None) -> bool:
        """Send the signal *name*, with *data* (JSON), to the run *run_id*: the run's
        :class:`~seawall.saga.WaitFor` step of that name ends with *data* as its result (the
        steps after it read ``ctx.results[name]``). Durable when this returns.

        A signal sent before the wait began is kept and ends the wait as soon as it begins.
        Signals are idempotent: the first one of a name is kept; another of the same name
        changes nothing and returns ``False`` (its data is not compared).

        Returns:
            ``True`` if the signal was kept, ``False`` for a duplicate.

        Raises:
            KeyError: no such run.
            ValueError: the run is over (SUCCEEDED, COMPENSATED or FAILED); the step *name* is
                not one of its waits, or its wait is over (timed out); *data* is larger than
                ``max_payload_bytes`` or nested too deep.
            TypeError: *run_id* or *name* is not a str, or *data* is not JSON data.
        """
        return send_signal(self.store, run_id, name, data, self.max_payload_bytes, self._waits)

    async def asignal(self, run_id: str, name: str, data: Any = None) -> bool:
        """:meth:`signal` for async code (asyncio or trio): the store is written in a thread of
        this orchestrator's, so the event loop runs on meanwhile; calls from several tasks at
        once run one after another. Durable when it returns; a call cancelled while it waits
        may still have kept the signal (send it again: a duplicate changes nothing).

        Returns and raises as :meth:`signal` does; ``RuntimeError`` once the orchestrator is
        closed.
        """
        return await self._in_thread(self.signal, run_id, name, data)

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the orchestrator's async thread, awaited without blocking the loop."""
        with self._async_lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            if self._async_thread is None:
                self._async_thread = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="seawall-saga-async"
                )
            future = self._async_thread.submit(fn, *args)
        if running_trio():
            import trio

            return await trio.to_thread.run_sync(future.result)
        return await asyncio.wrap_future(future)

    def _waits(self, saga: str, version: int | None) -> frozenset[str] | None:
        """The names of the waits of a definition registered here (``None``: not known)."""
        found = self._worker.versions.get(saga, {})
        definition = found.get(version) if isinstance(version, int) else None
        if definition is None:
            return None
        return frozenset(s.name for s in definition.steps if isinstance(s, WaitFor))

    def _operate(self, run_id: str, operation: str, force: bool = False) -> Run:
        if not isinstance(force, bool):
            raise TypeError(f"force must be a bool, got {force!r}")
        operate(self.store, run_id, operation, force=force)
        return self.get(run_id)

    # -- running ------------------------------------------------------------------------------

    def run_due(self) -> int:
        """Run every attempt (of a step or a compensation) due now, until none is due.

        Returns:
            How many attempts ran.
        """
        return self._worker.run_due()

    def run_until_settled(self, run_id: str) -> Run:
        """Drive one run until it is SUCCEEDED, COMPENSATED, FAILED or NEEDS_ATTENTION,
        sleeping on the orchestrator's clock between attempts.

        A run waiting for a signal is waited for (its timeout, the run's deadline, or a signal
        sent meanwhile ends the wait). On virtual time, a run waiting for a signal with neither
        a timeout nor a deadline is returned as it is (WAITING): the clock would move forever.

        Raises:
            KeyError: no such run.
            ValueError: the run's saga is not one of this orchestrator's.
        """
        return self._worker.run_until_settled(run_id, self.poll)

    def work(self, stop: threading.Event | None = None) -> int:
        """A worker loop: claim due work, run it, until *stop* is set; returns attempts run.

        Between claims it waits on *stop* (system clock) or sleeps on the virtual clock, until
        the next due time, at most ``poll`` seconds.
        """
        if stop is not None and not callable(getattr(stop, "is_set", None)):
            raise TypeError(f"stop must be a threading.Event or None, got {stop!r}")
        return self._worker.work(stop, self.poll)

"""The simulation's workers and the deterministic stand-ins for what a real worker process has:
its clock (:class:`SkewClock`), a store that dies at a planned commit, its lease renewal
(:class:`SimHeartbeat`) and its thread pool (:class:`InlineExecutor`)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import inspect
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sim_config import MAX_COMMITS, show

import seawall
from seawall import saga

if TYPE_CHECKING:
    from sim_schedule import Simulation


class SimulatedCrash(BaseException):
    """A worker dies here (a BaseException: it escapes the orchestrator as a kill would)."""

    def __init__(self, worker: Worker, where: str) -> None:
        super().__init__(f"{worker.wid} killed {where}")
        self.worker = worker


class SimulatedOutage(sqlite3.OperationalError):
    """The store lost at a commit point (an error every store takes for an outage)."""


class Runaway(BaseException):
    """The schedule called steps or committed far more than it can legitimately need."""


class SkewClock(seawall.VirtualClock):
    """A worker's clock: the shared virtual time plus an offset. A :class:`VirtualClock` to the
    orchestrator, so that its ``async def`` attempts run on a virtual event loop (on the
    worker's thread, deterministic); that loop's jumps move the shared time."""

    def __init__(self, base: seawall.VirtualClock, offset: float) -> None:
        self.base = base
        self.offset = offset
        super().__init__(base.now() + offset)

    @property  # type: ignore[override]
    def _now(self) -> float:
        return self.base.now() + self.offset

    @_now.setter
    def _now(self, value: float) -> None:
        self.base._now = value - self.offset

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        self.base.sleep(seconds)

    def __repr__(self) -> str:
        return f"SkewClock(offset={self.offset:+g})"


class _Crashing:
    """Mixed into a worker's store: counts its transactions and dies at the planned one."""

    sim_worker: Worker

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        w = self.sim_worker
        w.commits += 1
        n = w.commits
        if n > MAX_COMMITS:
            raise Runaway(f"{w.wid} began {n} transactions")
        plan = w.crash_commit if w.armed else None
        outage = w.outage_commit if w.armed and w.in_run_due else None
        with super().transaction():  # type: ignore[misc]
            yield
            if plan == (n, "before"):
                raise SimulatedCrash(w, f"before commit {n}")
            if outage == (n, "before"):
                raise SimulatedOutage(f"{w.wid}'s store lost before commit {n}")
        if plan == (n, "after"):
            raise SimulatedCrash(w, f"after commit {n}")
        if outage == (n, "after"):
            raise SimulatedOutage(f"{w.wid}'s store lost after commit {n}")


_CRASHING: dict[type, type] = {}


def make_crashing(store: Any, worker: Worker) -> None:
    """Turn *store* (the orchestrator's own) into an instance of a crashing subclass."""
    cls = type(store)
    sub = _CRASHING.get(cls)
    if sub is None:
        sub = _CRASHING[cls] = type(f"Crashing{cls.__name__}", (_Crashing, cls), {})
    store.__class__ = sub
    store.sim_worker = worker


class SimHeartbeat:
    """Stands in for the orchestrator's lease renewal (its thread, and its keeper process where
    it has one): renews the leases it holds when the harness ticks it, every third of the lease
    of virtual time that passes inside a step, never on its own, so a schedule stays
    deterministic. A starved worker's heartbeat is not ticked."""

    def __init__(self, orch: saga.Orchestrator, worker: Worker, *, late: bool = False) -> None:
        self.orch = orch
        self.worker = worker
        self.held: dict[str, int] = {}
        self.kept: dict[str, int] = {}  # leases of attempts still running after their round
        self.store: Any = None
        #: Sabotage: the leases are learnt only once the attempts begin (the order of old).
        self.late = late
        self.told: dict[str, int] | None = None

    def hold(self, leases: dict[str, int]) -> None:
        if self.late:
            self.told = dict(leases)
            return
        self.held = {**leases, **self.kept}

    def keep(self, run_id: str, token: int) -> None:
        self.kept[run_id] = token
        self.held[run_id] = token

    def let_go(self, run_id: str) -> None:
        self.kept.pop(run_id, None)
        self.held.pop(run_id, None)

    def learn(self) -> None:
        """Sabotaged: take the leases told (as the attempts begin)."""
        if self.told is not None:
            self.held, self.told = self.told, None

    def release(self) -> None:
        self.hold({})
        self.learn()

    def prepare(self) -> None:
        """Nothing to start: the harness ticks this heartbeat itself."""

    def tick(self) -> None:
        if not self.held:
            return
        if self.store is None:
            self.store = self.orch.store.clone()
        leases = list(self.held.items())
        if "due_at" in inspect.signature(self.store.renew).parameters:  # on the worker's clock
            self.store.renew(leases, self.worker.clock.now() + self.orch.lease)
        else:
            self.store.renew(leases, self.orch.lease)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


class InlineExecutor(concurrent.futures.Executor):
    """Stands in for the orchestrator's thread pool, so that a schedule stays deterministic.

    The heartbeat is told a group's leases, then its attempts are submitted; with threads each
    may begin the instant it is submitted, so its run's lease must be held by then (checked
    here: ``lease_unheld``). Here they begin together when the orchestrator waits for them
    (:meth:`Executor.finished <seawall.saga._execution.Executor.finished>`, which the harness
    has call :meth:`flush` first), then run one after another on the calling thread, in the
    order they were submitted: all of them begin before any outcome is recorded. Should the
    orchestrator ever wait for attempts some other way, a watchdog runs them after a few
    seconds and the schedule reports it (``harness_error``), rather than hanging.
    """

    def __init__(
        self, sim: Simulation, heartbeat: SimHeartbeat | None = None, *, at_once: bool = False
    ) -> None:
        self.sim = sim
        self.heartbeat = heartbeat  # whose leases an attempt's run must be among
        self.at_once = at_once  # no heartbeat to wait for: run each attempt when submitted
        self.deferred: list[tuple[concurrent.futures.Future[Any], Any, Any, Any]] = []
        self.since = 0.0
        self.late = False
        self.lock = threading.RLock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self.heartbeat is not None:
            self.check_held(args)
        with self.lock:
            if not self.deferred:
                self.since = time.monotonic()
                _watch(self)
            self.deferred.append((future, fn, args, kwargs))
        if self.at_once:
            self.flush()
        return future

    def check_held(self, args: Sequence[Any]) -> None:
        """An attempt handed to a thread may begin at once: its lease must be held already."""
        assert self.heartbeat is not None
        for p in args:
            ctx = getattr(p, "ctx", None)
            if isinstance(ctx, saga.StepContext) and ctx.run_id not in self.heartbeat.held:
                w = self.heartbeat.worker
                self.sim.violate(
                    "lease_unheld",
                    (w.wid, ctx.run_id, ctx.step, ctx.attempt),
                    f"{w.wid} handed run {ctx.run_id}'s attempt {ctx.attempt} of {ctx.step} to "
                    "a thread before its lease renewal held the run's lease",
                )

    def flush(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.learn()
        with self.lock:
            while self.deferred:
                group, self.deferred = self.deferred, []
                for _, _, args, _ in group:
                    self.sim.begin_early(args)
                for future, fn, args, kwargs in group:
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as exc:  # a kill too: it reaches the orchestrator
                        future.set_exception(exc)


#: Executors holding attempts not begun yet, watched for ones that would wait for ever.
_WATCHED: dict[int, InlineExecutor] = {}
_WATCH_LOCK = threading.Lock()
_WATCHDOG: list[threading.Thread] = []
LATE = 5.0


def _watch(executor: InlineExecutor) -> None:
    with _WATCH_LOCK:
        _WATCHED[id(executor)] = executor
        if not _WATCHDOG:
            thread = threading.Thread(target=_watchdog, name="simulation-watchdog", daemon=True)
            thread.start()
            _WATCHDOG.append(thread)


def _watchdog() -> None:
    while True:
        time.sleep(LATE / 5)
        with _WATCH_LOCK:
            for key, executor in list(_WATCHED.items()):
                if not executor.deferred:
                    del _WATCHED[key]
                elif time.monotonic() - executor.since > LATE:
                    executor.late = True
                    del _WATCHED[key]
                    threading.Thread(target=executor.flush, daemon=True).start()


@dataclasses.dataclass(eq=False)
class Worker:
    """One simulated worker process: an orchestrator with its own clock and fault plans."""

    wid: str
    defs: tuple[tuple[tuple[str, ...], int | None], ...]  # (step names, version) registered
    clock: SkewClock
    crash_commit: tuple[int, str] | None = None  # (transaction number, "before" | "after")
    crash_call: int | None = None  # killed after the side effect of its N-th step call
    outage_commit: tuple[int, str] | None = None  # the store lost at this commit in run_due
    in_run_due: bool = False
    ended: list[tuple[str, str, str, int]] = dataclasses.field(default_factory=list)
    # After an outage: the attempts that had ended in the run_due it ended, and the number
    # of run_due calls (of any worker) by then (see Simulation.check_outcomes).
    doubt: tuple[list[tuple[str, str, str, int]], int] | None = None
    slow: dict[int, float] = dataclasses.field(default_factory=dict)  # call -> seconds
    orch: Any = None
    heartbeat: SimHeartbeat | None = None
    executor: InlineExecutor | None = None
    commits: int = 0
    calls: int = 0
    alive: bool = True
    dying: bool = False  # killed during a step: its other attempts in flight die too
    armed: bool = True

    def describe(self) -> str:
        parts = [self.wid, "defs=" + "|".join(show(d, v) for d, v in self.defs)]
        if self.clock.offset:
            parts.append(f"skew={self.clock.offset:+g}")
        if self.crash_commit:
            parts.append(f"dies {self.crash_commit[1]} commit {self.crash_commit[0]}")
        if self.crash_call:
            parts.append(f"dies after the side effect of call {self.crash_call}")
        if self.outage_commit:
            parts.append(f"loses its store {self.outage_commit[1]} commit {self.outage_commit[0]}")
        for k, seconds in sorted(self.slow.items()):
            parts.append(f"call {k} takes {seconds:g} s")
        return " ".join(parts)


@dataclasses.dataclass
class Attempt:
    """A step call that began: who made it, with which function, for which row."""

    worker: Worker
    names: tuple[str, ...]
    name: str
    phase: str
    ctx: saga.StepContext
    k: int  # the worker's call number
    legit: bool  # its own row and key

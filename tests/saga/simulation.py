"""Deterministic simulation of the saga orchestrator under injected faults, one seed a schedule.

Each schedule runs the real :class:`seawall.saga.Orchestrator` against a real SQLite file, with
several simulated workers (each an orchestrator of its own on that file, as separate processes
would be), on one shared :class:`seawall.VirtualClock` that only the harness moves. Everything a
schedule does is drawn from ``random.Random(seed)``: the saga's steps and policies, the workers,
the order of their operations, how each step call ends, and the faults:

- ``crash``: a worker killed at a commit point (its store raises :class:`SimulatedCrash` just
  before or just after its N-th commit; before one, SQLite rolls the transaction back);
- ``side_crash``: a worker killed between a step's side effect and the commit of its outcome;
- ``skew``: workers whose clocks read the shared time plus an offset of up to 1.5 leases (where
  the orchestrator takes ``store_clock=``, leases and due times are judged on the shared clock,
  standing for the store's; elsewhere on each worker's own);
- ``slow``: a step that takes longer than the lease while another worker runs ``run_due``;
  its lease is renewed meanwhile (``slow_step``), or the step starves its worker's threads
  (``starved_lease``: it holds the GIL), when only the orchestrator's lease keeper process
  renews, or nothing does (``keeper_down``);
- ``deploy``: a new worker registers the saga with a step inserted, removed, renamed or moved
  (as version 2 beside version 1 in half of the deploys, where ``Saga`` takes ``version=``);
- ``failures``: transient and permanent errors of actions and compensations;
- ``outage``: the store lost at a worker's commit point inside ``run_due`` (its store raises
  :class:`SimulatedOutage`, an error the store takes for an outage, just before or just after
  its N-th commit: the commit is lost, or it landed and the worker cannot know); the worker
  lives on, as ``work`` would after an outage, and runs ``run_due`` again later;
- ``operator``: an operator's ``retry_now``, ``compensate`` or ``cancel`` of a run (with
  ``force`` in some schedules).

Apart from the faults, some schedules make some steps' functions ``async def`` (the worker
runs them on its virtual event loop: each worker's clock is a :class:`VirtualClock`), give
each run a deadline (``Saga(timeout=...)``), or put a step that waits among the others: a
durable timer (``saga.Sleep``) or a wait for a signal (``saga.WaitFor``), the signals sent to
started runs at random times, some twice.

Besides the faults, a step call lets another worker run ``run_due`` now and then (for up to a
third of the lease), as concurrent workers would. The orchestrator's lease-renewing heartbeat
and its thread pool are replaced by deterministic stand-ins (:class:`SimHeartbeat`,
:class:`InlineExecutor`): the harness decides when leases are renewed and in which order the
attempts of a group run, so that a seed replays exactly.

A killed worker's orchestrator is closed and never used again; later operations start new
workers with new ids. After the schedule's operations, the faults stop (crash plans disarmed,
clocks agree) and a fresh worker joins; time moves on until every run has settled.

The invariants are checked after every operation of the schedule and at every step call (see
:data:`INVARIANTS`). A violation names the seed, the operation and a command that replays it::

    python tests/saga/simulation.py --seed 1234 --trace

:data:`KNOWN_OPEN` lists, per fault, the invariants the orchestrator is known to break under it
(open faults), and :data:`NOT_GUARANTEED` those it does not promise by design: such a
violation is reported but does not fail the suite. Empty a KNOWN_OPEN entry once its fix
lands (``--strict`` ignores both lists; a sweep's summary names the listed invariants that no
schedule broke). Run many schedules with ``--schedules N [--first SEED]``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import importlib.util
import inspect
import logging
import os
import pathlib
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

if __name__ == "__main__":  # replaying from a checkout: this tree's seawall, not an installed one
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "src"))

import seawall
from seawall import saga

S = saga.Status

#: The saga every schedule runs, and its step names (a definition is a tuple of them).
SAGA = "order"
NAMES = ("reserve", "charge", "ship", "notify", "audit", "invoice", "pack", "label")
#: The steps that wait, in schedules that have one: a timer, and a wait for a signal.
SLEEP, SIGNAL = "nap", "paid"
SLEEP_SECONDS, SIGNAL_TIMEOUT = 3.0, 15.0
START = 1_700_000_000.0
LEASE = 10.0
BACKOFF_CAP = 4.0
#: Schedules of a default run (``SEAWALL_SIM_SCHEDULES`` raises it).
DEFAULT_SCHEDULES = 2000
#: A schedule that calls steps or commits more often than this has run away (a loop).
MAX_CALLS = 600
MAX_COMMITS = 3000
DRAIN_ROUNDS = 40
#: How often another worker runs ``run_due`` while a step runs (for a tenth of the lease or so).
MEANWHILE = 0.2

#: Whether the orchestrator judges leases on a clock of its own (the store's), and whether a
#: saga has versions: the harness uses both where they exist.
STORE_CLOCK = "store_clock" in inspect.signature(saga.Orchestrator).parameters
VERSIONS = "version" in inspect.signature(saga.Saga).parameters
#: Whether the orchestrator runs several attempts at once (``concurrency=``), and whether a
#: process of its own renews its leases (one a busy step cannot starve, as a thread can be).
#: The harness stands in for both: the attempts of a group run one after another once begun
#: together, and the keeper's renewals are ticks of the harness's heartbeat.
CONCURRENCY = "concurrency" in inspect.signature(saga.Orchestrator).parameters
KEEPER = importlib.util.find_spec("seawall.saga._keeper") is not None

FAULTS = ("crash", "side_crash", "skew", "slow", "deploy", "failures", "outage", "operator")

#: What each invariant means (the names violations carry).
INVARIANTS: dict[str, str] = {
    "run_lost": "every started run is readable",
    "run_unsettled": "every run settles once the faults stop",
    "finished_step_rerun": "a step (or compensation) whose success is in the log never runs again",
    "wrong_row": "a step function runs only for its own step's row and idempotency key",
    "other_definition": "a run is served only by functions of the definition it started under",
    "two_live_workers": "a step never runs in two live workers at once",
    "retry_early": "a retry never begins before the delay its failure scheduled has passed",
    "deadline_passed": "no action's attempt begins (in the log) once its run's deadline passed",
    "sleep_early": "no step after a durable timer begins before the timer's end",
    "wait_skipped": (
        "no step after a wait for a signal begins unless the signal was sent, and it sees the "
        "first signal's data"
    ),
    "recorded_success_untrue": "a step the log says succeeded had its action succeed",
    "status_succeeded": "a SUCCEEDED run had every step's action succeed",
    "status_compensated": "a COMPENSATED run had every finished step's compensation succeed",
    "attempts_charged_unbegun": (
        "attempts are charged once begun: a crash charges at most as many attempts that never "
        "began as the worker runs at once (its concurrency; 1 without); a worker that lives "
        "on after an outage, none"
    ),
    "stopped_run_ran": (
        "no attempt of a run begins once an operator's cancel of it is applied, and no action "
        "once an operator's compensate is"
    ),
    "outcome_dropped": (
        "an attempt that ended in a worker that then lost its store has its outcome recorded "
        "by that worker's next run_due, or its closing (no other worker ran meanwhile), not "
        "recorded as lost; a fenced line if an operator took the run before the commit"
    ),
    "lease_unheld": (
        "an attempt starts only once its worker's lease renewal (its keeper process) holds its "
        "run's lease"
    ),
    "worker_error": "run_due never raises (a worker would stop), but for an outage",
    "harness_error": "the schedule ran to its end (an error escaped the harness otherwise)",
}

#: Invariants the orchestrator is known to break, by the fault (schedule tag) that breaks
#: them: a fault that is still open. A violation of a listed invariant in a schedule with that
#: tag is reported, not failed. Remove an entry once its fix lands (the test then keeps it
#: fixed); for example ``{"batch_crash": frozenset({"attempts_charged_unbegun"})}``.
KNOWN_OPEN: dict[str, frozenset[str]] = {}

#: Invariants the orchestrator does not promise under a fault, by design: reported, not failed.
NOT_GUARANTEED: dict[str, frozenset[str]] = {
    # A step that starves its worker's threads, with no keeper process to renew its lease:
    # the lease lapses while the worker is alive, and another worker runs the step too.
    "keeper_down": frozenset({"two_live_workers"}),
    # An operator breaks a live worker's lease (--force, meant for a dead or hung worker): the
    # run can be claimed at once, while the live worker's attempt may still be under way.
    "forced_lease": frozenset({"two_live_workers"}),
    # The same with async def steps: one that starves its worker's threads blocks the event
    # loop too, so the worker's other async attempts of the group begin only after it, their
    # leases lapsed meanwhile; another worker (or an operator) may have finished or stopped
    # those runs by then.
    "async_keeper_down": frozenset({"two_live_workers", "finished_step_rerun", "stopped_run_ran"}),
    # An operator breaks a live worker's lease while one of its async def steps runs without
    # awaiting (it holds the event loop): the worker's other attempts of the group, begun in
    # the log before the operation, start their functions only after it, on a run an operator
    # has cancelled, compensated or that another worker has finished.
    "async_forced_lease": frozenset({"two_live_workers", "stopped_run_ran", "finished_step_rerun"}),
}

#: What the schedule tags (the keys of KNOWN_OPEN and NOT_GUARANTEED) mean.
TAGS: dict[str, str] = {
    "crash": "workers killed at commit points or after a side effect, one run at a time",
    "batch_crash": (
        "workers killed at commit points or after a side effect, several runs claimed or run "
        "at once (batch or concurrency > 1)"
    ),
    "skew": "workers' clocks up to 1.5 leases apart",
    "slow_step": "steps longer than the lease, renewed meanwhile",
    "starved_lease": (
        "steps longer than the lease that starve their worker's threads (the lease keeper "
        "process renews, where the orchestrator has one)"
    ),
    "keeper_down": "steps that starve their worker's threads while its lease keeper is down",
    "batch_slow": "steps longer than the lease, batch > 1",
    "deploy": "new workers with a step inserted, removed, renamed or moved",
    "failures": "transient and permanent errors of actions and compensations",
    "outage": (
        "the store lost at a worker's commit points inside run_due (the commit lost, or landed "
        "unknown to the worker), the worker going on"
    ),
    "operator": (
        "an operator's retry_now, compensate or cancel of a run, between workers' rounds or "
        "while a step runs (a request to the worker holding the run)"
    ),
    "forced_lease": "operators' operations with force, which break a live worker's lease",
    "async": "some steps' functions are async def (they run on the worker's event loop)",
    "deadline": "runs with a deadline (Saga(timeout=...)) of 2, 8 or 20 s",
    "sleep": "a durable timer (saga.Sleep) among the steps",
    "signal": (
        "a wait for a signal (saga.WaitFor) among the steps, and signals sent to runs (before "
        "or after the wait began, some twice)"
    ),
    "async_keeper_down": "keeper_down, with some steps async def",
    "async_forced_lease": "forced_lease, with some steps async def",
}


#: The history events that say how an attempt ended (``fenced``: its worker's lease was taken
#: before the outcome was committed).
OUTCOME_EVENTS = frozenset({"success", "failure", "hold", "fenced"})


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


def _make_crashing(store: Any, worker: Worker) -> None:
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
        parts = [self.wid, "defs=" + "|".join(_show(d, v) for d, v in self.defs)]
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


def _show(names: Sequence[str], version: int | None = None) -> str:
    return ",".join(names) + ("" if version is None else f"@v{version}")


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


@dataclasses.dataclass(frozen=True)
class Violation:
    invariant: str
    seed: int
    op: int
    message: str
    known: bool

    def __str__(self) -> str:
        flag = " (known open)" if self.known else ""
        return f"seed {self.seed}, operation {self.op}: {self.invariant}{flag}: {self.message}"


def replay_command(seed: int) -> str:
    return f"python tests/saga/simulation.py --seed {seed} --trace"


@dataclasses.dataclass
class Config:
    """What a schedule is made of, drawn from its seed."""

    faults: frozenset[str]
    renewed: bool  # a slow step leaves its worker's renewing thread alone
    keeper_down: bool  # the keeper process is not running (where the orchestrator has one)
    batch: int
    concurrency: int
    runs: int
    ops: int
    names: tuple[str, ...]
    compensated: frozenset[str]
    attempts: dict[str, int]
    delayed: frozenset[str]
    on_exhausted: dict[str, str]
    forced: bool = False  # operators break live leases (--force) three times in ten
    asynchronous: frozenset[str] = frozenset()  # steps whose functions are ``async def``
    timeout: float | None = None  # each run's deadline (Saga(timeout=...)), from its start
    wait: str | None = None  # a step of the saga that waits: SLEEP or SIGNAL (in names)

    @property
    def tags(self) -> frozenset[str]:
        tags = set(self.faults & {"skew", "deploy", "failures", "outage", "operator"})
        if self.forced:
            tags.add("forced_lease")
        if self.timeout is not None:
            tags.add("deadline")
        if self.wait is not None:
            tags.add("sleep" if self.wait == SLEEP else "signal")
        asynchronous = self.asynchronous & set(self.names)  # (those of the saga's steps)
        if asynchronous:
            tags.add("async")
            if self.forced:
                tags.add("async_forced_lease")
        if self.faults & {"crash", "side_crash"}:
            tags.add("batch_crash" if self.batch > 1 or self.concurrency > 1 else "crash")
        if "slow" in self.faults:
            tags.add("slow_step" if self.renewed else "starved_lease")
            if not self.renewed and self.keeper_down:
                tags.add("keeper_down")
                if asynchronous:
                    tags.add("async_keeper_down")
            if self.batch > 1:
                tags.add("batch_slow")
        return frozenset(tags)


def draw_config(rng: random.Random) -> Config:
    faults = frozenset(f for f in FAULTS if rng.random() < (0.5 if f == "failures" else 0.3))
    size = rng.randint(2, 4)
    names = tuple(NAMES[:size])
    config = Config(
        faults=faults,
        renewed=rng.random() < 0.5,
        keeper_down=KEEPER and rng.random() < 0.5,
        batch=rng.choice((1, 1, 2, 32)),
        concurrency=rng.choice((1, 2, 4)) if CONCURRENCY else 1,
        runs=rng.randint(1, 4),
        ops=rng.randint(8, 16),
        names=names,
        compensated=frozenset(n for n in NAMES if rng.random() < 0.6),
        attempts={n: rng.randint(2, 4) for n in NAMES},
        delayed=frozenset(n for n in NAMES if rng.random() < 0.4),
        on_exhausted={n: rng.choice(("compensate",) * 8 + ("fail", "park")) for n in NAMES},
        forced="operator" in faults and rng.random() < 0.5,
        asynchronous=(
            frozenset(n for n in NAMES if rng.random() < 0.5) if rng.random() < 0.3 else frozenset()
        ),
        timeout=rng.choice((2.0, 8.0, 20.0)) if rng.random() < 0.3 else None,
    )
    if rng.random() < 0.3:  # a durable timer, or a wait for a signal, among the steps
        config.wait = rng.choice((SLEEP, SIGNAL))
        at = rng.randint(0, len(names))
        config.names = (*names[:at], config.wait, *names[at:])
    return config


def mutate(names: tuple[str, ...], rng: random.Random) -> tuple[tuple[str, ...], str]:
    """A changed definition: a step inserted, removed, renamed or moved."""
    kinds = ["insert", "rename"] + (["remove", "move"] if len(names) > 1 else [])
    kind = rng.choice(kinds)
    fresh = [n for n in NAMES if n not in names]
    steps = list(names)
    if kind == "insert" and fresh:
        steps.insert(rng.randint(0, len(steps)), rng.choice(fresh))
    elif kind == "rename" and fresh:
        steps[rng.randrange(len(steps))] = rng.choice(fresh)
    elif kind == "remove":
        del steps[rng.randrange(len(steps))]
    else:
        i = rng.randrange(len(steps) - 1)
        steps[i], steps[i + 1] = steps[i + 1], steps[i]
        kind = "move"
    return tuple(steps), kind


@dataclasses.dataclass
class Result:
    seed: int
    tags: frozenset[str]
    batch: int
    concurrency: int
    violations: list[Violation]
    trace: list[str]
    stats: collections.Counter[str]

    @property
    def failures(self) -> list[Violation]:
        return [v for v in self.violations if not v.known]


_DONE_ACTION = frozenset({S.SUCCEEDED, S.COMPENSATING, S.COMPENSATED})


class Simulation:
    """One schedule: build it from *seed*, run it, check it (:meth:`run`)."""

    def __init__(
        self,
        seed: int,
        directory: str,
        *,
        strict: bool = False,
        trace: bool = False,
        sabotage: str | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.strict = strict
        self.tracing = trace
        self.sabotage = sabotage
        self.cfg = draw_config(self.rng)
        self.tags = self.cfg.tags
        self.path = os.path.join(directory, f"sim-{seed}.db")
        self.url = f"sqlite:///{self.path}"
        self.base = seawall.VirtualClock(start=START)
        self.workers: list[Worker] = []
        self.observer: Any = None
        self.current: tuple[tuple[tuple[str, ...], int | None], ...] = ((self.cfg.names, None),)
        self.defs_seen: list[tuple[str, ...]] = [self.cfg.names]
        self.started: list[str] = []
        self.signals: dict[str, Any] = {}  # the first signal's data, by run
        self.unstarted: list[str] = []
        self.next_run = 0
        self.deploys = 0
        self.op = 0
        self.depth = 0
        self.crashes = 0
        self.run_dues = 0  # run_due calls begun, of every worker (and operators' operations)
        self.stopped: dict[str, str] = {}  # runs an operator cancelled or had compensated
        self.hurried: set[str] = set()  # runs an operator asked to retry (or compensate) now
        self.allowance = 0  # attempts a crash may charge that never began (see INVARIANTS)
        self.violations: list[Violation] = []
        self.seen: set[tuple[Any, ...]] = set()
        self.trace: list[str] = []
        self.stats: collections.Counter[str] = collections.Counter()
        self.begun: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.ok: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.failed_at: dict[tuple[str, str, str, int], float] = {}
        self.inside: dict[tuple[str, str], list[Worker]] = collections.defaultdict(list)
        self.policies: dict[str, seawall.RetryPolicy] = {}
        self.early: dict[tuple[str, str, str, str, int], Attempt] = {}

    # -- reporting ------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        if self.tracing:
            self.trace.append(f"[{self.op:3d}] t=+{self.base.now() - START:7.2f} {text}")

    def violate(self, invariant: str, key: tuple[Any, ...], message: str) -> None:
        if (invariant, *key) in self.seen:
            return
        self.seen.add((invariant, *key))
        known = not self.strict and any(
            invariant in KNOWN_OPEN.get(t, ()) or invariant in NOT_GUARANTEED.get(t, ())
            for t in self.tags
        )
        violation = Violation(invariant, self.seed, self.op, message, known)
        self.violations.append(violation)
        self.note(f"VIOLATION {violation}")

    # -- workers --------------------------------------------------------------------------------

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.alive]

    def spawn(
        self,
        defs: tuple[tuple[tuple[str, ...], int | None], ...] | None = None,
        *,
        faults: bool = True,
        refusable: bool = False,
    ) -> Worker | None:
        rng, cfg = self.rng, self.cfg
        worker = Worker(
            wid=f"w{len(self.workers)}",
            defs=defs if defs is not None else self.current,
            clock=SkewClock(self.base, 0.0),
        )
        if faults:
            if "crash" in cfg.faults and rng.random() < 0.6:
                worker.crash_commit = (rng.randint(1, 8), rng.choice(("before", "after")))
            if "side_crash" in cfg.faults and rng.random() < 0.6:
                worker.crash_call = rng.randint(1, 4)
            if "outage" in cfg.faults and rng.random() < 0.7:
                worker.outage_commit = (rng.randint(1, 8), rng.choice(("before", "after")))
            if "skew" in cfg.faults:
                worker.clock.offset = LEASE * rng.choice((-1.5, -0.6, 0.0, 0.6, 1.5))
            if "slow" in cfg.faults and rng.random() < 0.7:
                worker.slow[rng.randint(1, 4)] = LEASE * rng.choice((0.5, 1.2, 3.0))
        sagas = [self.definition(worker, names, version) for names, version in worker.defs]
        kwargs: dict[str, Any] = {
            "clock": worker.clock,
            "lease": LEASE,
            "batch": cfg.batch,
            **({"concurrency": cfg.concurrency} if CONCURRENCY else {}),
            "worker_id": worker.wid,
            "hooks": (self.hook,) if self.tracing else (),
        }
        if STORE_CLOCK:
            kwargs["store_clock"] = self.base
        try:
            orch = saga.Orchestrator(self.url, sagas, **kwargs)
        except ValueError as err:
            if not refusable:
                raise
            self.note(f"deploy refused ({worker.describe()}): {err}")
            self.stats["deploys_refused"] += 1
            return None
        worker.orch = orch
        _make_crashing(orch.store, worker)
        execution = orch._worker._execution  # its lease heartbeat and its thread pool
        beat = getattr(execution, "heartbeat", None)
        if all(callable(getattr(beat, m, None)) for m in ("hold", "release", "close")):
            worker.heartbeat = SimHeartbeat(orch, worker, late=self.sabotage == "late_lease")
            execution.heartbeat = worker.heartbeat
        if CONCURRENCY:
            worker.executor = InlineExecutor(
                self, worker.heartbeat, at_once=worker.heartbeat is None
            )
            execution._pool = worker.executor
            if worker.heartbeat is not None and self.sabotage != "deaf":
                finished = execution.finished
                executor = worker.executor

                def begin_then_wait(running: Any) -> Any:
                    executor.flush()  # the attempts submitted begin together, then are waited for
                    return finished(running)

                execution.finished = begin_then_wait
        self.workers.append(worker)
        self.stats["workers"] += 1
        self.stats["skewed_workers"] += bool(worker.clock.offset)
        self.note(f"spawn {worker.describe()}")
        return worker

    def definition(self, worker: Worker, names: tuple[str, ...], version: int | None) -> Any:
        cfg = self.cfg
        actions = {n: self.function(worker, names, n, "action") for n in names if n in NAMES}
        if self.sabotage == "swap" and len(names) > 1:  # functions under each other's names
            actions[names[0]], actions[names[1]] = actions[names[1]], actions[names[0]]
        steps = [
            saga.Sleep(SLEEP_SECONDS, name=n)
            if n == SLEEP
            else saga.WaitFor(n, timeout=SIGNAL_TIMEOUT)
            if n == SIGNAL
            else saga.Step(
                n,
                actions[n],
                compensate=(
                    self.function(worker, names, n, "compensation")
                    if n in cfg.compensated
                    else None
                ),
                policy=self.policy(n),
                on_exhausted=cfg.on_exhausted[n],  # type: ignore[arg-type]
            )
            for n in names
        ]
        more: dict[str, Any] = {} if cfg.timeout is None else {"timeout": cfg.timeout}
        if version is not None:
            return saga.Saga(SAGA, steps, version=version, **more)  # type: ignore[call-arg]
        return saga.Saga(SAGA, steps, **more)

    def policy(self, name: str) -> seawall.RetryPolicy:
        """The step's policy (one object per schedule: its jitter draws in turn)."""
        policy = self.policies.get(name)
        if policy is None:
            cfg = self.cfg
            policy = self.policies[name] = seawall.RetryPolicy(
                max_attempts=cfg.attempts[name],
                backoff=(
                    seawall.Backoff(base=1.0, cap=BACKOFF_CAP)
                    if name in cfg.delayed
                    else seawall.Backoff(base=0.0, cap=0.0)
                ),
                rng=random.Random(self.rng.getrandbits(32)),
                hooks=(),
            )
        return policy

    def kill(self, worker: Worker, why: str) -> None:
        if not worker.alive:
            return
        worker.alive = False
        self.crashes += 1
        self.allowance += self.cfg.concurrency
        self.stats["crashes"] += 1
        self.note(f"{why}")
        self.close(worker, killed=True)

    def close(self, worker: Worker, *, killed: bool = False) -> None:
        doubt = worker.doubt
        fresh = worker.alive and not killed and doubt is not None and doubt[1] == self.run_dues
        if worker.alive and worker.doubt is not None:
            # Closed with commits in doubt: the attempts they began are charged as after a
            # crash (another worker takes the runs over once the leases run out).
            self.allowance += self.cfg.concurrency
        worker.alive = False
        if killed and worker.executor is not None:
            with worker.executor.lock:  # (attempts it had not begun die with it)
                worker.executor.deferred.clear()
        with contextlib.suppress(Exception):
            if killed:  # a killed process records nothing more
                worker.orch._closed = True
                worker.orch._worker.close(hand_back=False)
            else:
                worker.armed = False  # (its crash plan is for its rounds, not its closing)
                worker.orch.close()
        if worker.heartbeat is not None:
            with contextlib.suppress(Exception):
                worker.heartbeat.close()
        if fresh and doubt is not None:  # closing, it recorded what it held
            self.check_outcomes(worker, doubt[0])
        worker.doubt = None

    def hook(self, event: saga.SagaEvent) -> None:
        what = event.step if event.phase != "compensation" else f"{event.step} (undo)"
        error = event.error if isinstance(event.error, str) else repr(event.error)
        self.note(
            f"  event {event.kind} {event.run_id} {what or ''} attempt={event.attempt} "
            f"error={error} delay={event.delay} status={event.status.value}"
        )

    # -- the step functions ---------------------------------------------------------------------

    def function(
        self, worker: Worker, names: tuple[str, ...], name: str, phase: str
    ) -> Callable[[saga.StepContext], Any]:
        step: Callable[[saga.StepContext], Any]
        if name in self.cfg.asynchronous:

            async def step(ctx: saga.StepContext) -> Any:
                return self.call(worker, names, name, phase, ctx)

        else:

            def step(ctx: saga.StepContext) -> Any:
                return self.call(worker, names, name, phase, ctx)

        step.__name__ = f"{name}_{phase}"
        step.sim_attempt = (worker, names, name, phase)  # type: ignore[attr-defined]
        return step

    def call(
        self,
        w: Worker,
        names: tuple[str, ...],
        name: str,
        phase: str,
        ctx: saga.StepContext,
    ) -> Any:
        """A step function's body: begun (unless its group began it already), then its
        effect, drawn from the seed."""
        attempt = self.early.pop((w.wid, ctx.run_id, ctx.step, phase, ctx.attempt), None)
        if attempt is None:
            if w.dying:  # (an async def attempt after the one that killed it: never called)
                raise SimulatedCrash(w, f"before {name} for {ctx.run_id} began")
            attempt = self.begin(w, names, name, phase, ctx)
        return self.body(attempt)

    def begin_early(self, args: Sequence[Any]) -> None:
        """The attempts of a group all begin at once (they run in threads): check and mark
        each before any of them makes progress."""
        for p in args:
            info = getattr(getattr(p, "fn", None), "sim_attempt", None)
            ctx = getattr(p, "ctx", None)
            if info is not None and isinstance(ctx, saga.StepContext):
                w, names, name, phase = info
                key = (w.wid, ctx.run_id, ctx.step, phase, ctx.attempt)
                self.early[key] = self.begin(w, names, name, phase, ctx)

    def begin(
        self,
        w: Worker,
        names: tuple[str, ...],
        name: str,
        phase: str,
        ctx: saga.StepContext,
    ) -> Attempt:
        """An attempt begins: every check made at the start of a step call."""
        w.calls += 1
        k = w.calls
        self.stats["calls"] += 1
        if self.stats["calls"] > MAX_CALLS:
            raise Runaway(f"{self.stats['calls']} step calls")
        rid, row, now = ctx.run_id, ctx.step, self.base.now()
        comp = phase == "compensation"
        self.note(
            f"  {w.wid} calls {name}{' (undo)' if comp else ''} for {rid} row {row} "
            f"attempt {ctx.attempt} key {ctx.idempotency_key}"
        )
        suffix = f":{name}:compensate" if comp else f":{name}"
        legit = (
            name == row
            and ctx.idempotency_key.endswith(suffix)
            and (comp or not ctx.idempotency_key.endswith(":compensate"))
            and ctx.compensating == comp
        )
        if not legit:
            self.violate(
                "wrong_row",
                (rid, row, name, phase),
                f"{w.wid} ran {name}'s {phase} for run {rid}'s row {row!r} with the key "
                f"{ctx.idempotency_key!r}",
            )
        run = self.observer.get(rid)
        rows = {r.name: r for r in run.steps}
        started_under = tuple(rows)
        if names != started_under:
            self.violate(
                "other_definition",
                (rid, names, phase),
                f"{w.wid} served run {rid} (started under {_show(started_under)}) with a "
                f"function of {_show(names)}: {name} {phase}",
            )
        for checked in dict.fromkeys((row, name)):
            record = rows.get(checked)
            if record is None:
                continue
            done = record.status is S.COMPENSATED if comp else record.status in _DONE_ACTION
            if done:
                self.violate(
                    "finished_step_rerun",
                    (rid, checked, phase),
                    f"{w.wid} began {name}'s {phase} for run {rid} although the log records "
                    f"step {checked!r} as {record.status.value}",
                )
        stopped = self.stopped.get(rid)
        if stopped == "cancel" or (stopped == "compensate" and not comp):
            self.violate(
                "stopped_run_ran",
                (rid, row, phase),
                f"{w.wid} began {name}'s {phase} for run {rid} after an operator's {stopped} "
                "of it was applied",
            )
        slot = (rid, row)
        for other in self.inside[slot]:
            if other.alive and other is not w:
                self.violate(
                    "two_live_workers",
                    (rid, row),
                    f"{w.wid} began {row}'s {phase} of run {rid} (attempt {ctx.attempt}) while "
                    f"{other.wid}, alive, was still inside it",
                )
        if ctx.attempt >= 2:
            self.check_retry_time(rid, row, phase, ctx.attempt, now, w)
        if not comp:
            self.check_waits(rid, row, run, now, w, ctx)
        if run.deadline is not None and not comp:
            # (sabotage "overdue": deadlines that seem to pass 100 s sooner than they do)
            deadline = run.deadline.timestamp() - (100.0 if self.sabotage == "overdue" else 0.0)
            self.check_deadline(rid, row, ctx.attempt, deadline, w)
        if self.sabotage != "uncounted":
            self.begun[(rid, row, phase)] += 1
        self.inside[slot].append(w)
        return Attempt(w, names, name, phase, ctx, k, legit)

    def body(self, a: Attempt) -> Any:
        w, names, name, phase, ctx, k, legit = (
            a.worker,
            a.names,
            a.name,
            a.phase,
            a.ctx,
            a.k,
            a.legit,
        )
        rid, row, comp, slot = ctx.run_id, ctx.step, phase == "compensation", (ctx.run_id, ctx.step)
        if self.sabotage == "overlap" and self.depth == 0:  # the same call in another worker
            others = [o for o in self.live() if o is not w]
            if others:
                self.depth += 1
                try:
                    self.call(others[0], names, name, phase, ctx)
                except (Exception, SimulatedCrash):
                    pass
                finally:
                    self.depth -= 1
        ended = "crash"
        try:
            if w.dying:  # begun with the attempt that killed the worker: dies before its effect
                self.note(f"  {w.wid}: killed during {name} for {rid}, before its side effect")
                raise SimulatedCrash(w, f"during {name} for {rid}")
            if w.armed:
                if k in w.slow:
                    starved = not self.cfg.renewed and (not KEEPER or self.cfg.keeper_down)
                    self.slow(w, w.slow[k], starved=starved)
                elif self.rng.random() < MEANWHILE:
                    self.slow(w, LEASE * self.rng.choice((0.0, 0.1, 0.3)))
            outcome = self.outcome(comp)
            if w.armed and w.crash_call == k:
                if legit:
                    self.ok[(rid, row, phase)] += 1
                self.stats["side_effects"] += 1
                self.note(f"  {w.wid}: side effect of {name} done, then killed")
                w.dying = True
                raise SimulatedCrash(w, f"after the side effect of {name} for {rid}")
            if outcome == "ok":
                ended = "ok"
                if legit and self.sabotage != "forget":
                    self.ok[(rid, row, phase)] += 1
                if not comp:
                    self.stats["side_effects"] += 1
                return {"step": name}
            ended = outcome
            if outcome == "transient":
                raise ConnectionError(f"{name} is unreachable (simulated)")
            raise ValueError(f"{name} refused the request (simulated)")
        finally:
            self.inside[slot].remove(w)
            if ended != "crash":
                w.ended.append((rid, row, phase, ctx.attempt))
            if ended in ("transient", "permanent"):
                key = (rid, row, phase, ctx.attempt)
                late = 100.0 if self.sabotage == "early" else 0.0
                self.failed_at.setdefault(key, self.base.now() + late)
            self.note(f"  {w.wid} {name}{' (undo)' if comp else ''} for {rid}: {ended}")

    def outcome(self, comp: bool) -> str:
        if "failures" not in self.cfg.faults:
            return "ok"
        x = self.rng.random()
        if comp:
            return "ok" if x < 0.8 else "transient" if x < 0.97 else "permanent"
        return "ok" if x < 0.65 else "transient" if x < 0.9 else "permanent"

    def slow(self, w: Worker, seconds: float, *, starved: bool = False) -> None:
        """The step takes *seconds* while another worker runs. Meanwhile the heartbeats of the
        workers inside a step renew their leases every third of the lease, except a *starved*
        worker's (its step holds the GIL)."""
        self.stats["slow_steps" if seconds >= LEASE else "interleaved_steps"] += 1
        self.note(
            f"  {w.wid}: the step runs for {seconds:g} s while another worker runs"
            + (" (its lease is not renewed)" if starved else "")
        )
        while seconds > 0:
            self.base.advance(min(LEASE / 3.0, seconds))
            seconds -= LEASE / 3.0
            for o in self.live():
                if o.heartbeat is not None and not (starved and o is w):
                    o.heartbeat.tick()
        if self.depth == 0 and "operator" in self.cfg.faults and self.rng.random() < 0.3:
            self.depth += 1
            try:
                self.operate()  # while the step runs: the run is held
            finally:
                self.depth -= 1
        others = [o for o in self.live() if o is not w]
        if self.depth == 0 and others:
            other = others[self.rng.randrange(len(others))]
            self.depth += 1
            try:
                self.run_due(other)
            finally:
                self.depth -= 1

    def check_waits(
        self, rid: str, row: str, run: Any, now: float, w: Worker, ctx: saga.StepContext
    ) -> None:
        """The action of *row* begins: a timer before it has ended, a wait has its signal."""
        names = [r.name for r in run.steps]
        if row not in names:
            return
        before = names[: names.index(row)]
        if SLEEP in before and rid not in self.hurried:
            # (sabotage "restless": timers that seem to end 100 s later than they do)
            late = 100.0 if self.sabotage == "restless" else 0.0
            until = [
                e.detail["until"] + late
                for e in self.observer.history(rid)
                if e.event == "sleep" and e.step == SLEEP
            ]
            self.stats["after_sleep"] += 1
            if not until or now < until[-1] - 1e-6:
                self.violate(
                    "sleep_early",
                    (rid, row),
                    f"{w.wid} began {row} of run {rid} at {now:.3f}, before the timer's end "
                    f"({until[-1] if until else 'not begun'})",
                )
        if SIGNAL in before:
            sent = self.signals.get(rid)
            seen = ctx.results.get(SIGNAL)
            self.stats["after_signal"] += 1
            if sent is None or seen != sent:
                self.violate(
                    "wait_skipped",
                    (rid, row),
                    f"{w.wid} began {row} of run {rid} after the wait for {SIGNAL!r} with "
                    f"{seen!r} as its result; the first signal sent: {sent!r}",
                )

    def check_deadline(self, rid: str, row: str, attempt: int, deadline: float, w: Worker) -> None:
        """The action's attempt began in the log before the run's deadline."""
        begun = [
            e.at.timestamp()
            for e in self.observer.history(rid)
            if (e.event, e.step, e.phase, e.attempt) == ("attempt", row, "action", attempt)
        ]
        if begun and begun[0] >= deadline + 1e-5:
            self.violate(
                "deadline_passed",
                (rid, row, attempt),
                f"{w.wid} began attempt {attempt} of {row} of run {rid} "
                f"{begun[0] - deadline:.3f} s after the run's deadline",
            )

    def check_retry_time(
        self, rid: str, row: str, phase: str, attempt: int, now: float, w: Worker
    ) -> None:
        failed = self.failed_at.get((rid, row, phase, attempt - 1))
        if failed is None or rid in self.hurried:
            return
        delays = [
            e.delay
            for e in self.observer.history(rid)
            if e.event == "failure"
            and e.step == row
            and e.phase == phase
            and e.attempt == attempt - 1
            and e.delay
        ]
        if delays and now < failed + min(delays) - 1e-6:
            self.violate(
                "retry_early",
                (rid, row, phase, attempt),
                f"{w.wid} began attempt {attempt} of {row} ({phase}) of run {rid} "
                f"{now - failed:.3f} s after the failure of attempt {attempt - 1}, which "
                f"scheduled it {min(delays):.3f} s later",
            )

    # -- operations -----------------------------------------------------------------------------

    def run_due(self, w: Worker) -> None:
        self.note(f"{w.wid} run_due")
        # Nobody ran since this worker's outage: its next run_due records what was in doubt.
        doubt = w.doubt if w.doubt is not None and w.doubt[1] == self.run_dues else None
        if w.doubt is not None and doubt is None:
            # Others ran since its outage: its lease may have run out, and another worker
            # taken its runs over, charging what a crash would.
            self.allowance += self.cfg.concurrency
        self.run_dues += 1
        w.ended = []
        try:
            try:
                w.in_run_due = True
                ran = w.orch.run_due()
            finally:
                w.in_run_due = False
                if w.executor is not None and w.executor.late:
                    self.violate(
                        "harness_error",
                        ("late",),
                        f"{w.wid} waited for attempts the harness never began: "
                        "update InlineExecutor to the orchestrator's order",
                    )
        except SimulatedCrash as crash:
            if crash.worker is not w:
                raise
            self.kill(w, str(crash))
        except SimulatedOutage as outage:
            # As work() would: the worker lives on and claims again later.
            self.stats["outages"] += 1
            self.note(f"{outage}; {w.wid} goes on")
            ended = [a for a in w.ended if not self.lost_line(a)]  # (not taken over before)
            # (A worker whose run_due this one ran inside goes on after it, and may take the
            # runs over: the next check is not foreseeable then.)
            outer = any(o.in_run_due for o in self.workers if o is not w)
            w.doubt = ((doubt[0] if doubt else []) + ended, -1 if outer else self.run_dues)
        except Exception as exc:
            self.violate(
                "worker_error", (w.wid,), f"{w.wid}'s run_due raised {type(exc).__name__}: {exc}"
            )
            self.close(w)
        else:
            self.note(f"{w.wid} ran {ran} attempts")
            if doubt is not None:
                self.check_outcomes(w, doubt[0])
            w.doubt = None

    def operate(self) -> None:
        """An operator's operation on a started run (an active one, mostly): a retry now, a
        compensation or a cancel; with force (a lease broken, live or not) three times in ten
        where the schedule has operators that force."""
        rng = self.rng
        active = sorted(
            r.run_id for r in self.observer.runs(limit=1000) if r.status not in _SETTLED
        )
        rids = active if active and rng.random() < 0.8 else sorted(self.started)
        rid = rids[rng.randrange(len(rids))]
        operation = rng.choice(("retry_now", "retry_now", "compensate", "cancel"))
        force = self.cfg.forced and rng.random() < 0.3
        # Its outcome cannot be foreseen by the checks of what a worker's next round does:
        self.run_dues += 1  # (a worker back from an outage may find its run taken)
        if force:
            self.allowance += self.cfg.concurrency  # (an attempt a landed commit began, lost)
        if operation != "cancel":
            # A retry before its scheduled time, asked for (a compensate of a compensating
            # run tries its compensation again now, with a fresh state).
            self.hurried.add(rid)
        try:
            run = getattr(self.observer, operation)(rid, force=force)
        except (ValueError, KeyError) as exc:
            self.note(f"operator {operation}{' --force' if force else ''} {rid}: refused ({exc})")
            self.stats["operations_refused"] += 1
            return
        self.stats["operations"] += 1
        self.stats[f"operations_{operation}{'_forced' if force else ''}"] += 1
        if operation == "cancel" and run.status is S.FAILED:
            self.stopped[rid] = "cancel"  # applied at once (a request leaves it RUNNING)
            if self.sabotage == "unstopped":
                self.rerun(rid, run)
        elif operation == "compensate" and run.status in (S.COMPENSATING, S.COMPENSATED):
            self.stopped.setdefault(rid, "compensate")
        self.note(f"operator {operation}{' --force' if force else ''} {rid}: {run.status.value}")

    def signal(self) -> None:
        """A signal to a started run (its wait begun or not; a second one now and then)."""
        rid = self.started[self.rng.randrange(len(self.started))]
        data = {"n": self.stats["signals"]}
        try:
            kept = self.observer.signal(rid, SIGNAL, data)
        except ValueError as exc:  # the run is over, its wait too, or it has none
            self.note(f"signal {rid}: refused ({exc})")
            return
        self.stats["signals"] += 1
        first = rid not in self.signals
        if kept:
            # (sabotage "forged": the harness remembers other data than it sent)
            self.signals.setdefault(rid, {"n": -1} if self.sabotage == "forged" else data)
        if kept != first:
            self.violate(
                "wait_skipped",
                (rid, "signal", self.stats["signals"]),
                f"signal {data} to {rid}: kept={kept}, though {'no' if first else 'a'} signal "
                "was sent before",
            )
        self.note(f"signal {rid} {data}: {'kept' if kept else 'a duplicate'}")

    def lost_line(self, attempt: tuple[str, str, str, int]) -> bool:
        rid, row, phase, n = attempt
        return any(
            (e.event, e.step, e.phase, e.attempt) == ("lost", row, phase, n)
            for e in self.observer.history(rid)
        )

    def check_outcomes(self, w: Worker, attempts: list[tuple[str, str, str, int]]) -> None:
        """After *w*'s first run_due since its outage, with no other worker's in between:
        the *attempts* that had ended in it have their outcomes in the log."""
        self.stats["outcomes_in_doubt"] += len(attempts)
        for rid, row, phase, n in attempts:
            events = {
                e.event
                for e in self.observer.history(rid)
                if (e.step, e.phase, e.attempt) == (row, phase, n)
            }
            # (A fenced line: an operator took the run before the commit, which found its
            # lease taken; the log says what the attempt did, and whoever claims the run next
            # charges the attempt as lost, as documented for a broken lease.)
            fenced = "fenced" in events
            if ("lost" in events and not fenced) or not events & OUTCOME_EVENTS:
                self.violate(
                    "outcome_dropped",
                    (rid, row, phase, n),
                    f"attempt {n} of {row} ({phase}) of run {rid} ended in {w.wid} before its "
                    f"store was lost; the log after its next run_due has {sorted(events)}",
                )

    def start(self, w: Worker, rid: str) -> None:
        self.note(f"{w.wid} start {rid}")
        try:
            w.orch.start(SAGA, {"order": rid}, run_id=rid)
        except SimulatedCrash as crash:
            if crash.worker is not w:
                raise
            self.kill(w, str(crash))
            if rid not in self.unstarted:
                self.unstarted.append(rid)
            return
        if rid in self.unstarted:
            self.unstarted.remove(rid)
        if rid not in self.started:
            self.started.append(rid)

    def any_worker(self) -> Worker:
        live = self.live()
        if live:
            return live[self.rng.randrange(len(live))]
        worker = self.spawn()  # a supervisor restarts the dead
        assert worker is not None
        return worker

    def deploy(self) -> None:
        self.deploys += 1
        self.stats["deploys"] += 1
        names, kind = mutate(self.defs_seen[-1], self.rng)
        self.defs_seen.append(names)
        versioned = VERSIONS and self.rng.random() < 0.5
        if versioned:
            defs = tuple((d, i + 1) for i, d in enumerate(self.defs_seen))
        else:
            defs = ((names, None),)
        self.note(f"deploy ({kind}{', versioned' if versioned else ''}): {_show(names)}")
        worker = self.spawn(defs, refusable=True)
        if worker is None:
            return
        self.current = defs
        old = [o for o in self.live() if o is not worker]
        if old and self.rng.random() < 0.5:
            retired = old[self.rng.randrange(len(old))]
            self.note(f"retire {retired.wid} (rolling deploy)")
            self.close(retired)

    def step(self) -> None:
        rng, cfg = self.rng, self.cfg
        choices: list[tuple[str, float]] = [("run_due", 5.0), ("advance", 3.0)]
        if self.next_run < cfg.runs or self.unstarted:
            choices.append(("start", 3.0))
        if len(self.live()) < 3:
            choices.append(("spawn", 1.0))
        if "deploy" in cfg.faults and self.deploys < 2:
            choices.append(("deploy", 1.5))
        if len(self.live()) > 1:
            choices.append(("retire", 0.5))
        if "operator" in cfg.faults and self.started:
            choices.append(("operate", 1.5))
        if cfg.wait == SIGNAL and self.started:
            choices.append(("signal", 1.5))
        kind = rng.choices([c[0] for c in choices], [c[1] for c in choices])[0]
        if kind == "run_due":
            self.run_due(self.any_worker())
        elif kind == "advance":
            seconds = rng.choice((0.0, 0.5, 2.0, LEASE * 0.6, LEASE + 1.0))
            self.base.advance(seconds)
            self.note(f"advance {seconds:g} s")
        elif kind == "start":  # one run, or a few at once (claimed together then)
            for _ in range(rng.choice((1, 1, 2, 3))):
                if self.unstarted:
                    rid = self.unstarted[0]
                elif self.next_run < cfg.runs:
                    rid = f"r{self.next_run}"
                    self.next_run += 1
                else:
                    break
                self.start(self.any_worker(), rid)
        elif kind == "spawn":
            self.spawn()
        elif kind == "deploy":
            self.deploy()
        elif kind == "operate":
            self.operate()
        elif kind == "signal":
            self.signal()
        else:
            live = self.live()
            retired = live[rng.randrange(len(live))]
            self.note(f"retire {retired.wid}")
            self.close(retired)

    # -- checks after every operation -----------------------------------------------------------

    def runs(self) -> dict[str, Any]:
        """Every started run, as the log has it now."""
        log = {run.run_id: run for run in self.observer.runs(limit=1000)}
        found = {}
        for rid in self.started:
            if rid in log:
                found[rid] = log[rid]
            else:
                self.violate("run_lost", (rid,), f"run {rid} was started and is not in the log")
        return found

    def check(self) -> dict[str, Any]:
        runs = self.runs()
        excess = 0
        for rid, run in runs.items():
            for r in run.steps:
                excess += max(0, r.attempt_count - self.begun[(rid, r.name, "action")])
                excess += max(
                    0, r.compensation_attempt_count - self.begun[(rid, r.name, "compensation")]
                )
                if r.name == SIGNAL and r.status in _DONE_ACTION:
                    if rid not in self.signals or r.result != self.signals[rid]:
                        self.violate(
                            "wait_skipped",
                            (rid, r.name),
                            f"run {rid}: the log says the wait {r.name!r} is {r.status.value} "
                            f"with {r.result!r}; the first signal sent: {self.signals.get(rid)!r}",
                        )
                elif r.name == SLEEP:
                    pass  # (no function: its end is checked where the next step begins)
                elif r.status in _DONE_ACTION and not self.ok[(rid, r.name, "action")]:
                    self.violate(
                        "recorded_success_untrue",
                        (rid, r.name),
                        f"run {rid}: the log says step {r.name!r} is {r.status.value}, and its "
                        "action never succeeded",
                    )
                if r.status is S.COMPENSATED and not self.ok[(rid, r.name, "compensation")]:
                    self.violate(
                        "status_compensated",
                        (rid, r.name),
                        f"run {rid}: the log says step {r.name!r} is COMPENSATED, and its "
                        "compensation never succeeded",
                    )
            if run.status is S.SUCCEEDED:
                missing = [
                    r.name
                    for r in run.steps
                    if not self.ok[(rid, r.name, "action")] and r.name not in (SLEEP, SIGNAL)
                ]
                if missing:
                    self.violate(
                        "status_succeeded",
                        (rid,),
                        f"run {rid} is SUCCEEDED, and the action of {', '.join(missing)} never "
                        "succeeded",
                    )
            elif run.status is S.COMPENSATED:
                left = [
                    r.name
                    for r in run.steps
                    if r.status is S.SUCCEEDED and r.name in self.cfg.compensated
                ]
                if left:
                    self.violate(
                        "status_compensated",
                        (rid,),
                        f"run {rid} is COMPENSATED, and {', '.join(left)} succeeded without "
                        "being compensated",
                    )
        # A worker back from an outage runs the attempts its lost commits began (or records
        # them as lost if its lease ran out meanwhile): until its next run_due, they may wait.
        doubting = sum(1 for w in self.live() if w.doubt is not None)
        if excess > self.allowance + self.cfg.concurrency * doubting:
            self.violate(
                "attempts_charged_unbegun",
                (),
                f"the log charges {excess} attempts that never began, after {self.crashes} "
                f"crashes of workers running {self.cfg.concurrency} at once",
            )
        return runs

    # -- the schedule ---------------------------------------------------------------------------

    def run(self) -> Result:
        self.note(
            f"seed {self.seed}: tags {sorted(self.tags)} batch {self.cfg.batch} "
            f"concurrency {self.cfg.concurrency} "
            f"runs {self.cfg.runs} steps {_show(self.cfg.names)} "
            f"compensated {sorted(self.cfg.compensated & set(self.cfg.names))}"
        )
        self.observer = saga.Orchestrator(self.url, [], clock=self.base, hooks=())
        logger = logging.getLogger("seawall.saga")
        handler = _TraceHandler(self)
        propagate = logger.propagate
        logger.addHandler(handler)
        logger.propagate = False
        try:
            try:
                self.spawn()
                for op in range(1, self.cfg.ops + 1):
                    self.op = op
                    self.step()
                    self.check()
                self.drain()
                if self.sabotage == "rerun":
                    self.rerun()
                if self.sabotage == "lose":
                    self.started.append("never-started")
                    self.check()
            except Runaway as err:
                self.violate("run_unsettled", ("runaway",), f"runaway schedule: {err}")
        finally:
            logger.removeHandler(handler)
            logger.propagate = propagate
            for w in self.workers:
                if w.alive:
                    self.close(w)
            self.observer.close()
        self.stats["duplicates"] = sum(
            max(0, n - 1) for (_, _, phase), n in self.ok.items() if phase == "action"
        )
        return self.result()

    def result(self) -> Result:
        cfg, seed = self.cfg, self.seed
        return Result(
            seed, self.tags, cfg.batch, cfg.concurrency, self.violations, self.trace, self.stats
        )

    def drain(self) -> None:
        """The faults stop: crash plans off, clocks agree, a fresh worker joins; time moves on
        until every run has settled."""
        self.op += 1
        self.note("faults stop")
        for w in self.workers:
            w.armed = False
            w.clock.offset = 0.0
        fresh = self.spawn(faults=False)
        assert fresh is not None
        for rid in list(self.unstarted):
            self.start(fresh, rid)
        for _ in range(DRAIN_ROUNDS):
            runs = self.check()
            if all(r.status in _SETTLED for r in runs.values()):
                break
            self.op += 1
            self.base.advance(LEASE + BACKOFF_CAP + 1.0)
            for w in self.live():
                if self.sabotage != "stall":
                    self.run_due(w)
        else:
            for rid, run in self.check().items():
                if run.status not in _SETTLED:
                    self.violate(
                        "run_unsettled",
                        (rid,),
                        f"run {rid} is still {run.status.value} after the faults stopped",
                    )
        for run in self.check().values():
            self.stats[f"status_{run.status.value}"] += 1

    def rerun(self, rid: str | None = None, run: Any = None) -> None:
        """Sabotage: call a finished step's action again (or the first step's of *run*), as a
        broken orchestrator would."""
        cancelled = run is not None
        found = [(rid, run)] if cancelled else list(self.runs().items())
        for rid, run in found:
            for r in run.steps:
                if (r.status is S.SUCCEEDED or cancelled) and self.live():
                    w = self.live()[0]
                    names = tuple(x.name for x in run.steps)
                    ctx = saga.StepContext(rid, r.name, 9, {}, {}, f"{rid}:{r.name}")
                    with contextlib.suppress(Exception):
                        self.call(w, names, r.name, "action", ctx)
                    return


_SETTLED = frozenset({S.SUCCEEDED, S.COMPENSATED, S.FAILED, S.NEEDS_ATTENTION})


class _TraceHandler(logging.Handler):
    """The orchestrator's log lines, into the schedule's trace."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(logging.DEBUG)
        self.sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.sim.stats["log_errors"] += 1
        if self.sim.tracing:
            self.sim.note(f"  log {record.levelname}: {record.getMessage()}")


@contextlib.contextmanager
def scratch() -> Iterator[str]:
    """A directory for the schedules' SQLite files: in memory where the system has such a file
    system (every commit syncs the log to disk otherwise), else the default temporary one."""
    shm = "/dev/shm"
    parent = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    directory = tempfile.mkdtemp(prefix="seawall-sim-", dir=parent)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _remove(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


def run_schedule(
    seed: int,
    directory: str,
    *,
    strict: bool = False,
    trace: bool = False,
    sabotage: str | None = None,
) -> Result:
    """Run the schedule of *seed* with its SQLite file in *directory*; an error escaping the
    harness becomes a violation of the schedule (``harness_error``), with its replay command."""
    sim = Simulation(seed, directory, strict=strict, trace=trace, sabotage=sabotage)
    try:
        return sim.run()
    except Exception as exc:
        sim.violate("harness_error", (), f"{type(exc).__name__}: {exc}")
        if trace:
            import traceback

            sim.trace.append(traceback.format_exc())
        return sim.result()
    finally:
        _remove(sim.path)


def sweep(
    count: int, first: int = 0, *, strict: bool = False, sabotage: str | None = None
) -> list[Result]:
    with scratch() as directory:
        return [
            run_schedule(seed, directory, strict=strict, sabotage=sabotage)
            for seed in range(first, first + count)
        ]


def schedule_count() -> int:
    """``SEAWALL_SIM_SCHEDULES`` (only to raise the count), else the default."""
    text = os.environ.get("SEAWALL_SIM_SCHEDULES", "")
    try:
        return max(DEFAULT_SCHEDULES, int(text)) if text else DEFAULT_SCHEDULES
    except ValueError:
        raise ValueError(f"SEAWALL_SIM_SCHEDULES must be a number, got {text!r}") from None


def summary(results: Sequence[Result]) -> str:
    """What broke, by invariant and by tag, with example seeds; and what the runs became."""
    lines = [f"{len(results)} schedules"]
    by: dict[str, list[int]] = collections.defaultdict(list)
    tags: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        for v in {v.invariant: v for v in r.violations}.values():
            by[v.invariant].append(r.seed)
            for t in r.tags:
                tags[v.invariant][t] += 1
    for invariant, seeds in sorted(by.items()):
        shown = ", ".join(map(str, seeds[:5]))
        common = ", ".join(f"{t} {n}" for t, n in tags[invariant].most_common(4))
        failing = sum(
            any(v.invariant == invariant and not v.known for v in r.violations) for r in results
        )
        lines.append(
            f"  {invariant}: broken in {len(seeds)} schedules, {failing} failing (seeds "
            f"{shown}); tags: {common}"
        )
    if not by:
        lines.append("  no invariant broken")
    stale = [
        f"{invariant} under {tag}"
        for tag, invariants in sorted(KNOWN_OPEN.items())
        for invariant in sorted(invariants)
        if not any(
            tag in r.tags and any(v.invariant == invariant for v in r.violations) for r in results
        )
    ]
    if stale:
        lines.append("  known open, and broken in no schedule here: " + "; ".join(stale))
    total: collections.Counter[str] = collections.Counter()
    for r in results:
        total.update(r.stats)
    lines.append(
        "  totals: "
        + ", ".join(f"{k} {v}" for k, v in sorted(total.items()) if not k.startswith("status_"))
    )
    lines.append(
        "  runs: "
        + ", ".join(f"{k[7:]} {v}" for k, v in sorted(total.items()) if k.startswith("status_"))
    )
    for key in ("batch", "concurrency"):
        for value in sorted({getattr(r, key) for r in results}):
            picked = [r for r in results if getattr(r, key) == value and r.stats["crashes"]]
            crashes = sum(r.stats["crashes"] for r in picked)
            dupes = sum(r.stats["duplicates"] for r in picked)
            lines.append(
                f"  {key} {value}: {len(picked)} schedules with crashes, {crashes} crashes, "
                f"{dupes} duplicated side effects"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run (or replay) seeded schedules of the saga simulation."
    )
    parser.add_argument("--seed", type=int, help="replay this one schedule")
    parser.add_argument("--schedules", type=int, default=None, help="how many schedules")
    parser.add_argument("--first", type=int, default=0, help="the first seed of a sweep")
    parser.add_argument("--trace", action="store_true", help="print what the schedule did")
    parser.add_argument(
        "--strict", action="store_true", help="fail known-open invariants too (KNOWN_OPEN)"
    )
    args = parser.parse_args(argv)
    if args.seed is not None:
        with scratch() as directory:
            result = run_schedule(args.seed, directory, strict=args.strict, trace=True)
        if args.trace:
            print("\n".join(result.trace))
        print(f"seed {args.seed}: tags {sorted(result.tags)}; {dict(result.stats)}")
        for v in result.violations:
            print(v)
        return 1 if result.failures else 0
    count = args.schedules if args.schedules is not None else schedule_count()
    began = time.process_time()
    results = sweep(count, args.first, strict=args.strict)
    print(summary(results))
    print(f"  {time.process_time() - began:.1f} s of CPU")
    failed = [r for r in results if r.failures]
    for r in failed[:10]:
        print(f"{r.failures[0]}\n    replay: {replay_command(r.seed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

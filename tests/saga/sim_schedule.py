"""One schedule of the simulation: its workers, the step functions they call, and the run of
its operations until every run settles (:class:`Simulation`)."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

import sim_invariants
from sim_checks import Checks
from sim_config import (
    BACKOFF_CAP,
    CONCURRENCY,
    DRAIN_ROUNDS,
    KEEPER,
    LEASE,
    MEANWHILE,
    NAMES,
    SAGA,
    SETTLED,
    SIGNAL,
    SIGNAL_TIMEOUT,
    SLEEP,
    SLEEP_SECONDS,
    START,
    STORE_CLOCK,
    Result,
    S,
    Violation,
    draw_config,
    show,
)
from sim_operations import Operations
from sim_workers import (
    Attempt,
    InlineExecutor,
    Runaway,
    SimHeartbeat,
    SimulatedCrash,
    SkewClock,
    Worker,
    make_crashing,
)

import seawall
from seawall import saga


class Simulation(Checks, Operations):
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
        listed = (sim_invariants.KNOWN_OPEN, sim_invariants.NOT_GUARANTEED)
        known = not self.strict and any(
            invariant in tags.get(t, ()) for tags in listed for t in self.tags
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
        make_crashing(orch.store, worker)
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

    # -- the schedule ---------------------------------------------------------------------------

    def run(self) -> Result:
        self.note(
            f"seed {self.seed}: tags {sorted(self.tags)} batch {self.cfg.batch} "
            f"concurrency {self.cfg.concurrency} "
            f"runs {self.cfg.runs} steps {show(self.cfg.names)} "
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
            if all(r.status in SETTLED for r in runs.values()):
                break
            self.op += 1
            self.base.advance(LEASE + BACKOFF_CAP + 1.0)
            for w in self.live():
                if self.sabotage != "stall":
                    self.run_due(w)
        else:
            for rid, run in self.check().items():
                if run.status not in SETTLED:
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

"""What a schedule does, one operation at a time: workers' rounds, starts, deploys, operators'
operations and signals, drawn from the seed."""

from __future__ import annotations

from sim_config import LEASE, SAGA, SETTLED, SIGNAL, VERSIONS, S, mutate, show
from sim_workers import SimulatedCrash, SimulatedOutage, Worker


class Operations:
    """The operations of :class:`sim_schedule.Simulation` (mixed into it)."""

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
        active = sorted(r.run_id for r in self.observer.runs(limit=1000) if r.status not in SETTLED)
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
        self.note(f"deploy ({kind}{', versioned' if versioned else ''}): {show(names)}")
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

"""The invariants checked as an attempt begins and after every operation of a schedule."""

from __future__ import annotations

from typing import Any

from sim_config import DONE_ACTION, MAX_CALLS, SIGNAL, SLEEP, S, show
from sim_invariants import OUTCOME_EVENTS
from sim_workers import Attempt, Runaway, Worker

from seawall import saga


class Checks:
    """The checks of :class:`sim_schedule.Simulation` (mixed into it: they read its record of
    what the schedule did and report to its :meth:`~sim_schedule.Simulation.violate`)."""

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
                f"{w.wid} served run {rid} (started under {show(started_under)}) with a "
                f"function of {show(names)}: {name} {phase}",
            )
        for checked in dict.fromkeys((row, name)):
            record = rows.get(checked)
            if record is None:
                continue
            done = record.status is S.COMPENSATED if comp else record.status in DONE_ACTION
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
                if r.name == SIGNAL and r.status in DONE_ACTION:
                    if rid not in self.signals or r.result != self.signals[rid]:
                        self.violate(
                            "wait_skipped",
                            (rid, r.name),
                            f"run {rid}: the log says the wait {r.name!r} is {r.status.value} "
                            f"with {r.result!r}; the first signal sent: {self.signals.get(rid)!r}",
                        )
                elif r.name == SLEEP:
                    pass  # (no function: its end is checked where the next step begins)
                elif r.status in DONE_ACTION and not self.ok[(rid, r.name, "action")]:
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

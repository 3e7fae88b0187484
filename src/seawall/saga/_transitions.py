"""The state machine of a run: given a claimed run and the time, what it does next.

For each step, the step's :class:`~seawall.RetryPolicy` decides (through the sans-I/O core):
whether an error is retried, after which delay, whether the step's time or the budget allows
it. A transition writes each decision into the run's rows in memory (the worker saves them in
one transaction), and only then is the decision acted on: an attempt starts only once the log
says it started, and a wait is a ``next_retry_at`` in the log, which any worker picks up when it
is due. The retry state itself travels in the step's row (``RetryState.snapshot`` /
``restore``), so a restart, a deploy or another worker continues the same backoff.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable

from seawall._core.errors import DeadlineExceeded, Overloaded, error_summary
from seawall._strategies.retry import RetryState
from seawall.saga._model import Sleep, Status, StepContext, WaitFor, WorkerLost, utc
from seawall.saga._operations import ACTIVE, apply_operation
from seawall.saga._outcomes import Outcomes, Recorded
from seawall.saga._rows import HistoryRow, Loaded, dumps
from seawall.saga._work import Pending, Work, is_async

__all__ = ["Transitions"]

S = Status


class _Told:
    """The budget of a policy whose attempt's outcome is recorded again (the commit that
    recorded it first was lost, :meth:`Transitions.resumed`): the budget was told of the
    attempt then, and is not told twice; a retry is allowed as it was then."""

    __slots__ = ("allowed",)

    def __init__(self, *, allowed: bool) -> None:
        self.allowed = allowed

    def on_request(self) -> None:
        """(Asked before a first attempt only: never here.)"""

    def allow_retry(self, error: BaseException) -> bool:
        return self.allowed

    def on_success(self) -> None:
        """Told already."""

    def on_failure(self, error: BaseException) -> None:
        """Told already."""

    def on_answer(self, error: BaseException) -> None:
        """Told already."""


class Transitions:
    """Decides the next move of claimed runs, as this worker (*worker_id*, holding runs for
    *lease* seconds), recording what happens through *outcomes*."""

    __slots__ = ("lease", "outcomes", "signal_data", "worker_id")

    def __init__(
        self,
        lease: float,
        worker_id: str,
        outcomes: Outcomes,
        signal_data: Callable[[str, str], str | None] | None = None,
    ) -> None:
        self.lease = lease
        self.worker_id = worker_id
        self.outcomes = outcomes
        #: The data (JSON text) of a signal sent to a run, by run id and name; ``None`` if none
        #: is in (read in the worker's open transaction).
        self.signal_data: Callable[[str, str], str | None] = signal_data or (lambda r, n: None)

    def advance_safely(self, w: Work, now: float) -> None:
        """:meth:`advance`; a run whose rows cannot be read parks (:meth:`Outcomes.unreadable`)."""
        try:
            self.advance(w, now)
        except Exception as exc:
            self.outcomes.unreadable(w, exc, now)

    def advance(self, w: Work, now: float) -> None:
        """Decide the run's next move at *now*: start an attempt (its start is logged in the
        open transaction, and ``w.pending`` is set), or leave a wait in the log, or finish."""
        loaded, run = w.loaded, w.loaded.run
        w.pending = None
        if w.problem is not None:
            # No function runs for this run here: it waits for a person (or for a worker that
            # has its definition, after an operator's retry), and its step rows stay as they are.
            for row in loaded.steps:
                row.dirty = False
            if run.status not in ACTIVE:  # pragma: no cover - claims take active runs only
                self.outcomes.release(w, None, now)
                return
            self.outcomes.finish(w, S.NEEDS_ATTENTION, now, w.problem)
            return
        self.apply_request(loaded, now)
        for _ in range(4 * len(loaded.steps) + 8):
            status = run.status
            if status in (S.RUNNING.value, S.RETRYING.value, S.WAITING.value):
                index = next(
                    (i for i, s in enumerate(loaded.steps) if s.status != S.SUCCEEDED.value), None
                )
                if index is None:
                    self.outcomes.finish(w, S.SUCCEEDED, now, None)
                    return
                if loaded.steps[index].status == S.FAILED.value:
                    # Only an operation leaves a failed step in a going run: compensate.
                    self.outcomes.exhausted(w, index, "not_retryable", now)
                    continue
                deadline = run.deadline
                if deadline is not None and now >= deadline and not loaded.steps[index].running:
                    # The run's deadline passed: no attempt begins; the run compensates.
                    self.outcomes.give_up(
                        w,
                        index,
                        "action",
                        "run_deadline",
                        f"DeadlineExceeded: the run's deadline passed ({now - deadline:.3f} s ago)",
                        now,
                    )
                    continue
                step = w.saga.steps[index]
                if isinstance(step, (WaitFor, Sleep)):
                    if self._wait(w, index, step, now):
                        return
                    continue
                if self._step(w, index, "action", now):
                    return
            elif status == S.COMPENSATING.value:
                index = self._compensation_index(w)
                if index is None:
                    self.outcomes.finish(w, S.COMPENSATED, now, run.reason)
                    return
                if self._step(w, index, "compensation", now):
                    return
            else:
                run.due_at = None
                run.lease_owner = None
                return
        raise RuntimeError(f"run {run.run_id!r}: no progress")  # pragma: no cover

    @staticmethod
    def apply_request(loaded: Loaded, now: float) -> None:
        """Apply the operator's request the run carries (``run.requested``, read in the open
        transaction), if any; it begins no attempt. One that no longer applies to the run's
        status changes nothing (the save clears it all the same)."""
        if loaded.run.requested:
            with contextlib.suppress(ValueError):
                apply_operation(loaded, loaded.run.requested, now)

    def _compensation_index(self, w: Work) -> int | None:
        steps = w.saga.steps
        for i in range(len(w.loaded.steps) - 1, -1, -1):
            row = w.loaded.steps[i]
            if row.status == S.COMPENSATING.value:
                return i
            if row.status == S.SUCCEEDED.value and steps[i].compensate is not None:
                return i
        return None

    def _step(self, w: Work, index: int, phase: str, now: float) -> bool:
        """Start (or wait for, or give up on) the attempt of step *index* due in *phase*;
        ``True`` once the run's next move is decided, ``False`` to look again."""
        loaded, run = w.loaded, w.loaded.run
        row = loaded.steps[index]
        step = w.saga.steps[index]
        if step.name != row.name:  # pragma: no cover - the definition was matched by its names
            raise RuntimeError(f"step {step.name!r} does not match the row of step {row.name!r}")
        policy = step.retry_policy
        comp = phase == "compensation"
        if row.running:
            self._lost(w, index, phase, now)
            return False
        if comp and row.status == S.SUCCEEDED.value:
            row.status = S.COMPENSATING.value
            row.retry_state = None
            row.next_retry_at = None
            row.dirty = True
        if row.next_retry_at is not None and row.next_retry_at > now:
            run.status = S.COMPENSATING.value if comp else S.RETRYING.value
            self.outcomes.release(w, row.next_retry_at, now)
            return True
        error: BaseException = Recorded(row.last_error or "an earlier attempt failed")
        try:
            data = json.loads(row.retry_state) if row.retry_state else None
            if data is not None:
                # A refused retry is deferred by the core, not given up: this layer can wait.
                state = RetryState.restore(
                    policy, data["retry"], now=now, wall_now=now, defer_refusals=True
                )
                legacy = data.get("holds")  # rows of the first schema kept holds beside it
                if isinstance(legacy, int) and not isinstance(legacy, bool) and legacy > 0:
                    state.holds = max(state.holds, legacy)
            else:
                state = policy.new_state(now, defer_refusals=True)
        except Overloaded as exc:  # an adaptive throttle refused the call before it started
            self.outcomes.throttled(w, index, phase, exc, now)
            return True
        except (ValueError, KeyError, TypeError) as exc:  # a row this version cannot continue
            self.outcomes.give_up(w, index, phase, "not_retryable", error_summary(exc), now)
            return False
        if state.deferred:
            delay = state.resume(now, error)  # the budget asked again
            if delay is None:  # refused once too often, or the deadline: a give-up at last
                done = row.compensation_attempt_count if comp else row.attempt_count
                self.outcomes.event(
                    w,
                    "hold",
                    step=row.name,
                    phase=phase,
                    attempt=done,
                    error=row.last_error,
                    reason="budget",
                )
                self.outcomes.give_up(w, index, phase, "budget", row.last_error, now)
                return False
            if delay > 0.0:
                self.outcomes.hold(w, index, phase, state, error, delay, "budget", now)
                return True
        try:
            attempt_deadline = state.begin_attempt(now)
        except DeadlineExceeded as exc:
            self.outcomes.give_up(w, index, phase, "deadline", error_summary(exc), now)
            return False
        if not comp and run.deadline is not None:
            attempt_deadline = min(attempt_deadline, run.deadline)  # the run's deadline caps it
        if comp:
            row.compensation_attempt_count += 1
            attempt = row.compensation_attempt_count
            fn = step.compensate
            key = f"{row.idempotency_key}:compensate"
        else:
            row.attempt_count += 1
            attempt = row.attempt_count
            fn = step.action
            key = row.idempotency_key
            row.status = S.RUNNING.value
            if row.started_at is None:
                row.started_at = now
        assert fn is not None
        row.running = True
        row.next_retry_at = None
        row.retry_state = dumps({"retry": state.snapshot(now=now, wall_now=now)})
        row.updated_at = now
        row.dirty = True
        loaded.history.append(
            HistoryRow(
                run_id=run.run_id,
                at=now,
                event="attempt",
                step=row.name,
                phase=phase,
                attempt=attempt,
            )
        )
        run.status = S.COMPENSATING.value if comp else S.RUNNING.value
        run.updated_at = now
        run.due_at = now + self.lease
        run.lease_owner = self.worker_id
        results = {
            s.name: json.loads(s.result)
            for s in loaded.steps[: index + 1 if comp else index]
            if s.result is not None
        }
        ctx = StepContext(
            run_id=run.run_id,
            step=row.name,
            attempt=attempt,
            input=json.loads(run.input),
            results=results,
            idempotency_key=key,
            compensating=comp,
        )
        w.pending = Pending(
            index=index,
            phase=phase,
            state=state,
            deadline=attempt_deadline,
            fn=fn,
            ctx=ctx,
            started=now,
            is_async=is_async(fn),
        )
        return True

    def _wait(self, w: Work, index: int, step: WaitFor | Sleep, now: float) -> bool:
        """The step *index* is a wait or a timer: begin it (its end is the step's
        ``next_retry_at``), end it (the signal is in, the timer is due, or the wait timed out),
        or leave the run WAITING, released, until then. ``True`` once the run is released."""
        loaded, run = w.loaded, w.loaded.run
        row = loaded.steps[index]
        wait = isinstance(step, WaitFor)
        began = row.status != S.WAITING.value
        if began:
            # It begins (PENDING), or begins again after an operator's retry of a parked one.
            if isinstance(step, WaitFor):
                until = None if step.timeout is None else now + step.timeout
                if run.deadline is not None:
                    until = run.deadline if until is None else min(until, run.deadline)
                detail: dict[str, object] = {"signal": step.name, "until": until}
            else:
                until = now + step.seconds
                if run.deadline is not None and until > run.deadline:
                    self.outcomes.give_up(
                        w,
                        index,
                        "action",
                        "run_deadline",
                        f"DeadlineExceeded: a sleep of {step.seconds:g} s would end past the "
                        "run's deadline",
                        now,
                    )
                    return False
                detail = {"seconds": step.seconds, "until": until}
            row.status = S.WAITING.value
            row.next_retry_at = until
            row.retry_state = None
            row.last_error = None
            row.finished_at = None
            if row.started_at is None:
                row.started_at = now
            row.updated_at = now
            row.dirty = True
            loaded.history.append(
                HistoryRow(
                    run_id=run.run_id,
                    at=now,
                    event="wait" if wait else "sleep",
                    step=row.name,
                    phase="action",
                    detail=dumps(detail),
                )
            )
        if isinstance(step, WaitFor):
            data = self.signal_data(run.run_id, step.name)
            if data is not None:
                self.outcomes.waited(w, index, data, now)
                return False
        if row.next_retry_at is not None and row.next_retry_at <= now:
            if not isinstance(step, WaitFor):
                self.outcomes.waited(w, index, None, now)
                return False
            # The timeout the wait began with (a deploy may have changed the step's since).
            waited = row.next_retry_at - (row.started_at if row.started_at is not None else now)
            limit = step.timeout if step.timeout is not None else max(waited, 0.0)
            self.outcomes.give_up(
                w,
                index,
                "action",
                "timeout",
                f"TimeoutError: no signal {step.name!r} within {limit:g} s",
                now,
            )
            return False
        run.status = S.WAITING.value
        if wait:
            loaded.waiting_for = step.name
        self.outcomes.release(w, row.next_retry_at, now)
        if began:  # the run entered WAITING: the hooks hear of it once
            what = f"waits for the signal {step.name!r}" if wait else f"sleeps at {step.name!r}"
            end = "" if row.next_retry_at is None else f" until {utc(row.next_retry_at)}"
            self.outcomes.event(w, "run", reason=f"{what}{end}")
        return True

    @staticmethod
    def running(loaded: Loaded, pending: Pending) -> bool:
        """Whether the log (*loaded*) says the attempt *pending* began and has no outcome."""
        if pending.index >= len(loaded.steps):  # pragma: no cover - a run keeps its steps
            return False
        row = loaded.steps[pending.index]
        comp = pending.phase == "compensation"
        count = row.compensation_attempt_count if comp else row.attempt_count
        # The row's running flag is its phase's: an action runs on a RUNNING row, and a
        # compensation may run on the row of the action whose outcome began it.
        action = row.status == S.RUNNING.value
        return row.running and action != comp and count == pending.ctx.attempt

    def resumed(self, w: Work, done: Pending, now: float) -> Pending | None:
        """The attempt *done*, which the log (``w.loaded``, read anew) has begun with no
        outcome (:meth:`running`), its retry state read back from the step's row as
        :meth:`_lost` reads it: its outcome can be recorded on the log as it is (a commit that
        recorded it once was lost). ``None`` if that state cannot be read.

        The policy's budget and hooks heard of the outcome when it was first recorded (if it
        was, ``done.told``): they do not hear of it again, and the budget's answer then (a
        retry allowed, or refused) stands."""
        row = w.loaded.steps[done.index]
        policy = w.saga.steps[done.index].retry_policy
        if done.told:
            first = done.state
            refused = first.deferred or first.reason == "budget"
            told = None if policy.budget is None else _Told(allowed=not refused)
            policy = policy.replace(budget=told, hooks=())
        try:
            data = json.loads(row.retry_state) if row.retry_state else None
            if not isinstance(data, dict):
                return None
            state = RetryState.restore(
                policy, data["retry"], now=now, wall_now=now, defer_refusals=True
            )
        except (ValueError, KeyError, TypeError):
            return None
        return dataclasses.replace(done, state=state)

    def _lost(self, w: Work, index: int, phase: str, now: float) -> None:
        """The attempt the log says is running has no worker any more (the lease expired)."""
        row = w.loaded.steps[index]
        attempt = row.compensation_attempt_count if phase == "compensation" else row.attempt_count
        policy = w.saga.steps[index].retry_policy
        exc = WorkerLost(
            f"the worker running attempt {attempt} stopped before recording its outcome"
        )
        w.loaded.history.append(
            HistoryRow(
                run_id=w.loaded.run.run_id,
                at=now,
                event="lost",
                step=row.name,
                phase=phase,
                attempt=attempt,
            )
        )
        row.running = False
        row.dirty = True
        try:
            data = json.loads(row.retry_state) if row.retry_state else None
            if not isinstance(data, dict):
                raise ValueError("no retry state")
            state = RetryState.restore(policy, data["retry"], now=now, wall_now=now)
        except (ValueError, KeyError, TypeError) as err:
            self.outcomes.give_up(w, index, phase, "not_retryable", error_summary(err), now)
            return
        self.outcomes.failure(w, index, phase, state, exc, attempt, 0.0, now)

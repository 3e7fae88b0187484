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
import json
import logging
from typing import Any

from seawall._core.errors import (
    DeadlineExceeded,
    Overloaded,
    RetryAfter,
    error_summary,
    permanent,
    retry_after_of,
)
from seawall._strategies.retry import RetryState
from seawall.saga._model import SagaEvent, Status, StepContext, WorkerLost, check_json
from seawall.saga._operations import ACTIVE, apply_operation
from seawall.saga._rows import HistoryRow, dumps
from seawall.saga._work import Outcome, Pending, Work, is_async

__all__ = ["Recorded", "Transitions"]

logger = logging.getLogger("seawall.saga")

S = Status


class Recorded(Exception):
    """An earlier attempt's error, known only by its summary (after a restart)."""


class Transitions:
    """Moves claimed runs from one state to the next, as this worker (*worker_id*, holding
    runs for *lease* seconds); events for the hooks are built when *notify* is true."""

    __slots__ = ("lease", "notify", "worker_id")

    def __init__(self, lease: float, worker_id: str, notify: bool) -> None:
        self.lease = lease
        self.worker_id = worker_id
        self.notify = notify

    # -- deciding what runs next ---------------------------------------------------------------

    def advance_safely(self, w: Work, now: float) -> None:
        """:meth:`advance`; a run whose rows cannot be read parks (:meth:`unreadable`)."""
        try:
            self.advance(w, now)
        except Exception as exc:
            self.unreadable(w, exc, now)

    def unreadable(self, w: Work, exc: Exception, now: float) -> None:
        """A row this worker cannot read (edited by hand, or written by a newer version): the
        run waits for a person instead of stopping the worker on every claim."""
        loaded, run = w.loaded, w.loaded.run
        for row in loaded.steps:
            row.dirty = False  # keep the rows as they were
        loaded.history = []
        w.pending = None
        w.events = []
        logger.exception("saga %s run %s: its log cannot be read", run.saga, run.run_id)
        self._finish(
            w, S.NEEDS_ATTENTION, now, f"the run's log cannot be read: {error_summary(exc)}"
        )

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
                self._release(w, None, now)
                return
            self._finish(w, S.NEEDS_ATTENTION, now, w.problem)
            return
        if run.requested:
            with contextlib.suppress(ValueError):
                apply_operation(loaded, run.requested, now)
        for _ in range(4 * len(loaded.steps) + 8):
            status = run.status
            if status in (S.RUNNING.value, S.RETRYING.value):
                index = next(
                    (i for i, s in enumerate(loaded.steps) if s.status != S.SUCCEEDED.value), None
                )
                if index is None:
                    self._finish(w, S.SUCCEEDED, now, None)
                    return
                if loaded.steps[index].status == S.FAILED.value:
                    # Only an operation leaves a failed step in a going run: compensate.
                    self._exhausted(w, index, "not_retryable", now)
                    continue
                if self._step(w, index, "action", now):
                    return
            elif status == S.COMPENSATING.value:
                index = self._compensation_index(w)
                if index is None:
                    self._finish(w, S.COMPENSATED, now, run.reason)
                    return
                if self._step(w, index, "compensation", now):
                    return
            else:
                run.due_at = None
                run.lease_owner = None
                return
        raise RuntimeError(f"run {run.run_id!r}: no progress")  # pragma: no cover

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
            self._release(w, row.next_retry_at, now)
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
            self._throttled(w, index, phase, exc, now)
            return True
        except (ValueError, KeyError, TypeError) as exc:  # a row this version cannot continue
            self._give_up(w, index, phase, "not_retryable", error_summary(exc), now)
            return False
        if state.deferred:
            delay = state.resume(now, error)  # the budget asked again
            if delay is None:  # refused once too often, or the deadline: a give-up at last
                done = row.compensation_attempt_count if comp else row.attempt_count
                self._event(
                    w,
                    "hold",
                    step=row.name,
                    phase=phase,
                    attempt=done,
                    error=row.last_error,
                    reason="budget",
                )
                self._give_up(w, index, phase, "budget", row.last_error, now)
                return False
            if delay > 0.0:
                self._hold(w, index, phase, state, error, delay, "budget", now)
                return True
        try:
            attempt_deadline = state.begin_attempt(now)
        except DeadlineExceeded as exc:
            self._give_up(w, index, phase, "deadline", error_summary(exc), now)
            return False
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

    def _release(self, w: Work, due_at: float | None, now: float) -> None:
        run = w.loaded.run
        run.due_at = due_at
        run.lease_owner = None
        run.updated_at = now

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
            self._give_up(w, index, phase, "not_retryable", error_summary(err), now)
            return
        self._failure(w, index, phase, state, exc, attempt, 0.0, now)

    # -- recording outcomes ---------------------------------------------------------------------

    def record(self, w: Work, outcome: Outcome, now: float) -> None:
        pending = w.pending
        assert pending is not None
        w.pending = None
        ok, value, duration = outcome
        loaded, run = w.loaded, w.loaded.run
        row = loaded.steps[pending.index]
        comp = pending.phase == "compensation"
        attempt = pending.ctx.attempt
        if ok and not comp:
            try:
                check_json(value, f"the result of step {row.name!r}")
            except TypeError as err:
                ok, value = False, permanent(err)
        if not ok:
            self._failure(
                w, pending.index, pending.phase, pending.state, value, attempt, duration, now
            )
            return
        pending.state.on_success(now)
        row.running = False
        row.next_retry_at = None
        row.retry_state = None
        row.finished_at = now
        row.updated_at = now
        row.dirty = True
        if comp:
            row.status = S.COMPENSATED.value
        else:
            row.status = S.SUCCEEDED.value
            row.result = dumps(value)
        loaded.history.append(
            HistoryRow(
                run_id=run.run_id,
                at=now,
                event="success",
                step=row.name,
                phase=pending.phase,
                attempt=attempt,
                detail=dumps({"duration": round(duration, 6)}),
            )
        )
        run.updated_at = now
        run.due_at = now
        w.events.append(
            SagaEvent(
                kind="attempt",
                saga=run.saga,
                run_id=run.run_id,
                step=row.name,
                phase=pending.phase,
                attempt=attempt,
                error=None,
                delay=None,
                reason=None,
                status=Status(run.status),
                duration=duration,
            )
        )

    def _failure(
        self,
        w: Work,
        index: int,
        phase: str,
        state: RetryState,
        exc: BaseException,
        attempt: int,
        duration: float,
        now: float,
    ) -> None:
        """An attempt failed with *exc*: the core decides (retry after a delay, or give up)."""
        loaded, run = w.loaded, w.loaded.run
        row = loaded.steps[index]
        comp = phase == "compensation"
        decided: BaseException = exc
        if isinstance(exc, Overloaded):
            # "Overloaded; don't retry" tells the layer above not to retry at once. This layer
            # keeps the run and moves its next attempt out, as for a Retry-After: the core waits
            # the larger of the callee's hint and its backoff, and applies max_retry_after,
            # attempts, deadline and budget.
            hint = retry_after_of(exc)
            decided = RetryAfter(0.0 if hint is None else hint, str(exc))
        delay = state.on_error(decided, now)
        state.last_error = exc
        summary = error_summary(exc)
        row.running = False
        row.last_error = summary
        row.updated_at = now
        row.dirty = True
        run.updated_at = now
        if delay is not None and state.deferred:  # the budget refused: a hold, not a give-up
            self._hold(
                w,
                index,
                phase,
                state,
                exc,
                delay,
                "budget",
                now,
                attempt=attempt,
                duration=duration,
            )
            return
        if delay is None:
            reason = state.reason or "not_retryable"
            loaded.history.append(
                HistoryRow(
                    run_id=run.run_id,
                    at=now,
                    event="failure",
                    step=row.name,
                    phase=phase,
                    attempt=attempt,
                    error=summary,
                )
            )
            self._event(
                w,
                "attempt",
                step=row.name,
                phase=phase,
                attempt=attempt,
                error=exc,
                reason=reason,
                duration=duration,
            )
            self._give_up(w, index, phase, reason, summary, now)
            return
        at = now + delay
        row.next_retry_at = at
        row.retry_state = dumps({"retry": state.snapshot(now=now, wall_now=now)})
        if not comp:
            row.status = S.RETRYING.value
        run.status = S.COMPENSATING.value if comp else S.RETRYING.value
        run.due_at = at
        loaded.history.append(
            HistoryRow(
                run_id=run.run_id,
                at=now,
                event="failure",
                step=row.name,
                phase=phase,
                attempt=attempt,
                delay=delay,
                error=summary,
                detail=dumps({"next_retry_at": at}),
            )
        )
        self._event(
            w,
            "attempt",
            step=row.name,
            phase=phase,
            attempt=attempt,
            error=exc,
            delay=delay,
            duration=duration,
        )

    def _throttled(self, w: Work, index: int, phase: str, exc: BaseException, now: float) -> None:
        """A throttle refused the call before it started: hold it as the core holds a refused
        retry (:meth:`RetryState.defer`), or give up (reason ``"overloaded"``)."""
        policy = w.saga.steps[index].retry_policy
        delay = RetryState(policy, now, defer_refusals=True).defer(exc, now)
        if delay is None:
            self._give_up(w, index, phase, "overloaded", error_summary(exc), now)
            return
        self._hold(w, index, phase, None, exc, delay, "overloaded", now)

    def _hold(
        self,
        w: Work,
        index: int,
        phase: str,
        state: RetryState | None,
        exc: BaseException,
        delay: float,
        reason: str,
        now: float,
        *,
        attempt: int | None = None,
        duration: float = 0.0,
    ) -> None:
        """The budget refused a retry (or a throttle the call): the core deferred it by *delay*
        (:meth:`RetryState.defer`); record the wait, and ask the budget again then."""
        loaded, run = w.loaded, w.loaded.run
        row = loaded.steps[index]
        comp = phase == "compensation"
        summary = error_summary(exc) if not isinstance(exc, Recorded) else row.last_error
        if attempt is not None:
            loaded.history.append(
                HistoryRow(
                    run_id=run.run_id,
                    at=now,
                    event="failure",
                    step=row.name,
                    phase=phase,
                    attempt=attempt,
                    error=summary,
                )
            )
            # The attempt failed and its retry waits: held back, not given up.
            self._event(
                w,
                "attempt",
                step=row.name,
                phase=phase,
                attempt=attempt,
                error=exc,
                delay=delay,
                reason=reason,
                duration=duration,
            )
        at = now + delay
        row.running = False
        row.next_retry_at = at
        row.last_error = summary
        if state is not None:
            row.retry_state = dumps({"retry": state.snapshot(now=now, wall_now=now)})
        if not comp and row.status != S.PENDING.value:
            row.status = S.RETRYING.value
        row.updated_at = now
        row.dirty = True
        run.status = S.COMPENSATING.value if comp else S.RETRYING.value
        loaded.history.append(
            HistoryRow(
                run_id=run.run_id,
                at=now,
                event="hold",
                step=row.name,
                phase=phase,
                attempt=attempt,
                delay=delay,
                error=summary,
                detail=dumps({"next_retry_at": at, "reason": reason}),
            )
        )
        self._release(w, at, now)
        self._event(
            w,
            "hold",
            step=row.name,
            phase=phase,
            attempt=attempt or 0,
            error=exc,
            delay=delay,
            reason=reason,
        )

    def _give_up(
        self, w: Work, index: int, phase: str, reason: str, summary: str | None, now: float
    ) -> None:
        loaded, run = w.loaded, w.loaded.run
        row = loaded.steps[index]
        row.running = False
        row.next_retry_at = None
        row.updated_at = now
        row.dirty = True
        if summary is not None:
            row.last_error = summary
        loaded.history.append(
            HistoryRow(
                run_id=run.run_id,
                at=now,
                event="give_up",
                step=row.name,
                phase=phase,
                error=summary,
                detail=dumps({"reason": reason}),
            )
        )
        if phase == "compensation":
            # The step stays COMPENSATING, with its error: a person decides (retry_now, or
            # repair by hand and cancel).
            self._finish(
                w,
                S.NEEDS_ATTENTION,
                now,
                f"the compensation of step {row.name!r} gave up ({reason}): {summary}",
            )
            return
        row.status = S.FAILED.value
        row.finished_at = now
        self._exhausted(w, index, reason, now)

    def _exhausted(self, w: Work, index: int, reason: str, now: float) -> None:
        run = w.loaded.run
        row = w.loaded.steps[index]
        why = f"step {row.name!r} gave up ({reason}): {row.last_error}"
        on_exhausted = w.saga.steps[index].on_exhausted
        if on_exhausted == "park":
            self._finish(w, S.NEEDS_ATTENTION, now, why)
        elif on_exhausted == "fail":
            self._finish(w, S.FAILED, now, why)
        else:
            run.status = S.COMPENSATING.value
            run.reason = why
            run.due_at = now
            w.loaded.history.append(
                HistoryRow(
                    run_id=run.run_id,
                    at=now,
                    event="status",
                    detail=dumps({"status": "COMPENSATING"}),
                )
            )
            self._event(w, "run", reason=reason)

    def _finish(self, w: Work, status: Status, now: float, reason: str | None) -> None:
        run = w.loaded.run
        run.status = status.value
        run.reason = reason
        run.updated_at = now
        self._release(w, None, now)
        w.loaded.history.append(
            HistoryRow(
                run_id=run.run_id, at=now, event="status", detail=dumps({"status": status.value})
            )
        )
        self._event(w, "run", reason=reason, duration=now - run.created_at)

    def _event(
        self,
        w: Work,
        kind: Any,
        *,
        step: str | None = None,
        phase: str | None = None,
        attempt: int = 0,
        error: BaseException | str | None = None,
        delay: float | None = None,
        reason: str | None = None,
        duration: float = 0.0,
    ) -> None:
        """Queue a hooks' event of *w*'s run (emitted once the transaction is committed)."""
        if self.notify:
            run = w.loaded.run
            w.events.append(
                SagaEvent(
                    kind=kind,
                    saga=run.saga,
                    run_id=run.run_id,
                    step=step,
                    phase=phase,
                    attempt=attempt,
                    error=error,
                    delay=delay,
                    reason=reason,
                    status=Status(run.status),
                    duration=duration,
                )
            )

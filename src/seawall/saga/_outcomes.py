"""What the end of an attempt does to a run: a success, a failure the core retries or gives up
on, a retry the budget holds back, a step that gives up, a run that finishes.

Each is written into the run's rows in memory with its history line, and an event for the hooks
(emitted once the worker's transaction is committed).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from seawall._core.errors import Overloaded, RetryAfter, error_summary, permanent, retry_after_of
from seawall._strategies.retry import RetryState
from seawall.saga._model import MAX_PAYLOAD_BYTES, SagaEvent, Status, check_payload
from seawall.saga._rows import HistoryRow, dumps
from seawall.saga._work import Outcome, Pending, Work

__all__ = ["ENDED", "Outcomes", "Recorded", "fenced_line"]

logger = logging.getLogger("seawall.saga")

S = Status
#: The run statuses its deadline bounds (a compensation is not bounded by it).
_BEFORE_DEADLINE = frozenset({S.RUNNING.value, S.RETRYING.value, S.WAITING.value})


class Recorded(Exception):
    """An earlier attempt's error, known only by its summary (after a restart)."""


class Outcomes:
    """Records the ends of attempts into claimed runs; events for the hooks are built when
    *notify* is true."""

    __slots__ = ("max_payload_bytes", "notify")

    def __init__(self, notify: bool, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> None:
        self.notify = notify
        self.max_payload_bytes = max_payload_bytes

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
        self.finish(
            w, S.NEEDS_ATTENTION, now, f"the run's log cannot be read: {error_summary(exc)}"
        )

    def record(self, w: Work, outcome: Outcome, now: float) -> None:
        """Record how the attempt *w* was running ended: a success, or a failure the step's
        policy decides on (:meth:`failure`)."""
        pending = w.pending
        assert pending is not None
        w.pending = None
        ok, value, duration = outcome
        loaded = w.loaded
        row = loaded.steps[pending.index]
        comp = pending.phase == "compensation"
        attempt = pending.ctx.attempt
        text = None
        if ok and not comp:
            try:
                text = check_payload(
                    value, f"the result of step {row.name!r}", self.max_payload_bytes
                )
            except (TypeError, ValueError) as err:
                # Not JSON, too deep or too large: the same result again; never retried.
                ok, value = False, permanent(err)
        pending.told = True
        if not ok:
            self.failure(
                w, pending.index, pending.phase, pending.state, value, attempt, duration, now
            )
            return
        pending.state.on_success(now)
        self._succeed(
            w, pending.index, pending.phase, text, now, {"duration": round(duration, 6)}, attempt
        )
        self.event(
            w, "attempt", step=row.name, phase=pending.phase, attempt=attempt, duration=duration
        )

    def failure(
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
        reason_now = None
        if (
            delay is not None
            and not comp
            and not state.deferred
            and run.deadline is not None
            and now + delay > run.deadline
        ):
            # The retry would be due past the run's deadline: not scheduled; the step fails.
            delay, reason_now = None, "run_deadline"
        row.running = False
        row.last_error = summary
        row.updated_at = now
        row.dirty = True
        run.updated_at = now
        if delay is not None and state.deferred:  # the budget refused: a hold, not a give-up
            self.hold(
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
            reason = reason_now or state.reason or "not_retryable"
            self._failed(w, index, phase, attempt, exc, summary, duration, now, reason=reason)
            self.give_up(w, index, phase, reason, summary, now)
            return
        at = now + delay
        row.next_retry_at = at
        row.retry_state = dumps({"retry": state.snapshot(now=now, wall_now=now)})
        if not comp:
            row.status = S.RETRYING.value
        run.status = S.COMPENSATING.value if comp else S.RETRYING.value
        run.due_at = at
        self._failed(w, index, phase, attempt, exc, summary, duration, now, retry_in=delay)

    def _failed(
        self,
        w: Work,
        index: int,
        phase: str,
        attempt: int,
        exc: BaseException,
        summary: str | None,
        duration: float,
        now: float,
        *,
        retry_in: float | None = None,
        held: float | None = None,
        reason: str | None = None,
    ) -> None:
        """The ``failure`` line of an attempt, with the retry it scheduled (*retry_in*
        seconds from *now*), and the event the hooks hear of it: with that delay, or the wait of
        a hold (*held*), and why it gave up or is held back (*reason*)."""
        row = w.loaded.steps[index]
        w.loaded.history.append(
            HistoryRow(
                run_id=w.loaded.run.run_id,
                at=now,
                event="failure",
                step=row.name,
                phase=phase,
                attempt=attempt,
                delay=retry_in,
                error=summary,
                detail=None if retry_in is None else dumps({"next_retry_at": now + retry_in}),
            )
        )
        self.event(
            w,
            "attempt",
            step=row.name,
            phase=phase,
            attempt=attempt,
            error=exc,
            delay=held if retry_in is None else retry_in,
            reason=reason,
            duration=duration,
        )

    def throttled(self, w: Work, index: int, phase: str, exc: BaseException, now: float) -> None:
        """A throttle refused the call before it started: hold it as the core holds a refused
        retry (:meth:`RetryState.defer`), or give up (reason ``"overloaded"``)."""
        policy = w.saga.steps[index].retry_policy
        delay = RetryState(policy, now, defer_refusals=True).defer(exc, now)
        if delay is None:
            self.give_up(w, index, phase, "overloaded", error_summary(exc), now)
            return
        self.hold(w, index, phase, None, exc, delay, "overloaded", now)

    def hold(
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
            # The attempt failed and its retry waits: held back, not given up.
            self._failed(
                w, index, phase, attempt, exc, summary, duration, now, held=delay, reason=reason
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
        self.release(w, at, now)
        self.event(
            w,
            "hold",
            step=row.name,
            phase=phase,
            attempt=attempt or 0,
            error=exc,
            delay=delay,
            reason=reason,
        )

    def give_up(
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
            self.finish(
                w,
                S.NEEDS_ATTENTION,
                now,
                f"the compensation of step {row.name!r} gave up ({reason}): {summary}",
            )
            return
        row.status = S.FAILED.value
        row.finished_at = now
        self.exhausted(w, index, reason, now)

    def exhausted(self, w: Work, index: int, reason: str, now: float) -> None:
        run = w.loaded.run
        row = w.loaded.steps[index]
        why = f"step {row.name!r} gave up ({reason}): {row.last_error}"
        # Past the run's deadline the run compensates, whatever the step says.
        on_exhausted = (
            "compensate" if reason == "run_deadline" else w.saga.steps[index].on_exhausted
        )
        if on_exhausted == "park":
            self.finish(w, S.NEEDS_ATTENTION, now, why)
        elif on_exhausted == "fail":
            self.finish(w, S.FAILED, now, why)
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
            self.event(w, "run", reason=reason)

    def waited(self, w: Work, index: int, data: str | None, now: float) -> None:
        """A wait ended with its signal's *data* (JSON text), or a timer (``None``): the step
        succeeded, and the run goes on."""
        row = w.loaded.steps[index]
        detail = {"waited": round(now - row.started_at, 6) if row.started_at else 0.0}
        self._succeed(w, index, "action", data, now, detail)
        w.loaded.run.status = S.RUNNING.value

    def _succeed(
        self,
        w: Work,
        index: int,
        phase: str,
        result: str | None,
        now: float,
        detail: dict[str, float],
        attempt: int | None = None,
    ) -> None:
        """The step's action (with its *result*, JSON text) or its compensation succeeded: its
        row, its history line and the run made due (the next step, or the next compensation).
        An attempt's success and a wait's end both come here."""
        loaded, run = w.loaded, w.loaded.run
        row = loaded.steps[index]
        row.running = False
        row.next_retry_at = None
        row.retry_state = None
        row.finished_at = now
        row.updated_at = now
        row.dirty = True
        if phase == "compensation":
            row.status = S.COMPENSATED.value
        else:
            row.status = S.SUCCEEDED.value
            row.result = result
        loaded.history.append(
            HistoryRow(
                run_id=run.run_id,
                at=now,
                event="success",
                step=row.name,
                phase=phase,
                attempt=attempt,
                detail=dumps(detail),
            )
        )
        run.updated_at = now
        run.due_at = now

    def finish(self, w: Work, status: Status, now: float, reason: str | None) -> None:
        run = w.loaded.run
        run.status = status.value
        run.reason = reason
        run.updated_at = now
        self.release(w, None, now)
        w.loaded.history.append(
            HistoryRow(
                run_id=run.run_id, at=now, event="status", detail=dumps({"status": status.value})
            )
        )
        self.event(w, "run", reason=reason, duration=now - run.created_at)

    def event(
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
            started = None
            if phase == "action":
                started = next((r.started_at for r in w.loaded.steps if r.name == step), None)
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
                    started_at=started,
                )
            )

    def release(self, w: Work, due_at: float | None, now: float) -> None:
        run = w.loaded.run
        deadline = run.deadline
        if (
            deadline is not None
            and run.status in _BEFORE_DEADLINE
            and (due_at is None or due_at > deadline)
        ):
            due_at = deadline  # the run compensates then, whatever it waits for
        run.due_at = due_at
        run.lease_owner = None
        run.updated_at = now


#: The history events that record how an attempt ended (``fenced``: by a worker whose lease was
#: lost meanwhile; its outcome is not the run's).
ENDED: Final = frozenset({"success", "failure", "hold", "fenced"})


def fenced_line(worker_id: str, w: Work, done: Pending, outcome: Outcome, now: float) -> HistoryRow:
    """The history line of an attempt whose outcome is not recorded: its worker's lease was
    taken (fencing); the log still says what it did."""
    return HistoryRow(
        run_id=w.loaded.run.run_id,
        at=now,
        event="fenced",
        step=done.ctx.step,
        phase=done.phase,
        attempt=done.ctx.attempt,
        error=None if outcome.ok else error_summary(outcome.value),
        detail=dumps(
            {
                "worker": worker_id,
                "outcome": "success" if outcome.ok else "failure",
                "duration": round(outcome.duration, 6),
            }
        ),
    )

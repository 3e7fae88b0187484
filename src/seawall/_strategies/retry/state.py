"""RetryState: the retry decisions for one logical call, free of I/O."""

from __future__ import annotations

import math
from collections.abc import (
    Mapping,
)
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Literal,
    ParamSpec,
    TypeVar,
)

from seawall._core.classify import (
    Verdict,
    classify,
    remember_retried,
)
from seawall._core.clock import TESTING
from seawall._core.errors import (
    DeadlineExceeded,
    add_note,
    is_permanent,
    mark_exhausted,
    retry_after_of,
)
from seawall._core.events import DEBUG, emit, logger
from seawall._core.public import public
from seawall._core.redact import redact_text
from seawall._core.switch import ISOLATED, ONE_ATTEMPT, SWITCH
from seawall._strategies.deadline import (
    attempt_deadline,
)
from seawall._strategies.retry import persist as _persist
from seawall._strategies.retry.events import AttemptRecord, GiveUpReason, Outcome, RetryEvent

if TYPE_CHECKING:
    # At run time the budget module is imported by the first policy given a budget: a policy
    # without one (the first @seawall.retry of most programs) does not load it.
    from seawall._strategies.budget import Budget
    from seawall._strategies.retry.policy import RetryPolicy

__all__ = ["MIN_HOLD", "RetryState"]


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


@public("seawall.lowlevel")
class RetryState:
    """The retry decisions for one logical call, free of I/O (sans-I/O).

    A driver calls :meth:`begin_attempt` before each attempt, then :meth:`on_error`,
    :meth:`on_result` or :meth:`on_success` with the time now. ``on_error``/``on_result`` return
    the delay before the next attempt, or ``None`` to give up (``reason`` then says why). The
    driver does the waiting: a thread sleeps, a task awaits, the simulator schedules an event, a
    durable orchestrator writes ``next_retry_at`` (see :meth:`snapshot`).
    """

    __slots__ = (
        "_attempt_started",
        "_begin_at_once",
        "_previous_delay",
        "attempts",
        "deadline",
        "defer_refusals",
        "history",
        "holds",
        "last_error",
        "next_retry",
        "policy",
        "reason",
        "started",
        "total_delay",
    )

    def __init__(
        self,
        policy: RetryPolicy,
        now: float,
        deadline: float = math.inf,
        *,
        defer_refusals: bool = False,
    ) -> None:
        self.policy = policy
        self.started = now
        self.deadline = deadline
        self.attempts = 0
        self.total_delay = 0.0
        self.reason: GiveUpReason | None = None
        self.history: list[AttemptRecord] | None = None
        self._previous_delay: float | None = None
        self._attempt_started = now
        #: The latest attempt's error (an ``Exception``, or a summary string after
        #: :meth:`restore`); ``None`` before any failure.
        self.last_error: BaseException | str | None = None
        #: When the next attempt is due, on the policy's clock (``None``: none scheduled).
        self.next_retry: float | None = None
        #: Whether a retry the budget refuses is deferred (:meth:`defer`) instead of ending
        #: the call: for a durable driver, which can wait and ask the budget again.
        self.defer_refusals = defer_refusals
        #: Refusals in a row since the last attempt (see :meth:`defer`); 0 when none.
        self.holds = 0
        # Set by a driver that reads no clock (every decision at the state's start: *now*),
        # whose attempts need no deadline (no timeouts, none ambient), for a state it made
        # itself (no history) of a policy without hooks: a retry decision then also begins
        # the next attempt, and the driver does not call begin_attempt (one call fewer on
        # each failure).
        self._begin_at_once = False

    def begin_attempt(self, now: float) -> float:
        """Count an attempt starting at *now*; return its absolute deadline.

        Raises:
            DeadlineExceeded: less than the policy's ``min_attempt_time`` is left: the call gives
                up before doing work, not after.
        """
        deadline = self.deadline
        if deadline != _INF and deadline - now < self.policy._least_time:
            p = self.policy
            left = deadline - now
            error = DeadlineExceeded(
                f"gave up before attempt {self.attempts + 1}: {max(left, 0.0):.3f} s left of the "
                f"deadline, at least {p.min_attempt_time:.3f} s needed"
            )
            self.reason = "deadline"
            self._emit("give_up", error, 0.0, now, "deadline")
            raise error
        self.attempts += 1
        self._attempt_started = now
        self.next_retry = None
        timeout = self.policy.attempt_timeout
        if timeout is None:
            return deadline
        return attempt_deadline(now, deadline, timeout)

    def _record(self, now: float, error: BaseException | None, delay: float | None) -> None:
        if self.history is not None:
            start = self._attempt_started
            self.history.append(AttemptRecord(self.attempts, start, now - start, error, delay))

    def on_success(self, now: float) -> None:
        """The attempt succeeded."""
        # The latest attempt has no error; and a finished call's state, error and traceback do
        # not keep each other alive (a cycle only the garbage collector would free).
        self.last_error = None
        p = self.policy
        budget = p.budget
        if budget is not None:
            budget.on_success()
        if self.history is not None:
            self._record(now, None, None)
        if p._attempt_hooks:
            event = RetryEvent(
                "success",
                p.name,
                self.attempts,
                None,
                0.0,
                now - self.started,
                None,
                now - self._attempt_started,
            )
            emit(p._attempt_hooks, event)

    def classify(self, error: BaseException, now: float, *, retry: bool | None = None) -> Verdict:
        """The verdict on *error* for this call (see :func:`seawall.lowlevel.classify`), with
        this policy's ``retry_on``, its one-layer rule, and its deadline's room at *now*."""
        p = self.policy
        room = self.deadline - now > p.min_attempt_time
        return classify(error, p._matcher, retry, room, p.retry_nested)

    def on_error(
        self, error: BaseException, now: float, *, retry: bool | None = None
    ) -> float | None:
        """The attempt raised *error*: the delay before the next attempt, or ``None`` to give up.

        Args:
            error: what the attempt raised (or an exception standing for a failed response).
            now: the clock reading.
            retry: the driver's own classification, replacing ``retry_on``: ``True`` retries
                the error (still subject to the never-retried list, attempts, deadline and
                budget); ``False`` never retries it but counts it as a failure of the dependency
                (for budgets), e.g. a 503 answer to a POST that cannot be replayed. ``None``
                asks the policy's ``retry_on``.
        """
        return self._decide(error, now, retry)

    def _unmatched(self, error: BaseException) -> None:
        """Say why an error outside ``retry_on`` was not retried (a note, a debug line): a
        silent give-up is the first trap of a new user (an ``httpx.ConnectError`` where
        ``retry_on`` names only built-in classes)."""
        p = self.policy
        wanted = p._matcher.classes
        if wanted == ():
            return  # retry_on=(): nothing is retried by class, on purpose (or a driver decides)
        if wanted is None:
            what = getattr(p.retry_on, "__name__", repr(p.retry_on))
        else:
            what = ", ".join(c.__name__ for c in wanted)
        name = f" {p.name!r}" if p.name else ""
        text = (
            f"seawall{name}: not retried: {type(error).__name__} does not match retry_on ({what})"
        )
        add_note(error, text)
        if logger.isEnabledFor(DEBUG):
            logger.debug(text)

    def on_result(self, result: object, now: float) -> float | None:
        """The attempt returned *result*: a delay if ``retry_if_result`` rejects it, else ``None``.

        When the result is rejected but the policy gives up, ``reason`` is set and the caller
        receives the last result.
        """
        pred = self.policy.retry_if_result
        if pred is None or not pred(result):
            self.on_success(now)
            return None
        budget = self.policy.budget
        if budget is not None:
            budget.on_failure(_BadResult(result))
        return self._decide(None, now)

    def _decide(
        self, error: BaseException | None, now: float, retry: bool | None = None
    ) -> float | None:
        """:meth:`on_error` (an *error*) and :meth:`on_result` (``None``: a result rejected, the
        budget told already): the verdict on the error, then whether and when to retry. One
        method, not two calls: the retry loops call it on every failure."""
        p = self.policy
        budget = p.budget
        wanted = None
        if error is not None:
            self.last_error = error
            if retry is None and type(error) in p._retried and not error.__dict__:
                # The class alone decided a retry before (classify, then remember_retried):
                # the same verdict without asking again, and no retry_after to read.
                if budget is not None:
                    budget.on_failure(error)
            else:
                room = self.deadline - now > p.min_attempt_time
                verdict = classify(error, p._matcher, retry, room, p.retry_nested)
                if verdict is _RETRY and retry is None:
                    remember_retried(p._retried, error, p._matcher)
                # Most errors have no retry_after at all: one lookup, validation only when
                # present.
                if getattr(error, "retry_after", None) is not None:
                    wanted = retry_after_of(error)
                if budget is not None:
                    if verdict is _ANSWERED:
                        p._answer(error)  # answered, not healthily: neither sickness nor success
                    elif verdict is not _NEUTRAL:
                        budget.on_failure(error)
                if verdict is not _RETRY:
                    if verdict is _ANSWERED and not is_permanent(error):
                        self._unmatched(error)
                    return self._give_up(
                        "exhausted_below" if verdict is _EXHAUSTED else "not_retryable", error, now
                    )
        attempts = self.attempts
        if attempts >= p.max_attempts:
            # Only an error this policy retried is "already retried" for the layers above: a
            # policy that makes a single attempt leaves the retrying to them.
            return self._give_up("attempts_exhausted", error, now, mark=attempts > 1)
        switch = SWITCH
        if not switch.quiet:
            # SWITCH.enabled and SWITCH.disabled_names, inline (two property calls, each
            # reading a context variable): the operator's switch, off or for this name (never
            # None: names are strings), applies outside isolated() only, which is read only
            # when the switch is off.
            if (not switch._on or p.name in switch._disabled_names) and not ISOLATED.get():
                return self._give_up("disabled", error, now)
            if switch._delegating and ONE_ATTEMPT.get():
                return self._give_up("delegated", error, now)
        fixed = p._fixed_delays
        if fixed is not None:
            delay = fixed[attempts]
        else:
            delay = p.backoff.compute(attempts - 1, p.rng, self._previous_delay)
        self._previous_delay = delay
        if wanted is not None and p.honor_retry_after:
            # Server pushback: wait the larger of what it asks and our own jittered backoff, so
            # that a "Retry-After: 0" (or a date already past) cannot make every client retry
            # in lockstep. The untrusted value is clamped, or ends the call if so configured.
            if wanted > p.max_retry_after:
                if p.retry_after_beyond_max == "give_up":
                    return self._give_up("retry_after", error, now, mark=True)
                wanted = p.max_retry_after
            if wanted > delay:
                delay = wanted
        if TESTING.instant and p._zero_instant:
            delay = 0.0  # a clock of its own: no wait (the system clock skips it: instant time)
        if self._begin_at_once:
            # The timeless driver's state: no deadline, no history, no hook (see __init__).
            if budget is not None and not budget.allow_retry(error or _BadResult(None)):
                return self._refused(error, now, budget)
            self.total_delay += delay
            # begin_attempt(now) for the next attempt: with no deadline and no clock (every
            # attempt starts at the state's start) it only counts it
            self.attempts = attempts + 1
            return delay
        deadline = self.deadline
        if deadline != _INF and now + delay + p.min_attempt_time >= deadline:
            # Never sleep and then fail: give up now, with the last error.
            return self._give_up("deadline", error, now, mark=True)
        if budget is not None and not budget.allow_retry(error or _BadResult(None)):
            return self._refused(error, now, budget)
        if self.history is not None:
            self._record(now, error, delay)
        self.total_delay += delay
        if p._hooks:
            self._emit("retry", error, delay, now, None)
        self.next_retry = now + delay
        return delay

    def _refused(self, error: BaseException | None, now: float, budget: Budget) -> float | None:
        """The budget refused the retry: defer it (``defer_refusals``), or give up."""
        self._emit("budget_exhausted", error, 0.0, now, "budget", budget)
        if self.defer_refusals:
            return self.defer(error, now)
        return self._give_up("budget", error, now, mark=True)

    @property
    def deferred(self) -> bool:
        """Whether the wait in progress is a hold (:meth:`defer`): before the next attempt,
        :meth:`resume` asks the budget again."""
        return self.holds > 0

    def defer(self, error: BaseException | None, now: float) -> float | None:
        """Hold the next attempt back instead of giving up: the budget refused the retry (or,
        for a driver's own use, refused the call). Returns the wait before :meth:`resume` asks
        the budget again, or ``None`` to give up (``reason`` ``"budget"``).

        Each hold in a row waits one backoff step further, so the calls held back by one sick
        dependency spread out instead of asking together. A hold that would cross the
        deadline gives up, and so does the hold after ``max_attempts`` of them in a row: a
        budget that keeps refusing ends the call as one that is never deferred does at once.
        :meth:`on_error` calls this itself when the state defers refusals
        (``defer_refusals=True``).
        """
        p = self.policy
        self.holds += 1
        delay = p.backoff.compute(max(0, self.attempts - 1) + self.holds, p.rng)
        if delay < MIN_HOLD:
            delay = MIN_HOLD
        if self.holds > p.max_attempts or now + delay + p.min_attempt_time >= self.deadline:
            self.holds = 0
            return self._give_up("budget", error, now, mark=True)
        self.total_delay += delay
        self.next_retry = now + delay
        return delay

    def resume(self, now: float, error: BaseException | None = None) -> float | None:
        """At the end of a hold (:attr:`deferred`), ask the budget again.

        Args:
            now: the clock reading.
            error: what the budget is asked about (default: the latest error, or a stand-in
                when that is a restored summary).

        Returns:
            ``0.0``: the budget allows the retry, make the next attempt now; a positive delay:
            it refused again, hold that long (:meth:`defer`); ``None``: give up (``reason``
            ``"budget"``).
        """
        budget = self.policy.budget
        if error is None:
            last = self.last_error
            error = last if isinstance(last, BaseException) else _Restored(last)
        if budget is not None and not budget.allow_retry(error):
            self._emit("budget_exhausted", error, 0.0, now, "budget", budget)
            return self.defer(error, now)
        self.holds = 0
        self.reason = None
        return 0.0

    def _give_up(
        self, reason: GiveUpReason, error: BaseException | None, now: float, mark: bool = False
    ) -> float | None:
        self.reason = reason
        self._record(now, error, None)
        if error is not None and reason != "exhausted_below":
            if mark:
                mark_exhausted(error)
            if self.attempts > 1 or mark:
                name = f" {redact_text(repr(self.policy.name))}" if self.policy.name else ""
                add_note(
                    error,
                    f"seawall{name}: gave up after {self.attempts} attempt"
                    f"{'s' if self.attempts != 1 else ''} and {self.total_delay:.3f} s of waits "
                    f"({reason.replace('_', ' ')})",
                )
        self._emit("give_up", error, 0.0, now, reason)
        return None

    def _emit(
        self,
        kind: Literal["retry", "budget_exhausted", "give_up"],
        error: BaseException | None,
        delay: float,
        now: float,
        reason: GiveUpReason | None,
        budget: Budget | None = None,
    ) -> None:
        hooks = self.policy._hooks
        if hooks:
            event = RetryEvent(
                kind,
                self.policy.name,
                self.attempts,
                error,
                delay,
                now - self.started,
                reason,
                now - self._attempt_started,
                budget,
            )
            emit(hooks, event)

    # -- persistence: a durable driver stores this and continues elsewhere, later ----------

    def snapshot(
        self, *, now: float | None = None, wall_now: float | None = None
    ) -> dict[str, Any]:
        """The state as JSON-compatible data, with times on the wall clock (seconds since the
        epoch, UTC), for a durable driver to store and :meth:`restore` in another process.

        Args:
            now: the policy clock's reading (default: read it).
            wall_now: the wall clock's reading at the same moment (default: ``time.time()``).

        Returns:
            ``{"version", "attempts", "total_delay", "previous_delay", "started_at",
            "deadline_at", "next_retry_at", "last_error", "reason", "holds"}``:
            ``deadline_at`` and ``next_retry_at`` are ``None`` when there is none;
            ``last_error`` is ``"Type: message"`` (at most 500 characters) or ``None``;
            ``holds`` counts the budget's refusals in a row while a retry is deferred
            (:meth:`defer`).
        """
        return _persist.snapshot(self, now=now, wall_now=wall_now)

    @classmethod
    def restore(
        cls,
        policy: RetryPolicy,
        data: Mapping[str, Any],
        *,
        now: float | None = None,
        wall_now: float | None = None,
        defer_refusals: bool = False,
    ) -> RetryState:
        """Continue a call from a :meth:`snapshot` (the budget's ``on_request`` is not called
        again: it is the same logical call).

        The data is untrusted (a database row, maybe written by a newer version): a newer
        format is refused, and every field is checked.

        Raises:
            ValueError: *data* is not a snapshot this version can read.
        """
        return _persist.restore(
            cls, policy, data, now=now, wall_now=wall_now, defer_refusals=defer_refusals
        )

    def outcome(self, value: Any, error: BaseException | None) -> Outcome[Any]:
        return Outcome(
            value, error, self.attempts, self.total_delay, tuple(self.history or ()), self.reason
        )


class _Restored(Exception):
    """Stands for an error known only by its summary (a restored state's), for budgets."""

    def __init__(self, summary: str | None) -> None:
        super().__init__(summary or "an earlier attempt failed")


class _BadResult(Exception):
    """Stands for a rejected result where budgets expect an error."""

    def __init__(self, result: object) -> None:
        super().__init__(f"result rejected by retry_if_result: {result!r}")
        self.result = result


_RETRY, _ANSWERED, _EXHAUSTED, _NEUTRAL = (
    Verdict.RETRY,
    Verdict.ANSWERED,
    Verdict.EXHAUSTED,
    Verdict.NEUTRAL,
)
_INF: Final = math.inf
#: The shortest hold before a deferred retry asks a refusing budget again (seconds).
MIN_HOLD: Final = 0.05
# Positive, and no float lies between it and zero: `left < _SMALLEST_TIME` means `left <= 0`.
_SMALLEST_TIME: Final = math.ulp(0.0)

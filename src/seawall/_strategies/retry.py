"""RetryPolicy: the retry decision as a small sans-I/O state machine, and its sync/async drivers.

:class:`RetryState` decides, given an attempt's outcome and the time now, whether to retry after a
delay or give up, and why. The synchronous loop, the asyncio loop, the block API and the
simulator's event engine are thin drivers over it, so production and simulation make the same
decisions.
"""

from __future__ import annotations

import dataclasses
import itertools
import linecache
import math
import random
import threading
import time
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from types import CoroutineType, TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Final,
    Generic,
    Literal,
    NamedTuple,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from seawall._core import validate as _validate
from seawall._core.classify import (
    ErrorMatcher,
    RetryOn,
    Verdict,
    classify,
    compile_errors,
    is_transient,
    remember_retried,
)
from seawall._core.clock import SYSTEM_CLOCK, TESTING, Clock, SystemClock
from seawall._core.decorate import decorate
from seawall._core.errors import (
    SUMMARY_LIMIT,
    DeadlineExceeded,
    add_note,
    error_summary,
    is_permanent,
    mark_exhausted,
    retry_after_of,
)
from seawall._core.events import DEBUG, INFO, WARNING, check_hooks, emit, logger
from seawall._core.public import public
from seawall._core.redact import redact_text
from seawall._core.switch import ISOLATED, ONE_ATTEMPT, SWITCH
from seawall._strategies.backoff import DEFAULT_BACKOFF, Backoff
from seawall._strategies.deadline import (
    _DEADLINE,
    SCOPES,
    attempt_deadline,
    call_deadline,
    install,
)

__all__ = [
    "AttemptRecord",
    "GiveUpReason",
    "Hook",
    "Outcome",
    "RetryEvent",
    "RetryPolicy",
    "RetryState",
    "RetryStatistics",
    "logging_hook",
    "retry",
]

if TYPE_CHECKING:
    # At run time the budget module is imported by the first policy given a budget: a policy
    # without one (the first @seawall.retry of most programs) does not load it.
    from seawall._strategies.budget import Budget

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


GiveUpReason = Literal[
    "not_retryable",  # permanent, Overloaded, cancellation, or not matched by retry_on
    "exhausted_below",  # an inner policy already retried this error (retry at one layer)
    "attempts_exhausted",
    "deadline",  # the next wait (plus min_attempt_time) would cross the deadline
    "budget",  # the shared budget refused the retry
    "disabled",  # the kill switch is off, globally or for this policy's name
    "delegated",  # inside seawall.lowlevel.one_attempt(): an enclosing layer owns the retries
    "retry_after",  # the server asked for a wait beyond max_retry_after (retry_after_beyond_max)
]

_GIVE_UP_REASONS: Final = frozenset(GiveUpReason.__args__)  # type: ignore[attr-defined]

#: The version of :meth:`RetryState.snapshot`'s format; :meth:`RetryState.restore` refuses newer.
SNAPSHOT_VERSION: Final = 2


@public("seawall")
class RetryEvent(NamedTuple):
    """What a hook receives. Immutable and cheap to create (a named tuple).

    Attributes:
        kind: ``"retry"`` (a retry is scheduled after ``delay``), ``"budget_exhausted"`` (the
            budget refused a retry) or ``"give_up"`` (the policy stops; ``reason`` says why).
            ``"success"`` (an attempt succeeded) goes only to hooks whose ``observes_attempts``
            attribute is ``True``, such as metrics adapters; their policies skip the fast path.
        policy: the policy's ``name`` (or ``None``).
        attempt: the number of the attempt that just failed, from 1.
        error: the exception of that attempt (``None`` for a retried bad result).
        delay: the wait before the next attempt (0 when giving up).
        elapsed: seconds since the call started, waits included. A policy without timeouts,
            result check or attempt-observing hooks makes its first attempt without reading the
            clock (that is its fast path): there, ``elapsed`` counts from the end of the first
            attempt. Hooks with ``observes_attempts = True`` get exact figures.
        reason: why the policy gave up (``give_up`` and ``budget_exhausted`` only).
        duration: seconds the attempt itself took (0 when a policy without attempt-observing
            hooks made its first attempt on the fast path).
        budget: the budget that refused the retry (``budget_exhausted`` only, else ``None``),
            so that a hook can say how much of it was left.
    """

    kind: Literal["retry", "budget_exhausted", "give_up", "success"]
    policy: str | None
    attempt: int
    error: BaseException | None
    delay: float
    elapsed: float
    reason: GiveUpReason | None = None
    duration: float = 0.0
    budget: Budget | None = None


Hook = Callable[[RetryEvent], None]

# What the budget warning suggests: budgets bound the load retries add to a sick dependency,
# and a newcomer's script against a flaky test server meets one first.
_BUDGET_REMEDY: Final = (
    "retries resume as calls succeed and the window moves on; the budget keeps retries from "
    "multiplying the load on a failing dependency. To allow more, give the policy (or the HTTP "
    "transport) a larger budget, e.g. budget=seawall.RetryBudget(min_per_second=5.0), or "
    "budget=None"
)


# Arguments an error's repr shows well; any other object is shown through the error's str.
_PLAIN_ARGS: Final = (str, bytes, int, float, BaseException, type(None))


def _error_text(error: BaseException | None) -> str:
    """The error as a log line shows it: its repr, or ``Type('str')`` when its arguments are
    objects whose reprs say little at great length (aiohttp's ``ClientConnectorError`` holds a
    ``ConnectionKey`` of eight fields; its str says ``Cannot connect to host h:port``)."""
    try:
        args = getattr(error, "args", ())
        if error is None or (
            isinstance(args, tuple) and all(isinstance(a, _PLAIN_ARGS) for a in args)
        ):
            return repr(error)
        return f"{type(error).__name__}({str(error)!r})"
    except Exception:  # a broken __repr__ or __str__ must not lose the log line
        return f"<{type(error).__name__}>"


def logging_hook(event: RetryEvent) -> None:
    """The default hook: log scheduled retries (INFO) and budget refusals (WARNING) to "seawall"."""
    if event.kind == "give_up":
        return
    level = INFO if event.kind == "retry" else WARNING
    if not logger.isEnabledFor(level):
        return
    # The error's repr without secrets: HTTP libraries put the URL (query string and all) in
    # their messages; seawall logs it without query string and user info.
    error = redact_text(_error_text(event.error))
    policy = redact_text(event.policy or "")  # a name can be a URL (the HTTP integrations')
    extra = {
        "seawall_policy": policy,
        "seawall_attempt": event.attempt,
        "seawall_delay": event.delay,
        "seawall_error": error,
        "seawall_elapsed": event.elapsed,
    }
    if event.kind == "retry":
        logger.log(
            level,
            "retry %s scheduled in %.3f s after attempt %d failed: %s"
            if policy
            else "retry%s scheduled in %.3f s after attempt %d failed: %s",
            policy,
            event.delay,
            event.attempt,
            error,
            extra=extra,
        )
    else:
        from seawall._strategies.budget import budget_state

        state = "" if event.budget is None else f" ({redact_text(budget_state(event.budget))})"
        logger.log(
            level,
            "retry budget exhausted for %s%s: attempt %d failed (%s) and is not retried; %s",
            policy or "an unnamed policy",
            state,
            event.attempt,
            error,
            _BUDGET_REMEDY,
            extra=extra,
        )


@public("seawall.lowlevel")
@dataclasses.dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt in an :class:`Outcome`'s history.

    Attributes:
        number: from 1.
        started: clock reading when the attempt started.
        duration: seconds the attempt took.
        error: its exception, or ``None`` if it returned.
        delay: the wait that followed it (``None`` if no retry followed).
    """

    number: int
    started: float
    duration: float
    error: BaseException | None
    delay: float | None


@public("seawall")
@dataclasses.dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """The result of :meth:`RetryPolicy.run`: what happened, without raising.

    Attributes:
        value: the function's return value (``None`` if it failed).
        error: the last exception if the call failed, else ``None``.
        attempts: how many attempts were made.
        total_delay: seconds spent waiting between attempts.
        history: one :class:`AttemptRecord` per attempt.
        reason: why the policy stopped retrying, if it gave up.
    """

    value: T | None
    error: BaseException | None
    attempts: int
    total_delay: float
    history: tuple[AttemptRecord, ...]
    reason: GiveUpReason | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> T:
        """The value, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


@public("seawall.lowlevel")
class RetryStatistics:
    """What the calls of a decorated function did, counted as they end:
    ``fn.statistics`` on a function decorated by a :class:`RetryPolicy`.

    Live counters: read them at any time, all at once with :meth:`as_dict`, and start again
    from zero with :meth:`reset`. A call that succeeds at its first attempt costs one counter
    tick (``itertools.count``, atomic); a call that failed at least once adds its figures on
    its way out, under a lock. Threads calling one function share its counters and lose none.
    Counting is off unless the policy has ``statistics=True``: the tick is a measurable share
    of a decorated call that succeeds at once.

    Attributes (read-only):
        calls: calls that ended (returned or raised).
        attempts: attempts made by those calls.
        retries: attempts after each call's first.
        give_ups: calls that gave up, by reason (a :data:`GiveUpReason`), as a new dict.
        total_delay: seconds waited between attempts, over all calls.
    """

    __slots__ = ("_counter", "_give_ups", "_lock", "_offset", "_totals")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # for the retried calls and reset(): not the first path
        # First attempts that succeeded: itertools.count ticks atomically; its repr,
        # "count(N)", says how far it has counted (_offset: where reset() left it).
        self._counter = itertools.count()
        self._offset = 0
        # The calls that failed at least once: [calls, attempts, total_delay, calls that made
        # no attempt (the deadline or the budget stopped them first)].
        self._totals: list[Any] = [0, 0, 0.0, 0]
        self._give_ups: dict[str, int] = {}

    def _first_successes(self) -> int:
        return int(repr(self._counter)[6:-1]) - self._offset

    def _ended(self, state: RetryState | None) -> None:
        """A call that did not succeed at its first attempt ended with *state* (``None``: its
        budget refused it before any attempt)."""
        with self._lock:
            totals = self._totals
            totals[0] += 1
            attempts = 0 if state is None else state.attempts
            if state is not None:
                totals[1] += attempts
                totals[2] += state.total_delay
                reason = state.reason
                if reason is not None:
                    self._give_ups[reason] = self._give_ups.get(reason, 0) + 1
            if attempts == 0:
                totals[3] += 1

    def as_dict(self) -> dict[str, Any]:
        """All the counters at one moment: ``{"calls", "attempts", "retries", "give_ups",
        "total_delay"}``."""
        with self._lock:
            first = self._first_successes()
            calls, attempts, total_delay, none_made = self._totals
            return {
                "calls": first + calls,
                "attempts": first + attempts,
                "retries": attempts - (calls - none_made),
                "give_ups": dict(self._give_ups),
                "total_delay": total_delay,
            }

    @property
    def calls(self) -> int:
        return int(self.as_dict()["calls"])

    @property
    def attempts(self) -> int:
        return int(self.as_dict()["attempts"])

    @property
    def retries(self) -> int:
        return int(self.as_dict()["retries"])

    @property
    def give_ups(self) -> dict[str, int]:
        return dict(self.as_dict()["give_ups"])

    @property
    def total_delay(self) -> float:
        return float(self.as_dict()["total_delay"])

    def reset(self) -> None:
        """Start counting again from zero."""
        with self._lock:
            self._offset += self._first_successes()
            self._totals = [0, 0, 0.0, 0]
            self._give_ups = {}

    def __repr__(self) -> str:
        d = self.as_dict()
        return (
            f"RetryStatistics(calls={d['calls']}, attempts={d['attempts']}, "
            f"retries={d['retries']}, give_ups={d['give_ups']}, "
            f"total_delay={d['total_delay']:.3f})"
        )


class RetryingFunction(Protocol[P, T_co]):
    """What :meth:`RetryPolicy.__call__` returns, for type checkers: the function, with the
    attributes the decorator adds (``fn.statistics``, ``fn.policy``, ``fn.retry_with``), as a
    function or as a method."""

    statistics: RetryStatistics | None
    policy: RetryPolicy

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T_co: ...

    def retry_with(self, **changes: Any) -> Callable[P, T_co]: ...

    @overload
    def __get__(
        self, instance: None, owner: type[Any] | None = None
    ) -> RetryingFunction[P, T_co]: ...

    @overload
    def __get__(
        self: RetryingFunction[Concatenate[S, Q], T],
        instance: S,
        owner: type[Any] | None = None,
    ) -> RetryingMethod[Q, T]: ...

    def __get__(self, instance: Any, owner: Any = None) -> Any: ...


class RetryingMethod(Protocol[P, T_co]):
    """A :class:`RetryingFunction` read from an instance: a bound method, with the same
    attributes."""

    statistics: RetryStatistics | None
    policy: RetryPolicy

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T_co: ...


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
        # Set by a driver that reads no clock between a retry decision and the attempt it
        # allows, and whose attempts need no deadline (no timeouts, none ambient): a retry
        # decision then also begins the next attempt, at the same reading, and the driver
        # does not call begin_attempt (one call fewer on each failure).
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
        self.last_error = error
        p = self.policy
        if retry is None and type(error) in p._retried and not error.__dict__:
            # The class alone decided a retry before (classify, then remember_retried): the
            # same verdict without asking again, and no retry_after to read.
            if p.budget is None:
                return self._schedule(error, now, None)
            verdict: Verdict = _RETRY
            wanted = None
        else:
            room = self.deadline - now > p.min_attempt_time
            verdict = classify(error, p._matcher, retry, room, p.retry_nested)
            if verdict is _RETRY and retry is None:
                remember_retried(p._retried, error, p._matcher)
            # Most errors have no retry_after at all: one lookup, validation only when present.
            wanted = None if getattr(error, "retry_after", None) is None else retry_after_of(error)
        if p.budget is not None:
            if verdict is _ANSWERED:
                p._answer(error)  # answered, not healthily: neither sickness nor a success
            elif verdict is not _NEUTRAL:
                p.budget.on_failure(error)
        if verdict is not _RETRY:
            if verdict is _ANSWERED and not is_permanent(error):
                self._unmatched(error)
            return self._give_up(
                "exhausted_below" if verdict is _EXHAUSTED else "not_retryable", error, now
            )
        return self._schedule(error, now, wanted)

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
        return self._schedule(None, now, None)

    def _schedule(
        self, error: BaseException | None, now: float, wanted: float | None
    ) -> float | None:
        p = self.policy
        attempts = self.attempts
        if attempts >= p.max_attempts:
            # Only an error this policy retried is "already retried" for the layers above: a
            # policy that makes a single attempt leaves the retrying to them.
            return self._give_up("attempts_exhausted", error, now, mark=attempts > 1)
        # SWITCH.enabled, inline (a property call on every failure): off only outside isolated()
        if (not SWITCH.on and not ISOLATED.get()) or (
            p.name is not None and p.name in SWITCH.disabled_names
        ):
            return self._give_up("disabled", error, now)
        if SWITCH.delegating and ONE_ATTEMPT.get():
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
        deadline = self.deadline
        if deadline != _INF and now + delay + p.min_attempt_time >= deadline:
            # Never sleep and then fail: give up now, with the last error.
            return self._give_up("deadline", error, now, mark=True)
        budget = p.budget
        if budget is not None and not budget.allow_retry(error or _BadResult(None)):
            self._emit("budget_exhausted", error, 0.0, now, "budget", budget)
            if self.defer_refusals:
                return self.defer(error, now)
            return self._give_up("budget", error, now, mark=True)
        if self.history is not None:
            self._record(now, error, delay)
        self.total_delay += delay
        if p._hooks:
            self._emit("retry", error, delay, now, None)
        if self._begin_at_once:
            # begin_attempt(now) for the next attempt: with no deadline it only counts it
            self.attempts = attempts + 1
            self._attempt_started = now
            return delay
        self.next_retry = now + delay
        return delay

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
        if now is None:
            now = self.policy._clock.now()
        if wall_now is None:
            wall_now = time.time()
        offset = wall_now - now
        error = self.last_error
        return {
            "version": SNAPSHOT_VERSION,
            "attempts": self.attempts,
            "total_delay": self.total_delay,
            "previous_delay": self._previous_delay,
            "started_at": self.started + offset,
            "deadline_at": None if self.deadline == math.inf else self.deadline + offset,
            "next_retry_at": None if self.next_retry is None else self.next_retry + offset,
            "last_error": error_summary(error) if isinstance(error, BaseException) else error,
            "reason": self.reason,
            "holds": self.holds,
        }

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
        if not isinstance(data, Mapping):
            raise ValueError(f"a retry state snapshot must be a mapping, got {data!r}")
        version = data.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"snapshot version must be an int >= 1, got {version!r}")
        if version > SNAPSHOT_VERSION:
            raise ValueError(
                f"snapshot version {version} is newer than this seawall reads "
                f"({SNAPSHOT_VERSION}); upgrade seawall"
            )
        if now is None:
            now = policy._clock.now()
        if wall_now is None:
            wall_now = time.time()
        offset = wall_now - now

        def number(key: str, *, optional: bool) -> float | None:
            value = data.get(key)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"snapshot field {key} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"snapshot field {key} must be finite, got {value!r}")
            return float(value)

        attempts = data.get("attempts")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise ValueError(f"snapshot field attempts must be an int >= 0, got {attempts!r}")
        started_at = number("started_at", optional=False)
        assert started_at is not None
        deadline_at = number("deadline_at", optional=True)
        next_retry_at = number("next_retry_at", optional=True)
        total_delay = number("total_delay", optional=False)
        previous_delay = number("previous_delay", optional=True)
        error = data.get("last_error")
        if error is not None and not isinstance(error, str):
            raise ValueError(f"snapshot field last_error must be a str or None, got {error!r}")
        reason = data.get("reason")
        if reason is not None and reason not in _GIVE_UP_REASONS:
            raise ValueError(f"snapshot field reason is not a known reason, got {reason!r}")
        holds = data.get("holds", 0)  # version 1 had none
        if isinstance(holds, bool) or not isinstance(holds, int) or holds < 0:
            raise ValueError(f"snapshot field holds must be an int >= 0, got {holds!r}")
        state = cls(
            policy,
            started_at - offset,
            math.inf if deadline_at is None else deadline_at - offset,
            defer_refusals=defer_refusals,
        )
        state.holds = holds
        state.attempts = attempts
        state.total_delay = max(0.0, total_delay or 0.0)
        state._previous_delay = None if previous_delay is None else max(0.0, previous_delay)
        state.next_retry = None if next_retry_at is None else next_retry_at - offset
        state.last_error = None if error is None else error[:SUMMARY_LIMIT]
        state.reason = reason
        return state

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
# Transient errors of the standard library and of the popular HTTP clients, by name.
_DEFAULT_RETRY_ON: RetryOn = is_transient
_DEFAULT_HOOKS: tuple[Hook, ...] = (logging_hook,)
_INF: Final = math.inf
#: The shortest hold before a deferred retry asks a refusing budget again (seconds).
MIN_HOLD: Final = 0.05
# Positive, and no float lies between it and zero: `left < _SMALLEST_TIME` means `left <= 0`.
_SMALLEST_TIME: Final = math.ulp(0.0)
# The most attempts for which a policy keeps its jitter-free delays in a table.
_FIXED_DELAYS_LIMIT: Final = 64

# The drivers' signatures: fn, its positional arguments, its keyword arguments.
_Runner = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]


@public("seawall")
@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A frozen description of how to retry; use it with :meth:`call`, as a decorator, or in a loop.

    Args:
        max_attempts: total tries, the first included (gRPC, resilience4j and AWS SDK naming).
        backoff: the delays between attempts.
        retry_on: exception classes, or a predicate ``(exc) -> bool``, that are worth retrying.
            The default, :func:`seawall.lowlevel.is_transient`, knows the transient errors of
            the standard library, httpx, requests/urllib3, aiohttp and gRPC (by name).
            Whatever it says, ``Permanent``, ``permanent()``-marked exceptions, ``Overloaded``,
            cancellation, ``KeyboardInterrupt``, ``SystemExit`` and ``GeneratorExit`` are never
            retried, nor ``DeadlineExceeded`` once the call's own deadline has passed.
        retry_if_result: a predicate ``(result) -> bool``: retry when it returns ``True``.
        timeout: seconds for the whole call, waits included (combined with any ambient deadline;
            inner calls see it through :func:`seawall.remaining`).
        attempt_timeout: seconds per attempt. Async: enforced by cancellation. Sync: threads are
            never abandoned; the attempt sees it as its deadline (:func:`seawall.remaining`).
        budget: a shared :class:`~seawall.RetryBudget`, :class:`~seawall.TokenBucket`, or any
            :class:`~seawall.Budget`.
        clock: where time comes from (the system clock by default).
        rng: a seedable :class:`random.Random` for jitter.
        name: shows up in hooks, notes and logs, and keys the per-name kill switch.
        hooks: callables receiving a :class:`RetryEvent`; ``None`` means the logging hook.
        max_retry_after: the longest wait a server's ``retry_after`` can ask for (seconds).
        honor_retry_after: wait what the server asks (``Retry-After``, ``RetryAfter``, a
            ``retry_after`` attribute) when that is longer than the backoff; ``False`` ignores
            pushback and uses the backoff alone.
        retry_after_beyond_max: what to do when the server asks for more than
            ``max_retry_after``: ``"clamp"`` (wait ``max_retry_after``) or ``"give_up"`` (stop
            at once, reason ``"retry_after"``).
        statistics: count the calls of each function this policy decorates, in
            ``fn.statistics`` (a :class:`~seawall.lowlevel.RetryStatistics`); ``None`` there
            when off. Off by default: the count costs a little on every call.
        min_attempt_time: do not start an attempt with less than this left before the deadline.
        retry_nested: retry errors that an inner policy already retried and gave up on. Off by
            default, so nested policies multiply nothing: only one layer retries.

    A policy pickles (for process pools and task queues) as its configuration; a budget in it
    travels as its configuration too, so the other process starts with a fresh budget.
    """

    max_attempts: int = 3
    backoff: Backoff = DEFAULT_BACKOFF
    retry_on: RetryOn = _DEFAULT_RETRY_ON
    retry_if_result: Callable[[Any], bool] | None = None
    timeout: float | None = None
    attempt_timeout: float | None = None
    budget: Budget | None = None
    clock: Clock | None = None
    rng: random.Random | None = None
    name: str | None = None
    hooks: Sequence[Hook] | None = None
    max_retry_after: float = 60.0
    min_attempt_time: float = 0.0
    retry_nested: bool = False
    honor_retry_after: bool = True
    retry_after_beyond_max: Literal["clamp", "give_up"] = "clamp"
    statistics: bool = False

    _matcher: ErrorMatcher = dataclasses.field(init=False, repr=False, compare=False)
    # The error classes that retry_on alone retries, learnt from classify() (remember_retried):
    # a failure of a known class skips classification.
    _retried: dict[type, bool] = dataclasses.field(init=False, repr=False, compare=False)
    _hooks: tuple[Hook, ...] = dataclasses.field(init=False, repr=False, compare=False)
    # Hooks that also want "success" events (metrics); empty for most policies.
    _attempt_hooks: tuple[Hook, ...] = dataclasses.field(init=False, repr=False, compare=False)
    # The delays before each retry when the backoff draws no jitter: the same on every call,
    # computed once (by the backoff) for a policy of a few attempts; else None.
    _fixed_delays: tuple[float, ...] | None = dataclasses.field(
        init=False, repr=False, compare=False
    )
    # The least time left in which an attempt may start: min_attempt_time, or (for none) the
    # smallest positive float, so that one comparison says "less than it, or nothing left".
    _least_time: float = dataclasses.field(init=False, repr=False, compare=False)
    _clock: Clock = dataclasses.field(init=False, repr=False, compare=False)
    # Whether the clock is not the system clock: testing.instant() then makes this policy's
    # waits zero (the system clock skips them instead, so that deadlines see them pass), and
    # the clock hears of zero waits too (a VirtualClock counts them).
    _zero_instant: bool = dataclasses.field(init=False, repr=False, compare=False)
    # _clock.now, or time.monotonic itself for the system clock (what SystemClock.now returns).
    _now: Callable[[], float] = dataclasses.field(init=False, repr=False, compare=False)
    # What the budget hears when the dependency answered, not healthily (Verdict.ANSWERED).
    _answer: Callable[[BaseException], None] = dataclasses.field(
        init=False, repr=False, compare=False
    )
    # The one synchronous and the one asynchronous first-attempt path: call(), acall(), both
    # decorators, registry handles and pipelines all go through these (see _first_attempts).
    _first: _Runner = dataclasses.field(init=False, repr=False, compare=False)
    _afirst: _Runner = dataclasses.field(init=False, repr=False, compare=False)
    # Whether a first attempt needs no bookkeeping (no RetryState unless it fails).
    _fast: bool = dataclasses.field(init=False, repr=False, compare=False)
    # The budget's first-attempt callables (its first_attempt() capability), or None.
    _before: Callable[[], None] | None = dataclasses.field(init=False, repr=False, compare=False)
    _after: Callable[[], None] | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        _validate.count("max_attempts", self.max_attempts, minimum=1)
        if not isinstance(self.backoff, Backoff):
            raise TypeError(f"backoff must be a seawall.Backoff, got {self.backoff!r}")
        set_(self, "_matcher", compile_errors(self.retry_on, "retry_on"))
        set_(self, "_retried", {})
        if self.retry_if_result is not None and not callable(self.retry_if_result):
            raise TypeError(f"retry_if_result must be callable, got {self.retry_if_result!r}")
        optional_seconds = _validate.optional_seconds
        set_(self, "timeout", optional_seconds("timeout", self.timeout))
        set_(self, "attempt_timeout", optional_seconds("attempt_timeout", self.attempt_timeout))
        # Finite: the cap on a server's Retry-After must be one (inf would remove it).
        mra = _validate.seconds("max_retry_after", self.max_retry_after, finite=True)
        set_(self, "max_retry_after", mra)
        mat = optional_seconds("min_attempt_time", self.min_attempt_time, zero=True)
        set_(self, "min_attempt_time", mat or 0.0)
        set_(self, "_least_time", mat or _SMALLEST_TIME)
        if self.budget is not None:
            from seawall._strategies.budget import Budget

            if not isinstance(self.budget, Budget):
                raise TypeError(f"budget must implement seawall.Budget, got {self.budget!r}")
        if self.clock is not None and not isinstance(self.clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {self.clock!r}")
        if self.rng is not None and not isinstance(self.rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {self.rng!r}")
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"name must be a str or None, got {self.name!r}")
        if not isinstance(self.retry_nested, bool):
            raise TypeError(f"retry_nested must be a bool, got {self.retry_nested!r}")
        if not isinstance(self.honor_retry_after, bool):
            raise TypeError(f"honor_retry_after must be a bool, got {self.honor_retry_after!r}")
        if not isinstance(self.statistics, bool):
            raise TypeError(f"statistics must be a bool, got {self.statistics!r}")
        if self.retry_after_beyond_max not in ("clamp", "give_up"):
            raise ValueError(
                "retry_after_beyond_max must be 'clamp' or 'give_up', "
                f"got {self.retry_after_beyond_max!r}"
            )
        if self.hooks is None:
            hooks = _DEFAULT_HOOKS
        else:
            hooks = check_hooks(self.hooks)
            set_(self, "hooks", hooks)  # a tuple, so that policies stay hashable
        set_(self, "_hooks", hooks)
        attempt_hooks = tuple(h for h in hooks if getattr(h, "observes_attempts", False) is True)
        set_(self, "_attempt_hooks", attempt_hooks)
        fixed = None
        if self.backoff.jitter == "none" and self.max_attempts <= _FIXED_DELAYS_LIMIT:
            # Indexed by the number of attempts made (the wait after attempt 1 is fixed[1]).
            fixed = (0.0, *(self.backoff.compute(n) for n in range(self.max_attempts - 1)))
        set_(self, "_fixed_delays", fixed)
        clock = self.clock if self.clock is not None else SYSTEM_CLOCK
        set_(self, "_clock", clock)
        set_(self, "_zero_instant", type(clock) is not SystemClock)
        set_(self, "_now", time.monotonic if type(clock) is SystemClock else clock.now)
        if self.budget is not None:
            from seawall._strategies.budget import answer_callback, first_attempt_callables

            set_(self, "_answer", answer_callback(self.budget))
            before, after = first_attempt_callables(self.budget)
        else:
            set_(self, "_answer", _nothing)
            before = after = None
        fast = not (
            self.timeout is not None
            or self.attempt_timeout is not None
            or self.retry_if_result is not None
            or attempt_hooks
        )
        set_(self, "_fast", fast)
        set_(self, "_before", before)
        set_(self, "_after", after)
        first, afirst = _first_attempts(self)
        set_(self, "_first", first)
        set_(self, "_afirst", afirst)

    def replace(self, **changes: Any) -> RetryPolicy:
        """A new policy with some parameters changed (validated like the constructor)."""
        return dataclasses.replace(self, **changes)

    def __reduce__(self) -> tuple[Any, ...]:
        # The configuration, not the derived fields (closures do not pickle): rebuilt on load.
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return (_rebuild_policy, (type(self), fields))

    def _time(self) -> Callable[[], float]:
        """What reads the time for one call: time.monotonic itself for the system clock,
        unless instant time runs (testing.instant()) or ran: then the clock, which adds the
        waits it skipped."""
        return self._now if not (TESTING.instant or TESTING.skipped) else self._clock.now

    # -- the sans-I/O core ------------------------------------------------------------------

    def new_state(
        self, now: float | None = None, *, record: bool = False, defer_refusals: bool = False
    ) -> RetryState:
        """Start the decisions for one logical call (for custom drivers, such as the simulator).

        The deadline is the earlier of the ambient :func:`seawall.deadline` and ``timeout``.
        The budget's ``on_request`` is called here. With *defer_refusals*, a retry the budget
        refuses is held back (:meth:`RetryState.defer`) instead of ending the call: for a
        durable driver that can wait and ask again.
        """
        if now is None:
            now = self._time()()
        state = RetryState(
            self, now, call_deadline(now, self.timeout), defer_refusals=defer_refusals
        )
        if record:
            state.history = []
        if self.budget is not None:
            self.budget.on_request()
        return state

    # -- synchronous driver -----------------------------------------------------------------

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Call ``fn(*args, **kwargs)``, retrying per this policy.

        Returns:
            What *fn* returned (with ``retry_if_result``: the last result if every one was
            rejected).

        Raises:
            BaseException: the original last exception (not a wrapper), with a note that tells
                how many attempts were made and why the policy gave up.
            DeadlineExceeded: the deadline left too little time to start an attempt.
        """
        result: T = self._first(fn, args, kwargs)
        return result

    def _call_retrying(
        self,
        fn: Callable[..., T],
        args: Any,
        kwargs: Any,
        first_error: Exception | None,
        state: RetryState | None = None,
        stats: RetryStatistics | None = None,
    ) -> T:
        """The synchronous loop over :class:`RetryState`. With *first_error*, the first-attempt
        path already made attempt 1 (and told the budget of the request). With *stats*, the
        call is counted there when it ends."""
        try:
            clock = self._clock
            # self._time(), inline: this is every retried call's path
            clock_now = self._now if not (TESTING.instant or TESTING.skipped) else clock.now
            now = clock_now()
            # Handed over by the first attempt (no deadline, no timeouts, no result check) with
            # no hook to date events for: no decision of this call depends on the time, so the
            # clock is read once, here (a reading costs as much as a tenth of a failed attempt),
            # and each retry decision begins the next attempt itself.
            timeless = first_error is not None and not self._hooks
            if first_error is not None:
                state = RetryState(self, now)
                state.attempts = 1
                state._begin_at_once = timeless
                delay = state.on_error(first_error, now)
                if delay is None:
                    raise first_error
            else:
                if state is None:
                    state = self.new_state(now)
                delay = None
            check = self.retry_if_result
            # The system clock does nothing for a zero wait: neither a call to make nor time
            # to read again (the next attempt starts at once).
            zero_waits = self._zero_instant
            inf = _INF
            begin_attempt, on_error = state.begin_attempt, state.on_error
            while True:
                if delay is not None and (delay > 0.0 or zero_waits):
                    clock.sleep(delay)
                    if not timeless:
                        now = clock_now()
                at = inf if timeless else begin_attempt(now)
                token = None if at == inf else install(at, now, clock)
                try:
                    result = fn(*args, **kwargs)
                except Exception as exc:
                    if not timeless:
                        now = clock_now()
                    delay = on_error(exc, now)
                    if delay is None:
                        raise
                else:
                    if type(result) is _COROUTINE:
                        _refuse_coroutine(fn, result)
                    if check is None:
                        state.on_success(now if timeless else clock_now())
                        break
                    delay = state.on_result(result, clock_now())
                    if delay is None:
                        break
                finally:
                    if token is not None:
                        _DEADLINE.reset(token)
        finally:
            if stats is not None:
                stats._ended(state)
        return result

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Outcome[T]:
        """Like :meth:`call`, but return an :class:`Outcome` instead of raising ``Exception``s."""
        try:
            state = self.new_state(record=True)
        except Exception as exc:  # the budget rejected the call locally (Throttled)
            return Outcome(None, exc, 0, 0.0, ())
        try:
            value = self._call_retrying(fn, args, kwargs, None, state)
        except Exception as exc:
            return state.outcome(None, exc)
        return state.outcome(value, None)

    # -- asynchronous driver ----------------------------------------------------------------

    async def acall(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """The async twin of :meth:`call`: ``await fn(*args, **kwargs)``, retrying.

        ``attempt_timeout`` and deadlines are enforced by cancelling the attempt; the caller's own
        cancellation is never retried.
        """
        result: T = await self._afirst(fn, args, kwargs)
        return result

    async def _acall_retrying(
        self,
        fn: Callable[..., Awaitable[T]],
        args: Any,
        kwargs: Any,
        first_error: Exception | None,
        state: RetryState | None = None,
        stats: RetryStatistics | None = None,
    ) -> T:
        """The async twin of :meth:`_call_retrying`."""
        from seawall._core.compat import with_timeout

        try:
            clock = self._clock
            # self._time(), inline: this is every retried call's path
            clock_now = self._now if not (TESTING.instant or TESTING.skipped) else clock.now
            now = clock_now()
            if first_error is not None:
                state = RetryState(self, now)
                state.attempts = 1
                delay = state.on_error(first_error, now)
                if delay is None:
                    raise first_error
            else:
                if state is None:
                    state = self.new_state(now)
                delay = None
            while True:
                if delay is not None:
                    await clock.asleep(delay)
                    now = clock_now()
                at = state.begin_attempt(now)
                token = None if at == math.inf else install(at, now, clock)
                try:
                    if at == math.inf:
                        result = await fn(*args, **kwargs)
                    else:
                        what = _timed_out(self, state.attempts)
                        result = await with_timeout(fn(*args, **kwargs), at - now, what)
                except Exception as exc:
                    _check_awaited(fn, exc)
                    delay = state.on_error(exc, clock_now())
                    if delay is None:
                        raise
                else:
                    delay = state.on_result(result, clock_now())
                    if delay is None:
                        break
                finally:
                    if token is not None:
                        _DEADLINE.reset(token)
        finally:
            if stats is not None:
                stats._ended(state)
        return result

    async def arun(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> Outcome[T]:
        """The async twin of :meth:`run`."""
        try:
            state = self.new_state(record=True)
        except Exception as exc:  # the budget rejected the call locally (Throttled)
            return Outcome(None, exc, 0, 0.0, ())
        try:
            value = await self._acall_retrying(fn, args, kwargs, None, state)
        except Exception as exc:
            return state.outcome(None, exc)
        return state.outcome(value, None)

    # -- decorator --------------------------------------------------------------------------

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, T]]
    ) -> RetryingFunction[P, Coroutine[Any, Any, T]]: ...

    @overload
    def __call__(self, fn: Callable[P, T]) -> RetryingFunction[P, T]: ...

    def __call__(self, fn: Callable[P, Any]) -> RetryingFunction[P, Any]:
        """Decorate a ``def`` or ``async def`` function; its signature is preserved.

        The wrapper carries its policy as ``wrapper.policy``, a per-call override,
        ``wrapper.retry_with(max_attempts=5)(*args)``, which calls the function once with a
        policy changed that way (:meth:`replace`), leaving the decorated function as it is, and
        the statistics of its calls, ``wrapper.statistics`` (a :class:`RetryStatistics` if the
        policy has ``statistics=True``, else ``None``).

        A policy without a ``name`` is named after the function (its ``__qualname__``), so
        that logs, notes, metrics and the per-name kill switch say which function retried.
        """
        stats = RetryStatistics() if self.statistics else None
        policy = self
        if self.name is None:
            qualname = getattr(fn, "__qualname__", None)
            if isinstance(qualname, str) and qualname:
                policy = self.replace(name=qualname)

        def bind(fn: Callable[..., Any], asynchronous: bool) -> Any:
            return _bound_first_attempt(policy, fn, asynchronous, stats)

        wrapper = decorate(fn, "retry", policy._first, policy._afirst, bind=bind)

        def retry_with(**changes: Any) -> Callable[P, Any]:
            return policy.replace(**changes)(fn)

        wrapper.policy = policy  # type: ignore[attr-defined]
        wrapper.retry_with = retry_with  # type: ignore[attr-defined]
        wrapper.statistics = stats  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    # -- block API --------------------------------------------------------------------------

    def attempts(self) -> Attempts:
        """Retry a block: ``for attempt in policy.attempts(): with attempt: ...``.

        ``async for`` works too (waits then use the clock's ``asleep``). The block's exception
        propagates when the policy gives up. Inside the block, :func:`seawall.remaining` sees the
        attempt's deadline; ``async with attempt:`` also cancels the block there.

        Raises:
            TypeError: the policy has ``retry_if_result``: a block has no result to check
                (check it inside the block and raise a retryable error instead).
        """
        if self.retry_if_result is not None:
            raise TypeError(
                "the block API sees no result, so retry_if_result cannot apply: check the "
                "result inside the block and raise a retryable error, or use policy.call()"
            )
        return Attempts(self)


_COROUTINE = CoroutineType


def _refuse_coroutine(fn: Callable[..., Any], coroutine: Any) -> None:
    coroutine.close()  # never leave it un-awaited
    raise TypeError(
        f"{fn!r} returned a coroutine: it is async, so use `await policy.acall(fn)` "
        "or decorate the async def itself"
    )


def _check_awaited(fn: Callable[..., Any], error: Exception) -> None:
    """A sync function given to ``acall`` fails at our ``await``, after it ran: say so."""
    if type(error) is TypeError and "can't be used in 'await' expression" in str(error):
        raise TypeError(
            f"{fn!r} is not async: acall() awaits what it returns; use policy.call() for a "
            "plain function"
        ) from error


def _timed_out(policy: RetryPolicy, number: int) -> Callable[[float], str]:
    """The message of attempt *number*'s ``TimeoutError`` when it is cancelled after the
    seconds it was given: ``"attempt 2 of 'fetch' timed out after 0.250 s (attempt_timeout)"``
    (asyncio's own says nothing)."""

    def text(seconds: float) -> str:
        name = f" of {redact_text(repr(policy.name))}" if policy.name else ""
        limit = policy.attempt_timeout
        why = "attempt_timeout" if limit is not None and seconds >= limit else "the deadline"
        return f"attempt {number}{name} timed out after {max(seconds, 0.0):.3f} s ({why})"

    return text


def _nothing(error: BaseException) -> None:
    """No budget: nobody to tell."""


def _rebuild_policy(cls: type[RetryPolicy], fields: dict[str, Any]) -> RetryPolicy:
    return cls(**fields)


# -- the first attempt ---------------------------------------------------------------------------
#
# A call whose first attempt needs no bookkeeping (no timeouts and no ambient deadline, no result
# check, no hook that observes attempts) makes it without building a RetryState: tell the budget
# the call starts, call the function, tell the budget of the success. A failure hands over to the
# retry loop. The budget's part is whatever its first_attempt() capability offers (its cheapest
# callables, or None for nothing to do); the decisions stay in the budget and in RetryState.
#
# That path is written once, below, and instantiated four ways: for call(fn) and acall(fn), where
# the function is an argument, and for the sync and async decorators, where it is bound, so that a
# decorated call costs one frame, as a hand-written loop does. (A decorator calling a shared
# runner costs a frame more on every call.) The text is compiled once, at import.

_FIRST_ATTEMPT = """
def make(slow, before, after, scopes, ambient, coroutine, refuse, check_awaited{bound}):
    {kind}def first({params}):
        if {guard}(scopes.used and ambient() is not None):
            return {wait}{slow}(fn, args, kwargs, None{stats})  # the deadline shapes each attempt
        {fetch}if {before} is not None:
            {before}()
        try:
            result = {wait}fn(*args, **kwargs)
        except Exception as exc:
            {awaited}
            error = exc
        else:
            {returned}
            {tick}if {after} is not None:
                {after}()
            return result
        # Outside the `except`, so that the retries' own errors are not raised while handling
        # this one; and not left in this frame (the error's traceback holds it): no cycle.
        try:
            return {wait}{slow}(fn, args, kwargs, error{stats})
        finally:
            error = None

    return first
"""

# How the path finds its parts: a decorator's wrapper and call()/acall()'s runner hold them
# in their closure; the call()/acall() methods read them from the policy (one frame less).
_CLOSURE = {"guard": "", "fetch": "", "before": "before", "after": "after"}
_METHOD = {
    "guard": "not self._fast or ",
    "fetch": "before, after = self._before, self._after\n        ",
    "before": "before",
    "after": "after",
}


def _compile_first_attempt(
    *, asynchronous: bool, bound: bool = False, method: bool = False, counted: bool = False
) -> Callable[..., Any]:
    if method:
        params = "self, fn, /, *args, **kwargs"
        slow = "self._acall_retrying" if asynchronous else "self._call_retrying"
        parts = _METHOD
    else:
        params = "*args, **kwargs" if bound else "fn, args, kwargs"
        slow = "slow"
        parts = _CLOSURE
    source = _FIRST_ATTEMPT.format(
        # A decorated function of a policy with statistics=True counts its calls
        # (RetryStatistics): one tick, in C, for a first attempt that succeeds, the rest on the
        # retrying path. (Off by default: the tick is a sixth of a decorated call's cost.)
        bound=(", fn, tick, stats" if counted else ", fn") if bound else "",
        stats=", None, stats" if counted else "",
        tick="next(tick)\n            " if counted else "",
        kind="async " if asynchronous else "",
        params=params,
        slow=slow,
        wait="await " if asynchronous else "",
        awaited="check_awaited(fn, exc)" if asynchronous else "pass",
        returned="pass" if asynchronous else "if type(result) is coroutine: refuse(fn, result)",
        **parts,
    )
    where = (
        "method" if method else "counted decorator" if counted else "decorator" if bound else "call"
    )
    filename = f"<seawall first attempt: {'async ' if asynchronous else ''}{where}>"
    # Registered with linecache so that tracebacks and debuggers show the lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), namespace)
    make: Callable[..., Any] = namespace["make"]
    return make


_MAKE_FIRST = _compile_first_attempt(asynchronous=False)
_MAKE_AFIRST = _compile_first_attempt(asynchronous=True)
_MAKE_WRAPPER = _compile_first_attempt(asynchronous=False, bound=True)
_MAKE_AWRAPPER = _compile_first_attempt(asynchronous=True, bound=True)
_MAKE_COUNTED = _compile_first_attempt(asynchronous=False, bound=True, counted=True)
_MAKE_ACOUNTED = _compile_first_attempt(asynchronous=True, bound=True, counted=True)
_MAKE_CALL = _compile_first_attempt(asynchronous=False, method=True)
_MAKE_ACALL = _compile_first_attempt(asynchronous=True, method=True)


def _first_parts(policy: RetryPolicy) -> tuple[Any, ...]:
    return (
        policy._before,
        policy._after,
        SCOPES,
        _DEADLINE.get,
        _COROUTINE,
        _refuse_coroutine,
        _check_awaited,
    )


def _first_attempts(policy: RetryPolicy) -> tuple[_Runner, _Runner]:
    """The policy's synchronous and asynchronous first-attempt paths for call() and acall()."""
    slow, aslow = policy._call_retrying, policy._acall_retrying
    if not policy._fast:
        # Not a first attempt without bookkeeping: the loop, from the start.
        def general(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
            return slow(fn, args, kwargs, None)

        async def ageneral(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
            return await aslow(fn, args, kwargs, None)

        return general, ageneral
    parts = _first_parts(policy)
    return _MAKE_FIRST(slow, *parts), _MAKE_AFIRST(aslow, *parts)


def _bound_first_attempt(
    policy: RetryPolicy,
    fn: Callable[..., Any],
    asynchronous: bool,
    stats: RetryStatistics | None,
) -> Any:
    """The same first-attempt path with *fn* bound: a decorated function's wrapper, counting
    its calls in *stats* if given."""
    slow, aslow = policy._call_retrying, policy._acall_retrying
    if not policy._fast:
        # Not a first attempt without bookkeeping: the loop, from the start.
        if asynchronous:

            async def ageneral(*args: Any, **kwargs: Any) -> Any:
                return await aslow(fn, args, kwargs, None, None, stats)

            return ageneral

        def general(*args: Any, **kwargs: Any) -> Any:
            return slow(fn, args, kwargs, None, None, stats)

        return general
    parts = _first_parts(policy)
    if stats is None:
        return (
            _MAKE_AWRAPPER(aslow, *parts, fn) if asynchronous else _MAKE_WRAPPER(slow, *parts, fn)
        )
    counted = (*parts, fn, stats._counter, stats)
    return _MAKE_ACOUNTED(aslow, *counted) if asynchronous else _MAKE_COUNTED(slow, *counted)


@public("seawall.lowlevel")
class Attempt:
    """One attempt of the block API; use it as ``with attempt:``.

    Inside the block, the attempt's deadline (the tighter of ``attempt_timeout`` and the call's
    deadline) is the ambient one, so :func:`seawall.remaining` and the HTTP integration see it.
    ``async with attempt:`` also cancels the block at that deadline (it then counts as a
    ``TimeoutError``, retried like any timeout); a synchronous ``with attempt:`` cannot be
    interrupted.
    """

    __slots__ = ("_attempts", "_deadline", "_seconds", "_timeout", "_token", "number")

    def __init__(self, attempts: Attempts, number: int, deadline: float) -> None:
        self._attempts = attempts
        self._deadline = deadline
        self._token: Any = None
        self._timeout: Any = None
        self._seconds = 0.0
        #: The attempt number, from 1.
        self.number = number

    async def __aenter__(self) -> Attempt:
        self.__enter__()
        if self._deadline != math.inf:
            from seawall._core.compat import timeout_after

            self._seconds = self._deadline - self._attempts._policy._clock.now()
            self._timeout = timeout_after(self._seconds)
            await self._timeout.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        timeout, self._timeout = self._timeout, None
        if timeout is not None:
            try:
                await timeout.__aexit__(exc_type, exc, tb)
            except TimeoutError as err:
                # Our own cancellation at the attempt's deadline: a slow attempt.
                err.args = (_timed_out(self._attempts._policy, self.number)(self._seconds),)
                if self.__exit__(TimeoutError, err, err.__traceback__):
                    return True
                raise
        return self.__exit__(exc_type, exc, tb)

    def __enter__(self) -> Attempt:
        clock = self._attempts._policy._clock
        self._token = install(self._deadline, clock.now(), clock)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._token is not None:
            _DEADLINE.reset(self._token)
            self._token = None
        owner = self._attempts
        state = owner._state
        assert state is not None  # an Attempt exists only once the state does
        now = owner._policy._clock.now()
        if exc is None:
            state.on_success(now)
            owner._done = True
            return False
        if not isinstance(exc, Exception):
            return False
        delay = state.on_error(exc, now)
        if delay is None:
            owner._done = True
            return False
        owner._delay = delay
        return True  # swallow the error: the loop goes on to the next attempt

    def __repr__(self) -> str:
        return f"<Attempt {self.number}>"


@public("seawall.lowlevel")
class Attempts:
    """Sync and async iterator of :class:`Attempt` blocks; see :meth:`RetryPolicy.attempts`."""

    __slots__ = ("_delay", "_done", "_policy", "_state")

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        # Created on the first iteration: the call (and the budget's deposit) starts there.
        self._state: RetryState | None = None
        self._done = False
        self._delay: float | None = None

    def _next(self) -> Attempt | None:
        state = self._state
        now = self._policy._clock.now()
        if state is None:
            state = self._state = self._policy.new_state(now)
        elif self._done or self._delay is None:
            return None  # success, give-up, or a block that left without `with attempt:`
        self._delay = None
        deadline = state.begin_attempt(now)
        return Attempt(self, state.attempts, deadline)

    def __iter__(self) -> Iterator[Attempt]:
        while True:
            if self._delay is not None:
                self._policy._clock.sleep(self._delay)
            attempt = self._next()
            if attempt is None:
                return
            yield attempt

    # An iterator object, not an async generator: a block that returns from inside
    # `async for` leaves nothing to finalize (trio warns about unfinished async generators).
    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> Attempt:
        if self._delay is not None:
            await self._policy._clock.asleep(self._delay)
        attempt = self._next()
        if attempt is None:
            raise StopAsyncIteration
        return attempt


@overload
def retry(fn: Callable[P, T], /) -> Callable[P, T]: ...


@overload
def retry(
    *,
    max_attempts: int = 3,
    backoff: Backoff = DEFAULT_BACKOFF,
    retry_on: RetryOn = _DEFAULT_RETRY_ON,
    retry_if_result: Callable[[Any], bool] | None = None,
    timeout: float | None = None,
    attempt_timeout: float | None = None,
    budget: Budget | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    name: str | None = None,
    hooks: Sequence[Hook] | None = None,
    max_retry_after: float = 60.0,
    min_attempt_time: float = 0.0,
    retry_nested: bool = False,
    honor_retry_after: bool = True,
    retry_after_beyond_max: Literal["clamp", "give_up"] = "clamp",
    statistics: bool = False,
) -> RetryPolicy: ...


def retry(fn: Callable[..., Any] | None = None, /, **kwargs: Any) -> Any:
    """``RetryPolicy(**kwargs)``, read better as a decorator: ``@seawall.retry(max_attempts=5)``.

    ``@seawall.retry`` without parentheses decorates with the default policy. The keyword
    arguments are :class:`RetryPolicy`'s, typed, so a misspelt one is a type error too.
    """
    if fn is not None:
        if kwargs:
            raise TypeError("retry() takes either a function or keyword arguments, not both")
        return RetryPolicy()(fn)
    return RetryPolicy(**kwargs)


def _install_first_attempt_methods() -> None:
    """call() and acall() as the generated first-attempt path itself (their source above stays
    the documented signature)."""
    shared = (None, None, SCOPES, _DEADLINE.get, _COROUTINE, _refuse_coroutine, _check_awaited)
    for name, make in (("call", _MAKE_CALL), ("acall", _MAKE_ACALL)):
        method = make(None, *shared)
        documented = getattr(RetryPolicy, name)
        method.__doc__ = documented.__doc__
        method.__name__ = documented.__name__
        method.__qualname__ = documented.__qualname__
        method.__module__ = RetryPolicy.__module__
        method.__wrapped__ = documented  # inspect.signature shows the typed signature
        setattr(RetryPolicy, name, method)


_install_first_attempt_methods()

"""RetryPolicy: the retry decision as a small sans-I/O state machine, and its sync/async drivers.

:class:`RetryState` decides, given an attempt's outcome and the time now, whether to retry after a
delay or give up, and why. The synchronous loop, the asyncio loop, the block API and the
simulator's event engine are thin drivers over it, so production and simulation make the same
decisions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, Generic, Literal, NamedTuple, ParamSpec, TypeVar, overload

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock, SystemClock
from seawall._core.compat import timeout_at, with_timeout
from seawall._core.decorate import check_decoratable
from seawall._core.errors import (
    _EXHAUSTED_MARK,
    _NEVER_RETRIED,
    _PERMANENT_MARK,
    DeadlineExceeded,
    Overloaded,
    RetryAfter,
    add_note,
    answer_exhausted,
    mark_exhausted,
    retry_after_of,
)
from seawall._core.switch import SWITCH
from seawall._strategies.backoff import DEFAULT_BACKOFF, Backoff
from seawall._strategies.budget import Budget, first_attempt_wrapper, success_is_noop
from seawall._strategies.deadline import _DEADLINE, Deadline

__all__ = [
    "AttemptRecord",
    "GiveUpReason",
    "Hook",
    "Outcome",
    "RetryEvent",
    "RetryPolicy",
    "RetryState",
    "logging_hook",
    "retry",
]

P = ParamSpec("P")
T = TypeVar("T")

RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]

GiveUpReason = Literal[
    "not_retryable",  # permanent, Overloaded, cancellation, or not matched by retry_on
    "exhausted_below",  # an inner policy already retried this error (retry at one layer)
    "attempts_exhausted",
    "deadline",  # the next wait (plus min_attempt_time) would cross the deadline
    "budget",  # the shared budget refused the retry
    "disabled",  # the kill switch is off, globally or for this policy's name
]

logger = logging.getLogger("seawall")


class _Testing:
    __slots__ = ("instant",)

    def __init__(self) -> None:
        self.instant = 0  # > 0 inside seawall.testing.instant(): waits become zero


TESTING: Final = _Testing()


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
        elapsed: seconds since the call started, waits included.
        reason: why the policy gave up (``give_up`` and ``budget_exhausted`` only).
        duration: seconds the attempt itself took (0 when a policy without attempt-observing
            hooks made its first attempt on the fast path).
    """

    kind: Literal["retry", "budget_exhausted", "give_up", "success"]
    policy: str | None
    attempt: int
    error: BaseException | None
    delay: float
    elapsed: float
    reason: GiveUpReason | None = None
    duration: float = 0.0


Hook = Callable[[RetryEvent], None]


def logging_hook(event: RetryEvent) -> None:
    """The default hook: log scheduled retries (INFO) and budget refusals (WARNING) to "seawall"."""
    if event.kind == "give_up":
        return
    level = logging.INFO if event.kind == "retry" else logging.WARNING
    if not logger.isEnabledFor(level):
        return
    extra = {
        "seawall_policy": event.policy,
        "seawall_attempt": event.attempt,
        "seawall_delay": event.delay,
        "seawall_error": repr(event.error),
        "seawall_elapsed": event.elapsed,
    }
    if event.kind == "retry":
        logger.log(
            level,
            "retry %s scheduled in %.3f s after attempt %d failed: %r",
            event.policy or "",
            event.delay,
            event.attempt,
            event.error,
            extra=extra,
        )
    else:
        logger.log(level, "retry budget exhausted for %s", event.policy or "", extra=extra)


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


class RetryState:
    """The retry decisions for one logical call, free of I/O (sans-I/O).

    A driver calls :meth:`begin_attempt` before each attempt, then :meth:`on_error`,
    :meth:`on_result` or :meth:`on_success` with the time now. ``on_error``/``on_result`` return
    the delay before the next attempt, or ``None`` to give up (``reason`` then says why). The
    driver does the waiting: a thread sleeps, a task awaits, the simulator schedules an event.
    """

    __slots__ = (
        "_attempt_started",
        "_previous_delay",
        "attempts",
        "deadline",
        "history",
        "policy",
        "reason",
        "started",
        "total_delay",
    )

    def __init__(self, policy: RetryPolicy, now: float, deadline: float = math.inf) -> None:
        self.policy = policy
        self.started = now
        self.deadline = deadline
        self.attempts = 0
        self.total_delay = 0.0
        self.reason: GiveUpReason | None = None
        self.history: list[AttemptRecord] | None = None
        self._previous_delay: float | None = None
        self._attempt_started = now

    def begin_attempt(self, now: float) -> float:
        """Count an attempt starting at *now*; return its absolute deadline.

        Raises:
            DeadlineExceeded: less than the policy's ``min_attempt_time`` is left: the call gives
                up before doing work, not after.
        """
        p = self.policy
        left = self.deadline - now
        if left < p.min_attempt_time or left <= 0.0:
            error = DeadlineExceeded(
                f"gave up before attempt {self.attempts + 1}: {max(left, 0.0):.3f} s left of the "
                f"deadline, at least {p.min_attempt_time:.3f} s needed"
            )
            self.reason = "deadline"
            self._emit("give_up", error, 0.0, now, "deadline")
            raise error
        self.attempts += 1
        self._attempt_started = now
        if p.attempt_timeout is not None and now + p.attempt_timeout < self.deadline:
            return now + p.attempt_timeout
        return self.deadline

    def _record(self, now: float, error: BaseException | None, delay: float | None) -> None:
        if self.history is not None:
            start = self._attempt_started
            self.history.append(AttemptRecord(self.attempts, start, now - start, error, delay))

    def on_success(self, now: float) -> None:
        """The attempt succeeded."""
        p = self.policy
        budget = p.budget
        if budget is not None:
            budget.on_success()
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
            _run_hooks(p._attempt_hooks, event)

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
        p = self.policy
        # The checks of is_permanent() and is_exhausted(), inlined: this runs on every failure,
        # and in the simulator on every simulated attempt.
        if isinstance(error, _NEVER_RETRIED) or getattr(error, _PERMANENT_MARK, False) is True:
            if isinstance(error, Overloaded):
                kind = _OVERLOADED
            elif (
                isinstance(error, DeadlineExceeded)
                and getattr(error, _PERMANENT_MARK, False) is not True
            ):
                # A deadline below this call's own (an attempt's, or a hop's that needed more
                # time than the attempt had) is one slow attempt: retryable (and a failure, like
                # any timeout) while this call's deadline has room. Past it, the deadline is gone
                # for every layer: not retried, and neither success nor failure for budgets.
                room = self.deadline - now > p.min_attempt_time
                kind = _RETRY if room and retry is not False and p._retryable(error) else _NEUTRAL
            else:
                kind = _PERMANENT
        elif isinstance(error, RetryAfter) and retry is not False:
            kind = _RETRY
        elif not p.retry_nested and (
            getattr(error, _EXHAUSTED_MARK, False) is True or answer_exhausted(error)
        ):
            kind = _EXHAUSTED
        elif retry is None:
            classes = p._retry_classes
            if classes is not None:
                kind = _RETRY if isinstance(error, classes) else _PERMANENT
            else:
                kind = _RETRY if p._retryable(error) else _PERMANENT
        else:
            kind = _RETRY if retry else _FAILED
        budget = p.budget
        if budget is not None:
            if kind == _PERMANENT:
                budget.on_success()  # the dependency answered; this is not sickness
            elif kind != _NEUTRAL:
                budget.on_failure(error)
        if kind != _RETRY:
            return self._give_up(
                "exhausted_below" if kind == _EXHAUSTED else "not_retryable", error, now
            )
        # Most errors have no retry_after at all: one lookup, and validation only when present.
        wanted = None if getattr(error, "retry_after", None) is None else retry_after_of(error)
        return self._schedule(error, now, wanted)

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
        if not SWITCH.enabled or (p.name is not None and p.name in SWITCH.disabled_names):
            return self._give_up("disabled", error, now)
        if wanted is not None:
            # Server pushback replaces the backoff delay, but an untrusted value is clamped.
            delay = min(wanted, p.max_retry_after)
        else:
            delay = p.backoff.compute(attempts - 1, p.rng, self._previous_delay)
            self._previous_delay = delay
        if TESTING.instant:
            delay = 0.0
        if now + delay + p.min_attempt_time >= self.deadline:
            # Never sleep and then fail: give up now, with the last error.
            return self._give_up("deadline", error, now, mark=True)
        budget = p.budget
        if budget is not None and not budget.allow_retry(error or _BadResult(None)):
            self._emit("budget_exhausted", error, 0.0, now, "budget")
            return self._give_up("budget", error, now, mark=True)
        history = self.history
        if history is not None:
            start = self._attempt_started
            history.append(AttemptRecord(attempts, start, now - start, error, delay))
        self.total_delay += delay
        if p._hooks:
            self._emit("retry", error, delay, now, None)
        return delay

    def _give_up(
        self, reason: GiveUpReason, error: BaseException | None, now: float, mark: bool = False
    ) -> float | None:
        self.reason = reason
        self._record(now, error, None)
        if error is not None and reason != "exhausted_below":
            if mark:
                mark_exhausted(error)
            if self.attempts > 1 or mark:
                name = f" {self.policy.name!r}" if self.policy.name else ""
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
            )
            _run_hooks(hooks, event)

    def outcome(self, value: Any, error: BaseException | None) -> Outcome[Any]:
        return Outcome(
            value, error, self.attempts, self.total_delay, tuple(self.history or ()), self.reason
        )


def _run_hooks(hooks: tuple[Hook, ...], event: RetryEvent) -> None:
    """Call every hook; one that raises is logged and skipped: it never changes the outcome."""
    for hook in hooks:
        try:
            hook(event)
        except Exception:
            logger.exception("seawall hook %r failed on a %s event", hook, event.kind)


class _BadResult(Exception):
    """Stands for a rejected result where budgets expect an error."""

    def __init__(self, result: object) -> None:
        super().__init__(f"result rejected by retry_if_result: {result!r}")
        self.result = result


_RETRY, _PERMANENT, _OVERLOADED, _EXHAUSTED, _FAILED, _NEUTRAL = range(6)
_new_tuple = tuple.__new__
_DEFAULT_RETRY_ON: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
_DEFAULT_HOOKS: tuple[Hook, ...] = (logging_hook,)


def _compile_retry_on(retry_on: RetryOn) -> Callable[[BaseException], bool]:
    if isinstance(retry_on, type):
        if not issubclass(retry_on, BaseException):
            raise TypeError(f"retry_on must be exception classes or a predicate, got {retry_on!r}")
        retry_on = (retry_on,)
    if isinstance(retry_on, tuple):
        for cls in retry_on:
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                raise TypeError(
                    f"retry_on must be exception classes or a predicate, got {retry_on!r}"
                )
        classes = retry_on
        return lambda exc: isinstance(exc, classes)
    if callable(retry_on):
        return retry_on
    raise TypeError(f"retry_on must be exception classes or a predicate, got {retry_on!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A frozen description of how to retry; use it with :meth:`call`, as a decorator, or in a loop.

    Args:
        max_attempts: total tries, the first included (gRPC, resilience4j and AWS SDK naming).
        backoff: the delays between attempts.
        retry_on: exception classes, or a predicate ``(exc) -> bool``, that are worth retrying.
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
        min_attempt_time: do not start an attempt with less than this left before the deadline.
        retry_nested: retry errors that an inner policy already retried and gave up on. Off by
            default, so nested policies multiply nothing: only one layer retries.
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

    _retryable: Callable[[BaseException], bool] = dataclasses.field(
        init=False, repr=False, compare=False
    )
    # retry_on as a tuple of classes (None for a predicate): one isinstance() per failure.
    _retry_classes: tuple[type[BaseException], ...] | None = dataclasses.field(
        init=False, repr=False, compare=False
    )
    _hooks: tuple[Hook, ...] = dataclasses.field(init=False, repr=False, compare=False)
    # Hooks that also want "success" events (metrics); empty for most policies.
    _attempt_hooks: tuple[Hook, ...] = dataclasses.field(init=False, repr=False, compare=False)
    _clock: Clock = dataclasses.field(init=False, repr=False, compare=False)
    # _clock.now, or time.monotonic itself for the system clock (what SystemClock.now returns).
    _now: Callable[[], float] = dataclasses.field(init=False, repr=False, compare=False)
    # True when a call needs no bookkeeping before its first attempt: no budget, no timeouts,
    # no result check. The fast path is then a bare try/except around the function.
    _simple: bool = dataclasses.field(init=False, repr=False, compare=False)
    # Like _simple, but with a budget: the fast path only tells the budget of the call and of
    # its success, and builds no RetryState unless the first attempt fails.
    _lean_budget: Budget | None = dataclasses.field(init=False, repr=False, compare=False)
    # The budget's on_success, or None when it does nothing (RetryBudget): the fast path skips
    # the call.
    _lean_success: Callable[[], None] | None = dataclasses.field(
        init=False, repr=False, compare=False
    )
    # True when the first attempt needs no RetryState even with timeouts or an ambient
    # deadline: no result check and no hook that observes attempts. The fast path then computes
    # the deadline, installs it for the attempt, and builds a state only if the attempt fails.
    _lean: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        _validate.count("max_attempts", self.max_attempts, minimum=1)
        if not isinstance(self.backoff, Backoff):
            raise TypeError(f"backoff must be a seawall.Backoff, got {self.backoff!r}")
        set_(self, "_retryable", _compile_retry_on(self.retry_on))
        retry_on = self.retry_on
        if isinstance(retry_on, type):
            retry_on = (retry_on,)
        set_(self, "_retry_classes", retry_on if isinstance(retry_on, tuple) else None)
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
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise TypeError(f"budget must implement seawall.Budget, got {self.budget!r}")
        if self.clock is not None and not isinstance(self.clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {self.clock!r}")
        if self.rng is not None and not isinstance(self.rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {self.rng!r}")
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"name must be a str or None, got {self.name!r}")
        if not isinstance(self.retry_nested, bool):
            raise TypeError(f"retry_nested must be a bool, got {self.retry_nested!r}")
        if self.hooks is None:
            hooks = _DEFAULT_HOOKS
        else:
            if isinstance(self.hooks, (str, bytes)) or not isinstance(self.hooks, Sequence):
                raise TypeError(f"hooks must be a sequence of callables, got {self.hooks!r}")
            hooks = tuple(self.hooks)
            for h in hooks:
                if not callable(h):
                    raise TypeError(f"hooks must be callables, got {h!r}")
            set_(self, "hooks", hooks)  # a tuple, so that policies stay hashable
        set_(self, "_hooks", hooks)
        attempt_hooks = tuple(h for h in hooks if getattr(h, "observes_attempts", False) is True)
        set_(self, "_attempt_hooks", attempt_hooks)
        clock = self.clock if self.clock is not None else SYSTEM_CLOCK
        set_(self, "_clock", clock)
        set_(self, "_now", time.monotonic if type(clock) is SystemClock else clock.now)
        lean = self.retry_if_result is None and not attempt_hooks
        untimed = lean and self.timeout is None and self.attempt_timeout is None
        set_(self, "_lean", lean)
        set_(self, "_simple", untimed and self.budget is None)
        set_(self, "_lean_budget", self.budget if untimed else None)
        success = None
        if self.budget is not None and not success_is_noop(self.budget):
            success = self.budget.on_success
        set_(self, "_lean_success", success)

    def replace(self, **changes: Any) -> RetryPolicy:
        """A new policy with some parameters changed (validated like the constructor)."""
        return dataclasses.replace(self, **changes)

    # -- the sans-I/O core ------------------------------------------------------------------

    def new_state(self, now: float | None = None, *, record: bool = False) -> RetryState:
        """Start the decisions for one logical call (for custom drivers, such as the simulator).

        The deadline is the earlier of the ambient :func:`seawall.deadline` and ``timeout``.
        The budget's ``on_request`` is called here.
        """
        if now is None:
            now = self._now()
        ambient = _DEADLINE.get()
        at = math.inf if ambient is None else now + ambient.remaining()
        if self.timeout is not None and now + self.timeout < at:
            at = now + self.timeout
        state = RetryState(self, now, at)
        if record:
            state.history = []
        if self.budget is not None:
            self.budget.on_request()
        return state

    def _scope(self, attempt_deadline: float, now: float) -> Any:
        """Install the attempt's deadline as the ambient one when it is tighter; a reset token."""
        if attempt_deadline == math.inf:
            return None
        ambient = _DEADLINE.get()
        if ambient is not None and now + ambient.remaining() <= attempt_deadline:
            return None
        return _DEADLINE.set(_new_tuple(Deadline, (attempt_deadline, self._clock)))

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
        if self._simple and _DEADLINE.get() is None:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                return self._call_retrying(fn, args, kwargs, exc)
        budget = self._lean_budget
        if budget is not None and _DEADLINE.get() is None:
            budget.on_request()
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                return self._call_retrying(fn, args, kwargs, exc)
            on_success = self._lean_success
            if on_success is not None:
                on_success()
            return result
        if self._lean:
            return self._call_timed(fn, args, kwargs)
        return self._call_retrying(fn, args, kwargs, None)

    def _call_timed(self, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
        """The first attempt of a lean policy with a timeout or under an ambient deadline.

        It makes the decisions of :meth:`_call_retrying` (the same deadlines, the same
        DeadlineExceeded, the attempt's deadline installed when tighter), but builds a
        :class:`RetryState` only if the attempt fails.
        """
        clock = self._clock
        now = self._now()
        # The deadlines of new_state() and begin_attempt(): the ambient one, the call's, and the
        # first attempt's (conditional expressions: cheaper than min() on this path).
        ambient = _DEADLINE.get()
        outer = math.inf if ambient is None else now + ambient.remaining()
        at = outer
        if self.timeout is not None and now + self.timeout < at:
            at = now + self.timeout
        first = at
        if self.attempt_timeout is not None and now + self.attempt_timeout < first:
            first = now + self.attempt_timeout
        left = at - now
        if left < self.min_attempt_time or left <= 0.0:
            return self._call_retrying(fn, args, kwargs, None)  # raises DeadlineExceeded
        budget = self.budget
        if budget is not None:
            budget.on_request()
        # tuple.__new__ skips the named tuple's Python-level __new__ (half the cost).
        token = _DEADLINE.set(_new_tuple(Deadline, (first, clock))) if first < outer else None
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            state = RetryState(self, now, at)
            state.attempts = 1
            try:
                delay = state.on_error(exc, self._now())
            finally:
                if token is not None:
                    _DEADLINE.reset(token)
            if delay is None:
                raise
        except BaseException:
            if token is not None:
                _DEADLINE.reset(token)
            raise
        else:
            if token is not None:
                _DEADLINE.reset(token)
            if budget is not None:
                budget.on_success()
            return result
        # Outside the except block, so that later errors are not chained to this one.
        clock.sleep(delay)
        return self._call_retrying(fn, args, kwargs, None, state)

    def _call_retrying(
        self,
        fn: Callable[..., T],
        args: Any,
        kwargs: Any,
        first_error: Exception | None,
        state: RetryState | None = None,
    ) -> T:
        clock = self._clock
        clock_now = self._now
        now = clock_now()
        if state is None:
            # After a fast-path first attempt, on_request was already called and there is no
            # deadline: a bare state.
            state = self.new_state(now) if first_error is None else RetryState(self, now)
        if first_error is not None:
            # The fast path already made attempt 1; account for it.
            state.attempts = 1
            delay = state.on_error(first_error, now)
            if delay is None:
                raise first_error
            clock.sleep(delay)
        while True:
            now = clock_now()
            attempt_deadline = state.begin_attempt(now)
            token = self._scope(attempt_deadline, now)
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if first_error is not None and exc.__context__ is first_error:
                    # Attempt 1's error was handed over from inside the fast path's `except`:
                    # later errors were not raised while handling it.
                    exc.__context__ = None
                delay = state.on_error(exc, clock_now())
                if delay is None:
                    raise
            else:
                delay = state.on_result(result, clock_now())
                if delay is None:
                    return result
            finally:
                if token is not None:
                    _DEADLINE.reset(token)
            clock.sleep(delay)

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Outcome[T]:
        """Like :meth:`call`, but return an :class:`Outcome` instead of raising ``Exception``s."""
        clock = self._clock
        state = self.new_state(clock.now(), record=True)
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
        if self._simple and _DEADLINE.get() is None:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:
                return await self._acall_retrying(fn, args, kwargs, exc)
        budget = self._lean_budget
        if budget is not None and _DEADLINE.get() is None:
            budget.on_request()
            try:
                result = await fn(*args, **kwargs)
            except Exception as exc:
                return await self._acall_retrying(fn, args, kwargs, exc)
            on_success = self._lean_success
            if on_success is not None:
                on_success()
            return result
        if self._lean:
            return await self._acall_timed(fn, args, kwargs)
        return await self._acall_retrying(fn, args, kwargs, None)

    async def _acall_timed(self, fn: Callable[..., Awaitable[T]], args: Any, kwargs: Any) -> T:
        """The async twin of :meth:`_call_timed`."""
        clock = self._clock
        now = self._now()
        # The deadlines of new_state() and begin_attempt(): the ambient one, the call's, and the
        # first attempt's (conditional expressions: cheaper than min() on this path).
        ambient = _DEADLINE.get()
        outer = math.inf if ambient is None else now + ambient.remaining()
        at = outer
        if self.timeout is not None and now + self.timeout < at:
            at = now + self.timeout
        first = at
        if self.attempt_timeout is not None and now + self.attempt_timeout < first:
            first = now + self.attempt_timeout
        left = at - now
        if left < self.min_attempt_time or left <= 0.0:
            return await self._acall_retrying(fn, args, kwargs, None)  # raises DeadlineExceeded
        budget = self.budget
        if budget is not None:
            budget.on_request()
        # tuple.__new__ skips the named tuple's Python-level __new__ (half the cost).
        token = _DEADLINE.set(_new_tuple(Deadline, (first, clock))) if first < outer else None
        try:
            if first == math.inf:
                result = await fn(*args, **kwargs)
            else:
                result = await with_timeout(fn(*args, **kwargs), first - now)
        except Exception as exc:
            state = RetryState(self, now, at)
            state.attempts = 1
            try:
                delay = state.on_error(exc, self._now())
            finally:
                if token is not None:
                    _DEADLINE.reset(token)
            if delay is None:
                raise
        except BaseException:
            if token is not None:
                _DEADLINE.reset(token)
            raise
        else:
            if token is not None:
                _DEADLINE.reset(token)
            if budget is not None:
                budget.on_success()
            return result
        await clock.asleep(delay)
        return await self._acall_retrying(fn, args, kwargs, None, state)

    async def _acall_retrying(
        self,
        fn: Callable[..., Awaitable[T]],
        args: Any,
        kwargs: Any,
        first_error: Exception | None,
        state: RetryState | None = None,
    ) -> T:
        clock = self._clock
        clock_now = self._now
        now = clock_now()
        if state is None:
            # After a fast-path first attempt, on_request was already called and there is no
            # deadline: a bare state.
            state = self.new_state(now) if first_error is None else RetryState(self, now)
        if first_error is not None:
            state.attempts = 1
            delay = state.on_error(first_error, now)
            if delay is None:
                raise first_error
            await clock.asleep(delay)
        while True:
            now = clock_now()
            attempt_deadline = state.begin_attempt(now)
            token = self._scope(attempt_deadline, now)
            try:
                if attempt_deadline == math.inf:
                    result = await fn(*args, **kwargs)
                else:
                    result = await with_timeout(fn(*args, **kwargs), attempt_deadline - now)
            except Exception as exc:
                if first_error is not None and exc.__context__ is first_error:
                    # Attempt 1's error was handed over from inside the fast path's `except`:
                    # later errors were not raised while handling it.
                    exc.__context__ = None
                delay = state.on_error(exc, clock_now())
                if delay is None:
                    raise
            else:
                delay = state.on_result(result, clock_now())
                if delay is None:
                    return result
            finally:
                if token is not None:
                    _DEADLINE.reset(token)
            await clock.asleep(delay)

    async def arun(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> Outcome[T]:
        """The async twin of :meth:`run`."""
        state = self.new_state(self._clock.now(), record=True)
        try:
            value = await self._acall_retrying(fn, args, kwargs, None, state)
        except Exception as exc:
            return state.outcome(None, exc)
        return state.outcome(value, None)

    # -- decorator --------------------------------------------------------------------------

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, T]]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    @overload
    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]: ...

    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        """Decorate a ``def`` or ``async def`` function; its signature is preserved."""
        if check_decoratable(fn, "retry"):
            acall = self.acall

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await acall(fn, *args, **kwargs)

            return async_wrapper

        # One wrapper per kind of policy, chosen here once, so that a call tests nothing that
        # the policy's configuration already decided.
        slow = self._call_retrying
        timed = self._call_timed
        get_deadline = _DEADLINE.get
        budget = self._lean_budget
        inlined = None
        if budget is not None:
            inlined = first_attempt_wrapper(budget, fn, slow, timed, get_deadline)
        if inlined is not None:
            # A budget of seawall's own: its success path written out in the wrapper (no
            # Python-level call to the budget on most successful calls).
            return functools.wraps(fn)(inlined)

        if budget is not None:
            on_request, on_success = budget.on_request, self._lean_success

            @functools.wraps(fn)
            def budget_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                if get_deadline() is None:
                    on_request()
                    try:
                        result = fn(*args, **kwargs)
                    except Exception as exc:
                        return slow(fn, args, kwargs, exc)
                    if on_success is not None:
                        on_success()
                    return result
                return timed(fn, args, kwargs)

            return budget_wrapper

        if self._simple:

            @functools.wraps(fn)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                if get_deadline() is None:
                    try:
                        return fn(*args, **kwargs)
                    except Exception as exc:
                        return slow(fn, args, kwargs, exc)
                return timed(fn, args, kwargs)

            return wrapper

        if self._lean:

            @functools.wraps(fn)
            def timed_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                return timed(fn, args, kwargs)

            return timed_wrapper

        @functools.wraps(fn)
        def slow_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            return slow(fn, args, kwargs, None)

        return slow_wrapper

    # -- block API --------------------------------------------------------------------------

    def attempts(self) -> Attempts:
        """Retry a block: ``for attempt in policy.attempts(): with attempt: ...``.

        ``async for`` works too (waits then use the clock's ``asleep``). The block's exception
        propagates when the policy gives up. Inside the block, :func:`seawall.remaining` sees the
        attempt's deadline; ``async with attempt:`` also cancels the block there.
        """
        return Attempts(self)


class Attempt:
    """One attempt of the block API; use it as ``with attempt:``.

    Inside the block, the attempt's deadline (the tighter of ``attempt_timeout`` and the call's
    deadline) is the ambient one, so :func:`seawall.remaining` and the HTTP integration see it.
    ``async with attempt:`` also cancels the block at that deadline (it then counts as a
    ``TimeoutError``, retried like any timeout); a synchronous ``with attempt:`` cannot be
    interrupted.
    """

    __slots__ = ("_attempts", "_deadline", "_timeout", "_token", "number")

    def __init__(self, attempts: Attempts, number: int, deadline: float) -> None:
        self._attempts = attempts
        self._deadline = deadline
        self._token: Any = None
        self._timeout: Any = None
        #: The attempt number, from 1.
        self.number = number

    async def __aenter__(self) -> Attempt:
        self.__enter__()
        if self._deadline != math.inf:
            left = self._deadline - self._attempts._policy._clock.now()
            self._timeout = timeout_at(asyncio.get_running_loop().time() + max(0.0, left))
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
                if self.__exit__(TimeoutError, err, err.__traceback__):
                    return True
                raise
        return self.__exit__(exc_type, exc, tb)

    def __enter__(self) -> Attempt:
        owner = self._attempts
        self._token = owner._policy._scope(self._deadline, owner._policy._clock.now())
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

    async def _aiter(self) -> AsyncIterator[Attempt]:
        while True:
            if self._delay is not None:
                await self._policy._clock.asleep(self._delay)
            attempt = self._next()
            if attempt is None:
                return
            yield attempt

    def __aiter__(self) -> AsyncIterator[Attempt]:
        return self._aiter()


def retry(**kwargs: Any) -> RetryPolicy:
    """``RetryPolicy(**kwargs)``, read better as a decorator: ``@seawall.retry(max_attempts=5)``."""
    return RetryPolicy(**kwargs)

"""RetryPolicy: the frozen description of how to retry, its validation, its decorator, and
:func:`retry`."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Sequence,
)
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Final,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from seawall._core import validate as _validate
from seawall._core.classify import (
    ErrorMatcher,
    RetryOn,
    compile_errors,
    is_transient,
)
from seawall._core.clock import SYSTEM_CLOCK, TESTING, Clock, SystemClock
from seawall._core.decorate import decorate
from seawall._core.events import check_hooks
from seawall._core.public import public
from seawall._strategies.backoff import DEFAULT_BACKOFF, Backoff
from seawall._strategies.deadline import (
    _DEADLINE,
    SCOPES,
    call_deadline,
)
from seawall._strategies.retry.attempts import Attempts
from seawall._strategies.retry.drivers import (
    _COROUTINE,
    _check_awaited,
    _refuse_coroutine,
    acall_retrying,
    call_retrying,
)
from seawall._strategies.retry.events import Hook, Outcome, logging_hook
from seawall._strategies.retry.first_attempt import (
    _bound_first_attempt,
    _first_attempts,
    _Runner,
)
from seawall._strategies.retry.state import _SMALLEST_TIME, RetryState
from seawall._strategies.retry.statistics import RetryStatistics

if TYPE_CHECKING:
    # At run time the budget module is imported by the first policy given a budget: a policy
    # without one (the first @seawall.retry of most programs) does not load it.
    from seawall._strategies.budget import Budget

__all__ = ["RetryPolicy", "RetryingFunction", "RetryingMethod", "retry"]


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


# The ambient deadline's reader (a bound method, read once).
_ambient: Final = _DEADLINE.get
# Transient errors of the standard library and of the popular HTTP clients, by name.
_DEFAULT_RETRY_ON: RetryOn = is_transient
_DEFAULT_HOOKS: tuple[Hook, ...] = (logging_hook,)
# The most attempts for which a policy keeps its jitter-free delays in a table.
_FIXED_DELAYS_LIMIT: Final = 64


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
    # States the loop without a clock may take again: each is the state of one of its calls
    # that succeeded, which nothing else holds (see drivers.call_retrying); at most a few.
    _spare_states: list[RetryState] = dataclasses.field(init=False, repr=False, compare=False)
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
        set_(self, "_spare_states", [])
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
    # The loops themselves are in the drivers module; here they are methods (no extra frame).
    _call_retrying = call_retrying
    _acall_retrying = acall_retrying

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
        # The first attempt without bookkeeping (see the first_attempt module): no RetryState
        # unless it fails. The decorators and call()'s runner (self._first) run the same path,
        # instantiated from one template; a test holds them to this method.
        if not self._fast or (SCOPES.used and _ambient() is not None):
            return self._call_retrying(fn, args, kwargs, None)  # the deadline shapes attempts
        before, after = self._before, self._after
        if before is not None:
            before()
        try:
            # `fn(*args, **kwargs)` builds a dictionary on every call, even an empty one.
            result = fn(*args, **kwargs) if kwargs else fn(*args)  # type: ignore[call-arg]
        except Exception as exc:
            error = exc
        else:
            if type(result) is _COROUTINE:
                _refuse_coroutine(fn, result)
            if after is not None:
                after()
            return result
        # Outside the `except`, so that the retries' own errors are not raised while handling
        # this one; and not left in this frame (the error's traceback holds it): no cycle.
        try:
            return self._call_retrying(fn, args, kwargs, error)
        finally:
            error = None  # type: ignore[assignment]

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
        if not self._fast or (SCOPES.used and _ambient() is not None):
            return await self._acall_retrying(fn, args, kwargs, None)
        before, after = self._before, self._after
        if before is not None:
            before()
        try:
            result = await (fn(*args, **kwargs) if kwargs else fn(*args))  # type: ignore[call-arg]
        except Exception as exc:
            _check_awaited(fn, exc)
            error = exc
        else:
            if after is not None:
                after()
            return result
        try:
            return await self._acall_retrying(fn, args, kwargs, error)
        finally:
            error = None  # type: ignore[assignment]

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


def _nothing(error: BaseException) -> None:
    """No budget: nobody to tell."""


def _rebuild_policy(cls: type[RetryPolicy], fields: dict[str, Any]) -> RetryPolicy:
    return cls(**fields)


@overload
def retry(fn: Callable[P, T], /) -> RetryingFunction[P, T]: ...


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


@public("seawall")
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

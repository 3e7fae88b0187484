"""The retry loops: the synchronous and asyncio drivers over RetryState."""

from __future__ import annotations

import math
from collections.abc import (
    Awaitable,
    Callable,
)
from types import CoroutineType
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    ParamSpec,
    TypeVar,
)

from seawall._core.clock import TESTING
from seawall._core.redact import redact_text
from seawall._strategies.deadline import (
    _DEADLINE,
    install,
)
from seawall._strategies.retry.state import _INF, RetryState

if TYPE_CHECKING:
    from seawall._strategies.retry.policy import RetryPolicy
    from seawall._strategies.retry.statistics import RetryStatistics

__all__ = ["acall_retrying", "call_retrying"]


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


def call_retrying(
    policy: RetryPolicy,
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
        clock = policy._clock
        if first_error is not None and not policy._hooks:
            # Handed over by the first attempt (no deadline, no timeouts, no result check) with
            # no hook to date events for: no decision of this call depends on the time, and
            # none shows it, so the clock is not read at all (a reading costs as much as a
            # tenth of a failed attempt; the state's times stay at zero, unread), and each
            # retry decision begins the next attempt itself (RetryState._begin_at_once).
            # The state of an earlier call of this loop that succeeded, if one is spare: made
            # once, not on every call (making one costs a tenth of the whole call). Nothing
            # else holds a spare: the loop hands its state to nobody (no hook, no history, no
            # statistics); only the frame of an earlier call, kept alive by an error someone
            # retained from one of its retried attempts, would show it as a later call left it.
            spares = policy._spare_states
            try:
                state = spares.pop() if spares else None
            except IndexError:  # another thread took the last one
                state = None
            if state is None:
                state = RetryState(policy, 0.0)
                state._begin_at_once = True
            else:
                # What a call of this loop that succeeded changes, and no more (a give-up
                # raises: its state is not kept), and the policy a spare does not hold;
                # tests/test_first_attempt.py holds a spare to a new state, field by field.
                state.policy = policy
                state.total_delay = 0.0
                state._previous_delay = None
            state.attempts = 1
            # The method's function, called with every argument: no bound method to make,
            # and the interpreter's quickest call.
            decide = _DECIDE
            delay = decide(state, first_error, 0.0, None)
            if delay is None:
                raise first_error
            # The system clock does nothing for a zero wait: no call to make.
            zero_waits = policy._zero_instant
            budget = policy.budget
            while True:
                # (delay is a float: a None gave up, above or below)
                if delay > 0.0 or zero_waits:
                    clock.sleep(delay)
                try:
                    # Without keyword arguments, no empty dictionary to build for the call.
                    result = fn(*args, **kwargs) if kwargs else fn(*args)
                except Exception as exc:
                    delay = decide(state, exc, 0.0, None)
                    if delay is None:
                        raise
                else:
                    if type(result) is _COROUTINE:
                        _refuse_coroutine(fn, result)
                    # state.on_success(now), inline: with no history (the state was made
                    # here) and no hook that observes attempts (a first attempt without
                    # bookkeeping has none), a success clears the error and tells the budget.
                    state.last_error = None
                    if budget is not None:
                        budget.on_success()
                    # Kept for the next call unless the statistics are yet to read it;
                    # without its policy, so that a policy and its spares make no cycle.
                    if stats is None and len(spares) < _SPARE_STATES:
                        state.policy = None  # type: ignore[assignment]
                        spares.append(state)
                    return result
        # policy._time(), inline: this is every retried call's path
        clock_now = policy._now if not (TESTING.instant or TESTING.skipped) else clock.now
        now = clock_now()
        if first_error is not None:
            state = RetryState(policy, now)
            state.attempts = 1
            delay = state._decide(first_error, now)
            if delay is None:
                raise first_error
        else:
            if state is None:
                state = policy.new_state(now)
            delay = None
        # The system clock does nothing for a zero wait: neither a call to make nor time
        # to read again (the next attempt starts at once).
        zero_waits = policy._zero_instant
        check = policy.retry_if_result
        inf = _INF
        begin_attempt, on_error = state.begin_attempt, state._decide
        while True:
            if delay is not None and (delay > 0.0 or zero_waits):
                clock.sleep(delay)
                now = clock_now()
            at = begin_attempt(now)
            token = None if at == inf else install(at, now, clock)
            try:
                result = fn(*args, **kwargs) if kwargs else fn(*args)
            except Exception as exc:
                now = clock_now()
                delay = on_error(exc, now)
                if delay is None:
                    raise
            else:
                if type(result) is _COROUTINE:
                    _refuse_coroutine(fn, result)
                if check is None:
                    state.on_success(clock_now())
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


async def acall_retrying(
    policy: RetryPolicy,
    fn: Callable[..., Awaitable[T]],
    args: Any,
    kwargs: Any,
    first_error: Exception | None,
    state: RetryState | None = None,
    stats: RetryStatistics | None = None,
) -> T:
    """The async twin of :func:`call_retrying`."""
    from seawall._core.compat import with_timeout

    try:
        clock = policy._clock
        # policy._time(), inline: this is every retried call's path
        clock_now = policy._now if not (TESTING.instant or TESTING.skipped) else clock.now
        now = clock_now()
        if first_error is not None:
            state = RetryState(policy, now)
            state.attempts = 1
            delay = state._decide(first_error, now)
            if delay is None:
                raise first_error
        else:
            if state is None:
                state = policy.new_state(now)
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
                    what = _timed_out(policy, state.attempts)
                    result = await with_timeout(fn(*args, **kwargs), at - now, what)
            except Exception as exc:
                _check_awaited(fn, exc)
                delay = state._decide(exc, clock_now())
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


_COROUTINE = CoroutineType
_DECIDE = RetryState._decide
# The most spare states a policy keeps (calls of its loop without a clock at once, in threads).
_SPARE_STATES: Final = 4


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

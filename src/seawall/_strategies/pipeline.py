"""Pipeline: compose timeouts, retries, a circuit breaker and hedging in one fixed order.

The order, outermost first, is the one that keeps each strategy honest about what it sees:

1. **total timeout**: one deadline for the whole call, waits included; every layer below sees it.
2. **retry**: retries the layers below as one attempt.
3. **breaker**: each retry attempt passes the breaker; an open breaker fails fast and is never
   retried (:class:`~seawall.CircuitOpen` is an ``Overloaded``).
4. **attempt timeout**: inside the breaker, so a timed-out attempt counts as a failure there.
5. **hedge**: inside the attempt timeout, so the timeout bounds the hedged group as a whole.

The same order as Polly's and resilience4j's recommended decorations (timeout outside retry,
circuit breaker inside it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar, overload

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock, SystemClock
from seawall._core.decorate import decorate
from seawall._core.public import public
from seawall._strategies.breaker import CircuitBreaker
from seawall._strategies.deadline import _DEADLINE, deadline, install
from seawall._strategies.hedge import Hedge
from seawall._strategies.retry import RetryPolicy

__all__ = ["Pipeline"]

P = ParamSpec("P")
T = TypeVar("T")

# A layer takes (fn, args, kwargs) and makes one call through itself and the layers below.
_Sync = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]
_Async = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Awaitable[Any]]


@public("seawall")
class Pipeline:
    """Strategies composed in the documented order, used like a policy.

    ``call`` / ``acall`` / decorator, like :class:`~seawall.RetryPolicy`. Layers left out cost
    nothing: the composition is built once, here, not on every call.

    Args:
        timeout: seconds for the whole call, retries and waits included (an ambient
            :func:`seawall.deadline`; in async code the work is cancelled at the deadline and
            :class:`~seawall.DeadlineExceeded` raised).
        retry: the :class:`~seawall.RetryPolicy` that retries each attempt below it. Give it no
            ``attempt_timeout`` of its own: that would sit outside the breaker, which would see
            a cancelled call instead of a failure. Use this pipeline's ``attempt_timeout``.
        breaker: the :class:`~seawall.CircuitBreaker` each attempt passes.
        attempt_timeout: seconds per attempt. Async: the attempt is cancelled and raises
            ``TimeoutError`` (retryable). Sync: threads cannot be interrupted; the attempt sees it
            as its deadline through :func:`seawall.remaining`.
        hedge: a :class:`~seawall.Hedge` run as the innermost layer (async only; idempotent
            operations only). When it shares the retry policy's budget, the retry layer reports
            requests and outcomes to it and hedges only withdraw, so nothing counts twice
            (``self.hedge`` is then its :meth:`~seawall.Hedge.withdrawing_only` view; the
            given hedge is unchanged).
        clock: where the deadlines are measured (by default the retry policy's clock, else the
            system clock).

    Raises:
        TypeError: a layer of the wrong type (the message names it).
        ValueError: a timeout out of range.
    """

    __slots__ = (
        "_acall",
        "_call",
        "attempt_timeout",
        "breaker",
        "clock",
        "hedge",
        "retry",
        "timeout",
    )

    def __init__(
        self,
        *,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        attempt_timeout: float | None = None,
        hedge: Hedge | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.timeout = _validate.optional_seconds("timeout", timeout)
        self.attempt_timeout = _validate.optional_seconds("attempt_timeout", attempt_timeout)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a seawall.RetryPolicy, got {retry!r}")
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise TypeError(f"breaker must be a seawall.CircuitBreaker, got {breaker!r}")
        if hedge is not None and not isinstance(hedge, Hedge):
            raise TypeError(f"hedge must be a seawall.Hedge, got {hedge!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        if (
            hedge is not None
            and retry is not None
            and hedge.budget is not None
            and hedge.budget is retry.budget
        ):
            # The caller's Hedge is left as it is: it still reports wherever else it is used.
            hedge = hedge.withdrawing_only()
        self.retry = retry
        self.breaker = breaker
        self.hedge = hedge
        if clock is None:
            clock = retry._clock if retry is not None else SYSTEM_CLOCK
        self.clock: Clock = clock
        self._call = self._compose_sync()
        self._acall = self._compose_async()

    # -- composition ------------------------------------------------------------------------

    def _compose_sync(self) -> _Sync:
        layer: _Sync | None = None  # None: call fn directly (saves a frame on the hot path)
        if self.attempt_timeout is not None:
            layer = _sync_deadline(layer, self.attempt_timeout, self.clock)
        if self.breaker is not None:
            layer = _sync_breaker(layer, self.breaker)
        if self.retry is not None:
            layer = _sync_retry(layer, self.retry)
        if self.timeout is not None:
            layer = _sync_deadline(layer, self.timeout, self.clock)
        return layer if layer is not None else _direct

    def _compose_async(self) -> _Async:
        layer: _Async | None = None
        if self.hedge is not None:
            hedge_call = self.hedge.acall

            async def hedged(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
                return await hedge_call(fn, *args, **kwargs)

            layer = hedged
        if self.attempt_timeout is not None:
            layer = _async_attempt_timeout(layer, self.attempt_timeout, self.clock)
        if self.breaker is not None:
            layer = _async_breaker(layer, self.breaker)
        if self.retry is not None:
            layer = _async_retry(layer, self.retry)
        if self.timeout is not None:
            layer = _async_total_timeout(layer or _adirect, self.timeout, self.clock)
        return layer if layer is not None else _adirect

    # -- drivers ----------------------------------------------------------------------------

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Call ``fn(*args, **kwargs)`` through every layer.

        Raises:
            TypeError: the pipeline hedges (hedging needs asyncio: use :meth:`acall`).
            BaseException: what the layers raise: the original last error, ``CircuitOpen``,
                ``DeadlineExceeded``.
        """
        if self.hedge is not None:
            raise TypeError("a pipeline with a hedge needs asyncio: use acall()")
        result: T = self._call(fn, args, kwargs)
        return result

    async def acall(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """The async twin of :meth:`call`: ``await fn(*args, **kwargs)`` through every layer."""
        result: T = await self._acall(fn, args, kwargs)
        return result

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, T]]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    @overload
    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]: ...

    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        """Decorate a ``def`` or ``async def`` function; its signature is preserved."""
        # Hedging needs an event loop: with a hedge, only async def functions.
        return (
            decorate(fn, "hedge", None, self._acall)
            if self.hedge
            else decorate(fn, "wrap", self._call, self._acall)
        )

    def __repr__(self) -> str:
        parts = [
            f"{name}={getattr(self, name)!r}"
            for name in ("timeout", "retry", "breaker", "attempt_timeout", "hedge")
            if getattr(self, name) is not None
        ]
        return f"Pipeline({', '.join(parts)})"


def _direct(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    return fn(*args, **kwargs)


async def _adirect(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    return await fn(*args, **kwargs)


def _sync_deadline(inner: _Sync | None, seconds: float, clock: Clock) -> _Sync:
    call = inner if inner is not None else _direct
    now = time.monotonic if type(clock) is SystemClock else clock.now
    reset = _DEADLINE.reset

    def layer(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        # What `with deadline(seconds, clock=clock)` does, minus the scope object: this runs
        # on every call. An earlier ambient deadline is kept (nothing is installed then).
        start = now()
        token = install(start + seconds, start, clock)
        if token is None:
            return call(fn, args, kwargs)
        try:
            return call(fn, args, kwargs)
        finally:
            reset(token)

    return layer


def _sync_around(inner: _Sync | None, run: _Sync) -> _Sync:
    """*run* (a strategy's driver) around *inner* (the layers below), or around the function."""
    if inner is None:
        return run
    return lambda fn, args, kwargs: run(inner, (fn, args, kwargs), {})


def _sync_breaker(inner: _Sync | None, breaker: CircuitBreaker) -> _Sync:
    return _sync_around(inner, breaker._run)


def _sync_retry(inner: _Sync | None, retry: RetryPolicy) -> _Sync:
    return _sync_around(inner, retry._first)  # the policy's one first-attempt path


def _async_attempt_timeout(inner: _Async | None, seconds: float, clock: Clock) -> _Async:
    reset = _DEADLINE.reset

    async def layer(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        # The ambient deadline lets the attempt see its time left; the timeout cancels it. A
        # plain TimeoutError (not DeadlineExceeded): one slow attempt is worth retrying.
        from seawall._core.compat import with_timeout

        start = clock.now()
        token = install(start + seconds, start, clock)
        try:
            aw = fn(*args, **kwargs) if inner is None else inner(fn, args, kwargs)
            return await with_timeout(aw, seconds)
        finally:
            if token is not None:
                reset(token)

    return layer


def _async_total_timeout(inner: _Async, seconds: float, clock: Clock) -> _Async:
    async def layer(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        async with deadline(seconds, clock=clock):
            return await inner(fn, args, kwargs)

    return layer


def _async_breaker(inner: _Async | None, breaker: CircuitBreaker) -> _Async:
    return _async_around(inner, breaker._arun)


def _async_retry(inner: _Async | None, retry: RetryPolicy) -> _Async:
    return _async_around(inner, retry._afirst)  # the policy's one first-attempt path


def _async_around(inner: _Async | None, run: _Async) -> _Async:
    """*run* (a strategy's async driver) around *inner* (the layers below), or around the
    function itself."""
    if inner is None:
        return run

    async def layer(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        return await run(inner, (fn, args, kwargs), {})

    return layer

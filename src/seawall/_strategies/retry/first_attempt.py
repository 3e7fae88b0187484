"""The first attempt of a call, without bookkeeping: one path, instantiated per use."""

from __future__ import annotations

import linecache
from collections.abc import (
    Callable,
)
from typing import (
    TYPE_CHECKING,
    Any,
    ParamSpec,
    TypeVar,
)

from seawall._strategies.deadline import (
    _DEADLINE,
    SCOPES,
)

__all__ = []

from seawall._strategies.retry.drivers import _COROUTINE, _check_awaited, _refuse_coroutine

if TYPE_CHECKING:
    from seawall._strategies.retry.policy import RetryPolicy
    from seawall._strategies.retry.statistics import RetryStatistics


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


# The drivers' signatures: fn, its positional arguments, its keyword arguments.
_Runner = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]


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


def _install_first_attempt_methods(cls: type[RetryPolicy]) -> None:
    """call() and acall() as the generated first-attempt path itself (their source above stays
    the documented signature)."""
    shared = (None, None, SCOPES, _DEADLINE.get, _COROUTINE, _refuse_coroutine, _check_awaited)
    for name, make in (("call", _MAKE_CALL), ("acall", _MAKE_ACALL)):
        method = make(None, *shared)
        documented = getattr(cls, name)
        method.__doc__ = documented.__doc__
        method.__name__ = documented.__name__
        method.__qualname__ = documented.__qualname__
        method.__module__ = cls.__module__
        method.__wrapped__ = documented  # inspect.signature shows the typed signature
        setattr(cls, name, method)

"""The first attempt of a call without bookkeeping, generated for the wrappers that run it.

A call whose first attempt needs no bookkeeping (no timeouts and no ambient deadline, no result
check, no hook that observes attempts) makes it without building a RetryState: tell the budget
the call starts, call the function, tell the budget of the success. A failure hands over to the
retry loop (the drivers module). The budget's part is whatever its first_attempt() capability
offers (its cheapest callables, or None for nothing to do); the decisions stay in the budget and
in RetryState.

The readable version of that path is :meth:`RetryPolicy.call` (and ``acall``): it is what
``policy.call(fn)`` runs, and the reference the generated variants are tested against
(tests/test_first_attempt.py runs every scenario through both and compares what the caller, the
budget and the hooks see).

Why generated. A decorated function's wrapper must have *fn* bound in its closure: a wrapper
that calls ``policy.call(fn, *args, **kwargs)`` pays a second frame and the re-packing of the
arguments on every call. Measured on CPython 3.11, 2 cores, a policy without budget, a decorated
function that returns at once: 396-466 ns per call generated, 840-1,006 ns through ``call()``
(1.96-2.28x), the median of 9 interleaved rounds; counted under valgrind, which load does not
move: 2,491 instructions per call generated, 4,651 through ``call()`` (1.87x). The same path
is needed six ways (sync/async, function as argument or bound, counting calls or not); one text
instantiated six ways keeps them the same, where six hand-written copies would drift. The text
is compiled once, at import, and registered with linecache, so that tracebacks and debuggers
show its lines.

``call()``/``acall()`` themselves are not generated: written out, they measure the same as the
generated method did (375 vs 385 ns per call for a plain policy, 450 vs 436 ns with a
TokenBucket; readable/generated 0.96-1.01, in one run).
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from seawall._strategies.deadline import _DEADLINE, SCOPES
from seawall._strategies.retry.drivers import _COROUTINE, _check_awaited, _refuse_coroutine

if TYPE_CHECKING:
    from seawall._strategies.retry.policy import RetryPolicy
    from seawall._strategies.retry.statistics import RetryStatistics

__all__: list[str] = []

# The drivers' signatures: fn, its positional arguments, its keyword arguments.
_Runner = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]

# The path, written once; RetryPolicy.call() is the same text with the parts read from the
# policy. A decorator's wrapper and call()'s runner hold the parts in their closure.
_FIRST_ATTEMPT = """
def make(slow, before, after, scopes, ambient, coroutine, refuse, check_awaited{bound}):
    {kind}def first({params}):
        if scopes.used and ambient() is not None:
            return {wait}slow(fn, args, kwargs, None{stats})  # the deadline shapes each attempt
        if before is not None:
            before()
        try:
            result = {wait}(fn(*args, **kwargs) if kwargs else fn(*args))
        except Exception as exc:
            {awaited}
            error = exc
        else:
            {returned}
            {tick}if after is not None:
                after()
            return result
        # Outside the `except`, so that the retries' own errors are not raised while handling
        # this one; and not left in this frame (the error's traceback holds it): no cycle.
        try:
            return {wait}slow(fn, args, kwargs, error{stats})
        finally:
            error = None

    return first
"""


def _compile_first_attempt(
    *, asynchronous: bool, bound: bool = False, counted: bool = False
) -> Callable[..., Any]:
    params = "*args, **kwargs" if bound else "fn, args, kwargs"
    source = _FIRST_ATTEMPT.format(
        # A decorated function of a policy with statistics=True counts its calls
        # (RetryStatistics): one tick, in C, for a first attempt that succeeds, the rest on the
        # retrying path. (Off by default: the tick is a sixth of a decorated call's cost.)
        bound=(", fn, tick, stats" if counted else ", fn") if bound else "",
        stats=", None, stats" if counted else "",
        tick="next(tick)\n            " if counted else "",
        kind="async " if asynchronous else "",
        params=params,
        wait="await " if asynchronous else "",
        awaited="check_awaited(fn, exc)" if asynchronous else "pass",
        returned="pass" if asynchronous else "if type(result) is coroutine: refuse(fn, result)",
    )
    where = "counted decorator" if counted else "decorator" if bound else "call"
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

"""The drivers: every seawall HTTP integration sends through one of these two loops."""

from __future__ import annotations

import linecache
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from seawall._policy.http.wire import Resp

if TYPE_CHECKING:
    from seawall._policy.http.call import HttpCall

R = TypeVar("R")


# -- the drivers: every seawall HTTP integration sends through one of these two loops ----------
#
# The loop is written once, below, and compiled twice at import: a function for a thread and a
# coroutine function for a task (as the retry core's first-attempt path is). A synchronous
# driver stepping the coroutine would cost a frame and two coroutines on every request.

_DRIVER = """
{kind}def {name}(call, send, close, outcome=None):
    try:
        while (left := call.next_attempt()) is not None:
            if call._kept is not None:  # (one call less than take() on every request)
                {wait}close(call.take())  # a discarded attempt must not hold its connection
            try:
                if outcome is None:
                    response = {wait}send(left)
                else:  # the first attempt's, which the first-attempt path made
                    response, outcome = outcome, None
                    if isinstance(response, Exception):
                        try:
                            raise response
                        finally:
                            response = None  # not left in this frame: no cycle
            except Exception as exc:
                if (delay := call.on_error(exc)) is None:
                    raise
            else:
                try:
                    delay = call.on_response(response)
                except BaseException:
                    {wait}close(response)  # retry_if_result raised: nobody reads this one
                    raise
                if delay is None:
                    return call.answer(response)
            {wait}call.clock.{sleep}(delay)
        return call.answer_kept()
    finally:
        if call._kept is not None:
            {wait}close(call.take())  # the wait was interrupted (or cancelled): nobody reads it
"""


def compile_twin(template: str, name: str, asynchronous: bool, **names: Any) -> Any:
    """*template* compiled as a function named *name* (``a`` + *name* for a task), each
    ``{kind}`` and ``{wait}`` in it standing for ``async``/``await`` or nothing, its other
    fields given in *names*; registered with :mod:`linecache`, so that tracebacks and debuggers
    show its lines."""
    name = "a" + name if asynchronous else name
    source = template.format(
        kind="async " if asynchronous else "",
        name=name,
        wait="await " if asynchronous else "",
        sleep="asleep" if asynchronous else "sleep",
    )
    filename = f"<seawall HTTP: {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = dict(names)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


if TYPE_CHECKING:

    def drive(
        call: HttpCall[Resp],
        send: Callable[[float], Resp],
        close: Callable[[Resp], object],
        outcome: Resp | Exception | None = None,
    ) -> Resp:
        """See below."""

    async def adrive(
        call: HttpCall[Resp],
        send: Callable[[float], Awaitable[Resp]],
        close: Callable[[Resp], Awaitable[object]],
        outcome: Resp | Exception | None = None,
    ) -> Resp:
        """See below."""

else:
    drive = compile_twin(_DRIVER, "drive", asynchronous=False)
    adrive = compile_twin(_DRIVER, "drive", asynchronous=True)
    drive.__module__ = adrive.__module__ = __name__

drive.__doc__ = """Run *call* in this thread: ``send(seconds_left)`` makes one attempt, ``close``
releases a response nobody will read; waits sleep on the policy's clock. With *outcome* (a
response, or the exception it raised), the first attempt was made already, by the first-attempt
path (:mod:`~seawall._policy.http.first`), and that is its outcome."""
adrive.__doc__ = """Run *call* in a task (asyncio or trio): ``send(seconds_left)`` makes one
attempt, ``close`` releases a response nobody will read; waits ``await`` the policy clock's
``asleep``; *outcome* as :func:`drive` has it. Cancellation of the caller is never retried."""


async def within(aw: Awaitable[R], seconds: float, timed_out: Callable[[str], Exception]) -> R:
    """Await *aw* for at most *seconds* (``inf``: no limit), on asyncio or trio; past them it is
    cancelled and ``timed_out(message)`` is raised (the client library's timeout error)."""
    if seconds == math.inf:
        return await aw
    from seawall._core import compat  # here: no asyncio import for sync users

    def ran_out(error: TimeoutError, exc: BaseException | None, expired: bool) -> BaseException:
        if not expired:
            return error  # a timeout of the request itself, not of this scope
        return timed_out(f"seawall: the attempt ran out of time after {seconds:.3f} s")

    async with compat.TimeoutScope(seconds, ran_out):
        return await aw

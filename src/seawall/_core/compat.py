"""Timeouts by cancellation on every supported Python (``asyncio.timeout`` arrived in 3.11), and
on trio: the running library is detected (sniffio, which trio brings), never imported unused.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from seawall._core.runtime import TESTING

__all__ = [
    "checkpoint",
    "current_time",
    "running_trio",
    "sleep",
    "TimeoutScope",
    "timeout_after",
    "timeout_at",
    "with_timeout",
]

T = TypeVar("T")


class _TimeoutAt:
    """``asyncio.timeout_at`` for Python 3.10: cancel the task at *when* (loop time).

    On exit, a cancellation this scope caused becomes :class:`TimeoutError`; ``expired()`` says
    whether it fired, as on 3.11+.
    """

    __slots__ = ("_fired", "_handle", "_when")

    def __init__(self, when: float) -> None:
        self._when = when
        self._fired = False
        self._handle: asyncio.TimerHandle | None = None

    def expired(self) -> bool:
        return self._fired

    def _fire(self, task: asyncio.Task[Any]) -> None:
        self._fired = True
        task.cancel()

    async def __aenter__(self) -> _TimeoutAt:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a timeout needs to run inside a task")
        self._handle = asyncio.get_running_loop().call_at(self._when, self._fire, task)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._fired and exc_type is asyncio.CancelledError:
            raise TimeoutError("the deadline passed") from exc


def timeout_at(when: float) -> Any:
    """An async context manager that cancels its block at loop time *when* (``TimeoutError``)."""
    if sys.version_info >= (3, 11):
        return asyncio.timeout_at(when)
    return _TimeoutAt(when)  # pragma: no cover - Python 3.10


def running_trio() -> bool:
    """Whether the running async library is trio (directly or as anyio's backend).

    Free when trio was never imported: one dictionary lookup, then asyncio.
    """
    if "trio" not in sys.modules:
        return False
    import sniffio  # a dependency of trio: present whenever trio is

    try:
        return bool(sniffio.current_async_library() == "trio")
    except sniffio.AsyncLibraryNotFoundError:
        return False


class _TrioTimeout:
    """:func:`timeout_after` on trio: a cancel scope whose firing leaves as ``TimeoutError``."""

    __slots__ = ("_scope", "_seconds")

    def __init__(self, seconds: float) -> None:
        self._seconds = max(0.0, seconds)
        self._scope: Any = None

    def expired(self) -> bool:
        return self._scope is not None and bool(self._scope.cancelled_caught)

    async def __aenter__(self) -> _TrioTimeout:
        import trio

        self._scope = trio.CancelScope(deadline=trio.current_time() + self._seconds)
        self._scope.__enter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        suppressed = bool(self._scope.__exit__(exc_type, exc, tb))
        if self._scope.cancelled_caught:
            raise TimeoutError("the deadline passed") from exc
        return suppressed


class _Skipping:
    """A timeout armed for less real time than it stands for (inside ``testing.instant()``):
    when it fires, the blocked code has waited long enough, and instant time jumps by the
    rest, to the deadline it stands for."""

    __slots__ = ("_inner", "_skip")

    def __init__(self, inner: Any, skip: float) -> None:
        self._inner = inner
        self._skip = skip

    def expired(self) -> bool:
        return bool(self._inner.expired())

    async def __aenter__(self) -> _Skipping:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        try:
            result: bool | None = await self._inner.__aexit__(*exc_info)
        except TimeoutError:
            TESTING.skip(self._skip)
            raise
        return result


def timeout_after(seconds: float) -> Any:
    """:func:`timeout_at` *seconds* from now on the running loop (a negative value: at once);
    on trio, a cancel scope with the same behaviour. Inside ``testing.instant()``, armed for
    at most its grace in real time (see :class:`~seawall._core.runtime.Instant`)."""
    real, skip = TESTING.bounded(seconds)
    if running_trio():
        scope: Any = _TrioTimeout(real)
    else:
        scope = timeout_at(asyncio.get_running_loop().time() + max(0.0, real))
    return _Skipping(scope, skip) if skip else scope


def current_time() -> float:
    """The running async library's clock (asyncio's loop time, or trio's), which
    :func:`timeout_after` measures against."""
    if running_trio():
        import trio

        return float(trio.current_time())
    return asyncio.get_running_loop().time()


async def sleep(seconds: float) -> None:
    """Sleep on the running library's clock (asyncio's or trio's)."""
    if running_trio():
        import trio

        await trio.sleep(max(0.0, seconds))
    else:
        await asyncio.sleep(max(0.0, seconds))


async def checkpoint() -> None:
    """Let other tasks run (and cancellation arrive) without waiting."""
    if running_trio():
        import trio

        await trio.lowlevel.checkpoint()
    else:
        await asyncio.sleep(0)


class TimeoutScope:
    """The one adapter from a timeout by cancellation to the error its owner raises.

    An async block cancelled after *seconds* (:func:`timeout_after`: asyncio or trio, instant
    time honoured). A ``TimeoutError`` leaving the block goes to ``on_timeout(error, exc,
    expired)``, where *exc* is what the block raised and *expired* whether this scope's own
    timeout fired; it returns the exception to raise: *error* itself (its message changed or
    not), the block's own *exc*, or another, raised from *error*. Used with ``async with``, or
    entered and left by hand from another context manager's ``__aenter__``/``__aexit__``.
    """

    __slots__ = ("_on_timeout", "_scope", "seconds")

    def __init__(
        self,
        seconds: float,
        on_timeout: Callable[[TimeoutError, BaseException | None, bool], BaseException],
    ) -> None:
        self.seconds = seconds
        self._on_timeout = on_timeout
        self._scope: Any = None

    async def __aenter__(self) -> TimeoutScope:
        self._scope = timeout_after(self.seconds)
        await self._scope.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        scope, self._scope = self._scope, None
        try:
            result: bool | None = await scope.__aexit__(exc_type, exc, tb)
        except TimeoutError as error:
            raised = self._on_timeout(error, exc, bool(scope.expired()))
            if raised is error:
                raise
            if raised is exc:
                raise raised from None  # the block's own error, as it left the block
            raise raised from error
        return result


async def with_timeout(
    aw: Awaitable[T], seconds: float, what: Callable[[float], str] | None = None
) -> T:
    """Await *aw*, cancelling it after *seconds* (raises the builtin :class:`TimeoutError`,
    whose message is ``what(seconds)``: asyncio's has none)."""

    def said(error: TimeoutError, exc: BaseException | None, expired: bool) -> BaseException:
        if what is not None and expired:  # this scope's, not one raised inside
            error.args = (what(seconds),)
        return error

    async with TimeoutScope(seconds, said):
        return await aw

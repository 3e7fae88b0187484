"""The ``deadline()`` scope: a block's ambient deadline, and the cancellation of the work still
awaiting in it when the deadline passes."""

from __future__ import annotations

import contextvars
import math
import sys
from types import TracebackType
from typing import Any, Final

from seawall._core import validate as _validate
from seawall._core.clock import TESTING, Clock
from seawall._core.errors import DeadlineExceeded
from seawall._core.public import public
from seawall._strategies.deadline.ambient import _DEADLINE, Deadline, _relative, install

__all__ = ["deadline"]


_GRACE: Final = 0.001  # seconds a plain `with` in a coroutine waits past its deadline to cancel


def _running_task() -> Any:
    """The asyncio task running this code, or ``None`` (asyncio is not even imported for it)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        return None


def _running_trio() -> bool:
    """Whether this code runs in a trio task (asked only once trio is imported)."""
    from seawall._core.compat import running_trio  # it imports asyncio: not at import

    return running_trio()


@public("seawall")
class deadline:
    """Set an ambient deadline for the block: ``with deadline(2.0):`` or ``async with``.

    Nested scopes keep the earlier deadline: an inner scope can shorten the time left but never
    extend it. Every :class:`~seawall.RetryPolicy` called inside respects it: attempts get at most
    the time left, no wait crosses it, and no attempt starts with too little time left.

    Work still awaiting at the deadline is cancelled and the block raises
    :class:`~seawall.DeadlineExceeded`: in ``async with``, and in a plain ``with`` entered inside
    a coroutine too (as anyio's ``fail_after`` does), so that ``with deadline(0.2): await
    asyncio.sleep(1)`` does not silently sleep a second. Synchronous code cannot be
    interrupted; the deadline is visible to everything it calls through :func:`remaining`.

    Args:
        seconds: time allowed from entry; resolved to an absolute :class:`Deadline` on entry.
        clock: the clock to measure on (the system clock by default).
        at: an absolute :class:`Deadline` to use instead of *seconds*.
    """

    __slots__ = (
        "_at",
        "_clock",
        "_fired",
        "_handle",
        "_scope",
        "_seconds",
        "_timeout",
        "_token",
        "deadline",
    )

    def __init__(
        self,
        seconds: float | None = None,
        *,
        clock: Clock | None = None,
        at: Deadline | None = None,
    ) -> None:
        if (seconds is None) == (at is None):
            raise TypeError("deadline() takes exactly one of seconds or at=")
        if seconds is not None:
            seconds = _relative(seconds)
        if at is not None and not isinstance(at, Deadline):
            raise TypeError(f"at must be a seawall.propagation.Deadline, got {_validate.shown(at)}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {_validate.shown(clock)}")
        self._seconds = seconds
        self._at = at
        self._clock = clock
        self._token: contextvars.Token[Deadline | None] | None = None
        self._timeout: Any = None
        self._handle: Any = None  # a plain `with` in a coroutine: the loop timer that cancels
        self._fired: Any = None  # the task it cancelled, once it has
        self._scope: Any = None  # a plain `with` in a trio task: (its cancel scope, skip)
        self.deadline: Deadline | None = None

    def _enter(self) -> Deadline:
        if self._at is not None:
            new = self._at
        else:
            assert self._seconds is not None
            new = Deadline.after(self._seconds, self._clock)
        self._token = install(new.at, new.clock.now(), new.clock)
        if self._token is None:  # nested scopes keep the earlier deadline
            outer = _DEADLINE.get()
            if outer is not None:
                new = outer
        self.deadline = new
        return new

    def _exit(self) -> None:
        if self._token is not None:
            _DEADLINE.reset(self._token)
            self._token = None

    def __enter__(self) -> Deadline:
        new = self._enter()
        task = _running_task()
        if task is not None:
            left = new.remaining()
            if math.isfinite(left):
                loop = task.get_loop()
                # A hair after the deadline: the layers inside that enforce the same deadline
                # (an attempt timeout, a transport's timeout) report it first, in their terms.
                real, skip = TESTING.bounded(max(0.0, left))  # instant(): at most its grace
                when = loop.time() + real + _GRACE
                self._handle = loop.call_at(when, self._cancel, task, skip)
        elif "trio" in sys.modules and _running_trio():
            left = new.remaining()
            if math.isfinite(left):
                import trio

                real, skip = TESTING.bounded(max(0.0, left))
                # A cancel scope is a plain context manager: it cancels the awaits inside.
                scope = trio.CancelScope(deadline=trio.current_time() + real + _GRACE)
                scope.__enter__()
                self._scope = (scope, skip)
        return new

    def _cancel(self, task: Any, skip: float) -> None:
        # Runs only while the task is suspended inside the block (the timer is cancelled on
        # exit), so the CancelledError arrives at an await inside it.
        self._fired = task
        TESTING.skip(skip)
        task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._exit()
        if self._scope is not None:
            (scope, skip), self._scope = self._scope, None
            suppressed = bool(scope.__exit__(exc_type, exc, tb))
            if scope.cancelled_caught:
                TESTING.skip(skip)
                raise DeadlineExceeded("the deadline passed while the block was waiting") from exc
            return suppressed
        handle, self._handle = self._handle, None
        if handle is None:
            return False
        handle.cancel()
        task, self._fired = self._fired, None
        if task is not None and exc_type is not None and exc_type.__name__ == "CancelledError":
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+
            if uncancel is not None:
                uncancel()
            raise DeadlineExceeded("the deadline passed while the block was waiting") from exc
        return False

    async def __aenter__(self) -> Deadline:
        new = self._enter()
        left = new.remaining()
        if math.isfinite(left):
            # Only async code reaches here: a plain import never loads asyncio.
            from seawall._core.compat import TimeoutScope

            self._timeout = TimeoutScope(left, self._passed)
            await self._timeout.__aenter__()
        return new

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timeout, self._timeout = self._timeout, None
        try:
            if timeout is not None:
                await timeout.__aexit__(exc_type, exc, tb)
        finally:
            self._exit()

    def _passed(
        self, error: TimeoutError, exc: BaseException | None, expired: bool
    ) -> BaseException:
        # The deadline passed: said as DeadlineExceeded (one raised inside stays as it is).
        if isinstance(exc, DeadlineExceeded):
            return exc
        return DeadlineExceeded(f"deadline of {self.deadline!r} passed; the work was cancelled")

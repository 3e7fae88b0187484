"""The block API: ``for attempt in policy.attempts(): with attempt: ...``."""

from __future__ import annotations

import math
from collections.abc import (
    Iterator,
)
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    ParamSpec,
    TypeVar,
)

from seawall._core.public import public
from seawall._strategies.deadline import (
    _DEADLINE,
    install,
)
from seawall._strategies.retry.drivers import _timed_out

if TYPE_CHECKING:
    from seawall._strategies.retry.policy import RetryPolicy
    from seawall._strategies.retry.state import RetryState

__all__ = ["Attempt", "Attempts"]


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


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
            from seawall._core.compat import TimeoutScope  # here: no asyncio import for sync users

            self._seconds = self._deadline - self._attempts._policy._clock.now()
            self._timeout = TimeoutScope(self._seconds, self._timed_out)
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
                if self.__exit__(TimeoutError, err, err.__traceback__):
                    return True
                raise
        return self.__exit__(exc_type, exc, tb)

    def _timed_out(
        self, error: TimeoutError, exc: BaseException | None, expired: bool
    ) -> BaseException:
        # The cancellation at the attempt's deadline: a slow attempt, said in its terms.
        error.args = (_timed_out(self._attempts._policy, self.number)(self._seconds),)
        return error

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
        delay = state._decide(exc, now)
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

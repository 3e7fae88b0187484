"""The one retry driver of every gRPC call, over the policy's sans-I/O
:class:`~seawall.lowlevel.RetryState`: unary and streaming, sync and ``grpc.aio``.

Each kind of call says how one attempt ended (an :class:`Outcome`); :class:`RetryCall` makes the
decisions (:meth:`~RetryCall.judge`, :meth:`~RetryCall.again`) and :func:`drive` /
:func:`adrive` only wait between the attempts, in a thread or in a task.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Final, NamedTuple

import grpc
import grpc.aio

from seawall._core.errors import (
    DeadlineExceeded,
    Overloaded,
    add_note,
    is_exhausted,
    mark_exhausted,
    permanent,
)
from seawall._strategies.retry import RetryState
from seawall.grpc._rules import OK, RESPONSE_RECEIVED, Rules


class Outcome(NamedTuple):
    """How one attempt ended, for :meth:`RetryCall.judge`."""

    #: Its status; ``None`` when there is nothing for the policy to judge now (a local failure
    #: before any status, a cancelled call, or a first response message: the call is
    #: committed and is judged when it ends).
    code: grpc.StatusCode | None
    #: Its trailing metadata (the server's pushback).
    trailing: object = None
    #: Why the call can no longer be replayed, or ``None`` while it can.
    committed: str | None = None
    #: The error the caller gets for this attempt: the policy's marks and notes go on it.
    error: BaseException | None = None


#: An attempt that answered OK.
ANSWERED: Final = Outcome(OK)
#: An attempt with nothing to judge now (see :attr:`Outcome.code`).
UNJUDGED: Final = Outcome(None)


class RetryCall:
    """The retry decisions for one logical RPC, over the policy's :class:`RetryState`.

    Created when the RPC is, it begins the first attempt at once (raising ``DeadlineExceeded``
    when the deadline leaves too little time).
    """

    __slots__ = ("attempt_deadline", "cancelled", "clock", "heard", "rules", "state")

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.clock = clock = rules.clock
        now = clock.now()
        self.state: RetryState = rules.policy.new_state(now)
        #: Set by a call the caller cancelled: no attempt after the one in progress, and the
        #: end of the call is nobody's outcome.
        self.cancelled = False
        #: Whether the policy heard how the attempt in progress ended.
        self.heard = False
        self.attempt_deadline = self.state.begin_attempt(now)

    def timeout(self, configured: float | None) -> float | None:
        """The attempt's timeout: min(the caller's, the time left); ``None`` for none."""
        left = self.attempt_deadline - self.clock.now()
        if configured is None:
            return None if left == math.inf else max(left, 0.0)
        return min(configured, max(left, 0.0))

    def judge(self, outcome: Outcome) -> float | None:
        """Tell the policy how an attempt ended: the wait before the next attempt, or ``None``
        when this attempt's outcome is the call's (its error then carries the policy's marks)."""
        code = outcome.code
        if code is None:
            return None
        self.heard = True
        if code is OK:
            self.state.on_success(self.clock.now())
            return None
        signal, retry = self.rules.classify(code, outcome.trailing, outcome.committed)
        delay = self.state.on_error(signal, self.clock.now(), retry=retry)
        if delay is None or self.cancelled:
            hand_over(signal, outcome.error)
            return None
        return delay

    def again(self) -> bool:
        """After the wait: begin the next attempt, unless too little time is left or the caller
        cancelled (the last attempt's outcome then stands)."""
        try:
            self.attempt_deadline = self.state.begin_attempt(self.clock.now())
        except DeadlineExceeded:
            return False
        if self.cancelled:
            return False
        self.heard = False
        return True

    def end(self, error: grpc.RpcError | None) -> None:
        """How a committed call ended (a stream, after its first message): OK (*error*
        ``None``) or grpcio's *error*. Told to the policy once; a cancelled call is nobody's
        outcome, nor is an error without a status."""
        if self.heard or self.cancelled:
            return
        if error is None:
            self.judge(ANSWERED)
        elif isinstance(error, (grpc.Call, grpc.aio.AioRpcError)) and error.code() is not None:
            self.judge(Outcome(error.code(), error.trailing_metadata(), RESPONSE_RECEIVED, error))


def drive(call: RetryCall, attempt: Callable[[], Outcome]) -> Outcome:
    """Make attempts in this thread until one is final; the first is begun (see
    :class:`RetryCall`). Returns how the last one ended."""
    while True:
        outcome = attempt()
        delay = call.judge(outcome)
        if delay is None:
            return outcome
        call.clock.sleep(delay)
        if not call.again():
            return outcome


async def adrive(call: RetryCall, attempt: Callable[[], Awaitable[Outcome]]) -> Outcome:
    """:func:`drive` in a task: the waits are the clock's ``asleep``."""
    while True:
        outcome = await attempt()
        delay = call.judge(outcome)
        if delay is None:
            return outcome
        await call.clock.asleep(delay)
        if not call.again():
            return outcome


def hand_over(signal: BaseException | None, error: object) -> None:
    """Carry the policy's marks and notes from the stand-in *signal* to grpcio's *error*, so the
    layers above see that this call was retried already (retry at one layer) or must not be."""
    if signal is None or not isinstance(error, BaseException):
        return
    for note in getattr(signal, "__notes__", ()):
        add_note(error, note)
    try:
        if isinstance(signal, Overloaded):
            permanent(error)
        elif is_exhausted(signal):
            mark_exhausted(error)
    except TypeError:
        pass  # an error class that refuses attributes: nothing more to say

"""One logical RPC's retry decisions over the policy's :class:`~seawall.lowlevel.RetryState`,
and the hand-over of the policy's marks to the error grpcio raises."""

from __future__ import annotations

import math

import grpc

from seawall._core.errors import (
    _EXHAUSTED_MARK,
    Overloaded,
    add_note,
    mark_exhausted,
    permanent,
)
from seawall._strategies.retry import RetryState
from seawall.grpc._rules import (
    DEADLINE_CODE,
    OK,
    REFUSE,
    RetryableStatus,
    Rules,
    StatusDeadlineExceeded,
    parse_pushback,
)


class RetryCall:
    """The retry decisions for one logical RPC, over the policy's :class:`RetryState`."""

    __slots__ = ("attempt_deadline", "clock", "rules", "state")

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.clock = rules.policy._clock
        self.state: RetryState = rules.policy.new_state(self.clock.now())
        self.attempt_deadline = math.inf

    def begin_attempt(self) -> None:
        """Count an attempt (raises ``DeadlineExceeded`` when too little time is left)."""
        self.attempt_deadline = self.state.begin_attempt(self.clock.now())

    def timeout(self, configured: float | None) -> float | None:
        """The attempt's timeout: min(the caller's, the time left); ``None`` for none."""
        left = self.attempt_deadline - self.clock.now()
        if configured is None:
            return None if left == math.inf else max(left, 0.0)
        return min(configured, max(left, 0.0))

    def on_status(
        self, code: grpc.StatusCode, trailing: object, committed: str | None = None
    ) -> tuple[float | None, BaseException | None]:
        """Classify an attempt's status: (the wait before the next attempt or ``None`` to stop,
        the exception that stood for it).

        *committed* says why the call cannot be replayed (gRPC A6: responses received, or a
        request stream no longer buffered); a status that would be retried is then a failure of
        the dependency that is not retried, with a note saying why.
        """
        now = self.clock.now()
        state = self.state
        if code is OK:
            state.on_success(now)
            return None, None
        rules = self.rules
        pushback = parse_pushback(trailing)
        signal: Exception
        if pushback is REFUSE and (
            code in rules.retry_codes or code in rules.pushback_codes or code is DEADLINE_CODE
        ):
            # The server said "do not retry" a status that would be: a failure of the dependency,
            # never retried (a pushback on a fatal status changes nothing: gRPC proposal A6).
            signal = Overloaded(f"gRPC {code.name} with a pushback that forbids retries")
            return state.on_error(signal, now), signal
        if committed is not None and (
            code in rules.retry_codes
            or code is DEADLINE_CODE
            or (code in rules.pushback_codes and isinstance(pushback, float))
        ):
            signal = StatusDeadlineExceeded() if code is DEADLINE_CODE else RetryableStatus(code)
            add_note(signal, f"seawall: gRPC {code.name} not retried: {committed}")
            return state.on_error(signal, now, retry=False), signal
        if code is DEADLINE_CODE:
            signal = StatusDeadlineExceeded()
            return state.on_error(signal, now), signal
        wait = pushback if isinstance(pushback, float) else None
        if code in rules.retry_codes or (code in rules.pushback_codes and wait is not None):
            signal = RetryableStatus(code, wait)
            return state.on_error(signal, now, retry=True), signal
        # A fatal status: the dependency answered (the budget's on_answer), never retried;
        # marked so, it is not reported as an error that retry_on failed to match.
        signal = permanent(RetryableStatus(code))
        return state.on_error(signal, now), signal


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
        elif signal.__dict__.get(_EXHAUSTED_MARK) is True:
            mark_exhausted(error)
    except TypeError:
        pass  # an error class that refuses attributes: nothing more to say

"""What a policy asks of a budget (:class:`Budget`), how it asks, and :class:`Throttled`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from seawall._core.errors import Overloaded
from seawall._core.public import public

__all__ = ["Budget", "FirstAttempt", "Throttled", "answer_callback", "first_attempt_callables"]

# What a budget's first_attempt() capability returns: (before, after), each None for nothing.
FirstAttempt = tuple[Callable[[], None] | None, Callable[[], None] | None]


def answer_callback(budget: Budget) -> Callable[[BaseException], None]:
    """What *budget* is told when the dependency answered, not healthily: its ``on_answer``, or
    (for a budget that predates the third outcome) its ``on_success``."""
    on_answer = getattr(budget, "on_answer", None)
    if callable(on_answer):
        return on_answer  # type: ignore[no-any-return]
    on_success = budget.on_success

    def answered(error: BaseException) -> None:
        on_success()

    return answered


def first_attempt_callables(budget: Budget) -> FirstAttempt:
    """*budget*'s cheapest callables for a first attempt (its ``first_attempt()`` capability),
    or its ``on_request`` and ``on_success``."""
    offer = getattr(budget, "first_attempt", None)
    if callable(offer):
        before, after = offer()
        return before, after
    return budget.on_request, budget.on_success


@public("seawall")
@runtime_checkable
class Budget(Protocol):
    """What a policy asks of a shared budget. One budget may serve many policies and threads.

    A policy calls :meth:`on_request` before the first attempt of each logical call, then
    :meth:`on_success` or :meth:`on_failure` after every attempt, and :meth:`allow_retry` before
    each retry (only when it would otherwise retry). A failure is an error the policy would retry
    (or ``Overloaded``).

    Two optional capabilities, looked up on the object (a budget without them works as before):

    * ``on_answer(error)``: the dependency answered, but not with a success (a permanent error,
      a 4xx, a fatal gRPC status; :attr:`seawall.lowlevel.Verdict.ANSWERED`). Without it, such
      an answer is reported to :meth:`on_success`.
    * ``first_attempt() -> (before, after)``: the cheapest callables a first attempt needs,
      called in place of :meth:`on_request` before it and of :meth:`on_success` after it
      succeeds; ``None`` for "nothing to do". They must do exactly what those methods do.

    The calls for one logical call are made from the caller's thread or task, so an
    implementation may keep per-call state in a :class:`contextvars.ContextVar` (as
    :class:`RetryQuota` does). Implementations must be thread-safe and should be cheap:
    :meth:`on_request` and :meth:`on_success` run on every successful call.
    """

    def on_request(self) -> None:
        """A logical call starts. May raise :class:`~seawall.Overloaded` to reject it locally."""

    def allow_retry(self, error: BaseException) -> bool:
        """Withdraw for one retry (or hedge) after *error*; ``False`` refuses it."""

    def on_success(self) -> None:
        """An attempt succeeded (or failed permanently: the dependency answered)."""

    def on_failure(self, error: BaseException) -> None:
        """An attempt failed with a transient error or an overload signal."""


@public("seawall")
class Throttled(Overloaded):
    """A call rejected locally by :class:`AdaptiveThrottle`, before touching the network.

    A subclass of :class:`~seawall.Overloaded`, so no policy retries it and it propagates up.

    Attributes:
        probability: the rejection probability in force when the call was rejected.
    """

    def __init__(self, probability: float) -> None:
        super().__init__(
            f"throttled locally: the dependency rejects most requests, so this client drops "
            f"{probability:.0%} of new calls without sending them (adaptive throttling)"
        )
        self.probability = probability

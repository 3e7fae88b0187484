"""Retry events: what a hook receives, the default logging hook, and the records of a
call's attempts."""

from __future__ import annotations

import dataclasses
from collections.abc import (
    Callable,
)
from typing import (
    TYPE_CHECKING,
    Final,
    Generic,
    Literal,
    NamedTuple,
    ParamSpec,
    TypeVar,
)

from seawall._core import runtime
from seawall._core.events import INFO, WARNING, logger
from seawall._core.public import public
from seawall._core.redact import escape_controls, redact_text

if TYPE_CHECKING:
    # At run time the budget module is imported by the first policy given a budget: a policy
    # without one (the first @seawall.retry of most programs) does not load it.
    from seawall._strategies.budget import Budget

__all__ = ["AttemptRecord", "GiveUpReason", "Hook", "Outcome", "RetryEvent", "logging_hook"]


P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Q = ParamSpec("Q")


GiveUpReason = Literal[
    "not_retryable",  # permanent, Overloaded, cancellation, or not matched by retry_on
    "exhausted_below",  # an inner policy already retried this error (retry at one layer)
    "attempts_exhausted",
    "deadline",  # the next wait (plus min_attempt_time) would cross the deadline
    "budget",  # the shared budget refused the retry
    "disabled",  # the kill switch is off, globally or for this policy's name
    "delegated",  # inside seawall.lowlevel.one_attempt(): an enclosing layer owns the retries
    "retry_after",  # the server asked for a wait beyond max_retry_after (retry_after_beyond_max)
]

_GIVE_UP_REASONS: Final = frozenset(GiveUpReason.__args__)  # type: ignore[attr-defined]

#: The version of :meth:`RetryState.snapshot`'s format; :meth:`RetryState.restore` refuses newer.


@public("seawall")
class RetryEvent(NamedTuple):
    """What a hook receives. Immutable and cheap to create (a named tuple).

    Attributes:
        kind: ``"retry"`` (a retry is scheduled after ``delay``), ``"budget_exhausted"`` (the
            budget refused a retry) or ``"give_up"`` (the policy stops; ``reason`` says why).
            ``"success"`` (an attempt succeeded) goes only to hooks whose ``observes_attempts``
            attribute is ``True``, such as metrics adapters; their policies skip the fast path.
        policy: the policy's ``name`` (or ``None``).
        attempt: the number of the attempt that just failed, from 1.
        error: the exception of that attempt (``None`` for a retried bad result).
        delay: the wait before the next attempt (0 when giving up).
        elapsed: seconds since the call started, waits included. A policy without timeouts,
            result check or attempt-observing hooks makes its first attempt without reading the
            clock (that is its fast path): there, ``elapsed`` counts from the end of the first
            attempt. Hooks with ``observes_attempts = True`` get exact figures.
        reason: why the policy gave up (``give_up`` and ``budget_exhausted`` only).
        duration: seconds the attempt itself took (0 when a policy without attempt-observing
            hooks made its first attempt on the fast path).
        budget: the budget that refused the retry (``budget_exhausted`` only, else ``None``),
            so that a hook can say how much of it was left.
    """

    kind: Literal["retry", "budget_exhausted", "give_up", "success"]
    policy: str | None
    attempt: int
    error: BaseException | None
    delay: float
    elapsed: float
    reason: GiveUpReason | None = None
    duration: float = 0.0
    budget: Budget | None = None


Hook = Callable[[RetryEvent], None]

# What the budget warning suggests: budgets bound the load retries add to a sick dependency,
# and a newcomer's script against a flaky test server meets one first.
_BUDGET_REMEDY: Final = (
    "retries resume as calls succeed and the window moves on; the budget keeps retries from "
    "multiplying the load on a failing dependency. To allow more, give the policy a larger "
    "budget, e.g. budget=seawall.RetryBudget(min_per_second=5.0); an HTTP integration's "
    "per-host budget (for a policy without one) is its own argument: "
    "RetryTransport(policy, budget=...), or budget=None for none"
)


# Arguments an error's repr shows well; any other object is shown through the error's str.
_PLAIN_ARGS: Final = (str, bytes, int, float, BaseException, type(None))


def _error_text(error: BaseException | None) -> str:
    """The error as a log line shows it: its repr, or ``Type('str')`` when its arguments are
    objects whose reprs say little at great length (aiohttp's ``ClientConnectorError`` holds a
    ``ConnectionKey`` of eight fields; its str says ``Cannot connect to host h:port``)."""
    try:
        args = getattr(error, "args", ())
        if error is None or (
            isinstance(args, tuple) and all(isinstance(a, _PLAIN_ARGS) for a in args)
        ):
            return repr(error)
        return f"{type(error).__name__}({str(error)!r})"
    except Exception:  # a broken __repr__ or __str__ must not lose the log line
        return f"<{type(error).__name__}>"


@public("seawall")
def logging_hook(event: RetryEvent) -> None:
    """The default hook: log scheduled retries (INFO) and budget refusals (WARNING: once per
    budget every 10 s, with the count of refusals since) to "seawall"."""
    if event.kind == "give_up":
        return
    level = INFO if event.kind == "retry" else WARNING
    if not logger.isEnabledFor(level):
        return
    # The error's repr without secrets: HTTP libraries put the URL (query string and all) in
    # their messages; seawall logs it without query string and user info.
    error = redact_text(_error_text(event.error))
    # A name can be a URL (the HTTP integrations'), or come from a policy file: no secret,
    # and no control character that could forge a log line or drive a terminal.
    policy = escape_controls(redact_text(event.policy or ""))
    extra = {
        "seawall_policy": policy,
        "seawall_attempt": event.attempt,
        "seawall_delay": event.delay,
        "seawall_error": error,
        "seawall_elapsed": event.elapsed,
    }
    if event.kind == "retry":
        logger.log(
            level,
            "retry %s scheduled in %.3f s after attempt %d failed: %s"
            if policy
            else "retry%s scheduled in %.3f s after attempt %d failed: %s",
            policy,
            event.delay,
            event.attempt,
            error,
            extra=extra,
        )
    else:
        # Once per budget every runtime.BUDGET_WARNINGS.every seconds (10 s), with the count of
        # refusals since: a refusing budget refuses every call's retries until the window moves.
        skipped = runtime.BUDGET_WARNINGS.admit(
            (event.policy, id(event.budget) if event.budget is not None else None)
        )
        if skipped is None:
            return
        from seawall._strategies.budget import budget_state

        state = "" if event.budget is None else f" ({redact_text(budget_state(event.budget))})"
        since = f" (and {skipped} more refused since the last warning)" if skipped else ""
        logger.log(
            level,
            "retry budget exhausted for %s%s: attempt %d failed (%s) and is not retried%s; %s",
            policy or "an unnamed policy",
            state,
            event.attempt,
            error,
            since,
            _BUDGET_REMEDY,
            extra=extra,
        )


@public("seawall.lowlevel")
@dataclasses.dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt in an :class:`Outcome`'s history.

    Attributes:
        number: from 1.
        started: clock reading when the attempt started.
        duration: seconds the attempt took.
        error: its exception, or ``None`` if it returned.
        delay: the wait that followed it (``None`` if no retry followed).
    """

    number: int
    started: float
    duration: float
    error: BaseException | None
    delay: float | None


@public("seawall")
@dataclasses.dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """The result of :meth:`RetryPolicy.run`: what happened, without raising.

    Attributes:
        value: the function's return value (``None`` if it failed).
        error: the last exception if the call failed, else ``None``.
        attempts: how many attempts were made.
        total_delay: seconds spent waiting between attempts.
        history: one :class:`AttemptRecord` per attempt.
        reason: why the policy stopped retrying, if it gave up.
    """

    value: T | None
    error: BaseException | None
    attempts: int
    total_delay: float
    history: tuple[AttemptRecord, ...]
    reason: GiveUpReason | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> T:
        """The value, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]

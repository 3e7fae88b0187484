"""Exceptions and the marks that classify errors as never retried."""

from __future__ import annotations

import contextlib
import math
from typing import TypeVar

from seawall._core.public import public
from seawall._core.redact import redact_text

__all__ = [
    "DeadlineExceeded",
    "Overloaded",
    "Permanent",
    "RetryAfter",
    "is_permanent",
    "permanent",
    "error_summary",
    "retry_after_of",
]

E = TypeVar("E", bound=BaseException)

# Attribute names used to mark exception instances. Plain attributes keep the check to one lookup.
_PERMANENT_MARK = "__seawall_permanent__"
# Set on an error a policy gave up on after retrying it: enclosing policies pass it through, so
# only one layer retries (see docs/budgets.md, "Retry at one layer").
_EXHAUSTED_MARK = "__seawall_exhausted__"


@public("seawall")
class Permanent(Exception):
    """Base class for errors that no policy ever retries (bad input, auth, not found, ...)."""


@public("seawall")
class Overloaded(Exception):
    """ "Overloaded; don't retry": the callee shed this request.

    Never retried by any policy; it propagates up so that only the layer directly above the
    rejecting one decides what to do.

    Args:
        message: a description.
        retry_after: the callee's suggested wait in seconds, if it sent one (informational).
    """

    def __init__(self, message: str = "overloaded; don't retry", retry_after: float | None = None):
        super().__init__(message)
        #: The callee's suggested wait in seconds, or ``None`` (the one name seawall uses for
        #: a server's pushback, as on :class:`RetryAfter` and :class:`~seawall.CircuitOpen`).
        self.retry_after = retry_after

    @property
    def retry_after_hint(self) -> float | None:
        """The former name of :attr:`retry_after`."""
        return self.retry_after


@public("seawall")
class RetryAfter(Exception):
    """Ask the policy to wait *delay* seconds before the next attempt (server pushback).

    Retried whatever ``retry_on`` says (it is an explicit request to try again later), subject
    to ``max_attempts``, the deadline and ``max_retry_after``.

    Args:
        delay: seconds to wait; untrusted values (negative, NaN, huge) are clamped by the policy.
        message: a description.
    """

    def __init__(self, delay: float, message: str | None = None) -> None:
        super().__init__(message or f"retry after {delay!r} s")
        self.retry_after = delay


@public("seawall")
class DeadlineExceeded(TimeoutError):
    """The deadline passed, or too little time was left to start an attempt.

    A subclass of :class:`TimeoutError`. Never retried once the retrying call's own deadline has
    passed (it is gone for every layer); one from a tighter deadline below (an attempt's) is a
    slow attempt, retried like any timeout while the call's own deadline has room.
    """


@public("seawall")
def permanent(exc: E) -> E:
    """Mark an exception instance as never retried, and return it (``raise permanent(e)``)."""
    try:
        setattr(exc, _PERMANENT_MARK, True)
    except AttributeError as err:  # an exception class with __slots__ and no __dict__
        raise TypeError(f"cannot mark {type(exc).__name__} instances as permanent") from err
    return exc


_NEVER_RETRIED: tuple[type[BaseException], ...] = (Permanent, Overloaded, DeadlineExceeded)


@public("seawall")
def is_permanent(exc: BaseException) -> bool:
    """Whether *exc* is never retried, whatever a policy's ``retry_on`` says.

    ``Permanent``, ``permanent()``-marked errors, ``Overloaded``, ``DeadlineExceeded``, and
    anything that is not an ``Exception``: cancellation (``asyncio.CancelledError``, trio's
    ``Cancelled``), ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``. (A
    ``DeadlineExceeded`` from a deadline tighter than the retrying call's own is still retried
    as a slow attempt; see :func:`seawall.lowlevel.classify`.)
    """
    return (
        not isinstance(exc, Exception)
        or isinstance(exc, _NEVER_RETRIED)
        or getattr(exc, _PERMANENT_MARK, False) is True
    )


def mark_exhausted(exc: BaseException) -> None:
    with contextlib.suppress(AttributeError):
        setattr(exc, _EXHAUSTED_MARK, True)


def is_exhausted(exc: BaseException) -> bool:
    """Whether a policy below already retried *exc* and gave up (see :func:`answer_exhausted`)."""
    return getattr(exc, _EXHAUSTED_MARK, False) is True or answer_exhausted(exc)


def answer_exhausted(exc: BaseException) -> bool:
    """Whether *exc* carries an HTTP answer that a retrying transport already gave up on.

    ``raise_for_status()`` (httpx's ``HTTPStatusError``, requests' ``HTTPError``) makes a new
    exception around the response the transport returned; the transport marks that response,
    and ``exc.response`` carries the mark up, so a policy above retries neither the errors nor
    the statuses that a layer below has retried (retry at one layer).
    """
    try:
        response = getattr(exc, "response", None)
    except Exception:  # a property that raises: no answer to look at
        return False
    return response is not None and getattr(response, _EXHAUSTED_MARK, False) is True


def retry_after_of(exc: BaseException) -> float | None:
    """The wait an error asks for through a numeric ``retry_after`` attribute, if valid.

    The value is untrusted (it may come from a server): anything that is not a finite, non-negative
    number is ignored. Clamping to a maximum is the caller's job.
    """
    value = getattr(exc, "retry_after", None)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    if not math.isfinite(value) or value < 0:
        return None
    return value


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` on Python 3.11+, the same ``__notes__`` list on 3.10."""
    try:
        exc.add_note(note)  # type: ignore[attr-defined,unused-ignore]
    except AttributeError:  # Python 3.10, or an instance that refuses attributes
        try:
            notes = exc.__dict__.setdefault("__notes__", [])
            notes.append(note)
        except AttributeError:
            pass


#: The longest error summary kept (in logs of durable state, a saga's last_error).
SUMMARY_LIMIT = 500


def error_summary(exc: BaseException, limit: int = SUMMARY_LIMIT) -> str:
    """``"Type: message"`` for *exc* (``"Type"`` alone when the message is empty), at most
    *limit* characters, with URLs' query strings and user info removed: what a durable log
    keeps of an error. Never raises, whatever the exception's ``__str__`` does."""
    name = type(exc).__qualname__
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not lose the record
        message = "<unprintable>"
    text = f"{name}: {redact_text(message)}" if message else name
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text

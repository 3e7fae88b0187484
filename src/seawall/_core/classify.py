"""One classification of errors, used by every strategy: is this worth another attempt, and what
does a budget (or a breaker) learn from it?

Retry policies, hedges, breakers, the HTTP and gRPC rules and the simulator all ask
:func:`classify`; none has its own list of what is never retried.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Final, Literal, NamedTuple

from seawall._core.errors import (
    _EXHAUSTED_MARK,
    _PERMANENT_MARK,
    DeadlineExceeded,
    Overloaded,
    Permanent,
    RetryAfter,
)
from seawall._core.known_errors import NEVER_RETRIED_NAMES, TRANSIENT_CLASSES, TRANSIENT_ERRNOS
from seawall._core.public import public

__all__ = [
    "ErrorMatcher",
    "RetryOn",
    "Verdict",
    "classify",
    "compile_errors",
    "is_refused_stream",
    "is_transient",
    "remember_retried",
]

#: What ``retry_on`` (and a breaker's ``failure_on``) accepts: exception classes, or a
#: predicate ``(exc) -> bool``.
RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


@public("seawall.lowlevel")
class Verdict(enum.IntEnum):
    """What an attempt's error means: whether to retry, and what a budget hears.

    Budgets hear one of three outcomes: a *failure* (the dependency is sick or slow), an
    *answer* (it answered, but not with a success: a permanent error, a 4xx, a fatal gRPC
    status), or nothing (the error says nothing about the dependency). Successes are reported
    apart, by whoever saw the success.
    """

    #: Transient: worth another attempt (if attempts, deadline and budget allow). A failure.
    RETRY = 0
    #: Transient, but the caller must not send it again (a 503 to a POST without an
    #: idempotency key). A failure.
    FAILED = 1
    #: The dependency answered, not healthily: ``Permanent``, ``permanent()``-marked, or not
    #: matched by ``retry_on``. Never retried; an answer.
    ANSWERED = 2
    #: The callee shed the request (``Overloaded``): never retried, it propagates up. A failure.
    OVERLOADED = 3
    #: An inner policy already retried this error and gave up (retry at one layer). A failure.
    EXHAUSTED = 4
    #: Nobody's fault: the call's own deadline passed. Never retried; budgets hear nothing.
    NEUTRAL = 5

    @property
    def retry(self) -> bool:
        """Whether another attempt may be made."""
        return self is Verdict.RETRY

    @property
    def hears(self) -> Literal["failure", "answer"] | None:
        """What a budget is told: ``"failure"``, ``"answer"`` or ``None`` (nothing)."""
        return _HEARS[self]


_HEARS: dict[Verdict, Literal["failure", "answer"] | None] = {
    Verdict.RETRY: "failure",
    Verdict.FAILED: "failure",
    Verdict.ANSWERED: "answer",
    Verdict.OVERLOADED: "failure",
    Verdict.EXHAUSTED: "failure",
    Verdict.NEUTRAL: None,
}

_RETRY, _FAILED, _ANSWERED, _OVERLOADED, _EXHAUSTED, _NEUTRAL = Verdict


# -- the default retry_on: transient errors of the standard library and of the popular clients --

# The client libraries' transient errors and the connection-level errnos: the table of error
# knowledge by class name (known_errors), so that none of those libraries is imported.
# Certificate and protocol-misuse errors are not transient: a retry repeats them.
_TRANSIENT_ERRNOS: Final = TRANSIENT_ERRNOS
_TRANSIENT_CLASSES: Final = TRANSIENT_CLASSES
_NOT_TRANSIENT_NAMES: Final = NEVER_RETRIED_NAMES

_YES, _NO, _BY_ERRNO, _BY_GRPC_CODE = range(4)
_TRANSIENT_KINDS: dict[type, int] = {}


def _transient_kind(cls: type) -> int:
    names = [(c.__module__.partition(".")[0], c.__name__) for c in cls.__mro__]
    if any(bad in name for _, name in names for bad in _NOT_TRANSIENT_NAMES):
        kind = _NO
    elif issubclass(cls, (ConnectionError, TimeoutError)) or any(
        pair in _TRANSIENT_CLASSES for pair in names
    ):
        kind = _YES
    elif any(module == "grpc" and name == "RpcError" for module, name in names):
        kind = _BY_GRPC_CODE
    elif issubclass(cls, OSError):
        kind = _BY_ERRNO
    else:
        kind = _NO
    return _remember(_TRANSIENT_KINDS, cls, kind)


def is_transient(error: BaseException) -> bool:
    """The default ``retry_on``: errors that a later attempt may well not meet.

    ``ConnectionError`` and ``TimeoutError`` (and their subclasses); an ``OSError`` whose
    ``errno`` is a connection-level one (reset, refused, aborted, timed out, unreachable);
    httpx's timeouts, network and remote-protocol errors; requests' and urllib3's connection
    errors and timeouts; aiohttp's connection errors and timeouts; a gRPC error whose code is
    ``UNAVAILABLE``. TLS certificate errors and invalid URLs are not transient. None of those
    libraries is imported: classes are recognised by name.
    """
    cls = type(error)
    kind = _TRANSIENT_KINDS.get(cls)
    if kind is None:
        kind = _transient_kind(cls)
    if kind == _YES:
        return True
    if kind == _BY_ERRNO:
        return getattr(error, "errno", None) in _TRANSIENT_ERRNOS
    if kind == _BY_GRPC_CODE:
        code = getattr(error, "code", None)
        try:
            status = code() if callable(code) else None
        except Exception:
            return False
        return getattr(status, "name", None) == "UNAVAILABLE"
    return False


# HTTP/2 (RFC 9113 section 8.7): a stream the server resets with REFUSED_STREAM (0x7) was not
# processed at all, so the request may be sent again whatever its method. httpx (through httpcore
# and h2) raises RemoteProtocolError around h2's StreamReset event, whose text is
# "<StreamReset stream_id:1, error_code:7, remote_reset:True>" (older h2 writes the code's name).
_REFUSED_STREAM = 0x7
# (compiled on first use, by re's own cache: most programs never see a stream reset)
_REFUSED_STREAM_TEXT = (
    r"StreamReset stream_id:\d+, error_code:(?:7|ErrorCodes\.REFUSED_STREAM), remote_reset:True"
)


def is_refused_stream(error: BaseException) -> bool:
    """Whether *error* (or what it wraps) is the server's HTTP/2 REFUSED_STREAM reset: the
    request was not processed, so it is safe to send again, even a ``POST``. Recognised by the
    reset event's ``error_code`` or by its text, so that no HTTP/2 library is imported."""
    todo: list[BaseException] = [error]
    seen = 0
    while todo and seen < 6:
        e = todo.pop()
        seen += 1
        args = e.args if isinstance(e.args, tuple) else ()
        for arg in args[:1]:
            if isinstance(arg, str):
                if "StreamReset" in arg and re.search(_REFUSED_STREAM_TEXT, arg):
                    return True
            elif (
                type(arg).__name__ == "StreamReset"
                and getattr(arg, "remote_reset", False) is True
                and getattr(arg, "error_code", None) == _REFUSED_STREAM
            ):
                return True
        todo.extend(n for n in (e.__cause__, e.__context__) if n is not None)
    return False


@public("seawall.lowlevel")
class ErrorMatcher(NamedTuple):
    """``retry_on`` (or ``failure_on``) compiled: exception classes, or a predicate.

    Attributes:
        classes: the classes, when given as classes (one ``isinstance`` per error), else
            ``None``.
        predicate: ``(exc) -> bool``, for either form.
    """

    classes: tuple[type[BaseException], ...] | None
    predicate: Callable[[BaseException], bool]

    def __call__(self, error: BaseException) -> bool:
        classes = self.classes
        return isinstance(error, classes) if classes is not None else self.predicate(error)


def compile_errors(value: object, name: str, *, predicate: bool = True) -> ErrorMatcher:
    """An exception class, a tuple of them, or (when *predicate*) a callable, as a matcher.

    Raises:
        TypeError: anything else, naming the parameter *name*.
    """
    if isinstance(value, type):
        value = (value,)
    if isinstance(value, tuple):
        if all(isinstance(cls, type) and issubclass(cls, BaseException) for cls in value):
            return _class_matcher(value)
    elif predicate and callable(value):
        return ErrorMatcher(None, value)
    what = "exception classes or a predicate" if predicate else "exception classes"
    raise TypeError(f"{name} must be {what}, got {value!r}")


def _class_matcher(classes: tuple[type[BaseException], ...]) -> ErrorMatcher:
    return ErrorMatcher(classes, lambda exc: isinstance(exc, classes))


# What an exception's class alone says, computed once per class: classify() runs on every
# failed attempt (and in the simulator on every simulated one), and a dictionary lookup costs
# less than the chain of isinstance() checks it replaces. The marks that permanent() and the
# one-layer rule put on instances are read from the instance every time.
_PLAIN, _SHED, _FINAL, _NOT_EXCEPTION, _DEADLINE, _PUSHBACK = range(6)
_KINDS: dict[type, int] = {}
_KINDS_LIMIT = 4096  # classes made at runtime must not grow the cache without bound


def _remember(cache: dict[type, int], cls: type, kind: int) -> int:
    """Keep *kind* for *cls* in *cache* while it holds fewer than ``_KINDS_LIMIT`` classes."""
    if len(cache) < _KINDS_LIMIT:
        cache[cls] = kind
    return kind


def _kind(cls: type) -> int:
    if issubclass(cls, Overloaded):
        kind = _SHED
    elif issubclass(cls, Permanent) or getattr(cls, _PERMANENT_MARK, False) is True:
        kind = _FINAL
    elif not issubclass(cls, Exception):
        kind = _NOT_EXCEPTION
    elif issubclass(cls, DeadlineExceeded):
        kind = _DEADLINE
    elif issubclass(cls, RetryAfter):
        kind = _PUSHBACK
    else:
        kind = _PLAIN
    return _remember(_KINDS, cls, kind)


def classify(
    error: BaseException,
    matcher: ErrorMatcher | None = None,
    retry: bool | None = None,
    deadline_room: bool = True,
    retry_nested: bool = False,
) -> Verdict:
    """The verdict on one attempt's *error*.

    Args:
        error: what the attempt raised (or an exception standing for a failed response).
        matcher: the caller's ``retry_on``; ``None`` matches every ``Exception``.
        retry: a driver's own classification, replacing *matcher*: ``True`` retries the error
            (the never-retried rules still apply), ``False`` counts it as a failure without
            retrying it (:attr:`Verdict.FAILED`). ``None`` asks *matcher*.
        deadline_room: whether the caller's own deadline leaves room for another attempt. A
            ``DeadlineExceeded`` from a tighter deadline below (an attempt's) is one slow
            attempt, retried while there is room; past the caller's deadline it is
            :attr:`Verdict.NEUTRAL`: gone for every layer, and nobody's fault.
        retry_nested: retry errors that an inner policy already retried (off: one layer
            retries).

    Never retried, whatever *matcher* says: ``Permanent``, ``permanent()``-marked errors,
    ``Overloaded``, and anything that is not an ``Exception`` (cancellation,
    ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``).
    """
    # The order is the contract: overload, then permanence, then what is not an outcome of the
    # dependency, then the deadline, then pushback, then the one-layer rule, then the caller's
    # own rules.
    cls = type(error)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind(cls)
    if kind == _SHED:
        return _OVERLOADED
    if kind == _FINAL:
        return _ANSWERED
    marks = error.__dict__  # permanent() and the one-layer rule mark instances here
    if marks and marks.get(_PERMANENT_MARK) is True:
        return _ANSWERED
    if kind == _NOT_EXCEPTION:
        return _NEUTRAL  # cancellation and interpreter exits: not an outcome of the dependency
    if kind == _DEADLINE:
        if deadline_room and retry is not False and (matcher is None or matcher(error)):
            return _RETRY
        return _NEUTRAL
    if kind == _PUSHBACK and retry is not False:
        return _RETRY
    if marks and not retry_nested:
        if marks.get(_EXHAUSTED_MARK) is True:
            return _EXHAUSTED
        # raise_for_status() makes a new error around the response a retrying transport gave up
        # on; the transport marked that response (httpx's HTTPStatusError and requests'
        # HTTPError keep it in ``response``), so statuses retry at one layer too.
        answer = marks.get("response")
        if answer is not None and getattr(answer, _EXHAUSTED_MARK, False) is True:
            return _EXHAUSTED
    if retry is None:
        if matcher is None:
            return _RETRY
        classes = matcher.classes  # inlined ErrorMatcher.__call__
        matched = isinstance(error, classes) if classes is not None else matcher.predicate(error)
        return _RETRY if matched else _ANSWERED
    return _RETRY if retry else _FAILED


def remember_retried(
    retried: dict[type, bool], error: BaseException, matcher: ErrorMatcher | None
) -> None:
    """After :func:`classify` said :attr:`Verdict.RETRY` for *error* (with ``retry=None``),
    remember its class in *retried* if the class alone decided it.

    A driver that finds an error's class in *retried* and the error itself unmarked (an empty
    ``__dict__``) knows the verdict without asking again: a policy's failure path then costs
    one dictionary lookup instead of the chain above. Only what the class decides is kept: not
    a ``DeadlineExceeded`` (it depends on the deadline's room), not a class with a
    ``retry_after`` (the wait depends on the instance), not a predicate's answer (it may read
    the instance), save :func:`is_transient`'s for the classes it knows by name.
    """
    cls = type(error)
    if error.__dict__ or len(retried) >= _KINDS_LIMIT:
        return
    if _KINDS.get(cls) != _PLAIN or getattr(cls, "retry_after", None) is not None:
        return
    # A predicate may read the instance; is_transient reads only the class of these.
    predicate = None if matcher is None or matcher.classes is not None else matcher.predicate
    if predicate is not None and (
        predicate is not is_transient or _TRANSIENT_KINDS.get(cls) != _YES
    ):
        return
    retried[cls] = True

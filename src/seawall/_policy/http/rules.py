"""What the HTTP rules retry, and the records they keep: free of any HTTP library.

Which methods are idempotent and which statuses transient, ``Retry-After`` and the "overloaded"
headers, the ``Idempotency-Key``, :class:`HttpRules`, and the history of a request
(:class:`HttpAttempt`); what an attempt's timeouts may be (:func:`fits`, :func:`capped`).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import math
import re
import secrets
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Final, NamedTuple

from seawall._core import validate as _validate
from seawall._core.public import public

# RFC 9110 section 9.2.2: methods whose intended effect of several identical requests is the same
# as of one. POST and PATCH are not; they are retried only with an Idempotency-Key.
IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})

# Transient statuses: 408 Request Timeout, 429 Too Many Requests, 502/503/504 from gateways and
# overloaded servers (the same set as gRPC's UNAVAILABLE mapping and the AWS SDKs' retryable
# statuses). 500 and 501 are left out: they usually mean a bug, which a retry repeats.
DEFAULT_RETRY_STATUSES: Final = frozenset({408, 429, 502, 503, 504})

# "Overloaded; don't retry". Envoy sets x-envoy-overloaded when it sheds a request; seawall's own
# server middleware sets x-seawall-overloaded. Either one stops every retry above it.
OVERLOADED_HEADERS: Final = ("x-seawall-overloaded", "x-envoy-overloaded")

# IETF draft-ietf-httpapi-idempotency-key-header: the same key on every attempt of one request.
IDEMPOTENCY_KEY_HEADER: Final = "Idempotency-Key"

#: The least time an HTTP attempt may start with (seconds). With less left before the deadline,
#: the policy gives up before sending (``DeadlineExceeded``, or the last response), instead of
#: handing the HTTP library a timeout of zero, which urllib3 refuses (``ValueError``) and a
#: socket takes as "non-blocking" (``ConnectError: Operation now in progress``). It is also the
#: floor of every timeout given to the library.
MIN_ATTEMPT_TIME: Final = 1e-3

#: The total time of one logical request, attempts and waits included, when neither the policy
#: (``timeout``) nor the caller (:func:`seawall.deadline`) sets a deadline: without one, a server
#: that answers ``Retry-After`` or stalls each attempt just under the read timeout holds the
#: caller for as long as it likes. ``total_timeout=None`` on a transport turns it off. It is not
#: sent downstream: it is a limit of this client, not the caller's deadline.
DEFAULT_TOTAL_TIMEOUT: Final = 30.0

_ANSWERS: Final = frozenset(range(100, 400))
_DELTA_SECONDS = re.compile(r"[0-9]{1,32}(?:\.[0-9]{1,9})?")
_FALSE_VALUES = frozenset({"", "0", "false", "no", "off"})


def parse_retry_after(
    value: str | bytes | None, *, now: float | None = None, maximum: float = math.inf
) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or ``None`` if absent or invalid.

    Both forms of RFC 9110 section 10.2.3 are understood: delay-seconds (``"120"``; a decimal
    fraction is tolerated) and an HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``; a date in the
    past means 0). The value is untrusted: garbage, negative numbers, NaN and dates beyond the
    calendar are ignored, and the result is clamped to *maximum*. Never raises.

    Args:
        value: the header value.
        now: the wall-clock time (:func:`time.time`) that an HTTP-date is measured from.
        maximum: the longest wait to return.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str) or len(value) > 64:
        return None
    value = value.strip()
    if not value:
        return None
    if _DELTA_SECONDS.fullmatch(value):
        seconds = float(value)  # at most 32 digits: finite, no OverflowError
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
            if when.tzinfo is None:  # RFC 9110 dates are always GMT
                when = when.replace(tzinfo=datetime.timezone.utc)
            at = when.timestamp()
        except (TypeError, ValueError, IndexError, OverflowError, OSError):
            return None
        seconds = at - (time.time() if now is None else now)
        if not math.isfinite(seconds):
            return None
        seconds = max(0.0, seconds)
    return min(seconds, maximum)


def is_overloaded(headers: Mapping[str, str] | Callable[[str], str | None]) -> bool:
    """Whether a response carries the "overloaded; don't retry" signal (see OVERLOADED_HEADERS).

    Args:
        headers: a case-insensitive mapping, or a ``get(name) -> value`` function.
    """
    get = headers if callable(headers) else headers.get
    # Envoy's x-envoy-overloaded counts by its presence, whatever its value (as Envoy reads its
    # x-envoy-ratelimited); seawall's own header may say "false".
    if get("x-envoy-overloaded") is not None:
        return True
    value = get("x-seawall-overloaded")
    return value is not None and value.strip().lower() not in _FALSE_VALUES


def new_idempotency_key() -> str:
    """A fresh random key for the ``Idempotency-Key`` header (a UUID4 drawn from :mod:`secrets`)."""
    return str(uuid.UUID(bytes=secrets.token_bytes(16), version=4))


class RetryableResponse(Exception):
    """Stands for a response with a retryable status while the policy decides.

    Never raised to the caller: when the policy gives up, the caller gets the response itself.
    """

    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        # Read by the policy (retry_after_of): it waits the larger of this and its backoff.
        self.retry_after = retry_after


@public("seawall.http")
class HttpAttempt(NamedTuple):
    """One attempt of an HTTP request, in the history its response or error carries.

    ``response.extensions["seawall.history"]`` with httpx, ``response.seawall_history`` with
    requests and aiohttp, and ``error.seawall_history`` on the error a request raised: a tuple
    of these, the first attempt first (as urllib3's ``Retry.history``).

    Attributes:
        status: the response's status, or ``None`` when the attempt raised.
        error: the attempt's exception, or ``None`` when it was answered.
        wait: seconds waited after it (``None``: the call ended with it).
    """

    status: int | None
    error: BaseException | None
    wait: float | None


#: Where an httpx response carries its history (``response.extensions[HISTORY_KEY]``).
HISTORY_KEY: Final = "seawall.history"
#: The attribute of a requests or aiohttp response (and of an error) holding its history.
HISTORY_ATTRIBUTE: Final = "seawall_history"
#: The httpx request extension that overrides the policy for one request.
EXTENSION_KEY: Final = "seawall"

History = tuple[HttpAttempt, ...]
FIRST_TRY: dict[int, History] = {}  # the history of a response to a first attempt, by status


def first_try(status: int) -> History:
    """The history of a request answered *status* at the first attempt (shared, immutable)."""
    history = FIRST_TRY.get(status)
    if history is None:
        history = (HttpAttempt(status, None, None),)
        if len(FIRST_TRY) < 1024:  # statuses are untrusted numbers: keep the table bounded
            FIRST_TRY[status] = history
    return history


@public("seawall.http")
@dataclasses.dataclass(frozen=True, slots=True)
class HttpRules:
    """What the HTTP integrations treat as retryable, and how (validated, frozen).

    Args:
        retry_statuses: response statuses worth retrying.
        idempotent_methods: methods retried without an Idempotency-Key.
        idempotency_key: add an ``Idempotency-Key`` (the same on every attempt) to requests whose
            method is not idempotent, so that they can be retried.
        deadline_headers: send the time left downstream (``grpc-timeout``, ``x-request-deadline``).
        buffer_limit: read response bodies of up to this many bytes (by ``Content-Length``)
            within the attempt, so that a connection reset mid-body is retried; 0 turns it off.
        total_timeout: seconds for a whole request, attempts and waits included, when no
            deadline is set (:data:`DEFAULT_TOTAL_TIMEOUT`); ``None``: no limit.
    """

    retry_statuses: Collection[int] = DEFAULT_RETRY_STATUSES
    idempotent_methods: Collection[str] = IDEMPOTENT_METHODS
    idempotency_key: bool = False
    deadline_headers: bool = True
    buffer_limit: int = 1 << 20
    total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT
    #: The usual statuses of an answer returned as it is: 100-399, less *retry_statuses*. A
    #: response with one of them needs nothing read but its status (see
    #: :meth:`HttpCall.on_response`, whose first branch takes them and the rarer rest).
    answers: frozenset[int] = dataclasses.field(init=False, repr=False, compare=False)
    #: The history of a first attempt answered with each of *answers* (``first_try(status)``),
    #: by status: the first-attempt path (:mod:`~seawall._policy.http.first`) looks its answer
    #: up once.
    first_histories: Mapping[int, History] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if isinstance(self.retry_statuses, (str, bytes)) or not isinstance(
            self.retry_statuses, Collection
        ):
            raise TypeError(
                f"retry_statuses must be a collection of ints, got {self.retry_statuses!r}"
            )
        for s in self.retry_statuses:
            if isinstance(s, bool) or not isinstance(s, int) or not 100 <= s <= 599:
                raise ValueError(f"retry_statuses must hold HTTP statuses (100-599), got {s!r}")
        set_(self, "retry_statuses", frozenset(self.retry_statuses))
        set_(self, "answers", _ANSWERS.difference(self.retry_statuses))
        set_(self, "first_histories", {status: first_try(status) for status in self.answers})
        if isinstance(self.idempotent_methods, (str, bytes)) or not isinstance(
            self.idempotent_methods, Collection
        ):
            raise TypeError(
                f"idempotent_methods must be a collection of str, got {self.idempotent_methods!r}"
            )
        for m in self.idempotent_methods:
            if not isinstance(m, str) or not m:
                raise ValueError(f"idempotent_methods must hold method names, got {m!r}")
        set_(self, "idempotent_methods", frozenset(m.upper() for m in self.idempotent_methods))
        for name in ("idempotency_key", "deadline_headers"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        _validate.count("buffer_limit", self.buffer_limit)
        set_(self, "total_timeout", _validate.optional_seconds("total_timeout", self.total_timeout))


def exception_classes(retry_on: object) -> tuple[type[Exception], ...]:
    """*retry_on* (a class or a tuple of classes) as a tuple of exception classes."""
    if isinstance(retry_on, type):
        retry_on = (retry_on,)
    if not isinstance(retry_on, tuple) or not all(
        isinstance(c, type) and issubclass(c, Exception) for c in retry_on
    ):
        raise TypeError(f"retry_on must be exception classes, got {retry_on!r}")
    return retry_on


def read_within_attempt(content_length: str | None, limit: int) -> bool:
    """Whether to read a body within the attempt, so that a reset mid-body is retried.

    Only a body whose ``Content-Length`` declares at most *limit* bytes is (0 turns it off).
    """
    length = content_length
    # isascii(): str.isdigit() accepts digits such as "²" that int() refuses (untrusted header).
    # The length check first: int() refuses more than 4,300 digits (ValueError), and a value of
    # more than 19 digits is beyond any limit anyway.
    return (
        bool(limit)
        and length is not None
        and len(length) <= _MAX_LENGTH_DIGITS
        and length.isascii()
        and length.isdigit()
        and int(length) <= limit
    )


_MAX_LENGTH_DIGITS: Final = 19  # 2**63 - 1 has 19 digits


def fits(timeouts: Collection[float | None], left: float) -> bool:
    """Whether a request's *timeouts* (all of them set) fit the time *left* of its attempt
    (``inf``: no limit): it can then be sent with them, as the caller built it."""
    if left == math.inf:
        return True
    if not timeouts:
        return False
    # A loop: `None not in` and max() on a dict's values cost several times as much, and so
    # does all() over a generator.
    for value in timeouts:  # noqa: SIM110
        if value is None or not value <= left:
            return False
    return True


def capped(configured: float | None, left: float) -> float | None:
    """min(*configured*, *left*), the time left for the attempt; ``None`` for no limit (see
    :meth:`HttpCall.timeout`)."""
    if configured is None and left == math.inf:
        return None
    left = min(max(left, MIN_ATTEMPT_TIME), _validate.MAX_SECONDS)
    return left if configured is None else min(configured, left)

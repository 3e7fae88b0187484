"""One deadline for the whole call: an ambient, absolute deadline carried in a context variable."""

from __future__ import annotations

import contextvars
import dataclasses
import math
import sys
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Final, NamedTuple, Protocol

from seawall._core import runtime as _runtime
from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, TESTING, Clock
from seawall._core.errors import DeadlineExceeded
from seawall._core.public import public

__all__ = [
    "DEFAULT_TRANSIT_MARGIN",
    "GRPC_TIMEOUT_HEADER",
    "REQUEST_DEADLINE_HEADER",
    "Deadline",
    "DeadlineHeaderCounts",
    "attempt_deadline",
    "call_deadline",
    "current_deadline",
    "deadline",
    "deadline_from_headers",
    "deadline_header_counts",
    "deadline_headers",
    "decode_grpc_timeout",
    "decode_request_deadline",
    "encode_grpc_timeout",
    "encode_request_deadline",
    "install",
    "remaining",
    "timeout_from_headers",
]


def _relative(seconds: object) -> float:
    """A relative deadline in seconds: any number but NaN (negative: already passed; ``inf``:
    none), finite ones at most ``MAX_SECONDS`` (longer ones overflow the waits below)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, got {_validate.shown(seconds)}")
    if isinstance(seconds, float) and math.isnan(seconds):
        raise ValueError("seconds must not be NaN")
    return _validate.number("seconds", seconds, maximum=_validate.MAX_SECONDS)


@public("seawall.propagation")
class Deadline(NamedTuple):
    """An absolute point in time on a clock; ``at = math.inf`` means no deadline.

    Immutable, and cheap to create (a named tuple): retry loops make one per attempt.
    Relative timeouts are resolved once, on entry, into a ``Deadline``: every hop and every retry
    below then reads the *same* instant instead of starting its own timer.
    """

    at: float
    clock: Clock = SYSTEM_CLOCK

    @classmethod
    def after(cls, seconds: float, clock: Clock | None = None) -> Deadline:
        """The deadline *seconds* from now on *clock* (the system clock by default)."""
        s = _relative(seconds)
        if clock is None:
            clock = SYSTEM_CLOCK
        elif not callable(getattr(clock, "now", None)):  # cheaper than isinstance(, Clock)
            raise TypeError(f"clock must implement seawall.Clock, got {_validate.shown(clock)}")
        return cls(clock.now() + s, clock)

    def remaining(self) -> float:
        """Seconds left (negative once passed, ``inf`` for no deadline)."""
        return self.at - self.clock.now()

    @property
    def expired(self) -> bool:
        return self.clock.now() >= self.at


# The ambient deadline: process-wide state, kept in the runtime module.
_DEADLINE: contextvars.ContextVar[Deadline | None] = _runtime.DEADLINE
# Bound once: policies call this on every call to see whether an ambient deadline applies.
current_deadline = _DEADLINE.get


# Whether a deadline has ever been made ambient (install() sets it): a latch of the runtime.
SCOPES: Final = _runtime.SCOPES


@public("seawall")
def remaining() -> float:
    """Seconds left in the ambient deadline (``math.inf`` if none is set)."""
    d = _DEADLINE.get()
    return math.inf if d is None else d.at - d.clock.now()


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


# -- deadline composition: the one place where the ambient deadline, a call's timeout and an
# attempt's timeout meet. Every strategy and driver uses these three functions.

_new_deadline = tuple.__new__  # skips the named tuple's Python-level __new__: half the cost


def call_deadline(now: float, timeout: float | None) -> float:
    """A call's absolute deadline on the clock read as *now*: the earlier of the ambient
    deadline (converted to this clock through its time left) and ``now + timeout``."""
    ambient = _DEADLINE.get()
    at = math.inf if ambient is None else now + (ambient.at - ambient.clock.now())
    if timeout is not None and now + timeout < at:
        return now + timeout
    return at


def attempt_deadline(now: float, call_at: float, attempt_timeout: float | None) -> float:
    """An attempt's absolute deadline: the earlier of the call's and ``now + attempt_timeout``."""
    if attempt_timeout is not None and now + attempt_timeout < call_at:
        return now + attempt_timeout
    return call_at


def install(at: float, now: float, clock: Clock) -> contextvars.Token[Deadline | None] | None:
    """Make *at* (on *clock*, which reads *now*) the ambient deadline if it is earlier than the
    one in force: nested scopes keep the earlier deadline, and an inner one can only shorten
    the time left. Returns the token to reset, or ``None`` when nothing was installed."""
    if at == math.inf:
        return None
    outer = _DEADLINE.get()
    if outer is not None and outer.at - outer.clock.now() <= at - now:
        return None
    SCOPES.used = True
    return _DEADLINE.set(_new_deadline(Deadline, (at, clock)))


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


# -- propagation across hops: header codecs -----------------------------------------------------

#: gRPC's header for the time left: ``TimeoutValue TimeoutUnit``, e.g. ``100m`` or ``5S``.
GRPC_TIMEOUT_HEADER: Final = "grpc-timeout"
#: seawall's plain-HTTP header for the time left: a whole number of milliseconds, e.g. ``1500``.
REQUEST_DEADLINE_HEADER: Final = "x-request-deadline"
#: Subtracted from the time left before it goes on the wire: the request's transit to the next
#: hop and the response's way back both come out of the caller's budget.
# 5 ms covers a few round trips inside one data centre; callers across regions should raise it.
DEFAULT_TRANSIT_MARGIN: Final = 0.005

# gRPC over HTTP/2 spec: TimeoutValue is "a positive integer as ASCII string of at most 8 digits".
_GRPC_MAX_VALUE = 99_999_999
# Finest unit first: the encoder keeps the finest one whose value fits in 8 digits.
_GRPC_UNITS: tuple[tuple[str, int], ...] = (
    ("n", 1),
    ("u", 1_000),
    ("m", 1_000_000),
    ("S", 1_000_000_000),
    ("M", 60_000_000_000),
    ("H", 3_600_000_000_000),
)
_GRPC_UNIT_NS = dict(_GRPC_UNITS)
_GRPC_MAX_NS = _GRPC_MAX_VALUE * _GRPC_UNITS[-1][1]
# x-request-deadline uses the same 8-digit bound: 99,999,999 ms is about 27.8 hours, longer than
# any server should let a request run; a longer deadline is sent as that.
_REQUEST_DEADLINE_MAX_MS = 99_999_999
_DIGITS = frozenset("0123456789")
_OWS = " \t"  # optional whitespace around an HTTP field value (RFC 9110, section 5.5)


def encode_grpc_timeout(seconds: float) -> str:
    """Encode a time left as a ``grpc-timeout`` header value.

    The value is rounded *down* at the finest unit whose value fits in 8 digits (``"1500000u"``
    for 1.5 s, ``"250000S"`` for 250,000 s), so the callee never gets more time than the caller
    has. Zero or negative time left is sent as ``"0n"`` (the callee fails fast); values beyond
    the format's range are sent as its maximum, ``"99999999H"``.

    Args:
        seconds: the time left, a finite number.

    Raises:
        TypeError: *seconds* is not a number.
        ValueError: *seconds* is NaN or infinite (no deadline: send no header).
    """
    s = _validate.number("seconds", seconds, finite=True, what="a number of seconds")
    if s <= 0.0:
        return "0n"
    if s * 1e9 >= _GRPC_MAX_NS:
        return f"{_GRPC_MAX_VALUE}H"
    # Whole nanoseconds first (so 0.57 s is not 569999999.99 ns), then round *down* per unit.
    ns = round(s * 1e9)
    if ns - s * 1e9 > 1e-3:
        ns -= 1  # rounded up by more than float noise: the callee must not get more time
    for unit, size in _GRPC_UNITS:
        value = ns // size
        if value <= _GRPC_MAX_VALUE:
            return f"{value}{unit}"
    return f"{_GRPC_MAX_VALUE}H"  # pragma: no cover - excluded by the range check above


def _field_text(value: object) -> str | None:
    """A header value as ASCII text without surrounding whitespace, or None if it is not one."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            text = bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    elif isinstance(value, str):
        if not value.isascii():
            return None
        text = value
    else:
        return None
    return text.strip(_OWS)


def decode_grpc_timeout(value: str | bytes) -> float | None:
    """Decode a ``grpc-timeout`` header value into seconds; ``None`` if it is not a valid one.

    Accepts exactly what the gRPC spec allows: 1 to 8 ASCII digits and one unit letter among
    ``H M S m u n`` (surrounding spaces are ignored). Anything else (signs, decimals, longer
    values, other units, non-ASCII, non-text) yields ``None``; this function never raises.
    """
    text = _field_text(value)
    if text is None or not 2 <= len(text) <= 9:
        return None
    digits, unit = text[:-1], text[-1]
    size = _GRPC_UNIT_NS.get(unit)
    if size is None or not _DIGITS.issuperset(digits):
        return None
    return int(digits) * size / 1e9


def encode_request_deadline(seconds: float) -> str:
    """Encode a time left as an ``x-request-deadline`` header value.

    The format: the time left in whole milliseconds, as 1 to 8 ASCII digits, rounded down
    (``"1500"`` for 1.5 s). It is relative to when the request is sent, not a wall-clock time,
    because hosts' clocks disagree. Zero or negative time left is ``"0"``; more than 99,999,999
    ms (about 27.8 hours) is sent as that maximum.

    Raises:
        TypeError: *seconds* is not a number.
        ValueError: *seconds* is NaN or infinite (no deadline: send no header).
    """
    s = _validate.number("seconds", seconds, finite=True, what="a number of seconds")
    if s <= 0.0:
        return "0"
    if s * 1000.0 >= _REQUEST_DEADLINE_MAX_MS:
        return str(_REQUEST_DEADLINE_MAX_MS)
    # Whole nanoseconds first (so 0.3 s is not 299.99999999999994 ms), then round *down*.
    return str(round(s * 1e9) // 1_000_000)


def decode_request_deadline(value: str | bytes) -> float | None:
    """Decode an ``x-request-deadline`` header value into seconds; ``None`` if invalid.

    Accepts 1 to 8 ASCII digits (surrounding spaces are ignored); never raises.
    """
    text = _field_text(value)
    if text is None or not 1 <= len(text) <= 8 or not _DIGITS.issuperset(text):
        return None
    return int(text) / 1000.0


def deadline_headers(
    seconds: float | None = None,
    *,
    margin: float = DEFAULT_TRANSIT_MARGIN,
    grpc_timeout: bool = True,
    request_deadline: bool = True,
) -> dict[str, str]:
    """The headers that carry the time left to the next hop.

    Example:
        ``httpx.get(url, headers=seawall.propagation.deadline_headers())`` inside
        ``with seawall.deadline(2):``
        sends ``grpc-timeout: 1995000u`` and ``x-request-deadline: 1995`` (or a little less).

    Args:
        seconds: the time left to send; by default the ambient deadline's :func:`remaining`.
        margin: seconds subtracted for transit (the callee must answer before the caller stops
            listening). When the time left minus *margin* is not positive, the headers say zero
            and the callee fails fast.
        grpc_timeout: include the ``grpc-timeout`` header.
        request_deadline: include the ``x-request-deadline`` header.

    Returns:
        A new dict of lower-case header names to values; empty when there is no deadline.
    """
    m = _validate.seconds("margin", margin, finite=True)
    if seconds is None:
        left = remaining()
    else:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"seconds must be a number of seconds or None, got {seconds!r}")
        if isinstance(seconds, float) and math.isnan(seconds):
            raise ValueError("seconds must not be NaN")
        try:
            left = float(seconds)
        except OverflowError:  # an int beyond any float (10**400): as far off as infinity
            left = math.inf if seconds > 0 else 0.0
        if left == -math.inf:  # passed long ago: the callee is told zero, as for any past one
            left = 0.0
    if left == math.inf:
        return {}
    left -= m
    headers: dict[str, str] = {}
    if grpc_timeout:
        headers[GRPC_TIMEOUT_HEADER] = encode_grpc_timeout(left)
    if request_deadline:
        headers[REQUEST_DEADLINE_HEADER] = encode_request_deadline(left)
    return headers


# -- the server side: intake of untrusted headers -----------------------------------------------


@public("seawall.propagation")
@dataclasses.dataclass(frozen=True, slots=True)
class DeadlineHeaderCounts:
    """Process-wide counts of deadline headers read by :func:`timeout_from_headers`.

    Attributes:
        accepted: valid values used (a request carrying both headers counts twice).
        invalid: values ignored as malformed, negative, too long, non-ASCII or not text.
        clamped: requests whose deadline was cut to the server's ``max_seconds``.
    """

    accepted: int = 0
    invalid: int = 0
    clamped: int = 0


_COUNTERS: Final = _runtime.HEADER_COUNTS


def deadline_header_counts() -> DeadlineHeaderCounts:
    """A snapshot of how many deadline headers were accepted, ignored as invalid, or clamped.

    The counts only grow; export them as counters (differences between snapshots are rates).
    """
    c = _COUNTERS
    with c.lock:
        return DeadlineHeaderCounts(c.accepted, c.invalid, c.clamped)


@public("seawall.propagation")
class SupportsHeaderItems(Protocol):
    """Anything with ``items()`` giving ``(name, value)`` pairs: dicts and header containers."""

    def items(self) -> Iterable[tuple[Any, Any]]: ...


HeadersLike = SupportsHeaderItems | Iterable[tuple[str | bytes, str | bytes]]
_DECODERS = {
    GRPC_TIMEOUT_HEADER: decode_grpc_timeout,
    REQUEST_DEADLINE_HEADER: decode_request_deadline,
    GRPC_TIMEOUT_HEADER.encode(): decode_grpc_timeout,
    REQUEST_DEADLINE_HEADER.encode(): decode_request_deadline,
}


def _header_items(headers: object) -> Iterable[Any]:
    # Header containers repeat names their own way: httpx and Starlette offer multi_items(); the
    # standard library's http.server and email messages, aiohttp and Django offer items() (and
    # http.server's headers are not a Mapping at all). Plain pairs are ASGI's raw headers.
    for method in ("multi_items", "items"):
        items = getattr(headers, method, None)
        if callable(items):
            return list(items())
    if isinstance(headers, Iterable) and not isinstance(headers, (str, bytes, bytearray)):
        return headers
    raise TypeError(
        f"headers must be a mapping or an iterable of (name, value) pairs, got {headers!r}"
    )


def timeout_from_headers(
    headers: HeadersLike,
    *,
    max_seconds: float,
    margin: float = 0.0,
) -> float:
    """How long the server should allow a request, from its deadline headers.

    Reads ``grpc-timeout`` and ``x-request-deadline`` (either or both; names in any case; when
    several valid values arrive, the shortest wins). The result is clamped to *max_seconds*, so an
    untrusted client cannot make the server work longer than it allows. Malformed, negative, too
    long or non-ASCII values are ignored and counted (:func:`deadline_header_counts`); this never
    raises on header *content*.

    Args:
        headers: a mapping or anything with ``items()`` (``dict``, ``httpx.Headers``, Starlette
            ``Headers``, ``http.server``'s ``self.headers``), or ASGI-style ``(name, value)``
            pairs of ``bytes`` or ``str``.
        max_seconds: the server's own limit, used when no valid header arrived. Positive, finite.
        margin: seconds subtracted from the client's value (the server's time to send its answer).

    Returns:
        Seconds allowed: ``min(max_seconds, header - margin)``, or *max_seconds* without a valid
        header. Zero or less means the client's deadline is already gone: fail fast.

    Raises:
        TypeError, ValueError: *max_seconds* or *margin* is invalid, or *headers* is not a
            mapping or iterable of pairs.
    """
    cap = _validate.seconds("max_seconds", max_seconds, zero=False, finite=True)
    m = _validate.seconds("margin", margin, finite=True)
    best = math.inf
    accepted = invalid = 0
    for item in _header_items(headers):
        try:
            name, value = item
        except (TypeError, ValueError):
            continue  # not a pair: not a header at all
        if isinstance(name, str):
            name = name.lower()
        elif isinstance(name, (bytes, bytearray)):
            name = bytes(name).lower()
        else:
            continue
        decode = _DECODERS.get(name)
        if decode is None:
            continue
        seconds = decode(value)
        if seconds is None:
            invalid += 1
        else:
            accepted += 1
            best = min(best, seconds)
    # Clamp to the server's own limit, as Envoy's max_grpc_timeout (and grpc_timeout_header_offset
    # for the margin) do at a proxy: the client proposes, the server disposes.
    allowed = min(cap, best - m)
    clamped = best - m > cap and best != math.inf
    if accepted or invalid or clamped:
        c = _COUNTERS
        with c.lock:
            c.accepted += accepted
            c.invalid += invalid
            c.clamped += clamped
    return allowed


def deadline_from_headers(
    headers: HeadersLike,
    *,
    max_seconds: float,
    margin: float = 0.0,
    clock: Clock | None = None,
) -> deadline:
    """A :func:`deadline` scope for a server handling a request, from its deadline headers.

    ``with seawall.propagation.deadline_from_headers(request.headers, max_seconds=10):`` (or
    ``async with``,
    which cancels the handler at the deadline) installs the client's deadline, clamped to the
    server's *max_seconds*; see :func:`timeout_from_headers` for how headers are read. Every
    policy and every :func:`deadline_headers` call inside then sees the time left.

    Args:
        headers: the request's headers (see :func:`timeout_from_headers`).
        max_seconds: the server's own limit for one request.
        margin: seconds kept back for sending the response.
        clock: the clock the deadline is measured on (the system clock by default).
    """
    return deadline(
        max(0.0, timeout_from_headers(headers, max_seconds=max_seconds, margin=margin)),
        clock=clock,
    )

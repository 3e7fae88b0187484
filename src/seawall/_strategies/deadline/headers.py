"""Deadline propagation across hops: the ``grpc-timeout`` and ``x-request-deadline`` header
codecs, and the headers that carry the time left to the next hop."""

from __future__ import annotations

import math
from typing import Final

from seawall._core import validate as _validate
from seawall._strategies.deadline.ambient import remaining

__all__ = [
    "DEFAULT_TRANSIT_MARGIN",
    "GRPC_TIMEOUT_HEADER",
    "REQUEST_DEADLINE_HEADER",
    "deadline_headers",
    "decode_grpc_timeout",
    "decode_request_deadline",
    "encode_grpc_timeout",
    "encode_request_deadline",
]


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

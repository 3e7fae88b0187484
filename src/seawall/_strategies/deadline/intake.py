"""The server side: a request's untrusted deadline headers read into a time allowed, clamped to
the server's own limit and counted, and into a ``deadline()`` scope."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, Final, Protocol

from seawall._core import runtime as _runtime
from seawall._core import validate as _validate
from seawall._core.clock import Clock
from seawall._core.public import public
from seawall._strategies.deadline.headers import (
    GRPC_TIMEOUT_HEADER,
    REQUEST_DEADLINE_HEADER,
    decode_grpc_timeout,
    decode_request_deadline,
)
from seawall._strategies.deadline.scope import deadline

__all__ = [
    "DeadlineHeaderCounts",
    "HeadersLike",
    "SupportsHeaderItems",
    "deadline_from_headers",
    "deadline_header_counts",
    "timeout_from_headers",
]


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

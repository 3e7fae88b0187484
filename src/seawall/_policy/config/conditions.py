"""Envoy's ``retry_on`` conditions, as predicates on Python's errors and sets of statuses."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from seawall._core.classify import is_refused_stream, is_transient
from seawall._core.known_errors import (
    CONNECT_CLASSES,
    CONNECT_ERRNOS,
    NEVER_RETRIED_NAMES,
    TIMEOUT_CLASSES,
    class_names,
)

__all__ = [
    "ERROR_CONDITIONS",
    "STATUS_CONDITIONS",
    "is_connect_failure",
    "is_no_response",
    "is_refused",
    "is_timeout",
]


# -- retry_on conditions ------------------------------------------------------------------------
#
# Envoy's router docs (x-envoy-retry-on): "5xx" retries any 5xx response *or no response at all*
# (disconnect, reset, read timeout), connect failures and refused streams included;
# "gateway-error" is the same for 502/503/504 (Envoy counts a reset as the 503 it answers);
# "reset" retries no response at all; "connect-failure" a connection that could not be made
# (refused, connect timeout). Python's clients raise their own classes for these: they are
# recognised by name, as the default retry_on does, so none is imported.

# The classes and errnos of each condition: the table of error knowledge by class name.
_CONNECT_ERRNOS: Final = CONNECT_ERRNOS
_CONNECT_CLASSES: Final = CONNECT_CLASSES
_TIMEOUT_CLASSES: Final = TIMEOUT_CLASSES
# A retry repeats these, whatever their base classes say.
_NEVER: Final = NEVER_RETRIED_NAMES
_names = class_names


def _excluded(names: frozenset[tuple[str, str]]) -> bool:
    """Errors no condition retries: those a retry repeats, and gRPC's (its statuses are not
    HTTP conditions)."""
    if any(module == "grpc" for module, _ in names):
        return True
    return any(bad in name for _, name in names for bad in _NEVER)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """*error*, then what it wraps, a few levels deep: requests raises ``ConnectionError``
    around urllib3's ``MaxRetryError`` around the ``NewConnectionError`` that says what
    happened."""
    seen: list[BaseException] = []
    todo = [error]
    while todo and len(seen) < 8:
        e = todo.pop(0)
        if any(e is s for s in seen):
            continue
        seen.append(e)
        yield e
        nested = [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args[:2]]
        todo.extend(n for n in nested if isinstance(n, BaseException))


def is_connect_failure(error: BaseException) -> bool:
    """``connect-failure``: the connection could not be made (refused, unreachable, connect
    timeout); the request never reached the server."""
    for e in _causes(error):
        names = _names(type(e))
        if _excluded(names):
            return False
        if isinstance(e, ConnectionRefusedError) or names & _CONNECT_CLASSES:
            return True
        if isinstance(e, OSError) and getattr(e, "errno", None) in _CONNECT_ERRNOS:
            return True
    return False


def is_refused(error: BaseException) -> bool:
    """``refused-stream``: the server refused the request before processing it: an HTTP/2
    stream reset with REFUSED_STREAM (httpx with ``http2=True``), or a refused connection."""
    return is_refused_stream(error) or any(
        isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED
        for e in _causes(error)
    )


def is_timeout(error: BaseException) -> bool:
    """``timeout``: an attempt timed out (connect, read, write or pool timeout)."""
    names = _names(type(error))
    if _excluded(names):
        return False
    return (
        isinstance(error, (TimeoutError, asyncio.TimeoutError))
        or bool(names & _TIMEOUT_CLASSES)
        or (isinstance(error, OSError) and getattr(error, "errno", None) == errno.ETIMEDOUT)
    )


def is_no_response(error: BaseException) -> bool:
    """``reset``: no response at all: a connect failure, a reset or closed connection, a read
    timeout (and the clients' forms of these: httpx, requests/urllib3, aiohttp)."""
    if _excluded(_names(type(error))):
        return False
    return is_transient(error) or is_timeout(error) or is_connect_failure(error)


#: Conditions that name failures without a response, and how each is recognised.
ERROR_CONDITIONS: Final[Mapping[str, Callable[[BaseException], bool]]] = {
    "connect-failure": is_connect_failure,
    "reset": is_no_response,
    "refused-stream": is_refused,
    "timeout": is_timeout,
}
#: Conditions that name HTTP statuses (Envoy's x-envoy-retry-on values), for HTTP integrations.
STATUS_CONDITIONS: Final[Mapping[str, frozenset[int]]] = {
    "5xx": frozenset(range(500, 600)),
    "gateway-error": frozenset({502, 503, 504}),
    "retriable-4xx": frozenset({409}),
    "retriable-status-codes": frozenset(),  # the codes come from retriable_status_codes
}
# Status conditions that also retry a request that got no response at all (Envoy: "5xx ...
# or does not respond at all (disconnect/reset/read timeout)").
_NO_RESPONSE_TOO: Final = frozenset({"5xx", "gateway-error"})
# Envoy conditions seawall does not offer, and why (a clear error beats a silent no-op).
_UNSUPPORTED: Final[Mapping[str, str]] = {
    "retriable-headers": "retrying on response headers is not supported; name the statuses "
    "(retriable-status-codes) instead",
    "envoy-ratelimited": "x-envoy-ratelimited responses are not retried by seawall",
    "http3-post-connect-failure": "HTTP/3 is not supported",
}


@dataclasses.dataclass(frozen=True, slots=True)
class _RetryOn:
    """A route's ``retry_on``: the named failure conditions, then the application's classes."""

    conditions: tuple[str, ...]
    classes: tuple[type[BaseException], ...]

    def __call__(self, error: BaseException) -> bool:
        if self.classes and isinstance(error, self.classes):
            return True
        return any(ERROR_CONDITIONS[c](error) for c in self.conditions)

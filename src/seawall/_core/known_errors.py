"""What seawall knows of other libraries' errors, by class name: one table.

The client libraries' errors are recognised by ``(top-level package, class name)`` anywhere in
an error's class hierarchy, so that none of those libraries is imported. Each entry says what
the class means to seawall:

- ``transient``: a later attempt may well not meet it (the default ``retry_on``,
  :func:`seawall.lowlevel.is_transient`);
- ``connect``: the connection could not be made, the request never left (Envoy's
  ``connect-failure`` condition, in policy files);
- ``timeout``: an attempt timed out (Envoy's ``timeout`` condition).

A subclass inherits what its bases mean (httpx's ``ConnectTimeout`` is a ``TimeoutException``).
Besides the table: class-name fragments that mark errors a retry repeats (certificates, invalid
URLs), timeouts of any library (a retry quota charges them more), and throttling; and the
connection-level errnos.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Final, Literal

__all__ = [
    "CONNECT_CLASSES",
    "CONNECT_ERRNOS",
    "KNOWN_ERRORS",
    "NEVER_RETRIED_NAMES",
    "TIMEOUT_CLASSES",
    "TRANSIENT_CLASSES",
    "TRANSIENT_ERRNOS",
    "class_names",
    "named_like_throttling",
    "named_like_timeout",
]

Meaning = Literal["transient", "connect", "timeout"]

KNOWN_ERRORS: Final[Mapping[tuple[str, str], frozenset[Meaning]]] = {
    # httpx
    ("httpx", "TimeoutException"): frozenset({"transient", "timeout"}),
    ("httpx", "NetworkError"): frozenset({"transient"}),
    ("httpx", "RemoteProtocolError"): frozenset({"transient"}),
    ("httpx", "ConnectError"): frozenset({"connect"}),
    ("httpx", "ConnectTimeout"): frozenset({"connect"}),
    # requests and urllib3
    ("requests", "ConnectionError"): frozenset({"transient"}),
    ("requests", "Timeout"): frozenset({"transient", "timeout"}),
    ("requests", "ChunkedEncodingError"): frozenset({"transient"}),
    ("requests", "ConnectTimeout"): frozenset({"connect"}),
    ("urllib3", "TimeoutError"): frozenset({"transient", "timeout"}),
    ("urllib3", "ProtocolError"): frozenset({"transient"}),
    ("urllib3", "NewConnectionError"): frozenset({"transient", "connect"}),
    ("urllib3", "ConnectTimeoutError"): frozenset({"connect"}),
    # aiohttp
    ("aiohttp", "ClientConnectionError"): frozenset({"transient"}),
    ("aiohttp", "ServerTimeoutError"): frozenset({"transient", "timeout"}),
    ("aiohttp", "ClientPayloadError"): frozenset({"transient"}),
    ("aiohttp", "ClientConnectorError"): frozenset({"connect"}),
    ("aiohttp", "ConnectionTimeoutError"): frozenset({"connect"}),
}


def _meaning(meaning: Meaning) -> frozenset[tuple[str, str]]:
    return frozenset(key for key, meanings in KNOWN_ERRORS.items() if meaning in meanings)


TRANSIENT_CLASSES: Final = _meaning("transient")
CONNECT_CLASSES: Final = _meaning("connect")
TIMEOUT_CLASSES: Final = _meaning("timeout")

#: Fragments of class names a retry repeats, whatever their base classes say: TLS certificate
#: errors, invalid URLs, unsupported protocols.
NEVER_RETRIED_NAMES: Final = ("SSLError", "Certificate", "InvalidURL", "UnsupportedProtocol")
_TIMEOUT_NAME: Final = "Timeout"
_THROTTLING_NAMES: Final = ("Throttl", "TooManyRequests")


def _errnos(*names: str) -> frozenset[int]:
    return frozenset(getattr(errno, name) for name in names if hasattr(errno, name))


#: Connection-level errnos that a later attempt may not meet (a reset, a refusal while a server
#: restarts, an unreachable network during a failover). Not EACCES, ENOENT, EINVAL and the like.
TRANSIENT_ERRNOS: Final = _errnos(
    "ECONNRESET",
    "ECONNREFUSED",
    "ECONNABORTED",
    "ETIMEDOUT",
    "EPIPE",
    "ENETUNREACH",
    "ENETDOWN",
    "ENETRESET",
    "EHOSTUNREACH",
    "EHOSTDOWN",
    "EAGAIN",
)
#: Connection-level errnos of a connection that was never made.
CONNECT_ERRNOS: Final = _errnos(
    "ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH", "ENETDOWN", "EHOSTDOWN"
)

_NAMES: dict[type, frozenset[tuple[str, str]]] = {}
_NAMES_LIMIT: Final = 4096  # classes made at runtime must not grow the cache without bound


def class_names(cls: type) -> frozenset[tuple[str, str]]:
    """``(top-level package, class name)`` of every class in *cls*'s hierarchy."""
    names = _NAMES.get(cls)
    if names is None:
        names = frozenset((c.__module__.partition(".")[0], c.__name__) for c in cls.__mro__)
        if len(_NAMES) < _NAMES_LIMIT:
            _NAMES[cls] = names
    return names


def named_like_timeout(cls: type) -> bool:
    """Whether a class in *cls*'s hierarchy is named like a timeout, of any library
    (``httpx.ReadTimeout``, ``requests.Timeout``, botocore's ``ReadTimeoutError``)."""
    return any(_TIMEOUT_NAME in c.__name__ for c in cls.__mro__)


def named_like_throttling(cls: type) -> bool:
    """Whether a class in *cls*'s hierarchy is named like throttling (``ThrottlingException``,
    ``TooManyRequestsException``, ...)."""
    return any(word in c.__name__ for c in cls.__mro__ for word in _THROTTLING_NAMES)

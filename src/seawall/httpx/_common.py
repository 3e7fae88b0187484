"""What the sync and async transports share: the transport errors they retry, how httpx's
responses are read, and the request each attempt sends (its timeouts and deadline headers)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection
from typing import Final

import httpx

from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    HISTORY_KEY,
    HostKey,
    HttpCall,
    HttpOptions,
    Policies,
    Wire,
    fits,
)
from seawall._strategies.retry import RetryPolicy

#: Transport errors worth retrying: timeouts, network errors (refused, reset, DNS) and a server
#: that closed the connection mid-message. Not retried: local protocol errors, unsupported
#: protocols, proxy errors (configuration, not transient states).
DEFAULT_RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)
# The request never left this process: retrying cannot duplicate it, whatever the method.
_NEVER_SENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
_TIMEOUT_KEYS = ("connect", "read", "write", "pool")
#: A request's host, as the per-host budgets key it: ``(scheme, host, port)``, ``host`` in lower
#: case and IDNA-encoded (bytes), ``port`` ``None`` for the scheme's default (see ``origin()``).
_host: Callable[[httpx.Request], HostKey] = operator.attrgetter(
    "url.scheme", "url.raw_host", "url.port"
)
_N_TIMEOUTS = len(_TIMEOUT_KEYS)
_FIT_ROOM = 0.001  # seconds: timeouts this far within the total time are remembered as fitting
_UNFIT: Final = object()  # no timeouts remembered for a total time (unequal to any request's)


class _Wire(Wire[httpx.Response]):
    """httpx's responses carry their history in ``extensions``."""

    __slots__ = ()

    def view(self, response: httpx.Response) -> httpx.Response:
        """A copy whose body is read when it is in memory (``.text``, ``.json()`` work), so that
        the predicate does not consume the stream the caller reads."""
        stream = response.stream
        if not isinstance(stream, httpx.ByteStream):
            return response  # streamed: status and headers only
        view = httpx.Response(
            response.status_code,
            headers=response.headers,
            content=b"".join(stream),
            extensions=response.extensions,
        )
        view.read()
        return view


_WIRE = _Wire(never_sent=_NEVER_SENT, history_in="extensions", history_key=HISTORY_KEY)


class _Base:
    """What the sync and async transports share: configuration and per-attempt requests."""

    def __init__(self, policy: RetryPolicy | PolicyHandle | None, options: HttpOptions) -> None:
        self._policies = Policies(policy, options, _WIRE, DEFAULT_RETRY_EXCEPTIONS)
        # The last httpx timeouts found within a total time with room to spare, by that total:
        # a request with the same four timeouts (httpx builds them anew for each request, from
        # the client's Timeout) needs no check. One entry; replaced whole, never mutated.
        self._fit: dict[float, dict[str, float | None]] = {}

    def _as_built(self, request: httpx.Request, total: float, started: float) -> bool:
        """Whether a first attempt can go as the caller built it, within the total time
        *total* (its time left, as HttpCall gives it): its httpx timeouts are all set and within
        that time. Those that fit *total* by a millisecond or more are remembered (see
        ``_fit``, which the caller looks up first), since the time left of another first
        attempt differs from *total* by a rounding error at most."""
        configured = request.extensions.get("timeout")
        if configured is None or len(configured) != _N_TIMEOUTS:
            return False
        values = configured.values()
        if not fits(values, (started + total) - started):
            return False
        if fits(values, total - _FIT_ROOM):
            self._fit = {total: dict(configured)}
        return True

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now (with a :class:`~seawall.config.PolicyHandle`: its current one)."""
        return self._policies.policy

    @staticmethod
    def _replayable(request: httpx.Request) -> bool:
        # ByteStream holds bytes (content=, data=, json=, or a body already read): it can be
        # sent again. Generators and other streams are consumed by the first attempt.
        return isinstance(request.stream, httpx.ByteStream)

    @staticmethod
    def _prepare(
        request: httpx.Request, call: HttpCall[httpx.Response], left: float
    ) -> httpx.Request:
        """The request to send now: timeouts capped by the attempt's time left, deadline headers.

        Built when it is sent, so that a hedged copy started later tells the next hop the time
        actually left. The caller's request itself when nothing changes (the common case: no
        deadline of the caller's, and httpx's timeouts within the transport's total time).
        """
        extensions = request.extensions
        configured = extensions.get("timeout") or {}
        complete = len(configured) == len(_TIMEOUT_KEYS)
        if call.sends_as_is(configured.values() if complete else (), left):
            return request
        extra = call.deadline_headers()
        # A shallow copy of the caller's request (its URL, stream and read body are shared, as
        # httpx's own redirects share them) with its own headers and extensions: building a
        # new httpx.Request would parse the URL and normalise every header again.
        prepared = _new_request(httpx.Request)
        prepared.__dict__.update(request.__dict__)
        extensions = prepared.extensions = dict(extensions)
        extensions["timeout"] = call.timeouts(configured, _TIMEOUT_KEYS)
        if extra:
            headers = prepared.headers = request.headers.copy()
            for name, value in extra.items():
                headers[name] = value
        return prepared


_new_request = object.__new__


def _timeouts(request: httpx.Request) -> Collection[float | None] | None:
    """The request's httpx timeouts when all four are set (else ``None``: see _prepare)."""
    configured = request.extensions.get("timeout")
    if configured is None or len(configured) != _N_TIMEOUTS:
        return None
    values: Collection[float | None] = configured.values()
    return values


def _handle(registry: PolicyRegistry, name: str) -> PolicyHandle:
    if not isinstance(registry, PolicyRegistry):
        raise TypeError(f"registry must be a seawall.config.PolicyRegistry, got {registry!r}")
    return registry.policy(name)

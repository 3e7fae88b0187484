"""requests integration: a transport adapter that retries per a :class:`~seawall.RetryPolicy`.

Example:
    ``session.mount("https://", seawall.requests.RetryAdapter(policy=seawall.RetryPolicy()))``

Install the ``requests`` extra (``pip install -e '.[requests]'`` in a checkout). See
``docs/http.md`` for what is retried and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any, Final, NamedTuple

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError, NewConnectionError

from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    OPTION_NAMES,
    PER_HOST,
    FirstAttemptPath,
    HttpCall,
    Policies,
    RetryOnErrors,
    Wire,
    capped,
    drive,
    first_attempt,
    read_within_attempt,
    retryable_error,
)
from seawall._strategies.retry import RetryPolicy

__all__ = ["DEFAULT_RETRY_EXCEPTIONS", "PER_HOST", "RetryAdapter"]

#: Exceptions worth retrying: connection failures (refused, reset, DNS), timeouts, and a body cut
#: short. TLS errors are never retried (a bad certificate stays bad), although requests makes
#: ``SSLError`` a ``ConnectionError``.
DEFAULT_RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
)
_NEVER_RETRIED: tuple[type[Exception], ...] = (
    requests.exceptions.SSLError,
    requests.exceptions.ProxyError,
    requests.exceptions.InvalidURL,
)


def _never_sent(exc: Exception) -> bool:
    """The request never left: the connection could not be made (refused, DNS, connect timeout)."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError) and not isinstance(exc, _NEVER_RETRIED):
        cause = exc.args[0] if exc.args else None
        if isinstance(cause, MaxRetryError):
            cause = cause.reason
        return isinstance(cause, NewConnectionError)
    return False


class _Wire(Wire[requests.Response]):
    """requests says that a request never left only in the cause of its error."""

    __slots__ = ()

    def classify(self, error: Exception, retry_on: RetryOnErrors) -> tuple[bool, bool]:
        if isinstance(error, _NEVER_RETRIED):
            return False, False
        never_sent = _never_sent(error)
        return retryable_error(error, retry_on, never_sent), never_sent


_WIRE = _Wire()


class _Sending(NamedTuple):
    """A request and the arguments ``HTTPAdapter.send`` takes with it, and its method and
    headers, which the first-attempt path reads. Built with ``_make``: a tuple's constructor,
    in C."""

    request: requests.PreparedRequest
    stream: bool
    timeout: Any
    verify: bool | str
    cert: Any
    proxies: Mapping[str, str] | None
    method: str
    headers: MutableMapping[str, str]


class RetryAdapter(HTTPAdapter):
    """A ``requests`` transport adapter that retries per a :class:`~seawall.RetryPolicy`.

    Mount it on a session: ``session.mount("https://", RetryAdapter(policy))``. It is an
    ``HTTPAdapter`` (connection pools, TLS and proxies as usual) whose urllib3 retries are off:
    the policy decides every retry, waits on its clock, and the classification is the same as
    :class:`seawall.httpx.RetryTransport`'s (see ``docs/http.md``).

    Args:
        policy: the retry policy (``RetryPolicy()`` by default), or a
            :class:`~seawall.config.PolicyHandle`: each request then uses its current policy, so a
            registry reload changes the live adapter (see :meth:`from_route`).
        **kwargs: the :class:`seawall.http.HttpOptions` every HTTP integration takes
            (``budget``, ``retry_statuses``, ``retry_on``, ``idempotent_methods``,
            ``idempotency_key``, ``deadline_headers``, ``buffer_limit``, ``total_timeout``);
            the others go to ``HTTPAdapter`` (``pool_connections``, ``pool_maxsize``,
            ``pool_block``) or the next class of a combined adapter.
            When the caller does not stream, bodies declared up to ``buffer_limit`` bytes are
            read within the attempt, so that a connection reset mid-body is retried.

    Inside a :func:`seawall.http.override` block, requests use the policy it gives
    (``with seawall.http.override(retries=0): session.get(url)``). Each response carries its
    attempts in ``response.seawall_history`` (:class:`seawall.http.HttpAttempt`).
    """

    def __init__(self, policy: RetryPolicy | PolicyHandle | None = None, **kwargs: Any) -> None:
        if "max_retries" in kwargs:
            raise TypeError("max_retries is not accepted: the policy decides retries")
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES}
        self._policies = Policies(policy, options, _WIRE, DEFAULT_RETRY_EXCEPTIONS)
        # The caller's timeout and the total time last seen by the first-attempt path, and the
        # urllib3 Timeout it sent for them (see _first_timeouts). Replaced whole.
        # (requests' annotations do not name a urllib3 Timeout, which it accepts: Any.)
        self._sent: tuple[tuple[Any, float | None], Any] = ((_UNSEEN, None), None)
        super().__init__(max_retries=0, **kwargs)

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now (with a :class:`~seawall.config.PolicyHandle`: its current one)."""
        return self._policies.policy

    @classmethod
    def from_route(cls, registry: PolicyRegistry, name: str, **kwargs: Any) -> RetryAdapter:
        """An adapter that follows the route *name* of *registry*, reloads included.

        Each request uses the route's current policy and, unless ``retry_statuses`` is given,
        the statuses its ``retry_on`` names. Unless ``retry_on`` is
        given, the error conditions it names (``connect-failure``, ``reset``, ``timeout``, ...)
        alone decide which transport errors are retried (a route naming none retries none).
        Other keyword arguments are the constructor's.

        Raises:
            KeyError: the registry has no policy named *name*.
        """
        if not isinstance(registry, PolicyRegistry):
            raise TypeError(f"registry must be a seawall.config.PolicyRegistry, got {registry!r}")
        return cls(registry.policy(name), **kwargs)

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Send *request*, retrying per the policy; the final response or the last error."""
        scheme, _, rest = (request.url or "").partition("://")
        host = f"{scheme}://{rest.split('/', 1)[0].rsplit('@', 1)[-1]}"
        sending = _Sending._make(
            (
                request,
                stream,
                timeout,
                verify,
                cert,
                proxies,
                request.method or "GET",
                request.headers,
            )
        )
        return first_attempt(self, sending, host)

    def _send_first(
        self, sending: _Sending, path: FirstAttemptPath, started: float
    ) -> requests.Response:
        """The first attempt (see first_attempt): the caller's timeouts capped by the total
        time, which is the time left as the attempt starts."""
        timeout = sending.timeout
        seen, timeouts = self._sent
        if seen != (timeout, path.total):
            timeouts = self._first_timeouts(timeout, path.total)
        return self._send_one(sending, sending.request, timeouts, path.limit)

    def _send_one(
        self, sending: _Sending, request: requests.PreparedRequest, timeouts: Any, limit: int
    ) -> requests.Response:
        """Send *request* once, as *sending* says, with *timeouts*; a body declared up to
        *limit* bytes is read now, unless the caller streams, so that a reset mid-body is
        retried."""
        stream = sending.stream
        response: requests.Response = super().send(
            request,
            stream=stream,
            timeout=timeouts,
            verify=sending.verify,
            cert=sending.cert,
            proxies=sending.proxies,
        )
        if limit and not stream and _small(response, limit):
            _ = response.content
        return response

    @staticmethod
    def _replayable(sending: _Sending) -> bool:
        request = sending.request
        body = request.body
        return (
            body is None
            or isinstance(body, (bytes, str))
            or (hasattr(body, "read") and isinstance(getattr(request, "_body_position", None), int))
        )

    @staticmethod
    def _close(response: requests.Response) -> None:
        response.close()

    def _retrying(
        self,
        sending: _Sending,
        call: HttpCall[requests.Response],
        outcome: requests.Response | Exception | None,
    ) -> requests.Response:
        """Drive *call*: from its first attempt, or with that attempt's *outcome* in hand."""
        request = sending.request
        rewind = call.replayable and hasattr(request.body, "read")
        limit = call.rules.buffer_limit
        connect, read = _split_timeout(sending.timeout)
        position = getattr(request, "_body_position", None)

        def attempt(left: float) -> requests.Response:
            prepared = request
            extra = call.deadline_headers()
            if extra is not None:
                prepared = request.copy()
                prepared.headers.update(extra)
            if rewind and call.attempts > 1:
                # requests recorded where the file body started (as for redirects): rewind.
                prepared.body.seek(position)  # type: ignore[union-attr]
            # requests' annotations forbid (None, read); urllib3 accepts it (no connect limit).
            timeouts: Any = (call.timeout(connect), call.timeout(read))
            return self._send_one(sending, prepared, timeouts, limit)

        return drive(call, attempt, self._close, outcome)

    def _first_timeouts(self, timeout: Any, total: float | None) -> urllib3.Timeout:
        """The timeouts a first attempt goes with: the caller's *timeout*, each capped by the
        *total* time (``None``: no limit), which is the time left at the attempt's start (as
        HttpCall gives it to attempt()). A urllib3 Timeout, which requests sends on as it is,
        where it would build and check one from a pair on every request; kept for the next
        request with the same timeout and total (unless *timeout* is an object that may
        change)."""
        connect, read = _split_timeout(timeout)
        left = math.inf if total is None else total
        sent = urllib3.Timeout(connect=capped(connect, left), read=capped(read, left))
        if timeout is None or type(timeout) in (float, int, tuple):
            self._sent = ((timeout, total), sent)
        return sent


_UNSEEN: Final = object()  # no timeout seen yet (see RetryAdapter._sent)


def _small(response: requests.Response, limit: int) -> bool:
    return read_within_attempt(response.headers.get("content-length"), limit)


def _split_timeout(timeout: Any) -> tuple[float | None, float | None]:
    """requests' timeout (None, seconds, (connect, read) or a urllib3 Timeout) as a pair."""
    if timeout is None:
        return None, None
    if isinstance(timeout, tuple):
        connect, read = timeout
        return connect, read
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout), float(timeout)
    connect = getattr(timeout, "connect_timeout", None)
    read = getattr(timeout, "read_timeout", None)
    return (
        connect if isinstance(connect, (int, float)) else None,
        read if isinstance(read, (int, float)) else None,
    )

"""requests integration: a transport adapter that retries per a :class:`~seawall.RetryPolicy`.

Example:
    ``session.mount("https://", seawall.requests.RetryAdapter(policy=seawall.RetryPolicy()))``

Install with ``pip install seawall[requests]``. See ``docs/http.md`` for what is retried and why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError, NewConnectionError

from seawall._core.errors import DeadlineExceeded
from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    DEFAULT_TOTAL_TIMEOUT,
    IDEMPOTENT_METHODS,
    PER_HOST,
    Policies,
    exception_classes,
    read_within_attempt,
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
        budget: ``PER_HOST`` (default): one :class:`~seawall.RetryBudget` per host shared in the
            process, unless the policy has its own budget; a :class:`~seawall.Budget`; or ``None``.
        retry_statuses: statuses worth retrying (by default 408, 429, 502, 503, 504, or those the
            handle's route names in its ``retry_on``).
        retry_on: exception classes worth retrying.
        idempotent_methods: methods retried without an ``Idempotency-Key``.
        idempotency_key: add an ``Idempotency-Key`` to non-idempotent requests (generated once
            per request, the same on every attempt) so that they can be retried.
        deadline_headers: send the time left downstream.
        buffer_limit: when the caller does not stream, read bodies declared up to this many bytes
            within the attempt, so that a connection reset mid-body is retried (0: never).
        total_timeout: seconds for the whole request, attempts and waits included, when neither
            the policy's ``timeout`` nor an ambient :func:`seawall.deadline` sets one (30 s by
            default; ``None``: no limit). It caps each attempt's timeouts but is not sent
            downstream.
        **adapter_kwargs: passed to ``HTTPAdapter`` (``pool_connections``, ``pool_maxsize``,
            ``pool_block``).
    """

    def __init__(
        self,
        policy: RetryPolicy | PolicyHandle | None = None,
        *,
        budget: Any = PER_HOST,
        retry_statuses: Collection[int] | None = None,
        retry_on: tuple[type[Exception], ...] = DEFAULT_RETRY_EXCEPTIONS,
        idempotent_methods: Collection[str] = IDEMPOTENT_METHODS,
        idempotency_key: bool = False,
        deadline_headers: bool = True,
        buffer_limit: int = 1 << 20,
        total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT,
        **adapter_kwargs: Any,
    ) -> None:
        if "max_retries" in adapter_kwargs:
            raise TypeError("max_retries is not accepted: the policy decides retries")
        self._policies = Policies(
            policy,
            budget,
            retry_statuses,
            idempotent_methods=idempotent_methods,
            idempotency_key=idempotency_key,
            deadline_headers=deadline_headers,
            buffer_limit=buffer_limit,
            total_timeout=total_timeout,
        )
        self._retry_on = exception_classes(retry_on)
        super().__init__(max_retries=0, **adapter_kwargs)

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now (with a :class:`~seawall.config.PolicyHandle`: its current one)."""
        return self._policies.policy

    @classmethod
    def from_route(cls, registry: PolicyRegistry, name: str, **kwargs: Any) -> RetryAdapter:
        """An adapter that follows the route *name* of *registry*, reloads included.

        Each request uses the route's current policy and, unless ``retry_statuses`` is given,
        the statuses its ``retry_on`` names. Other keyword arguments are the constructor's.

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
        body = request.body
        rewind = hasattr(body, "read")
        replayable = (
            body is None
            or isinstance(body, (bytes, str))
            or (rewind and isinstance(getattr(request, "_body_position", None), int))
        )
        scheme, _, rest = (request.url or "").partition("://")
        host = f"{scheme}://{rest.split('/', 1)[0].rsplit('@', 1)[-1]}"
        call = self._policies.start(
            request.method or "GET", request.headers, host, replayable=replayable
        )
        rules = call.rules
        connect, read = _split_timeout(timeout)
        position = getattr(request, "_body_position", None)
        sleep = call.clock.sleep
        first = True
        # The latest retried response, kept through the wait: if the policy then gives up before
        # the next attempt, the caller gets it, as without retries. Closed when that attempt
        # starts (its body is usually in memory already: see _small).
        retried: requests.Response | None = None
        try:
            while True:
                try:
                    call.begin_attempt()
                except DeadlineExceeded:
                    if retried is None:
                        raise
                    # The wait left too little time (a sleep that overshot on a real clock).
                    response, retried = retried, None
                    call.exhausted = True  # retried, and no time for another attempt
                    return call.mark_answer(response)
                if retried is not None:
                    retried.close()  # a discarded attempt must not hold its connection
                    retried = None
                attempt = request.copy()
                if call.rules.deadline_headers:
                    attempt.headers.update(call.deadline_headers())
                if rewind and replayable and not first:
                    # requests recorded where the file body started (as for redirects): rewind.
                    attempt.body.seek(position)  # type: ignore[union-attr]
                first = False
                # requests' annotations forbid (None, read); urllib3 accepts it (no connect limit).
                attempt_timeout: Any = (call.timeout(connect), call.timeout(read))
                try:
                    response = super().send(
                        attempt,
                        stream=stream,
                        timeout=attempt_timeout,
                        verify=verify,
                        cert=cert,
                        proxies=proxies,
                    )
                    if not stream and _small(response, rules.buffer_limit):
                        _ = response.content  # read now: a reset mid-body is then retried
                except Exception as exc:
                    retryable = isinstance(exc, self._retry_on) and not isinstance(
                        exc, _NEVER_RETRIED
                    )
                    never_sent = _never_sent(exc)
                    delay = call.on_error(exc, never_sent, retryable or never_sent)
                    if delay is None:
                        raise
                else:
                    delay = call.on_response(response.status_code, response.headers.get)
                    if delay is None:
                        return call.mark_answer(response)
                    retried = response
                sleep(delay)
        finally:
            if retried is not None:
                retried.close()  # the wait was interrupted: nobody will read it


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

"""httpx integration: transports that retry per a :class:`~seawall.RetryPolicy`.

Example:
    ``httpx.Client(transport=seawall.httpx.RetryTransport(policy=seawall.RetryPolicy()))``

Install with ``pip install seawall[httpx]``. See ``docs/http.md`` for what is retried and why.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import httpx

from seawall._http import (
    DEFAULT_RETRY_STATUSES,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENT_METHODS,
    PER_HOST,
    HttpCall,
    HttpRules,
    PolicyCache,
    new_idempotency_key,
)
from seawall._retry import RetryPolicy

__all__ = [
    "DEFAULT_RETRY_EXCEPTIONS",
    "PER_HOST",
    "AsyncRetryTransport",
    "RetryTransport",
]

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


class _Base:
    """What the sync and async transports share: configuration and per-attempt requests."""

    def __init__(
        self,
        policy: RetryPolicy | None,
        *,
        budget: Any,
        retry_statuses: Collection[int],
        retry_on: tuple[type[Exception], ...],
        idempotent_methods: Collection[str],
        idempotency_key: bool,
        deadline_headers: bool,
        buffer_limit: int,
    ) -> None:
        self._policies = PolicyCache(policy if policy is not None else RetryPolicy(), budget)
        self._rules = HttpRules(
            retry_statuses=retry_statuses,
            idempotent_methods=idempotent_methods,
            idempotency_key=idempotency_key,
            deadline_headers=deadline_headers,
            buffer_limit=buffer_limit,
        )
        if isinstance(retry_on, type):
            retry_on = (retry_on,)
        if not isinstance(retry_on, tuple) or not all(
            isinstance(c, type) and issubclass(c, Exception) for c in retry_on
        ):
            raise TypeError(f"retry_on must be exception classes, got {retry_on!r}")
        self._retry_on = retry_on

    @property
    def policy(self) -> RetryPolicy:
        """The policy this transport was given."""
        return self._policies.policy

    def _start(self, request: httpx.Request) -> HttpCall:
        rules = self._rules
        method = request.method.upper()
        if (
            rules.idempotency_key
            and method not in rules.idempotent_methods
            and IDEMPOTENCY_KEY_HEADER not in request.headers
        ):
            # Once per logical request, on the caller's request: every attempt sends the same key.
            request.headers[IDEMPOTENCY_KEY_HEADER] = new_idempotency_key()
        url = request.url
        host = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}"
        return HttpCall(
            self._policies.for_host(host),
            rules,
            method,
            has_key=IDEMPOTENCY_KEY_HEADER in request.headers,
            # ByteStream holds bytes (content=, data=, json=, or a body already read): it can be
            # sent again. Generators and other streams are consumed by the first attempt.
            replayable=isinstance(request.stream, httpx.ByteStream),
        )

    def _attempt(self, request: httpx.Request, call: HttpCall) -> httpx.Request:
        """The request for one attempt: timeouts capped by the time left, deadline headers."""
        call.begin_attempt()
        configured = request.extensions.get("timeout") or {}
        extensions = dict(request.extensions)
        extensions["timeout"] = {k: call.timeout(configured.get(k)) for k in _TIMEOUT_KEYS}
        headers = request.headers
        extra = call.deadline_headers()
        if extra:
            headers = headers.copy()
            headers.update(extra)
        return httpx.Request(
            request.method,
            request.url,
            headers=headers,
            stream=request.stream,
            extensions=extensions,
        )

    def _classify(self, exc: Exception) -> tuple[bool, bool]:
        """(retryable kind, never sent)."""
        never_sent = isinstance(exc, _NEVER_SENT)
        return never_sent or isinstance(exc, self._retry_on), never_sent

    def _small(self, response: httpx.Response) -> bool:
        """Whether to read the body within the attempt (so that a reset mid-body is retried)."""
        limit = self._rules.buffer_limit
        length = response.headers.get("content-length")
        return bool(limit) and length is not None and length.isdigit() and int(length) <= limit


class RetryTransport(_Base, httpx.BaseTransport):
    """An httpx transport that retries the requests it sends, per a :class:`~seawall.RetryPolicy`.

    Usable as ``httpx.Client(transport=RetryTransport(...))``. The policy decides every retry
    (attempts, backoff, deadline, budget, hooks, kill switch) and waits on its clock; this
    transport classifies outcomes the HTTP way:

    - retried: connection errors, timeouts, and the statuses in *retry_statuses*; a
      ``Retry-After`` replaces the backoff (clamped to the policy's ``max_retry_after``), and a
      wait that would cross the deadline gives up at once, returning the response;
    - never retried: other statuses (the response is returned as is), responses marked
      ``x-seawall-overloaded`` or ``x-envoy-overloaded``, non-idempotent methods without an
      ``Idempotency-Key`` (unless the request never left), bodies that cannot be replayed;
    - each attempt's timeouts are min(configured, time left), and the time left is sent
      downstream in ``grpc-timeout`` and ``x-request-deadline``;
    - responses of discarded attempts are closed.

    The policy's ``retry_on`` and ``retry_if_result`` are replaced by the HTTP classification.

    Args:
        policy: the retry policy (``RetryPolicy()`` by default).
        transport: the transport that sends each attempt (``httpx.HTTPTransport()`` by default).
        budget: ``PER_HOST`` (default): one :class:`~seawall.RetryBudget` per host, shared by all
            transports in the process, unless the policy has its own budget; a
            :class:`~seawall.Budget` to use for every host; or ``None`` for no budget.
        retry_statuses: statuses worth retrying (408, 429, 502, 503, 504 by default).
        retry_on: transport exception classes worth retrying.
        idempotent_methods: methods retried without an ``Idempotency-Key``.
        idempotency_key: add an ``Idempotency-Key`` to non-idempotent requests (generated once
            per request, the same on every attempt) so that they can be retried.
        deadline_headers: send the time left downstream.
        buffer_limit: read bodies declared up to this many bytes within the attempt (0: never).
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        *,
        budget: Any = PER_HOST,
        retry_statuses: Collection[int] = DEFAULT_RETRY_STATUSES,
        retry_on: tuple[type[Exception], ...] = DEFAULT_RETRY_EXCEPTIONS,
        idempotent_methods: Collection[str] = IDEMPOTENT_METHODS,
        idempotency_key: bool = False,
        deadline_headers: bool = True,
        buffer_limit: int = 1 << 20,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(f"transport must be an httpx.BaseTransport, got {transport!r}")
        super().__init__(
            policy,
            budget=budget,
            retry_statuses=retry_statuses,
            retry_on=retry_on,
            idempotent_methods=idempotent_methods,
            idempotency_key=idempotency_key,
            deadline_headers=deadline_headers,
            buffer_limit=buffer_limit,
        )
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        call = self._start(request)
        sleep = call.clock.sleep
        send = self._transport.handle_request
        while True:
            attempt = self._attempt(request, call)
            try:
                response = send(attempt)
                if self._small(response):
                    response = _buffered(response)
            except Exception as exc:
                retryable, never_sent = self._classify(exc)
                delay = call.on_error(exc, never_sent, retryable)
                if delay is None:
                    raise
            else:
                delay = call.on_response(response.status_code, response.headers.get)
                if delay is None:
                    return response
                response.close()  # a discarded attempt must not hold its connection
            sleep(delay)

    def close(self) -> None:
        self._transport.close()


class AsyncRetryTransport(_Base, httpx.AsyncBaseTransport):
    """The asyncio twin of :class:`RetryTransport`, for ``httpx.AsyncClient(transport=...)``.

    Waits use the policy clock's ``asleep``; cancellation of the caller is never retried.
    Arguments are those of :class:`RetryTransport`, with an ``httpx.AsyncBaseTransport``
    (``httpx.AsyncHTTPTransport()`` by default).
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        budget: Any = PER_HOST,
        retry_statuses: Collection[int] = DEFAULT_RETRY_STATUSES,
        retry_on: tuple[type[Exception], ...] = DEFAULT_RETRY_EXCEPTIONS,
        idempotent_methods: Collection[str] = IDEMPOTENT_METHODS,
        idempotency_key: bool = False,
        deadline_headers: bool = True,
        buffer_limit: int = 1 << 20,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(f"transport must be an httpx.AsyncBaseTransport, got {transport!r}")
        super().__init__(
            policy,
            budget=budget,
            retry_statuses=retry_statuses,
            retry_on=retry_on,
            idempotent_methods=idempotent_methods,
            idempotency_key=idempotency_key,
            deadline_headers=deadline_headers,
            buffer_limit=buffer_limit,
        )
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        call = self._start(request)
        asleep = call.clock.asleep
        send = self._transport.handle_async_request
        while True:
            attempt = self._attempt(request, call)
            try:
                response = await send(attempt)
                if self._small(response):
                    response = await _abuffered(response)
            except Exception as exc:
                retryable, never_sent = self._classify(exc)
                delay = call.on_error(exc, never_sent, retryable)
                if delay is None:
                    raise
            else:
                delay = call.on_response(response.status_code, response.headers.get)
                if delay is None:
                    return response
                await response.aclose()  # a discarded attempt must not hold its connection
            await asleep(delay)

    async def aclose(self) -> None:
        await self._transport.aclose()


def _buffered(response: httpx.Response) -> httpx.Response:
    """The same response with its raw body read into memory (the connection is released)."""
    stream = response.stream
    assert isinstance(stream, httpx.SyncByteStream)
    try:
        body = b"".join(stream)
    finally:
        response.close()
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        stream=httpx.ByteStream(body),
        extensions=response.extensions,
    )


async def _abuffered(response: httpx.Response) -> httpx.Response:
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    try:
        body = b"".join([chunk async for chunk in stream])
    finally:
        await response.aclose()
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        stream=httpx.ByteStream(body),
        extensions=response.extensions,
    )

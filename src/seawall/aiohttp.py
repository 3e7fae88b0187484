"""aiohttp integration: a client middleware that retries requests per a
:class:`~seawall.RetryPolicy`, with the same HTTP rules as the httpx transports.

Example:
    ``aiohttp.ClientSession(middlewares=[seawall.aiohttp.RetryMiddleware(policy)])``

Install with ``pip install seawall[aiohttp]`` (aiohttp 3.12 or later: client middlewares). See
``docs/aiohttp.md``. The server side (deadline intake, load shedding) is
:mod:`seawall.server.aiohttp`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Collection
from typing import Any

import aiohttp
import aiohttp.payload

from seawall._core.compat import timeout_at
from seawall._core.errors import DeadlineExceeded
from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    IDEMPOTENT_METHODS,
    PER_HOST,
    HttpCall,
    Policies,
    exception_classes,
    read_within_attempt,
)
from seawall._strategies.retry import RetryPolicy

__all__ = ["DEFAULT_RETRY_EXCEPTIONS", "PER_HOST", "RetryMiddleware"]

#: Client errors worth retrying: connection failures and resets, timeouts, and a body cut short.
#: TLS and proxy errors are configuration, not transient states, and are never retried.
DEFAULT_RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
)
# The request never left this process: retrying cannot duplicate it, whatever the method.
_NEVER_SENT: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)
_NEVER_RETRIED: tuple[type[Exception], ...] = (
    aiohttp.ClientSSLError,
    aiohttp.ClientProxyConnectionError,
)

Handler = Any  # aiohttp.ClientHandlerType: ClientRequest -> Awaitable[ClientResponse]


class RetryMiddleware:
    """An aiohttp client middleware that retries the requests it sees, per a policy.

    ``aiohttp.ClientSession(middlewares=[RetryMiddleware(policy)])``, or per request with
    ``session.get(url, middlewares=[...])``. The rules are those of
    :class:`seawall.httpx.RetryTransport` (the same :class:`~seawall.http.HttpRules`, decided by
    the same :class:`~seawall.lowlevel.RetryState`):

    - retried: connection errors, timeouts, a body cut short, and the statuses in
      *retry_statuses*; ``Retry-After`` replaces the backoff (clamped to the policy's
      ``max_retry_after``);
    - never retried: other statuses (the response is returned), responses marked
      ``x-seawall-overloaded`` or ``x-envoy-overloaded``, non-idempotent methods without an
      ``Idempotency-Key`` (unless the request never left), bodies that cannot be replayed
      (streams and file objects: only in-memory bodies are sent again);
    - each attempt is bounded by cancellation at the attempt's deadline (``attempt_timeout``, the
      policy's ``timeout``, the ambient :func:`seawall.deadline`), and the time left is sent in
      ``grpc-timeout`` and ``x-request-deadline``; the session's own ``ClientTimeout`` still
      bounds the whole call;
    - a body declared (``Content-Length``) up to *buffer_limit* bytes is read within the attempt,
      so a reset mid-body is retried; responses of discarded attempts are released.

    The policy's ``retry_on`` and ``retry_if_result`` are replaced by the HTTP classification.
    Redirects are followed by aiohttp after the middleware, so each hop is retried on its own.

    Args:
        policy: the retry policy (``RetryPolicy()`` by default), or a
            :class:`~seawall.config.PolicyHandle`: each request then uses its current policy.
        budget: ``PER_HOST`` (default): one :class:`~seawall.RetryBudget` per host, shared with
            the httpx and requests integrations, unless the policy has its own budget; a
            :class:`~seawall.Budget` for every host; or ``None``.
        retry_statuses: statuses worth retrying (by default 408, 429, 502, 503, 504).
        retry_on: client exception classes worth retrying.
        idempotent_methods: methods retried without an ``Idempotency-Key``.
        idempotency_key: add an ``Idempotency-Key`` to non-idempotent requests (the same on
            every attempt) so that they can be retried.
        deadline_headers: send the time left downstream.
        buffer_limit: read bodies declared up to this many bytes within the attempt (0: never).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
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
    ) -> None:
        self._policies = Policies(
            policy,
            budget,
            retry_statuses,
            idempotent_methods=idempotent_methods,
            idempotency_key=idempotency_key,
            deadline_headers=deadline_headers,
            buffer_limit=buffer_limit,
        )
        self._retry_on = exception_classes(retry_on)

    @classmethod
    def from_route(cls, registry: PolicyRegistry, name: str, **kwargs: Any) -> RetryMiddleware:
        """A middleware that follows the route *name* of *registry*, reloads included.

        Each request uses the route's current policy and, unless ``retry_statuses`` is given,
        the statuses its ``retry_on`` names, as :meth:`seawall.httpx.RetryTransport.from_route`
        does. Other keyword arguments are the constructor's.

        Raises:
            KeyError: the registry has no policy named *name*.
        """
        if not isinstance(registry, PolicyRegistry):
            raise TypeError(f"registry must be a seawall.config.PolicyRegistry, got {registry!r}")
        return cls(registry.policy(name), **kwargs)

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now (with a :class:`~seawall.config.PolicyHandle`: its current one)."""
        return self._policies.policy

    def _classify(self, exc: Exception) -> tuple[bool, bool]:
        """(retryable kind, never sent)."""
        if isinstance(exc, _NEVER_RETRIED):
            return False, False
        never_sent = isinstance(exc, _NEVER_SENT)
        return never_sent or isinstance(exc, self._retry_on), never_sent

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: Handler
    ) -> aiohttp.ClientResponse:
        body = request.body
        call = self._policies.start(
            request.method,
            request.headers,  # a CIMultiDict: an Idempotency-Key goes in
            str(request.url.origin()),
            # In-memory bodies (bytes, str, JSON, url-encoded forms) are sent again as they are;
            # streams and file objects are consumed by the first attempt.
            replayable=body == b"" or isinstance(body, aiohttp.payload.BytesPayload),
        )
        asleep = call.clock.asleep
        retried: aiohttp.ClientResponse | None = None
        try:
            while True:
                try:
                    left = call.begin_attempt()
                except DeadlineExceeded:
                    if retried is None:
                        raise
                    response, retried = retried, None
                    return response
                if retried is not None:
                    retried.release()  # a discarded attempt must not hold its connection
                    retried = None
                for name, value in call.deadline_headers().items():
                    request.headers[name] = value
                try:
                    response = await self._attempt(request, handler, call, left)
                except Exception as exc:
                    retryable, never_sent = self._classify(exc)
                    delay = call.on_error(exc, never_sent, retryable)
                    if delay is None:
                        raise
                else:
                    delay = call.on_response(response.status, response.headers.get)
                    if delay is None:
                        return response
                    retried = response
                await asleep(delay)
        finally:
            if retried is not None:
                retried.release()  # the wait was interrupted (or cancelled): nobody reads it

    async def _attempt(
        self, request: aiohttp.ClientRequest, handler: Handler, call: HttpCall, left: float
    ) -> aiohttp.ClientResponse:
        if left == math.inf:
            return await self._send(request, handler, call)
        left = max(0.0, left)
        # aiohttp's timeouts bound the whole call or each read, not the attempt: cancellation
        # bounds it, at the attempt's deadline converted once to the event loop's clock.
        scope = timeout_at(asyncio.get_running_loop().time() + left)
        try:
            async with scope:
                return await self._send(request, handler, call)
        except TimeoutError as err:
            if not scope.expired():
                raise  # a timeout of aiohttp's own
            raise aiohttp.ServerTimeoutError(
                f"seawall: the attempt ran out of time after {left:.3f} s"
            ) from err

    @staticmethod
    async def _send(
        request: aiohttp.ClientRequest, handler: Handler, call: HttpCall
    ) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await handler(request)
        limit = call.rules.buffer_limit
        if read_within_attempt(response.headers.get("content-length"), limit):
            try:
                await response.read()  # kept by the response; the connection is released
            except BaseException:
                response.release()
                raise
        return response

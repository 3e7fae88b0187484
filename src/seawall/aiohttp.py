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
from typing import TYPE_CHECKING, Any

import aiohttp
import aiohttp.payload

from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    PER_HOST,
    HttpCall,
    HttpOptions,
    Policies,
    Wire,
    adrive,
    read_within_attempt,
    within,
)
from seawall._strategies.retry import RetryPolicy

if TYPE_CHECKING:
    from typing_extensions import Unpack

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


class _Wire(Wire[aiohttp.ClientResponse]):
    """aiohttp names the status ``status``."""

    __slots__ = ()

    def status(self, response: aiohttp.ClientResponse) -> int:
        return response.status


_WIRE = _Wire(never_sent=_NEVER_SENT, never_retried=_NEVER_RETRIED)


async def _release(response: aiohttp.ClientResponse) -> None:
    response.release()


def _timed_out(message: str) -> Exception:
    return aiohttp.ServerTimeoutError(message)


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

    The policy's ``retry_on`` is replaced by the HTTP classification; its ``retry_if_result``
    sees each response the status rules would return (its body read when within
    *buffer_limit*) and retries it when it returns ``True``. Inside a
    :func:`seawall.http.override` block, requests use the policy it gives; each response
    carries its attempts in ``response.seawall_history`` (:class:`seawall.http.HttpAttempt`).
    Redirects are followed by aiohttp after the middleware, so each hop is retried on its own.

    Args:
        policy: the retry policy (``RetryPolicy()`` by default), or a
            :class:`~seawall.config.PolicyHandle`: each request then uses its current policy.
        **options: the :class:`seawall.http.HttpOptions` every HTTP integration takes
            (``budget``, ``retry_statuses``, ``retry_on``, ``idempotent_methods``,
            ``idempotency_key``, ``deadline_headers``, ``buffer_limit``, ``total_timeout``).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self, policy: RetryPolicy | PolicyHandle | None = None, **options: Unpack[HttpOptions]
    ) -> None:
        self._policies = Policies(policy, options, _WIRE, DEFAULT_RETRY_EXCEPTIONS)

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

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: Handler
    ) -> aiohttp.ClientResponse:
        body = request.body
        call: HttpCall[aiohttp.ClientResponse] = self._policies.start(
            request.method,
            request.headers,  # a CIMultiDict: an Idempotency-Key goes in
            f"{request.url.scheme}://{request.url.raw_authority}",  # the budget's key: origin()
            # In-memory bodies (bytes, str, JSON, url-encoded forms) are sent again as they are;
            # streams and file objects are consumed by the first attempt.
            replayable=body == b"" or isinstance(body, aiohttp.payload.BytesPayload),
        )

        async def attempt(left: float) -> aiohttp.ClientResponse:
            # aiohttp's timeouts bound the whole call or each read, not the attempt:
            # cancellation bounds it, at the attempt's deadline.
            return await within(_send(request, handler, call), left, _timed_out)

        return await adrive(call, attempt, _release)


async def _send(
    request: aiohttp.ClientRequest, handler: Handler, call: HttpCall[aiohttp.ClientResponse]
) -> aiohttp.ClientResponse:
    for name, value in (call.deadline_headers() or {}).items():
        request.headers[name] = value
    response: aiohttp.ClientResponse = await handler(request)
    limit = call.rules.buffer_limit
    if limit and read_within_attempt(response.headers.get("content-length"), limit):
        try:
            await response.read()  # kept by the response; the connection is released
        except BaseException:
            response.release()
            raise
    return response

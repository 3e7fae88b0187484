"""The synchronous transport: :class:`RetryTransport`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from seawall._core.public import public
from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    EXTENSION_KEY,
    FirstAttemptPath,
    HttpCall,
    HttpOptions,
    drive,
    first_attempt,
)
from seawall._strategies.retry import RetryPolicy
from seawall.httpx._bodies import _buffer, _small
from seawall.httpx._common import _TIMEOUT_KEYS, _UNFIT, _Base, _handle, _host

if TYPE_CHECKING:
    from typing_extensions import Unpack


@public("seawall.httpx")
class RetryTransport(_Base, httpx.BaseTransport):
    """An httpx transport that retries the requests it sends, per a :class:`~seawall.RetryPolicy`.

    Usable as ``httpx.Client(transport=RetryTransport(...))``. The policy decides every retry
    (attempts, backoff, deadline, budget, hooks, kill switch) and waits on its clock; this
    transport classifies outcomes the HTTP way:

    - retried: connection errors, timeouts, and the statuses in *retry_statuses*; the
      wait is the larger of ``Retry-After`` and the backoff, clamped to the policy's
      ``max_retry_after`` (or the call ends, with ``retry_after_beyond_max="give_up"``), and a
      wait that would cross the deadline gives up at once, returning the response;
    - never retried: other statuses (the response is returned as is), responses marked
      ``x-seawall-overloaded`` or ``x-envoy-overloaded``, non-idempotent methods without an
      ``Idempotency-Key`` (unless the request never left), bodies that cannot be replayed;
    - each attempt's timeouts are min(configured, time left), and the time left is sent
      downstream in ``grpc-timeout`` and ``x-request-deadline``;
    - responses of discarded attempts are closed.

    The policy's ``retry_on`` is replaced by the HTTP classification; its ``retry_if_result``
    sees each response that the status rules would return, and retries it when it returns
    ``True`` (as httpx-retries' ``validate_response``).

    Args:
        policy: the retry policy (``RetryPolicy()`` by default), or a
            :class:`~seawall.config.PolicyHandle` from a :class:`~seawall.config.PolicyRegistry`:
            each request then uses the handle's current policy, so a reload changes the live
            transport (see :meth:`from_route`).
        transport: the transport that sends each attempt (``httpx.HTTPTransport()`` by default).
        **options: the :class:`seawall.http.HttpOptions` every HTTP integration takes
            (``budget``, ``retry_statuses``, ``retry_on``, ``idempotent_methods``,
            ``idempotency_key``, ``deadline_headers``, ``buffer_limit``, ``total_timeout``).

    A request's extension ``"seawall"`` overrides the policy for that request: a
    :class:`~seawall.RetryPolicy`, or a dict of its fields (``{"retries": 0}``, see
    :func:`seawall.http.override`). Each response carries its attempts in
    ``response.extensions["seawall.history"]`` (:class:`seawall.http.HttpAttempt`).
    """

    def __init__(
        self,
        policy: RetryPolicy | PolicyHandle | None = None,
        transport: httpx.BaseTransport | None = None,
        **options: Unpack[HttpOptions],
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(f"transport must be an httpx.BaseTransport, got {transport!r}")
        super().__init__(policy, options)
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    @classmethod
    def from_route(
        cls,
        registry: PolicyRegistry,
        name: str,
        transport: httpx.BaseTransport | None = None,
        **kwargs: Any,
    ) -> RetryTransport:
        """A transport that follows the route *name* of *registry*, reloads included.

        Each request uses the route's current policy (attempts, backoff, timeouts, budget, kill
        switch) and, unless ``retry_statuses`` is given, the statuses its ``retry_on`` names
        (``5xx``, ``gateway-error``, ...). Unless ``retry_on`` is
        given, the error conditions it names (``connect-failure``, ``reset``, ``timeout``, ...)
        alone decide which transport errors are retried (a route naming none retries none).
        Other keyword arguments are the constructor's.

        Raises:
            KeyError: the registry has no policy named *name*.
        """
        return cls(_handle(registry, name), transport, **kwargs)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return first_attempt(self, request, _host(request), request.extensions.get(EXTENSION_KEY))

    def _send_first(
        self, request: httpx.Request, path: FirstAttemptPath, started: float
    ) -> httpx.Response | None:
        """The first attempt, as the caller built it (see first_attempt), or ``None``: its
        timeouts are not all within the total time, and are capped per attempt."""
        if (
            (total := path.total) is not None
            and request.extensions.get("timeout") != self._fit.get(total, _UNFIT)
            and not self._as_built(request, total, started)
        ):
            return None  # (the timeouts last found to fit are looked up here: a call less)
        response = self._transport.handle_request(request)
        limit = path.limit
        if limit and not isinstance(response.stream, httpx.ByteStream) and _small(response, limit):
            _buffer(response)
        return response

    @staticmethod
    def _close(response: httpx.Response) -> None:
        response.close()

    def _retrying(
        self,
        request: httpx.Request,
        call: HttpCall[httpx.Response],
        outcome: httpx.Response | Exception | None,
    ) -> httpx.Response:
        """Drive *call*: from its first attempt, or with that attempt's *outcome* in hand."""
        send = self._transport.handle_request
        limit = call.rules.buffer_limit
        configured = request.extensions.get("timeout")  # _timeouts(request), one call less
        timeouts = (
            configured.values()
            if configured is not None and len(configured) == len(_TIMEOUT_KEYS)
            else None
        )
        prepare = self._prepare

        def attempt(left: float) -> httpx.Response:
            # The common case decided here, without a call to _prepare (which decides the rest).
            if timeouts is not None and call.sends_as_is(timeouts, left):
                response = send(request)
            else:
                response = send(prepare(request, call, left))
            if (
                limit
                and not isinstance(response.stream, httpx.ByteStream)
                and _small(response, limit)
            ):
                _buffer(response)
            return response

        return drive(call, attempt, self._close, outcome)

    def close(self) -> None:
        self._transport.close()

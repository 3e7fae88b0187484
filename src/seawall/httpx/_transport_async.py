"""The async transport: :class:`AsyncRetryTransport`, on asyncio, trio and anyio, and the
hedged copies of its requests."""

from __future__ import annotations

import functools
from collections.abc import Collection, Coroutine
from typing import TYPE_CHECKING, Any

import httpx

from seawall._core.public import public
from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    EXTENSION_KEY,
    PER_HOST,
    FirstAttemptPath,
    HostKey,
    HttpCall,
    HttpOptions,
    adrive,
    afirst_attempt,
    within,
)
from seawall._strategies.budget import RetryBudget
from seawall._strategies.hedge import Hedge
from seawall._strategies.retry import RetryPolicy
from seawall.httpx._bodies import _abuffer, _bound_body, _small
from seawall.httpx._common import _UNFIT, _WIRE, _Base, _handle, _host, _timeouts

if TYPE_CHECKING:
    from typing_extensions import Unpack


@public("seawall.httpx")
class AsyncRetryTransport(_Base, httpx.AsyncBaseTransport):
    """The async twin of :class:`RetryTransport`, for ``httpx.AsyncClient(transport=...)``, on
    asyncio, trio and anyio (the running library is detected).

    Waits use the policy clock's ``asleep``; cancellation of the caller is never retried. Each
    attempt is also bounded by cancellation: it may last the policy's ``attempt_timeout`` and
    never outlives the deadline, even when the server drips bytes slowly enough to defeat
    httpx's per-operation timeouts; a body streamed to the caller is bounded the same way.

    Arguments are those of :class:`RetryTransport`, with an ``httpx.AsyncBaseTransport``
    (``httpx.AsyncHTTPTransport()`` by default), and:

    Args:
        hedge: a :class:`~seawall.Hedge`: requests whose method is in *hedge_methods* are
            hedged within each attempt. When one has not answered after the hedge's delay, a
            copy is sent; the first response wins, the others are cancelled and their
            connections closed. The hedge's ``max_attempts``, ``max_extra_load``, budget and
            kill switch apply; its ``replicas`` are not supported (the URL names the host).
        hedge_methods: the methods to hedge (``GET`` and ``HEAD`` by default). Only idempotent
            methods are accepted: a hedged request runs twice on the server by design, and an
            ``Idempotency-Key`` does not make that safe (a server deduplicating by key answers
            a concurrent duplicate with 409 Conflict).

    Raises:
        ValueError: *hedge_methods* names a method that is not idempotent, or is given without
            a *hedge*; the hedge has ``replicas``.
    """

    def __init__(
        self,
        policy: RetryPolicy | PolicyHandle | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        hedge: Hedge | None = None,
        hedge_methods: Collection[str] | None = None,
        **options: Unpack[HttpOptions],
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(f"transport must be an httpx.AsyncBaseTransport, got {transport!r}")
        super().__init__(policy, options)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        rules = self._policies.rules
        self._hedge_methods = _hedge_methods(hedge, hedge_methods, rules.idempotent_methods)
        if hedge is not None:
            budget = self._policies.budget
            shared = budget if budget is not PER_HOST else self.policy.budget
            if hedge.budget is not None and hedge.budget is shared:
                # As in a Pipeline: the retry loop reports requests and outcomes to the shared
                # budget; hedges only withdraw from it, so nothing is counted twice. A view:
                # the caller's Hedge still reports wherever else it is used.
                hedge = hedge.withdrawing_only()
        self._hedge = hedge

    @property
    def hedge(self) -> Hedge | None:
        """The hedging policy, if any (a ``withdrawing_only()`` view when it shares the budget)."""
        return self._hedge

    @classmethod
    def from_route(
        cls,
        registry: PolicyRegistry,
        name: str,
        transport: httpx.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> AsyncRetryTransport:
        """A transport that follows the route *name* of *registry*, reloads included.

        As :meth:`RetryTransport.from_route`; in addition, when the route configures ``hedge``
        (delay, max_attempts, percentile, max_extra_percent) and no ``hedge`` is given, ``GET``
        and ``HEAD`` requests are hedged with a :class:`~seawall.Hedge` of those settings (named
        after the route, drawing from the route's budget), built once, when the transport is.

        Raises:
            KeyError: the registry has no policy named *name*.
        """
        handle = _handle(registry, name)
        settings = handle.hedge_config
        if settings is not None and kwargs.get("hedge") is None:
            budget = handle.policy.budget
            kwargs["hedge"] = settings.build(
                name=handle.name, budget=budget if isinstance(budget, RetryBudget) else None
            )
        return cls(handle, transport, **kwargs)

    def handle_async_request(self, request: httpx.Request) -> Coroutine[Any, Any, httpx.Response]:
        # The coroutine that sends the request, returned for httpx to await: not awaited in a
        # coroutine of this method's own (one coroutine less on every request).
        host: HostKey = _host(request)
        override = request.extensions.get(EXTENSION_KEY)
        if self._hedge is not None and self._hedged(request):
            call = self._policies.start(
                request.method, request.headers, host, replayable=True, override=override
            )
            return self._retrying(request, call, None)
        return afirst_attempt(self, request, host, override)

    async def _send_first(
        self, request: httpx.Request, path: FirstAttemptPath, started: float
    ) -> httpx.Response | None:
        """As RetryTransport._send_first: without a deadline of the caller's, the attempt is
        bounded by httpx's timeouts (within the total time), without a timer, and its body is
        not bounded (see _bound_body)."""
        if (
            (total := path.total) is not None
            and request.extensions.get("timeout") != self._fit.get(total, _UNFIT)
            and not self._as_built(request, total, started)
        ):
            return None  # (the timeouts last found to fit are looked up here: a call less)
        response = await self._transport.handle_async_request(request)
        limit = path.limit
        if limit and not isinstance(response.stream, httpx.ByteStream) and _small(response, limit):
            await _abuffer(response)
        return response

    @staticmethod
    async def _close(response: httpx.Response) -> None:
        await response.aclose()

    def _hedged(self, request: httpx.Request) -> bool:
        """Whether the hedge applies to *request* (its method, in upper case as HttpCall has
        it, is hedged, and its body can be sent again)."""
        return request.method.upper() in self._hedge_methods and isinstance(
            request.stream, httpx.ByteStream
        )

    async def _retrying(
        self,
        request: httpx.Request,
        call: HttpCall[httpx.Response],
        outcome: httpx.Response | Exception | None,
    ) -> httpx.Response:
        """Drive *call*: from its first attempt, or with that attempt's *outcome* in hand."""
        hedge = self._hedge
        if hedge is not None and (call.method not in self._hedge_methods or not call.replayable):
            hedge = None

        async def attempt(left: float) -> httpx.Response:
            if hedge is None:
                sending = self._send_one(request, call, left)
            else:
                sending = self._send(request, call, hedge)
            if not call.bounded_by_caller:
                # Only the default total time: it caps httpx's timeouts (see _prepare), as in
                # the sync transport, without a timer per request.
                return await sending
            # httpx's timeouts bound each read, not the attempt: a server dripping a byte at a
            # time would outlive it. Cancellation bounds the whole attempt.
            timed_out = functools.partial(httpx.TimeoutException, request=request)
            return await within(sending, left, timed_out)

        response = await adrive(call, attempt, self._close, outcome)
        return _bound_body(response, call, request)

    async def _send_one(
        self, request: httpx.Request, call: HttpCall[httpx.Response], left: float | None = None
    ) -> httpx.Response:
        """One request: with *left*, the attempt's time left as it starts; without, a hedged
        copy's, read as it is sent."""
        if left is None:
            left = call.time_left()
        timeouts = _timeouts(request)
        if timeouts is None or not call.sends_as_is(timeouts, left):
            request = self._prepare(request, call, left)
        response = await self._transport.handle_async_request(request)
        limit = call.rules.buffer_limit
        if limit and _small(response, limit):
            await _abuffer(response)
        return response

    async def _send(
        self, request: httpx.Request, call: HttpCall[httpx.Response], hedge: Hedge | None
    ) -> httpx.Response:
        if hedge is None:
            return await self._send_one(request, call)
        answered: list[httpx.Response] = []

        async def copy() -> httpx.Response:
            try:
                response = await self._send_one(request, call)
            except Exception as exc:
                if _WIRE.classify(exc, call.retry_on)[0]:
                    # Let the hedge go on with the other copies (its retry_on sees a
                    # ConnectionError); the retry loop then sees the original error.
                    raise _CopyFailed(exc) from None
                raise
            answered.append(response)
            return response

        winner: httpx.Response | None = None
        failure: Exception | None = None
        try:
            winner = await hedge.acall(copy)
        except _CopyFailed as wrapped:
            failure = wrapped.error
        finally:
            # Copies that answered but lost (at the same instant as the winner, or before a
            # failure ended the call) must not hold their connections.
            for response in answered:
                if response is not winner:
                    await response.aclose()
        if failure is not None:
            raise failure
        assert winner is not None
        return winner

    async def aclose(self) -> None:
        await self._transport.aclose()


class _CopyFailed(ConnectionError):
    """A hedged copy failed with a retryable transport error (carried in ``error``)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _hedge_methods(
    hedge: Hedge | None, methods: Collection[str] | None, idempotent: Collection[str]
) -> frozenset[str]:
    if hedge is None:
        if methods is not None:
            raise ValueError("hedge_methods needs a hedge (seawall.Hedge(...))")
        return frozenset()
    if not isinstance(hedge, Hedge):
        raise TypeError(f"hedge must be a seawall.Hedge, got {hedge!r}")
    if hedge.replicas is not None:
        raise ValueError("hedge must not have replicas: the request's URL names the host")
    safe = frozenset(m.upper() for m in idempotent if isinstance(m, str))
    if methods is None:
        return frozenset({"GET", "HEAD"}) & safe
    if isinstance(methods, (str, bytes)) or not isinstance(methods, Collection):
        raise TypeError(f"hedge_methods must be a collection of method names, got {methods!r}")
    chosen = set()
    for m in methods:
        if not isinstance(m, str) or not m:
            raise TypeError(f"hedge_methods must hold method names, got {m!r}")
        if m.upper() not in safe:
            raise ValueError(
                f"hedge_methods may only hold idempotent methods ({', '.join(sorted(safe))}): "
                f"a hedged request runs more than once, got {m!r}"
            )
        chosen.add(m.upper())
    return frozenset(chosen)

"""The ``grpc.aio`` client interceptor: :class:`AsyncRetryInterceptor`, its streaming twins and
hedging of unary-unary RPCs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

import grpc
import grpc.aio

from seawall._core.public import public
from seawall._strategies.hedge import Hedge
from seawall._strategies.retry import RetryPolicy
from seawall.grpc._driver import ANSWERED, Outcome, RetryCall, adrive
from seawall.grpc._rules import (
    DEADLINE_CODE,
    DEFAULT_REQUEST_BUFFER,
    DEFAULT_RETRY_CODES,
    OK,
    PER_CHANNEL,
    PUSHBACK_CODES,
    RetryBase,
)
from seawall.grpc._streams import (
    AioResponseStream,
    AioStreamStream,
    AioStreamUnary,
    AioUnaryStream,
    AsyncRequests,
)


class _CopyFailed(ConnectionError):
    """A hedged copy ended with a retryable status: the hedge may go on with the others."""

    def __init__(self, attempt: Any) -> None:
        super().__init__("a hedged copy failed with a retryable status")
        self.attempt = attempt


def _details(d: grpc.aio.ClientCallDetails, call: RetryCall) -> grpc.aio.ClientCallDetails:
    """*d* with the attempt's timeout (see :meth:`RetryCall.timeout`)."""
    return grpc.aio.ClientCallDetails(
        d.method, call.timeout(d.timeout), d.metadata, d.credentials, d.wait_for_ready
    )


def _method_name(method: object) -> str:
    return method.decode("utf-8", "replace") if isinstance(method, bytes) else str(method)


def _hedge_methods(hedge: Hedge | None, methods: Collection[str]) -> frozenset[str]:
    if isinstance(methods, (str, bytes)) or not isinstance(methods, Collection):
        raise TypeError(f"hedge_methods must be a collection of method names, got {methods!r}")
    names = frozenset(methods)
    for name in names:
        if not isinstance(name, str) or not name.startswith("/"):
            raise TypeError(
                f"hedge_methods must hold full method names '/pkg.Service/Method', got {name!r}"
            )
    if hedge is None:
        if names:
            raise ValueError("hedge_methods needs a hedge (seawall.Hedge(...))")
        return names
    if not isinstance(hedge, Hedge):
        raise TypeError(f"hedge must be a seawall.Hedge, got {hedge!r}")
    if hedge.replicas is not None:
        raise ValueError("hedge must not have replicas: the channel names the server")
    if not names:
        raise ValueError(
            "hedge_methods must name the idempotent methods to hedge: a hedged RPC runs more "
            "than once on the server"
        )
    return names


@public("seawall.grpc")
class AsyncRetryInterceptor(RetryBase, grpc.aio.UnaryUnaryClientInterceptor):
    """The ``grpc.aio`` twin of :class:`RetryInterceptor`: ``grpc.aio.insecure_channel(target,
    interceptors=AsyncRetryInterceptor(policy).interceptors())``.

    ``grpc.aio`` gives each interceptor object one kind of RPC only (unary-unary for this
    one): :meth:`interceptors` returns it with its three streaming twins, which share its
    policy, budget and rules. ``interceptors=[AsyncRetryInterceptor(policy)]`` retries
    unary-unary RPCs only.

    Waits use the policy clock's ``asleep``; the caller's cancellation is never retried.
    Arguments are those of :class:`RetryInterceptor`, and:

    Args:
        hedge: a :class:`~seawall.Hedge`: RPCs to the methods in *hedge_methods* are hedged
            within each attempt. When one has not answered after the hedge's delay, a copy is
            sent; the first answer wins (a retryable status lets the others go on, as in gRPC
            hedging), the others are cancelled. The hedge's ``max_attempts``,
            ``max_extra_load``, budget and kill switch apply.
        hedge_methods: the full names (``"/pkg.Service/Method"``) of the idempotent methods to
            hedge; required with *hedge*, since a hedged RPC runs more than once on the server.
            Only unary-unary RPCs are hedged.

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        budget: Any = PER_CHANNEL,
        retry_codes: Collection[grpc.StatusCode] = DEFAULT_RETRY_CODES,
        pushback_codes: Collection[grpc.StatusCode] = PUSHBACK_CODES,
        request_buffer: int = DEFAULT_REQUEST_BUFFER,
        hedge: Hedge | None = None,
        hedge_methods: Collection[str] = (),
    ) -> None:
        super().__init__(policy, budget, retry_codes, pushback_codes, request_buffer)
        self._hedge_methods = _hedge_methods(hedge, hedge_methods)
        if hedge is not None and hedge.budget is not None and hedge.budget is self.budget:
            # As in a Pipeline: the retry loop reports requests and outcomes to the shared
            # budget; hedges only withdraw from it, so nothing is counted twice.
            hedge = hedge.withdrawing_only()
        self._hedge = hedge

    @property
    def hedge(self) -> Hedge | None:
        """The hedging policy, if any (a ``withdrawing_only()`` view when it shares the budget)."""
        return self._hedge

    async def _hedged(
        self, hedge: Hedge, continuation: Any, d: Any, request: Any, call: RetryCall
    ) -> Any:
        sent: list[Any] = []
        retryable = self._rules.retry_codes | {DEADLINE_CODE}

        async def copy() -> Any:
            attempt = await continuation(_details(d, call), request)
            sent.append(attempt)
            if await attempt.code() in retryable:
                raise _CopyFailed(attempt)
            return attempt

        winner: Any = None
        try:
            winner = await hedge.acall(copy)
        except _CopyFailed as failed:
            winner = failed.attempt  # every copy failed: the retry driver decides on the last
        finally:
            for attempt in sent:
                if attempt is not winner:
                    attempt.cancel()  # a loser must not keep running on the server
        return winner

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        d = client_call_details
        call = RetryCall(self._rules)
        hedge = self._hedge
        if hedge is not None and _method_name(d.method) not in self._hedge_methods:
            hedge = None
        last: Any = None

        async def attempt() -> Outcome:
            nonlocal last
            if hedge is not None:
                last = await self._hedged(hedge, continuation, d, request, call)
            else:
                last = await continuation(_details(d, call), request)
            code = await last.code()
            if code is OK:
                return ANSWERED
            trailing = await last.trailing_metadata()
            try:
                await last
            except grpc.RpcError as error:
                return Outcome(code, trailing, None, error)
            return Outcome(code, trailing)  # pragma: no cover - a failed status always raises

        error = (await adrive(call, attempt)).error
        if error is not None:
            raise error
        return last

    def interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        """This interceptor and its twins for unary-stream, stream-unary and stream-stream RPCs,
        for ``grpc.aio.insecure_channel(target, interceptors=...)``."""
        return [
            self,
            _AioUnaryStreamRetry(self),
            _AioStreamUnaryRetry(self),
            _AioStreamStreamRetry(self),
        ]

    async def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        return self._stream(AioUnaryStream, continuation, client_call_details, request, None)

    async def intercept_stream_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = AsyncRequests(request_iterator, self._request_buffer)
        return self._stream(AioStreamUnary, continuation, client_call_details, None, requests)

    async def intercept_stream_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = AsyncRequests(request_iterator, self._request_buffer)
        return self._stream(AioStreamStream, continuation, client_call_details, None, requests)

    def _stream(
        self,
        kind: type[AioResponseStream],
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        d: grpc.aio.ClientCallDetails,
        request: Any,
        requests: AsyncRequests | None,
    ) -> AioResponseStream:
        """A response stream of *kind*, retried until it is committed."""
        call = RetryCall(self._rules)

        async def start() -> Any:
            sent = request if requests is None else requests.replay()
            return await continuation(_details(d, call), sent)

        return kind(call, start, requests)


class _AioUnaryStreamRetry(grpc.aio.UnaryStreamClientInterceptor):
    """:class:`AsyncRetryInterceptor` for unary-stream RPCs (see ``interceptors()``)."""

    def __init__(self, owner: AsyncRetryInterceptor) -> None:
        self._owner = owner

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await self._owner.intercept_unary_stream(continuation, client_call_details, request)


class _AioStreamUnaryRetry(grpc.aio.StreamUnaryClientInterceptor):
    """:class:`AsyncRetryInterceptor` for stream-unary RPCs (see ``interceptors()``)."""

    def __init__(self, owner: AsyncRetryInterceptor) -> None:
        self._owner = owner

    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await self._owner.intercept_stream_unary(
            continuation, client_call_details, request_iterator
        )


class _AioStreamStreamRetry(grpc.aio.StreamStreamClientInterceptor):
    """:class:`AsyncRetryInterceptor` for stream-stream RPCs (see ``interceptors()``)."""

    def __init__(self, owner: AsyncRetryInterceptor) -> None:
        self._owner = owner

    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await self._owner.intercept_stream_stream(
            continuation, client_call_details, request_iterator
        )

"""Deadline intake: each RPC runs inside the client's deadline, clamped to the server's limit."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

import grpc
import grpc.aio

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.errors import DeadlineExceeded
from seawall._core.public import public
from seawall._strategies.deadline import deadline, timeout_from_headers
from seawall.grpc._rules import DEADLINE_CODE
from seawall.grpc.server._handlers import wrap_handler

# No limit of the server's own and no deadline from the client: timeout_from_headers needs a cap.
_NO_LIMIT: Final = 1e9


def _metadata_pairs(metadata: object) -> list[tuple[Any, Any]]:
    pairs: list[tuple[Any, Any]] = []
    for item in metadata or ():  # type: ignore[attr-defined]
        key = getattr(item, "key", None)
        if key is not None:
            pairs.append((key, item.value))
        else:
            pairs.append(tuple(item))
    return pairs


class _Intake:
    """How long a server lets one RPC run: the client's deadline (``grpc-timeout``, read by
    grpcio into ``context.time_remaining()``, and ``x-request-deadline`` metadata), clamped to
    the server's own limit, less a margin."""

    __slots__ = ("cap", "clock", "margin")

    def __init__(self, max_request_time: float | None, margin: float, clock: Clock | None) -> None:
        _validate.optional_seconds("max_request_time", max_request_time)
        self.cap = float(max_request_time) if max_request_time is not None else _NO_LIMIT
        self.margin = _validate.seconds("deadline_margin", margin)
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self.clock = clock if clock is not None else SYSTEM_CLOCK

    def allowed(self, context: Any, metadata: object) -> float:
        allowed = timeout_from_headers(
            _metadata_pairs(metadata), max_seconds=self.cap, margin=self.margin
        )
        left = context.time_remaining()
        if left is not None and math.isfinite(left):
            allowed = min(allowed, left - self.margin)
        return allowed


@public("seawall.grpc")
class DeadlineInterceptor(grpc.ServerInterceptor):
    """A server interceptor that runs each RPC inside the client's deadline.

    The time left (``grpc-timeout``, and ``x-request-deadline`` metadata from plain HTTP hops),
    clamped to *max_request_time* and less *deadline_margin*, becomes the ambient
    :func:`seawall.deadline` of the handler: every policy and every seawall client inside sees
    it. An RPC whose deadline has already passed is answered DEADLINE_EXCEEDED before any work.
    A synchronous handler cannot be interrupted; it sees the deadline through
    :func:`seawall.remaining`.

    Args:
        max_request_time: the server's own limit for one RPC in seconds (also the cap on the
            client's deadline); ``None`` for none.
        deadline_margin: seconds kept back for sending the answer.
        clock: the clock the deadline is measured on.
    """

    def __init__(
        self,
        *,
        max_request_time: float | None = None,
        deadline_margin: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self._intake = _Intake(max_request_time, deadline_margin, clock)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        intake = self._intake
        metadata = details.invocation_metadata

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            if streaming:

                def stream(request: Any, context: Any) -> Iterator[Any]:
                    allowed = intake.allowed(context, metadata)
                    if allowed <= 0.0:
                        context.abort(DEADLINE_CODE, "deadline exceeded before the work began")
                    with deadline(allowed if allowed < _NO_LIMIT else math.inf, clock=intake.clock):
                        yield from behaviour(request, context)

                return stream

            def unary(request: Any, context: Any) -> Any:
                allowed = intake.allowed(context, metadata)
                if allowed <= 0.0:
                    context.abort(DEADLINE_CODE, "deadline exceeded before the work began")
                with deadline(allowed if allowed < _NO_LIMIT else math.inf, clock=intake.clock):
                    return behaviour(request, context)

            return unary

        return wrap_handler(continuation(details), wrap)


@public("seawall.grpc")
class AsyncDeadlineInterceptor(grpc.aio.ServerInterceptor):
    """The ``grpc.aio`` twin of :class:`DeadlineInterceptor`; the handler is also cancelled at
    the deadline (answered DEADLINE_EXCEEDED). Arguments are those of
    :class:`DeadlineInterceptor`."""

    def __init__(
        self,
        *,
        max_request_time: float | None = None,
        deadline_margin: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self._intake = _Intake(max_request_time, deadline_margin, clock)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        intake = self._intake
        metadata = details.invocation_metadata

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            if streaming:

                async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                    allowed = intake.allowed(context, metadata)
                    if allowed <= 0.0:
                        await context.abort(DEADLINE_CODE, "deadline exceeded")
                    # Not cancelled at the deadline: a scope must not span a generator's yields.
                    with deadline(allowed if allowed < _NO_LIMIT else math.inf, clock=intake.clock):
                        async for item in behaviour(request, context):
                            yield item

                return stream

            async def unary(request: Any, context: Any) -> Any:
                allowed = intake.allowed(context, metadata)
                if allowed <= 0.0:
                    await context.abort(DEADLINE_CODE, "deadline exceeded before the work began")
                if allowed >= _NO_LIMIT:
                    return await behaviour(request, context)
                try:
                    async with deadline(allowed, clock=intake.clock):
                        return await behaviour(request, context)
                except DeadlineExceeded:
                    await context.abort(DEADLINE_CODE, "deadline exceeded")

            return unary

        return wrap_handler(await continuation(details), wrap)

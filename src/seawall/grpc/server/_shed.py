"""Load shedding: at most so many RPCs at once, the rest answered RESOURCE_EXHAUSTED with a
pushback."""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
import grpc.aio

from seawall._core import validate as _validate
from seawall._core.public import public
from seawall.grpc._rules import PUSHBACK_HEADER
from seawall.grpc.server._handlers import wrap_handler


def _pushback_value(retry_after: float | None) -> str:
    if retry_after is None:
        return "-1"  # "overloaded; don't retry" (gRPC proposal A6)
    return str(math.ceil(retry_after * 1000))


class _Slots:
    """A concurrency limit without a queue: take a slot now, or be shed."""

    __slots__ = ("in_flight", "limit", "lock", "shed")

    def __init__(self, limit: int) -> None:
        self.limit = _validate.count("max_concurrency", limit, minimum=1)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.shed = 0

    def take(self) -> bool:
        with self.lock:
            if self.in_flight >= self.limit:
                self.shed += 1
                return False
            self.in_flight += 1
            return True

    def give(self) -> None:
        with self.lock:
            self.in_flight -= 1


class _ShedBase:
    def __init__(self, max_concurrency: int, retry_after: float | None) -> None:
        self._slots = _Slots(max_concurrency)
        _validate.optional_seconds("retry_after", retry_after, zero=True, finite=True)
        self._trailing = ((PUSHBACK_HEADER, _pushback_value(retry_after)),)
        self._details = "overloaded; the request was shed"

    @property
    def in_flight(self) -> int:
        """RPCs being handled now."""
        return self._slots.in_flight

    @property
    def shed(self) -> int:
        """RPCs rejected so far."""
        return self._slots.shed


@public("seawall.grpc")
class LoadShedder(_ShedBase, grpc.ServerInterceptor):
    """A server interceptor that handles at most *max_concurrency* RPCs at once and answers the
    rest at once RESOURCE_EXHAUSTED with a ``grpc-retry-pushback-ms`` trailer.

    Without a queue of its own: grpcio's thread pool already queues what its workers cannot
    take. Put it first in the server's interceptors, so a shed RPC costs no other work.

    Args:
        max_concurrency: RPCs handled at once (near the throughput-optimal concurrency).
        retry_after: the pushback sent, in seconds: seawall and grpcio clients wait that long
            before retrying. ``None`` (default) sends a negative pushback: "overloaded; don't
            retry", so the callers' retries do not add to the overload.

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(self, *, max_concurrency: int, retry_after: float | None = None) -> None:
        super().__init__(max_concurrency, retry_after)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        slots, trailing, why = self._slots, self._trailing, self._details

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            def shed(context: Any) -> None:
                context.set_trailing_metadata(trailing)
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)

            if streaming:

                def stream(request: Any, context: Any) -> Iterator[Any]:
                    if not slots.take():
                        shed(context)
                    try:
                        yield from behaviour(request, context)
                    finally:
                        slots.give()

                return stream

            def unary(request: Any, context: Any) -> Any:
                if not slots.take():
                    shed(context)
                try:
                    return behaviour(request, context)
                finally:
                    slots.give()

            return unary

        return wrap_handler(continuation(details), wrap)


@public("seawall.grpc")
class AsyncLoadShedder(_ShedBase, grpc.aio.ServerInterceptor):
    """The ``grpc.aio`` twin of :class:`LoadShedder` (same arguments)."""

    def __init__(self, *, max_concurrency: int, retry_after: float | None = None) -> None:
        super().__init__(max_concurrency, retry_after)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        slots, trailing, why = self._slots, self._trailing, self._details

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            async def shed(context: Any) -> None:
                context.set_trailing_metadata(trailing)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)

            if streaming:

                async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                    if not slots.take():
                        await shed(context)
                    try:
                        async for item in behaviour(request, context):
                            yield item
                    finally:
                        slots.give()

                return stream

            async def unary(request: Any, context: Any) -> Any:
                if not slots.take():
                    await shed(context)
                try:
                    return await behaviour(request, context)
                finally:
                    slots.give()

            return unary

        return wrap_handler(await continuation(details), wrap)

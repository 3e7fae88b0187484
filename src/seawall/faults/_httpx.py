"""Fault-injecting httpx transports (sync and async)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any, Final, TypeAlias

import httpx

from seawall._core.public import public
from seawall.faults._plan import Drip, Error, FaultPlan, Refuse, Reset, Status

__all__ = ["AsyncFaultTransport", "FaultTransport"]

_REFUSED = "[Errno 111] Connection refused (injected by seawall.faults)"
_RESET = "[Errno 104] Connection reset by peer (injected by seawall.faults)"
_TIMED_OUT = "timed out (injected by seawall.faults)"


def _read_timeout(request: httpx.Request) -> float | None:
    timeout = request.extensions.get("timeout") or {}
    read = timeout.get("read")
    return float(read) if isinstance(read, (int, float)) else None


def _check(plan: object) -> FaultPlan:
    if not isinstance(plan, FaultPlan):
        raise TypeError(f"plan must be a seawall.faults.FaultPlan, got {plan!r}")
    return plan


# The steps of a request's script besides a wait (a float): send it on and hand the answer
# back; send it on and discard the answer.
_SEND: Final = "send"
_SEND_AND_DISCARD: Final = "discard"
_Script: TypeAlias = Generator["float | str", "httpx.Response | None", httpx.Response]


def _script(plan: FaultPlan, request: httpx.Request) -> _Script:
    """One request through the plan's faults, as steps the sync and async transports carry out.

    Yields a wait in seconds, :data:`_SEND` (the answer of the next transport is sent back in)
    or :data:`_SEND_AND_DISCARD`; returns the response, or raises the injected error.
    """
    decision = plan.decide()
    read_timeout = _read_timeout(request)
    wait, timed_out = decision.wait(read_timeout)
    if wait:
        yield wait
    if timed_out:
        raise httpx.ReadTimeout(_TIMED_OUT, request=request)
    fault = decision.fault
    if isinstance(fault, Status):
        return httpx.Response(
            fault.status, headers=fault.headers, content=fault.body, request=request
        )
    if isinstance(fault, Error):
        raise fault.make()
    if isinstance(fault, Refuse):
        raise httpx.ConnectError(_REFUSED, request=request)
    if isinstance(fault, Reset):
        if fault.after_send:
            yield _SEND_AND_DISCARD
        raise httpx.ReadError(_RESET, request=request)
    response = yield _SEND
    assert response is not None
    if isinstance(fault, Drip):
        response.stream = _Drip(response.stream, fault, plan, read_timeout, request)
    return response


@public("seawall.faults")
class FaultTransport(httpx.BaseTransport):
    """An httpx transport that injects a :class:`~seawall.faults.FaultPlan`'s faults.

    Wrap the transport that sends requests, and put it under the retry layer, so that every
    attempt meets the faults: ``RetryTransport(policy, FaultTransport(plan))``.

    - :class:`~seawall.faults.Latency`: waits on the plan's clock before sending, at most the
      request's read timeout, then raises ``httpx.ReadTimeout`` as a slow server would.
    - :class:`~seawall.faults.Status`: answers without sending.
    - :class:`~seawall.faults.Error`: raises the fault's exception.
    - :class:`~seawall.faults.Refuse`: raises ``httpx.ConnectError`` (the request never left).
    - :class:`~seawall.faults.Reset`: raises ``httpx.ReadError``; with ``after_send`` the
      request is sent and answered first, and the answer discarded.
    - :class:`~seawall.faults.Drip`: the body arrives *chunk* bytes per *interval* (a read
      timeout shorter than the interval times out, as on a socket).

    Args:
        plan: the faults.
        transport: the transport that sends requests (``httpx.HTTPTransport()`` by default).
    """

    def __init__(self, plan: FaultPlan, transport: httpx.BaseTransport | None = None) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(f"transport must be an httpx.BaseTransport, got {transport!r}")
        self.plan = _check(plan)
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        script = _script(self.plan, request)
        sleep = self.plan.clock.sleep
        answer = None
        try:
            while True:
                step = script.send(answer)
                answer = None
                if step == _SEND:
                    answer = self._transport.handle_request(request)
                elif step == _SEND_AND_DISCARD:
                    discarded = self._transport.handle_request(request)
                    try:
                        discarded.read()
                    finally:
                        discarded.close()
                else:
                    assert isinstance(step, float)
                    sleep(step)
        except StopIteration as done:
            response: httpx.Response = done.value
            return response

    def close(self) -> None:
        self._transport.close()


@public("seawall.faults")
class AsyncFaultTransport(httpx.AsyncBaseTransport):
    """The asyncio twin of :class:`FaultTransport` (waits with the plan clock's ``asleep``).

    Args:
        plan: the faults.
        transport: the transport that sends requests (``httpx.AsyncHTTPTransport()`` by
            default).
    """

    def __init__(self, plan: FaultPlan, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(f"transport must be an httpx.AsyncBaseTransport, got {transport!r}")
        self.plan = _check(plan)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        script = _script(self.plan, request)
        asleep = self.plan.clock.asleep
        answer = None
        try:
            while True:
                step = script.send(answer)
                answer = None
                if step == _SEND:
                    answer = await self._transport.handle_async_request(request)
                elif step == _SEND_AND_DISCARD:
                    discarded = await self._transport.handle_async_request(request)
                    try:
                        await discarded.aread()
                    finally:
                        await discarded.aclose()
                else:
                    assert isinstance(step, float)
                    await asleep(step)
        except StopIteration as done:
            response: httpx.Response = done.value
            return response

    async def aclose(self) -> None:
        await self._transport.aclose()


class _Drip(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that drips (sync or async, as the stream it wraps)."""

    def __init__(
        self,
        inner: Any,  # an httpx.SyncByteStream or AsyncByteStream
        fault: Drip,
        plan: FaultPlan,
        read_timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._inner = inner
        self._fault = fault
        self._clock = plan.clock
        self._read_timeout = read_timeout
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        for part in self._inner:
            for wait, piece in self._fault.pieces(part, self._read_timeout):
                self._clock.sleep(wait)
                if piece is None:
                    raise httpx.ReadTimeout(_TIMED_OUT, request=self._request)
                yield piece

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._inner:
            for wait, piece in self._fault.pieces(part, self._read_timeout):
                await self._clock.asleep(wait)
                if piece is None:
                    raise httpx.ReadTimeout(_TIMED_OUT, request=self._request)
                yield piece

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

"""Fault-injecting httpx transports (sync and async)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx

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
        plan = self.plan
        decision = plan.decide()
        sleep = plan.clock.sleep
        read_timeout = _read_timeout(request)
        if decision.delay:
            if read_timeout is not None and decision.delay > read_timeout:
                sleep(read_timeout)
                raise httpx.ReadTimeout(_TIMED_OUT, request=request)
            sleep(decision.delay)
        fault = decision.fault
        if fault is None:
            return self._transport.handle_request(request)
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
                response = self._transport.handle_request(request)
                try:
                    response.read()
                finally:
                    response.close()
            raise httpx.ReadError(_RESET, request=request)
        assert isinstance(fault, Drip)
        response = self._transport.handle_request(request)
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)
        response.stream = _SyncDrip(stream, fault, sleep, read_timeout, request)
        return response

    def close(self) -> None:
        self._transport.close()


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
        plan = self.plan
        decision = plan.decide()
        asleep = plan.clock.asleep
        read_timeout = _read_timeout(request)
        if decision.delay:
            if read_timeout is not None and decision.delay > read_timeout:
                await asleep(read_timeout)
                raise httpx.ReadTimeout(_TIMED_OUT, request=request)
            await asleep(decision.delay)
        fault = decision.fault
        if fault is None:
            return await self._transport.handle_async_request(request)
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
                response = await self._transport.handle_async_request(request)
                try:
                    await response.aread()
                finally:
                    await response.aclose()
            raise httpx.ReadError(_RESET, request=request)
        assert isinstance(fault, Drip)
        response = await self._transport.handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        response.stream = _AsyncDrip(stream, fault, asleep, read_timeout, request)
        return response

    async def aclose(self) -> None:
        await self._transport.aclose()


class _SyncDrip(httpx.SyncByteStream):
    def __init__(
        self,
        inner: httpx.SyncByteStream,
        fault: Drip,
        sleep: Callable[[float], None],
        read_timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._inner = inner
        self._fault = fault
        self._sleep = sleep
        self._read_timeout = read_timeout
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        chunk, interval = self._fault.chunk, self._fault.interval
        for part in self._inner:
            for i in range(0, len(part), chunk):
                if self._read_timeout is not None and interval > self._read_timeout:
                    self._sleep(self._read_timeout)
                    raise httpx.ReadTimeout(_TIMED_OUT, request=self._request)
                self._sleep(interval)
                yield part[i : i + chunk]

    def close(self) -> None:
        self._inner.close()


class _AsyncDrip(httpx.AsyncByteStream):
    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        fault: Drip,
        asleep: Callable[[float], Any],
        read_timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._inner = inner
        self._fault = fault
        self._asleep = asleep
        self._read_timeout = read_timeout
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunk, interval = self._fault.chunk, self._fault.interval
        async for part in self._inner:
            for i in range(0, len(part), chunk):
                if self._read_timeout is not None and interval > self._read_timeout:
                    await self._asleep(self._read_timeout)
                    raise httpx.ReadTimeout(_TIMED_OUT, request=self._request)
                await self._asleep(interval)
                yield part[i : i + chunk]

    async def aclose(self) -> None:
        await self._inner.aclose()

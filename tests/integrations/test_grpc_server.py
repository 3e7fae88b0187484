"""seawall.grpc server interceptors (deadline intake, load shedding) on a real grpcio server on
127.0.0.1, sync and grpc.aio, called by real clients."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import grpc.aio
import pytest

import seawall
import seawall.grpc as sg

SERVICE = "test.Served"
CODES = grpc.StatusCode


class Seen:
    def __init__(self) -> None:
        self.remaining: list[float] = []
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.port = 0


class Stoppable:
    """A started grpcio server and its worker pool, stopped together."""

    def __init__(self, server: grpc.Server, pool: futures.ThreadPoolExecutor) -> None:
        self.server = server
        self.pool = pool

    def stop(self, grace: float | None) -> None:
        self.server.stop(grace).wait(10)
        self.pool.shutdown(wait=True)  # no worker thread outlives the test


def start_sync(seen: Seen, interceptors: list[Any]) -> Stoppable:
    def echo(request: bytes, context: Any) -> bytes:
        seen.calls += 1
        seen.remaining.append(seawall.remaining())
        return request

    def hold(request: bytes, context: Any) -> bytes:
        seen.calls += 1
        seen.entered.set()
        seen.release.wait(10)
        return request

    def stream(request: bytes, context: Any) -> Iterator[bytes]:
        seen.remaining.append(seawall.remaining())
        yield request
        yield request

    pool = futures.ThreadPoolExecutor(max_workers=8)
    srv = grpc.server(pool, interceptors=interceptors)
    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Hold": grpc.unary_unary_rpc_method_handler(hold),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
    }
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    seen.port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    return Stoppable(srv, pool)


@pytest.fixture
def seen() -> Seen:
    return Seen()


def test_deadline_intake_sync(seen: Seen) -> None:
    srv = start_sync(seen, [sg.DeadlineInterceptor(max_request_time=60.0)])
    try:
        with grpc.insecure_channel(f"127.0.0.1:{seen.port}") as ch:
            echo = ch.unary_unary(f"/{SERVICE}/Echo")
            assert echo(b"a", timeout=20.0) == b"a"  # grpc-timeout: the client's time left
            assert echo(b"b") == b"b"  # no deadline: the server's own limit
            # A plain-HTTP hop's header, when it is the shorter one.
            assert echo(b"c", timeout=30.0, metadata=(("x-request-deadline", "8000"),)) == b"c"
            assert list(ch.unary_stream(f"/{SERVICE}/Stream")(b"s", timeout=10.0)) == [b"s", b"s"]
    finally:
        srv.stop(None)
    a, b, c, s = seen.remaining
    # Seconds apart, so that a loaded machine's delays (up to a second or two) still tell them
    # apart: the client's 20 s, the server's limit of 60 s, the header's 8 s, the stream's 10 s
    # (grpc-timeout rounds up to 0.1 s at these sizes).
    assert 10.0 < a <= 20.2
    assert 50.0 < b <= 60.0
    assert 5.0 < c <= 8.0
    assert 5.0 < s <= 10.2


def test_load_shedding_sync(seen: Seen) -> None:
    shedder = sg.LoadShedder(max_concurrency=1)
    srv = start_sync(seen, [shedder])
    target = f"127.0.0.1:{seen.port}"
    try:
        with grpc.insecure_channel(target) as ch:
            holder = ch.unary_unary(f"/{SERVICE}/Hold").future(b"h", timeout=10.0)
            assert seen.entered.wait(5)
            assert shedder.in_flight == 1
            # A seawall client does not retry a shed call: the pushback says "don't retry".
            policy = seawall.RetryPolicy(clock=seawall.VirtualClock())
            retrying = grpc.intercept_channel(
                grpc.insecure_channel(target), sg.RetryInterceptor(policy, budget=None)
            )
            with retrying, pytest.raises(grpc.RpcError) as info:
                retrying.unary_unary(f"/{SERVICE}/Echo")(b"x", timeout=5.0)
            assert info.value.code() is CODES.RESOURCE_EXHAUSTED
            assert dict(info.value.trailing_metadata())[sg.PUSHBACK_HEADER] == "-1"
            # Nor does grpcio's own retry policy, even with RESOURCE_EXHAUSTED retryable.
            config = {
                "methodConfig": [
                    {
                        "name": [{"service": SERVICE}],
                        "retryPolicy": {
                            "maxAttempts": 3,
                            "initialBackoff": "0.01s",
                            "maxBackoff": "0.02s",
                            "backoffMultiplier": 2,
                            "retryableStatusCodes": ["RESOURCE_EXHAUSTED"],
                        },
                    }
                ]
            }
            options = [("grpc.service_config", json.dumps(config))]
            with (
                grpc.insecure_channel(target, options=options) as builtin,
                pytest.raises(grpc.RpcError) as info,
            ):
                builtin.unary_unary(f"/{SERVICE}/Echo")(b"y", timeout=5.0)
            assert info.value.code() is CODES.RESOURCE_EXHAUSTED
            assert seen.calls == 1  # only the holder reached a handler
            assert shedder.shed == 2
            seen.release.set()
            assert holder.result() == b"h"
            assert ch.unary_unary(f"/{SERVICE}/Echo")(b"z", timeout=5.0) == b"z"
    finally:
        seen.release.set()
        srv.stop(None)
    assert shedder.in_flight == 0


def test_load_shedding_with_pushback_is_retried_by_seawall(seen: Seen) -> None:
    shedder = sg.LoadShedder(max_concurrency=1, retry_after=0.2)
    srv = start_sync(seen, [shedder])
    target = f"127.0.0.1:{seen.port}"
    try:
        with grpc.insecure_channel(target) as ch:
            holder = ch.unary_unary(f"/{SERVICE}/Hold").future(b"h", timeout=10.0)
            assert seen.entered.wait(5)
            clock = seawall.VirtualClock()
            delays: list[float] = []

            def release_on_retry(event: seawall.RetryEvent) -> None:
                if event.kind == "retry":
                    delays.append(event.delay)
                    seen.release.set()
                    holder.result()  # the slot is free before the retry goes out

            policy = seawall.RetryPolicy(clock=clock, hooks=[release_on_retry])
            retrying = grpc.intercept_channel(
                grpc.insecure_channel(target), sg.RetryInterceptor(policy, budget=None)
            )
            with retrying:
                assert retrying.unary_unary(f"/{SERVICE}/Echo")(b"x", timeout=5.0) == b"x"
            assert delays == [0.2]
    finally:
        seen.release.set()
        srv.stop(None)


def test_bad_server_arguments() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        sg.LoadShedder(max_concurrency=0)
    with pytest.raises(ValueError, match="retry_after"):
        sg.AsyncLoadShedder(max_concurrency=1, retry_after=-1.0)
    with pytest.raises(ValueError, match="max_request_time"):
        sg.DeadlineInterceptor(max_request_time=-1.0)
    with pytest.raises(TypeError, match="clock"):
        sg.AsyncDeadlineInterceptor(clock=object())  # type: ignore[arg-type]


# -- grpc.aio ------------------------------------------------------------------------------------


async def start_aio(seen: Seen, interceptors: list[Any], gate: asyncio.Event) -> grpc.aio.Server:
    async def echo(request: bytes, context: Any) -> bytes:
        seen.calls += 1
        seen.remaining.append(seawall.remaining())
        return request

    async def hold(request: bytes, context: Any) -> bytes:
        seen.calls += 1
        seen.entered.set()
        await gate.wait()
        return request

    async def slow(request: bytes, context: Any) -> bytes:
        await asyncio.sleep(10)
        return request

    srv = grpc.aio.server(interceptors=interceptors)
    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Hold": grpc.unary_unary_rpc_method_handler(hold),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    }
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    seen.port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    return srv


async def test_aio_deadline_intake_cancels_at_the_deadline(seen: Seen) -> None:
    gate = asyncio.Event()
    interceptor = sg.AsyncDeadlineInterceptor(max_request_time=0.3)
    srv = await start_aio(seen, [interceptor], gate)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{seen.port}") as ch:
            assert await ch.unary_unary(f"/{SERVICE}/Echo")(b"a", timeout=2.0) == b"a"
            with pytest.raises(grpc.RpcError) as info:
                # The client allows 5 s; the server's own limit cancels the handler at 0.3 s.
                await ch.unary_unary(f"/{SERVICE}/Slow")(b"s", timeout=5.0)
            assert info.value.code() is CODES.DEADLINE_EXCEEDED
    finally:
        await srv.stop(None)
    (a,) = seen.remaining
    assert 0.0 < a <= 0.3


async def test_aio_load_shedding(seen: Seen) -> None:
    gate = asyncio.Event()
    shedder = sg.AsyncLoadShedder(max_concurrency=1, retry_after=0.5)
    srv = await start_aio(seen, [shedder], gate)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{seen.port}") as ch:
            holder = asyncio.ensure_future(ch.unary_unary(f"/{SERVICE}/Hold")(b"h", timeout=10.0))
            while not seen.entered.is_set():
                await asyncio.sleep(0.01)
            with pytest.raises(grpc.RpcError) as info:
                await ch.unary_unary(f"/{SERVICE}/Echo")(b"x", timeout=5.0)
            assert info.value.code() is CODES.RESOURCE_EXHAUSTED
            trailing = dict(info.value.trailing_metadata() or ())
            assert trailing[sg.PUSHBACK_HEADER] == "500"
            gate.set()
            assert await holder == b"h"
    finally:
        gate.set()
        await srv.stop(None)
    assert (shedder.shed, shedder.in_flight, seen.calls) == (1, 0, 1)

"""Proof on a real server: at twice its capacity, shedding keeps goodput; queueing collapses it.

A uvicorn server on 127.0.0.1 (random port, in a thread) runs an app of known capacity: it holds
each request for SERVICE seconds behind a semaphore of CONCURRENCY slots, so it completes at most
CONCURRENCY / SERVICE requests per second. An open-loop generator (plain asyncio streams) sends
twice that rate for LOAD_SECONDS, each request with a client timeout of CLIENT_TIMEOUT, then
stops by itself.

Goodput is the number of requests answered 200 within the client's timeout, per second of the
serving window (the sending window plus one service time).
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from seawall.server import OVERLOADED_HEADER, LoadShedder

pytestmark = pytest.mark.slow  # seconds of real traffic on a real server

CONCURRENCY = 10
SERVICE = 0.2
CAPACITY = CONCURRENCY / SERVICE  # 50 requests per second
LOAD = 2 * CAPACITY
LOAD_SECONDS = 4.0
CLIENT_TIMEOUT = 1.0
MAX_QUEUE_WAIT = 0.3


class CapacityApp:
    """Serves at most CONCURRENCY requests at once, each for SERVICE seconds, FIFO beyond that."""

    def __init__(self) -> None:
        self._slots: asyncio.Semaphore | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._slots is None:  # created on the server's own event loop
            self._slots = asyncio.Semaphore(CONCURRENCY)
        async with self._slots:
            await asyncio.sleep(SERVICE)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start a uvicorn server for an ASGI app on a random port (returned); stop it afterwards."""
    started: list[tuple[uvicorn.Server, threading.Thread, socket.socket]] = []

    def start(app: Any) -> int:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            app,
            loop="asyncio",
            http="h11",
            ws="none",
            lifespan="off",
            log_level="critical",  # the unprotected run ends with cancelled work
            access_log=False,
            backlog=1024,
            # The unprotected server still owes work for requests nobody waits for: cut it short.
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        started.append((server, thread, sock))
        limit = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < limit, "server did not start"
            time.sleep(0.01)
        port: int = sock.getsockname()[1]
        return port

    yield start
    for server, thread, sock in started:
        server.should_exit = True
        thread.join(10)
        sock.close()
        assert not thread.is_alive()


class Result:
    def __init__(self) -> None:
        self.ok_latencies: list[float] = []
        self.shed = 0
        self.shed_with_signal = 0
        self.timed_out = 0
        self.other = 0
        self.sent = 0
        self.send_seconds = 0.0

    @property
    def goodput(self) -> float:
        return len(self.ok_latencies) / (LOAD_SECONDS + SERVICE)


async def get(port: int) -> tuple[int, dict[str, str]]:
    """One HTTP/1.1 GET on a fresh connection: the status and headers of the answer.

    A minimal client on asyncio streams: it costs the generator little, so the generator (not
    the client library) never limits the offered load on a small machine.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.read()
    finally:
        writer.close()
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def generate_load(port: int) -> Result:
    """Open loop: one request every 1/LOAD s for LOAD_SECONDS, whatever the answers; then stop."""
    result = Result()

    async def one() -> None:
        start = time.monotonic()
        try:
            # The caller's whole budget for the request, as a client deadline would be.
            status, headers = await asyncio.wait_for(get(port), CLIENT_TIMEOUT)
        except (TimeoutError, asyncio.TimeoutError):  # distinct types on Python 3.10
            result.timed_out += 1
            return
        except OSError:
            result.other += 1
            return
        if status == 200:
            result.ok_latencies.append(time.monotonic() - start)
        elif status == 503:
            result.shed += 1
            result.shed_with_signal += headers.get(OVERLOADED_HEADER) == "1"
        else:
            result.other += 1

    tasks = []
    begin = time.monotonic()
    total = int(LOAD * LOAD_SECONDS)
    for i in range(total):
        delay = begin + i / LOAD - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one()))
    result.sent = total
    result.send_seconds = time.monotonic() - begin
    # Every request ends by itself within the client timeout; the bound is a safety net.
    await asyncio.wait_for(asyncio.gather(*tasks), CLIENT_TIMEOUT + 5)
    return result


@pytest.mark.timeout(60)
async def test_shedding_keeps_goodput_at_twice_capacity_and_queueing_collapses(serve: Any) -> None:
    shedder = LoadShedder(
        CapacityApp(),
        max_concurrency=CONCURRENCY,
        max_queue=CONCURRENCY,
        max_queue_wait=MAX_QUEUE_WAIT,
    )
    shed = await generate_load(serve(shedder))
    naive = await generate_load(serve(CapacityApp()))

    # With shedding: goodput stays at >= 90% of capacity ...
    assert shed.goodput >= 0.9 * CAPACITY, vars(shed)
    # ... the excess is rejected cheaply, with the overload signal, and nothing times out ...
    assert shed.shed == shed.shed_with_signal
    assert shed.shed >= 0.3 * shed.sent
    assert shed.timed_out == 0
    assert shed.other == 0
    # ... and accepted requests are served in about one service time, at most the queue wait.
    assert max(shed.ok_latencies) < SERVICE + MAX_QUEUE_WAIT + 0.25
    assert statistics.median(shed.ok_latencies) < SERVICE + 0.1
    assert shedder.stats.in_flight == 0

    # Without shedding: the same server queues everything, answers late, and most callers give
    # up first. The share answered within the timeout falls well below; goodput collapses.
    assert naive.goodput < 0.5 * CAPACITY, vars(naive)
    assert naive.timed_out > 0.5 * naive.sent
    assert len(naive.ok_latencies) / naive.sent < 0.5 * len(shed.ok_latencies) / shed.sent

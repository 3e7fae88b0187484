"""Proof on a real server: at twice its capacity, shedding keeps goodput; queueing collapses it.

Two uvicorn servers on 127.0.0.1 (random ports, in threads) run the same app of known capacity,
one behind LoadShedder: it holds each request for SERVICE seconds behind a semaphore of
CONCURRENCY slots, so it completes at most CONCURRENCY / SERVICE requests per second. Two
open-loop generators (plain asyncio streams), one per server, run side by side in one event
loop: each sends twice that rate for LOAD_SECONDS, each request with a client timeout of
CLIENT_TIMEOUT, then stops by itself. Both servers see the same machine at the same moment, so
a busy machine weighs on both alike.

Goodput is the number of requests answered 200 within the client's timeout, per second of the
serving window (the sending window plus one service time).

The scale is chosen for a loaded machine (load 10 on two cores): a few dozen requests per second
in all, so that the process is not short of CPU; service and queue times of 0.4 s and a client
timeout of 2 s, so that a scheduling delay of a second does not turn an accepted request into a
timeout; twelve seconds, so that the queueing server's backlog outgrows the timeout for all but
the first two of them. Every assertion's message is both runs' figures.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn

from seawall.server import OVERLOADED_HEADER, LoadShedder

pytestmark = pytest.mark.slow  # seconds of real traffic on real servers

CONCURRENCY = 5
SERVICE = 0.4
CAPACITY = CONCURRENCY / SERVICE  # 12.5 requests per second
LOAD = 2 * CAPACITY
LOAD_SECONDS = 12.0
CLIENT_TIMEOUT = 2.0
MAX_QUEUE_WAIT = 0.4

# The bounds. The proof is the comparison: the same load on both servers at the same moment,
# so a busy machine weighs on both alike. The queueing server keeps about 30% of its capacity on
# any machine; the shedding one 97% on a quiet machine (docs/server.md) and 70% in the worst run
# seen on a starved machine (two cores shared with other builds), where a freed slot is handed
# on late and the client's loop reads answers late. So: the shedding server keeps at least
# SHED_FLOOR of its capacity and SHED_OVER_NAIVE times the queueing server's goodput; the
# queueing one stays below NAIVE_CEILING of its capacity. Latency bounds add the event loop's
# lag measured beside the load (a ticker in the same loop): what the machine, not the server,
# added to each answer.
SHED_FLOOR = 0.6
SHED_OVER_NAIVE = 1.6
NAIVE_CEILING = 0.5
TICK = 0.05


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
        limit = time.monotonic() + 30
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
    def __init__(self, name: str) -> None:
        self.name = name
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

    def quantile(self, q: float) -> float:
        """The *q* quantile of the accepted requests' latencies (0 when none was accepted)."""
        ordered = sorted(self.ok_latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    def __str__(self) -> str:
        return (
            f"{self.name}: goodput {self.goodput:.1f}/s ({self.goodput / CAPACITY:.0%} of "
            f"{CAPACITY:g}/s), {len(self.ok_latencies)} of {self.sent} answered in time "
            f"(sent in {self.send_seconds:.1f} s), {self.shed} shed ({self.shed_with_signal} "
            f"with the signal), {self.timed_out} timed out, {self.other} other; latency of "
            f"accepted p50/p95/max {self.quantile(0.5):.2f}/{self.quantile(0.95):.2f}/"
            f"{self.quantile(1.0):.2f} s"
        )


def report(*results: Result) -> str:
    """What the runs measured, for an assertion's message."""
    return "\n".join(str(r) for r in results)


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


async def generate_load(port: int, name: str) -> Result:
    """Open loop: one request every 1/LOAD s for LOAD_SECONDS, whatever the answers; then stop."""
    result = Result(name)

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
    await asyncio.wait_for(asyncio.gather(*tasks), CLIENT_TIMEOUT + 30)
    return result


class Lag:
    """How late the load generator's event loop ran, measured by a ticker beside the load."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def quantile(self, q: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    def __str__(self) -> str:
        return (
            f"event loop lag p50/p95/max {self.quantile(0.5):.2f}/{self.quantile(0.95):.2f}/"
            f"{self.quantile(1.0):.2f} s ({len(self.samples)} ticks)"
        )


async def _tick(lag: Lag, stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.monotonic()
        await asyncio.sleep(TICK)
        lag.samples.append(max(0.0, time.monotonic() - began - TICK))


async def side_by_side(shed_port: int, naive_port: int) -> tuple[Result, Result, Lag]:
    """The same open-loop load on both servers at the same time, and the loop's lag meanwhile."""
    lag, stop = Lag(), asyncio.Event()
    ticker = asyncio.ensure_future(_tick(lag, stop))
    try:
        shed, naive = await asyncio.gather(
            generate_load(shed_port, "with shedding"), generate_load(naive_port, "queueing")
        )
    finally:
        stop.set()
        await ticker
    return shed, naive, lag


async def settled(in_flight: Callable[[], int]) -> int:
    """*in_flight()* once it is 0, or after a few seconds: a server thread may end a request
    (and count it) a moment after its client read the answer."""
    limit = time.monotonic() + 5
    while in_flight() and time.monotonic() < limit:
        await asyncio.sleep(0.01)
    return in_flight()


def check_goodput(shed: Result, naive: Result, lag: Lag, in_flight: int) -> None:
    """The proof's assertions, shared by the ASGI and WSGI runs; each message is both runs and
    the loop's lag. *in_flight*: the requests the shedder still counted as running once the load
    was over."""
    said = report(shed, naive) + f"\n{lag}"
    print(said)  # shown by `pytest -rA`, for the figures in docs/server.md
    # With shedding: goodput stays near capacity, well above the queueing server's ...
    assert shed.goodput >= SHED_FLOOR * CAPACITY, said
    assert shed.goodput >= SHED_OVER_NAIVE * naive.goodput, said
    # ... the excess is rejected cheaply, with the overload signal ...
    assert shed.shed == shed.shed_with_signal, said
    assert shed.shed >= 0.3 * shed.sent, said
    assert shed.other == 0, said
    # ... accepted requests are served in about one service time, at most the queue wait, plus
    # what the machine added (the queueing server answers from a queue that grows by CAPACITY a
    # second) ...
    assert shed.quantile(0.5) < SERVICE + MAX_QUEUE_WAIT + lag.quantile(0.5), said
    assert shed.quantile(0.95) < SERVICE + MAX_QUEUE_WAIT + 0.5 + lag.quantile(1.0), said
    # ... and few time out: none on a quiet machine, and far fewer than without shedding on a
    # starved one, where a scheduling delay of over a second turns an accepted request into one.
    assert shed.timed_out <= max(0.02 * shed.sent, 0.5 * naive.timed_out), said
    assert in_flight <= shed.timed_out, said  # every other request ended before its timeout

    # Without shedding: the same server queues everything, answers late, and most callers give
    # up first. The share answered within the timeout falls well below; goodput collapses.
    assert naive.goodput < NAIVE_CEILING * CAPACITY, said
    assert naive.timed_out > 0.5 * naive.sent, said


@pytest.mark.timeout(120)
async def test_shedding_keeps_goodput_at_twice_capacity_and_queueing_collapses(serve: Any) -> None:
    shedder = LoadShedder(
        CapacityApp(),
        max_concurrency=CONCURRENCY,
        max_queue=CONCURRENCY,
        max_queue_wait=MAX_QUEUE_WAIT,
    )
    shed, naive, lag = await side_by_side(serve(shedder), serve(CapacityApp()))
    check_goodput(shed, naive, lag, await settled(lambda: shedder.stats.in_flight))

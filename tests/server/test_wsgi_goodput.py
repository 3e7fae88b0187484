"""Proof on a real threaded WSGI server (waitress): at twice its capacity, the WSGI LoadShedder
keeps goodput; the same server without it queues and collapses.

Each server runs in a process of its own (wsgi_goodput_server.py), as in production, so that
its threads never compete with the load generator, or with the other server, for one
interpreter's lock. The application holds each request for SERVICE seconds behind CONCURRENCY
slots, so it completes at most CONCURRENCY / SERVICE requests per second. waitress has more
threads than the shedder admits and queues, so the shedder (not waitress's own task queue)
decides. The load, the scale and the bounds are those of tests/server/test_goodput.py (the
ASGI proof): twice the capacity for LOAD_SECONDS on both servers side by side, each request
with a client timeout, stopping by itself.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_goodput import (
    CONCURRENCY,
    MAX_QUEUE_WAIT,
    SERVICE,
    check_goodput,
    side_by_side,
)

THREADS = 2 * CONCURRENCY + 8
ARGS = (CONCURRENCY, SERVICE, MAX_QUEUE_WAIT, THREADS)
SERVER = Path(__file__).with_name("wsgi_goodput_server.py")


@pytest.fixture
def wsgi_servers() -> Iterator[tuple[int, int]]:
    """The shedding and the queueing server's ports, each server a process of its own."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(SERVER), mode, *map(str, ARGS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for mode in ("shed", "queue")
    ]
    try:
        ports = [int(p.stdout.readline()) for p in processes if p.stdout]
        yield ports[0], ports[1]
    finally:
        for p in processes:
            try:
                p.communicate(timeout=10)  # closes its input: the server stops
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


async def in_flight(port: int) -> int:
    """The shedding server's count of requests still running, once it is 0 or after a few
    seconds: a server thread may end a request (and count it) a moment after its client read
    the answer."""
    limit = time.monotonic() + 5
    while True:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /in-flight HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        answer = await reader.read()
        writer.close()
        count = int(answer.rsplit(b"\r\n\r\n", 1)[1])
        if not count or time.monotonic() > limit:
            return count
        await asyncio.sleep(0.01)


# Seconds of real traffic on real servers: measured in a pytest run of its own (`make soak`).
@pytest.mark.realtime
@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_wsgi_shedding_keeps_goodput_at_twice_capacity(
    wsgi_servers: tuple[int, int],
) -> None:
    shed_port, naive_port = wsgi_servers
    shed, naive, lag = await side_by_side(shed_port, naive_port)
    # waitress queues everything without the shedder: most callers give up first.
    check_goodput(shed, naive, lag, await in_flight(shed_port))

"""Proof on a real threaded WSGI server (waitress): at twice its capacity, the WSGI LoadShedder
keeps goodput; the same server without it queues and collapses.

The application holds each request for SERVICE seconds behind CONCURRENCY slots, so it completes
at most CONCURRENCY / SERVICE requests per second. waitress has more threads than the shedder
admits and queues, so the shedder (not waitress's own task queue) decides. The load, the scale
and the bounds are those of tests/server/test_goodput.py (the ASGI proof): twice the capacity
for LOAD_SECONDS on both servers side by side, each request with a client timeout, stopping by
itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import pytest
from test_goodput import (
    CONCURRENCY,
    MAX_QUEUE_WAIT,
    SERVICE,
    check_goodput,
    settled,
    side_by_side,
)
from wsgi_serving import serve_wsgi

from seawall.server.wsgi import LoadShedder

__all__ = ["serve_wsgi"]  # the fixture, imported for pytest

THREADS = 2 * CONCURRENCY + 8


class CapacityApp:
    """Serves at most CONCURRENCY requests at once, each for SERVICE seconds."""

    def __init__(self) -> None:
        self._slots = threading.Semaphore(CONCURRENCY)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with self._slots:
            time.sleep(SERVICE)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]


# Seconds of real traffic on real servers: measured in a pytest run of its own (`make soak`),
# where no thread left by another test competes with the servers'.
@pytest.mark.realtime
@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_wsgi_shedding_keeps_goodput_at_twice_capacity(serve_wsgi: Any) -> None:
    shedder = LoadShedder(
        CapacityApp(),
        max_concurrency=CONCURRENCY,
        max_queue=CONCURRENCY,
        max_queue_wait=MAX_QUEUE_WAIT,
    )
    shed, naive = await side_by_side(
        serve_wsgi(shedder, threads=THREADS), serve_wsgi(CapacityApp(), threads=THREADS)
    )
    # waitress queues everything without the shedder: most callers give up first.
    check_goodput(shed, naive, await settled(lambda: shedder.stats.in_flight))

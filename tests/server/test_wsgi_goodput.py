"""Proof on a real threaded WSGI server (waitress): at twice its capacity, the WSGI LoadShedder
keeps goodput; the same server without it queues and collapses.

The application holds each request for SERVICE seconds behind CONCURRENCY slots, so it completes
at most CONCURRENCY / SERVICE requests per second. waitress has more threads than the shedder
admits and queues, so the shedder (not waitress's own task queue) decides. The open-loop load is
that of tests/server/test_goodput.py (the ASGI proof): twice the capacity for LOAD_SECONDS, each
request with a client timeout, stopping by itself.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterable
from typing import Any

import pytest
from test_goodput import CAPACITY, CONCURRENCY, MAX_QUEUE_WAIT, SERVICE, generate_load
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


# Seconds of real traffic on a real server: measured in a pytest run of its own (`make soak`),
# where no thread left by another test competes with the server's.
@pytest.mark.realtime
@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_wsgi_shedding_keeps_goodput_at_twice_capacity(serve_wsgi: Any) -> None:
    shedder = LoadShedder(
        CapacityApp(),
        max_concurrency=CONCURRENCY,
        max_queue=CONCURRENCY,
        max_queue_wait=MAX_QUEUE_WAIT,
    )
    shed = await generate_load(serve_wsgi(shedder, threads=THREADS))
    naive = await generate_load(serve_wsgi(CapacityApp(), threads=THREADS))

    # With shedding: goodput stays at >= 90% of capacity, the excess is rejected cheaply with
    # the overload signal, nothing times out, and accepted requests are served promptly.
    assert shed.goodput >= 0.9 * CAPACITY, vars(shed)
    assert shed.shed == shed.shed_with_signal
    assert shed.shed >= 0.3 * shed.sent
    assert shed.timed_out == 0
    assert shed.other == 0
    assert max(shed.ok_latencies) < SERVICE + MAX_QUEUE_WAIT + 0.25
    assert statistics.median(shed.ok_latencies) < SERVICE + 0.1
    assert shedder.stats.in_flight == 0  # every request ended before its client's timeout

    # Without shedding: waitress queues everything, answers late, most callers give up first.
    assert naive.goodput < 0.5 * CAPACITY, vars(naive)
    assert naive.timed_out > 0.5 * naive.sent

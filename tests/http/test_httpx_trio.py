"""AsyncRetryTransport on asyncio and on trio (through anyio.run), against the real server.

The policy waits on a VirtualClock; the attempt bounds are cancellations on the running
library's own clock, measured here in real time (each cut at 0.3 s, where the server's drip
would take over 2 s).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest
from seawall_test_server import Server

import seawall
from seawall.httpx import AsyncRetryTransport

pytestmark = pytest.mark.parametrize("backend", ["asyncio", "trio"])


def run(backend: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn, backend=backend)


def aclient(buffer_limit: int = 1 << 20, **policy: Any) -> httpx.AsyncClient:
    p = seawall.RetryPolicy(clock=seawall.VirtualClock(), rng=random.Random(2), hooks=(), **policy)
    transport = AsyncRetryTransport(p, budget=None, buffer_limit=buffer_limit)
    return httpx.AsyncClient(transport=transport, timeout=5.0)


def test_retries_statuses_with_history(server: Server, backend: str) -> None:
    async def main() -> httpx.Response:
        async with aclient(backoff=seawall.Backoff.constant(1.0)) as c:
            return await c.get(server.url + "/flaky/2/503")

    r = run(backend, main)
    assert (r.status_code, r.text) == (200, "ok after 3")
    assert [(a.status, a.wait) for a in r.extensions["seawall.history"]] == [
        (503, 1.0),
        (503, 1.0),
        (200, None),
    ]


def test_attempt_timeout_cuts_a_dripping_answer(server: Server, backend: str) -> None:
    async def main() -> httpx.Response:
        async with aclient(attempt_timeout=0.3, max_attempts=2) as c:
            return await c.get(server.url + "/drip-head/1")

    started = time.monotonic()
    r = run(backend, main)
    assert r.text == "ok after 2"
    assert server.count("GET", "/drip-head/1") == 2
    assert 0.3 <= time.monotonic() - started < 1.5
    first = r.extensions["seawall.history"][0]
    assert isinstance(first.error, httpx.TimeoutException)


def test_streamed_body_is_bounded_by_the_attempt(server: Server, backend: str) -> None:
    async def main() -> None:
        async with (
            aclient(buffer_limit=0, attempt_timeout=0.3) as c,
            c.stream("GET", server.url + "/drip-body/1") as r,
        ):
            assert r.status_code == 200
            with pytest.raises(httpx.ReadTimeout):
                await r.aread()

    started = time.monotonic()
    run(backend, main)
    assert 0.25 <= time.monotonic() - started < 1.5


def test_deadline_scope_is_sent_and_bounds(server: Server, backend: str) -> None:
    async def main() -> httpx.Response:
        async with aclient() as c:
            with seawall.deadline(5.0):
                return await c.get(server.url + "/ok")

    assert run(backend, main).text == "ok"
    (got,) = server.requests_to("/ok")
    assert 0 < int(got.headers["x-request-deadline"]) <= 5000

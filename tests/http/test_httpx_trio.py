"""AsyncRetryTransport on asyncio and on trio (through anyio.run), against the real server.

The policy waits on a VirtualClock; the attempt bounds are cancellations on the running
library's own clock, measured here in real time (each cut at 0.3 s, where the server's drip
would take 10 s: a client free before WELL_BEFORE, 5 s, was cut, however loaded the machine).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest
from seawall_test_server import HEDGE_DELAY, WELL_BEFORE, Server

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
    assert 0.3 <= time.monotonic() - started < WELL_BEFORE
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
    assert 0.25 <= time.monotonic() - started < WELL_BEFORE


def test_deadline_scope_is_sent_and_bounds(server: Server, backend: str) -> None:
    async def main() -> httpx.Response:
        async with aclient() as c:
            with seawall.deadline(5.0):
                return await c.get(server.url + "/ok")

    assert run(backend, main).text == "ok"
    (got,) = server.requests_to("/ok")
    assert 0 < int(got.headers["x-request-deadline"]) <= 5000


def test_hedge_answers_a_stalled_request_and_cancels_the_loser(
    server: Server, backend: str
) -> None:
    hedge = seawall.Hedge(HEDGE_DELAY)
    inner = httpx.AsyncHTTPTransport()
    p = seawall.RetryPolicy(clock=seawall.VirtualClock(), hooks=())
    transport = AsyncRetryTransport(p, inner, budget=None, hedge=hedge)

    async def main() -> tuple[httpx.Response, int, bool]:
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
            r = await c.get(server.url + "/stall/1")
            connections = inner._pool.connections  # the loser's was closed
            return r, len(connections), all(conn.is_idle() for conn in connections)

    started = time.monotonic()
    r, connections, idle = run(backend, main)
    assert r.text == "ok after 2"  # the second copy's answer
    assert time.monotonic() - started < WELL_BEFORE  # the stalled copy would hold for 10 s
    assert server.count("GET", "/stall/1") == 2
    assert (hedge.calls, hedge.hedges, hedge.wins) == (1, 1, 1)
    assert (connections, idle) == (1, True)


def test_hedged_copy_errors_reach_the_retry_loop(
    server: Server, refused_url: str, backend: str
) -> None:
    hedge = seawall.Hedge(HEDGE_DELAY)
    p = seawall.RetryPolicy(clock=seawall.VirtualClock(), hooks=(), max_attempts=2)
    transport = AsyncRetryTransport(p, budget=None, hedge=hedge)

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
            await c.get(refused_url)

    with pytest.raises(httpx.ConnectError) as error:
        run(backend, main)
    assert len(error.value.seawall_history) == 2  # type: ignore[attr-defined]


def test_hedge_inside_a_deadline_tells_each_copy_its_time_left(
    server: Server, backend: str
) -> None:
    hedge = seawall.Hedge(HEDGE_DELAY)
    p = seawall.RetryPolicy(hooks=())  # the system clock: the copy starts HEDGE_DELAY later
    transport = AsyncRetryTransport(p, budget=None, hedge=hedge)

    async def main() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
            with seawall.deadline(5.0):
                return await c.get(server.url + "/stall/1")

    assert run(backend, main).text == "ok after 2"
    first, second = (
        int(got.headers["x-request-deadline"]) for got in server.requests_to("/stall/1")
    )
    assert 0 < second < first <= 5000  # the copy sent later has less time left

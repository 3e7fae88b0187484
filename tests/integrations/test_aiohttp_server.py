"""seawall.server.aiohttp.LoadShedder on a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import seawall
from seawall.server.aiohttp import OVERLOADED_HEADER, LoadShedder


class App:
    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = 0
        self.remaining: list[float] = []

    async def hold(self, request: web.Request) -> web.Response:
        self.entered += 1
        await self.gate.wait()
        return web.Response(text="held")

    async def left(self, request: web.Request) -> web.Response:
        self.remaining.append(seawall.remaining())
        return web.Response(text="ok")

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[LoadShedder], Any]]:
    runners: list[web.AppRunner] = []

    async def start(shedder: LoadShedder) -> tuple[App, str]:
        app = App()
        web_app = web.Application(middlewares=[shedder])
        web_app.router.add_get("/hold", app.hold)
        web_app.router.add_get("/left", app.left)
        web_app.router.add_get("/slow", app.slow)
        runner = web.AppRunner(web_app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return app, f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def wait_for(predicate: Callable[[], bool]) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_limit_queue_and_cheap_rejection(serve: Any) -> None:
    shedder = LoadShedder(max_concurrency=1, max_queue=1, max_queue_wait=5.0, retry_after=2)
    app, url = await serve(shedder)
    async with aiohttp.ClientSession() as s:

        async def get(path: str) -> tuple[int, str, Any]:
            async with s.get(url + path) as r:
                return r.status, await r.text(), r.headers

        first = asyncio.ensure_future(get("/hold"))
        await wait_for(lambda: app.entered == 1)
        second = asyncio.ensure_future(get("/hold"))
        await wait_for(lambda: shedder.stats.queued == 1)
        # The queue is full: newest first, so the oldest waiter is shed, cheaply.
        third = asyncio.ensure_future(get("/hold"))
        status, _, headers = await second
        assert status == 503
        assert headers["Retry-After"] == "2"
        assert headers[OVERLOADED_HEADER] == "1"
        app.gate.set()
        assert (await first)[:2] == (200, "held")
        assert (await third)[:2] == (200, "held")
    assert app.entered == 2
    assert shedder.stats.admitted == 2
    assert shedder.stats.shed["queue_full"] == 1
    assert (shedder.stats.in_flight, shedder.stats.queued) == (0, 0)


async def test_deadline_intake(serve: Any) -> None:
    shedder = LoadShedder(max_concurrency=4, max_request_time=3.0)
    app, url = await serve(shedder)
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/left", headers={"x-request-deadline": "1500"}) as r:
            assert r.status == 200
        async with s.get(url + "/left") as r:
            assert r.status == 200
        async with s.get(url + "/left", headers={"grpc-timeout": "0n"}) as r:
            assert r.status == 504  # already gone: no work
        async with s.get(url + "/slow", headers={"x-request-deadline": "200"}) as r:
            assert r.status == 504  # cancelled at the deadline
    a, b = app.remaining
    assert 1.0 < a <= 1.5
    assert 2.5 < b <= 3.0
    assert shedder.stats.shed["deadline"] == 1


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        LoadShedder(max_concurrency=0)
    with pytest.raises(ValueError, match="status"):
        LoadShedder(max_concurrency=1, status=500)

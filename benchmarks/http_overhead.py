"""The HTTP integrations' own cost per request, side by side with bare clients and the peers.

Each contender sends GET requests that succeed at once, in-process, with no network:
  - httpx (sync and async) over ``httpx.MockTransport``: a bare client, seawall's
    ``RetryTransport`` / ``AsyncRetryTransport``, and httpx-retries' ``RetryTransport``;
  - requests over a urllib3 connection pool whose ``_make_request`` returns a prepared
    response (everything above the socket runs: ``HTTPAdapter.send``, ``urlopen``, urllib3's
    ``Retry``): a bare adapter (``max_retries=0``), ``HTTPAdapter(max_retries=Retry(3, ...))``
    and seawall's ``RetryAdapter``;
  - aiohttp against a real aiohttp server on 127.0.0.1 (the same event loop): a bare session,
    one with seawall's ``RetryMiddleware``, and one with a middleware that only passes the
    request on (what aiohttp's middleware chain costs by itself).
Every seawall contender uses the defaults (a per-host budget, the 30 s total time). Last, once
the others are measured, one more table per httpx client times a bare client, seawall, and
seawall inside ``seawall.deadline(10)`` (which adds the deadline headers): once a deadline
has been used in a process, each later request looks for an ambient deadline, so these
tables show that state, and the first ones a process that has never used one.

Contenders are interleaved in many short rounds, in an order shuffled for each round (with a
fixed order, the place in the round alone moved a ratio by 1-2%: a second bare client timed
right after the first came out at 1.01-1.02x). Each row gives the best time per request over
the rounds, and its ratio to the bare client as the median of the ratios measured within each
round, which a noisy neighbour disturbs least. Garbage collection is off while timing. Run:
`python benchmarks/http_overhead.py` (the peers are pinned in the `dev` extra).

Usage: python benchmarks/http_overhead.py [--rounds 200] [--number 25] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import importlib.metadata
import io
import os
import platform
import random
import statistics
import timeit
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import httpx_retries
import requests
import requests.adapters
import urllib3
import urllib3.connectionpool
from aiohttp import web

import seawall
import seawall.aiohttp
from seawall.httpx import AsyncRetryTransport, RetryTransport
from seawall.requests import RetryAdapter

PEERS = ("httpx", "httpx-retries", "requests", "urllib3", "aiohttp")
URL = "http://api.test/orders/7"


def machine() -> str:
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}; "
        + ", ".join(f"{p} {importlib.metadata.version(p)}" for p in PEERS)
    )


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b'{"id": 7}')


def httpx_clients(client: Any, transport: Any) -> dict[str, Any]:
    """The bare *client* class, and over seawall's *transport* and httpx-retries', on a mock."""
    mock = httpx.MockTransport(answer)
    peer = httpx_retries.RetryTransport(transport=mock, retry=httpx_retries.Retry(3))
    return {
        "bare": client(transport=mock),
        "seawall": client(transport=transport(transport=mock)),
        "httpx-retries": client(transport=peer),
    }


def httpx_sync() -> dict[str, Callable[[], object]]:
    clients = httpx_clients(httpx.Client, RetryTransport)
    return {n: (lambda c=c: c.get(URL)) for n, c in clients.items()}


def httpx_sync_deadline() -> dict[str, Callable[[], object]]:
    """Bare, seawall, and seawall inside ``seawall.deadline(10)`` (see AFTER_A_DEADLINE)."""
    clients = httpx_clients(httpx.Client, RetryTransport)

    def with_deadline() -> object:
        with seawall.deadline(10.0):
            return clients["seawall"].get(URL)

    return {
        "bare": lambda: clients["bare"].get(URL),
        "seawall": lambda: clients["seawall"].get(URL),
        "seawall, in a deadline": with_deadline,
    }


def httpx_async() -> dict[str, Callable[[], Awaitable[object]]]:
    clients = httpx_clients(httpx.AsyncClient, AsyncRetryTransport)
    return {n: (lambda c=c: c.get(URL)) for n, c in clients.items()}


def httpx_async_deadline() -> dict[str, Callable[[], Awaitable[object]]]:
    clients = httpx_clients(httpx.AsyncClient, AsyncRetryTransport)

    async def with_deadline() -> object:
        async with seawall.deadline(10.0):
            return await clients["seawall"].get(URL)

    return {
        "bare": lambda: clients["bare"].get(URL),
        "seawall": lambda: clients["seawall"].get(URL),
        "seawall, in a deadline": with_deadline,
    }


#: The title suffix of the tables measured once ``seawall.deadline`` has been used in the
#: process: they run last, since from then on the integrations' first-attempt path also looks
#: for an ambient deadline (see Policies.first), in every later request.
AFTER_A_DEADLINE = ", once a deadline was used"


class _PreparedPool(urllib3.connectionpool.HTTPConnectionPool):
    """A urllib3 pool whose requests are answered by a prepared response (no socket)."""

    def _make_request(self, conn: Any, method: str, url: str, **kw: Any) -> Any:
        return urllib3.HTTPResponse(
            body=io.BytesIO(b'{"id": 7}'),
            headers={"Content-Length": "9", "Content-Type": "application/json"},
            status=200,
            preload_content=kw.get("preload_content", True),
            decode_content=kw.get("decode_content", True),
            pool=self,
            connection=kw.get("response_conn"),
            request_method=method,
            request_url=url,
            retries=kw.get("retries"),
        )


def _session(adapter: requests.adapters.HTTPAdapter) -> requests.Session:
    adapter.poolmanager.pool_classes_by_scheme = {"http": _PreparedPool, "https": _PreparedPool}
    session = requests.Session()
    session.mount("http://", adapter)
    return session


def requests_sync() -> dict[str, Callable[[], object]]:
    retry = urllib3.Retry(total=3, backoff_factor=0.1, status_forcelist=(502, 503, 504))
    sessions = {
        "bare": _session(requests.adapters.HTTPAdapter()),
        "seawall": _session(RetryAdapter()),
        "urllib3 Retry": _session(requests.adapters.HTTPAdapter(max_retries=retry)),
    }
    return {name: (lambda s=s: s.get(URL)) for name, s in sessions.items()}


Times = dict[str, list[float]]  # seconds per request, one entry per round


def orders(contenders: dict[str, Any], rounds: int) -> list[list[str]]:
    """The order of the contenders in each round: shuffled, the same in every run."""
    rng = random.Random(rounds)
    out = []
    for _ in range(rounds):
        names = list(contenders)
        rng.shuffle(names)
        out.append(names)
    return out


def measure(
    contenders: dict[str, Callable[[], Any]], rounds: int, number: int, run: Callable[..., Any]
) -> Times:
    times: Times = {name: [] for name in contenders}
    for names in orders(contenders, rounds):
        for name in names:
            times[name].append(run(contenders[name], number) / number)
    return times


def run_sync(fn: Callable[[], object], number: int) -> float:
    return timeit.timeit(fn, number=number)


async def _serve() -> tuple[web.AppRunner, str]:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(body=b'{"id": 7}', content_type="application/json")

    app = web.Application()
    app.router.add_get("/orders/7", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/orders/7"


async def asynchronous(rounds: int, number: int) -> tuple[Times, Times, Times]:
    loop = asyncio.get_running_loop()

    async def timed(fn: Callable[[], Awaitable[object]], n: int) -> float:
        start = loop.time()
        for _ in range(n):
            await fn()
        return loop.time() - start

    async def best_of(contenders: dict[str, Callable[[], Awaitable[Any]]], n: int) -> Times:
        times: Times = {name: [] for name in contenders}
        gc.disable()
        try:
            for names in orders(contenders, rounds):
                for name in names:
                    times[name].append(await timed(contenders[name], n) / n)
        finally:
            gc.enable()
        return times

    httpx_times = await best_of(httpx_async(), number)

    runner, url = await _serve()
    try:

        async def passing(
            request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
        ) -> aiohttp.ClientResponse:
            return await handler(request)

        sessions = {
            "bare": aiohttp.ClientSession(),
            "seawall": aiohttp.ClientSession(middlewares=[seawall.aiohttp.RetryMiddleware()]),
            "a middleware passing it on": aiohttp.ClientSession(middlewares=[passing]),
        }

        async def get(session: aiohttp.ClientSession) -> bytes:
            async with session.get(url) as response:
                return await response.read()

        contenders: dict[str, Callable[[], Awaitable[Any]]] = {
            name: functools.partial(get, session) for name, session in sessions.items()
        }
        aiohttp_times = await best_of(contenders, number)
        for session in sessions.values():
            await session.close()
    finally:
        await runner.cleanup()
    return httpx_times, aiohttp_times, await best_of(httpx_async_deadline(), number)


def table(title: str, times: Times, markdown: bool) -> str:
    bare = times["bare"]
    rows = [
        (name, min(t) * 1e6, statistics.median(a / b for a, b in zip(t, bare, strict=True)))
        for name, t in times.items()
    ]
    if markdown:
        lines = [f"| {title} | best us/request | x bare (median) |", "|---|---:|---:|"]
        lines += [f"| {n} | {us:.1f} | {r:.2f} |" for n, us, r in rows]
    else:
        lines = [title] + [f"  {n:<26} {us:8.1f} us  {r:5.2f}x" for n, us, r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--number", type=int, default=25)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    sync_httpx = measure(httpx_sync(), args.rounds, args.number, run_sync)
    sync_requests = measure(requests_sync(), args.rounds, args.number, run_sync)
    # The deadline rows last (AFTER_A_DEADLINE): async, then sync.
    async_httpx, async_aiohttp, async_deadline = asyncio.run(asynchronous(args.rounds, args.number))
    sync_deadline = measure(httpx_sync_deadline(), args.rounds, args.number, run_sync)
    print(machine())
    print(
        f"{args.rounds} rounds of {args.number} requests, in a shuffled order: best "
        "us/request, median ratio to bare within a round"
    )
    for title, times in (
        ("httpx.Client (MockTransport)", sync_httpx),
        ("httpx.AsyncClient (MockTransport)", async_httpx),
        ("requests.Session (prepared urllib3 response)", sync_requests),
        ("aiohttp.ClientSession (aiohttp server on 127.0.0.1)", async_aiohttp),
        ("httpx.Client (MockTransport)" + AFTER_A_DEADLINE, sync_deadline),
        ("httpx.AsyncClient (MockTransport)" + AFTER_A_DEADLINE, async_deadline),
    ):
        print()
        print(table(title, times, args.markdown))


if __name__ == "__main__":
    main()

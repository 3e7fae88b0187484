"""seawall.aiohttp.RetryMiddleware against a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import seawall
import seawall.aiohttp as sa
from seawall.http import budget_for_host


class Scripted:
    """Answers follow a script per path key (the last step repeats); attempts are counted.

    A step is a status, ``(status, headers)``, or ``"cut"`` (a body shorter than declared).
    """

    def __init__(self) -> None:
        self.scripts: dict[str, list[Any]] = {}
        self.attempts: dict[str, int] = {}
        self.headers: dict[str, list[dict[str, str]]] = {}
        self.url = ""

    def script(self, key: str, *steps: Any) -> str:
        self.scripts[key] = list(steps)
        return f"{self.url}/s/{key}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        n = self.attempts.get(key, 0)
        self.attempts[key] = n + 1
        self.headers.setdefault(key, []).append(dict(request.headers))
        await request.read()
        steps = self.scripts.get(key, [200])
        step = steps[min(n, len(steps) - 1)]
        if step == "cut":
            response = web.StreamResponse(status=200, headers={"Content-Length": "100"})
            await response.prepare(request)
            await response.write(b"partial")
            assert request.transport is not None
            request.transport.close()
            return response
        if step == "slow":
            await asyncio.sleep(1.0)
            step = 200
        status, headers = step if isinstance(step, tuple) else (step, {})
        return web.Response(status=status, headers=headers, body=f"{key}:{status}".encode())


@pytest.fixture
async def server() -> AsyncIterator[Scripted]:
    state = Scripted()
    app = web.Application()
    app.router.add_route("*", "/s/{key}", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()


def policy(**kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("clock", seawall.VirtualClock())  # waits cost nothing
    return seawall.RetryPolicy(**kwargs)


def session(mw: sa.RetryMiddleware, **kwargs: Any) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(middlewares=[mw], **kwargs)


async def test_retries_transient_statuses(server: Scripted) -> None:
    url = server.script("a", 503, 502, 200)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s, s.get(url) as r:
        assert (r.status, await r.text()) == (200, "a:200")
    assert server.attempts["a"] == 3


async def test_gives_up_returning_the_last_response(server: Scripted) -> None:
    url = server.script("a", 503)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s, s.get(url) as r:
        assert (r.status, await r.text()) == (503, "a:503")
    assert server.attempts["a"] == 3


async def test_other_statuses_and_overload_are_not_retried(server: Scripted) -> None:
    missing = server.script("missing", 404)
    shed = server.script("shed", (503, {"x-seawall-overloaded": "1"}), 200)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s:
        async with s.get(missing) as r:
            assert r.status == 404
        async with s.get(shed) as r:
            assert r.status == 503
    assert (server.attempts["missing"], server.attempts["shed"]) == (1, 1)


async def test_post_needs_an_idempotency_key(server: Scripted) -> None:
    plain = server.script("plain", 503, 200)
    keyed = server.script("keyed", 503, 503, 200)
    async with (
        session(sa.RetryMiddleware(policy(), budget=None)) as s,
        s.post(plain, data=b"x") as r,
    ):
        assert r.status == 503
    async with (
        session(sa.RetryMiddleware(policy(), budget=None, idempotency_key=True)) as s,
        s.post(keyed, json={"a": 1}) as r,
    ):
        assert r.status == 200
    assert (server.attempts["plain"], server.attempts["keyed"]) == (1, 3)
    keys = {h.get("Idempotency-Key") for h in server.headers["keyed"]}
    assert len(keys) == 1 and None not in keys


async def test_streamed_body_is_not_replayed(server: Scripted) -> None:
    url = server.script("stream", 503, 200)

    async def body() -> AsyncIterator[bytes]:
        yield b"chunk"

    mw = sa.RetryMiddleware(policy(), budget=None)
    async with session(mw) as s, s.put(url, data=body()) as r:
        assert r.status == 503
    assert server.attempts["stream"] == 1


async def test_retry_after_replaces_the_backoff(server: Scripted) -> None:
    url = server.script("a", (503, {"Retry-After": "2"}), (429, {"Retry-After": "1e9"}), 200)
    clock = seawall.VirtualClock()
    delays: list[float] = []
    p = policy(clock=clock, hooks=[lambda e: delays.append(e.delay)], max_retry_after=30.0)
    async with session(sa.RetryMiddleware(p, budget=None)) as s, s.get(url) as r:
        assert r.status == 200
    # "1e9" is not delay-seconds: ignored, the backoff applies (at most its cap).
    assert delays[0] == 2.0 and delays[1] <= seawall.Backoff().cap


async def test_deadline_headers_and_attempt_timeout(server: Scripted) -> None:
    url = server.script("a", 200)
    async with (
        session(sa.RetryMiddleware(seawall.RetryPolicy(), budget=None)) as s,
        seawall.deadline(2.0),
        s.get(url) as r,
    ):
        assert r.status == 200
    (seen,) = server.headers["a"]
    assert 1000 < int(seen["x-request-deadline"]) <= 2000
    assert "grpc-timeout" in seen

    slow = server.script("slow", "slow", 200)
    p = seawall.RetryPolicy(attempt_timeout=0.2, backoff=seawall.Backoff(base=0.01))
    async with session(sa.RetryMiddleware(p, budget=None)) as s, s.get(slow) as r:
        assert r.status == 200  # the slow attempt was cancelled at 0.2 s and retried
    assert server.attempts["slow"] == 2


async def test_body_cut_short_is_retried_within_the_attempt(server: Scripted) -> None:
    url = server.script("cut", "cut", 200)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s, s.get(url) as r:
        assert (r.status, await r.text()) == (200, "cut:200")
    assert server.attempts["cut"] == 2


async def test_discarded_responses_release_their_connections(server: Scripted) -> None:
    """One connection in the pool and no buffering: a discarded response that kept its
    connection would leave the next attempt waiting for the pool forever."""
    url = server.script("a", 503, 503, 200)
    mw = sa.RetryMiddleware(policy(), budget=None, buffer_limit=0)
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=5)
    async with session(mw, connector=connector, timeout=timeout) as s, s.get(url) as r:
        assert r.status == 200
    assert server.attempts["a"] == 3


async def test_never_sent_is_retried_for_any_method() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    events: list[str] = []
    p = policy(hooks=[lambda e: events.append(e.kind)])
    async with session(sa.RetryMiddleware(p, budget=None)) as s:
        with pytest.raises(aiohttp.ClientConnectorError):
            await s.post(f"http://127.0.0.1:{port}/x", data=b"x")
    assert events == ["retry", "retry", "give_up"]


async def test_per_host_budget_is_shared(server: Scripted) -> None:
    url = server.script("a", 200)
    budget = budget_for_host(server.url)
    assert isinstance(budget, seawall.RetryBudget)
    before = budget.requests
    async with (
        session(sa.RetryMiddleware(policy())) as s1,
        session(sa.RetryMiddleware(policy())) as s2,
    ):
        for s in (s1, s2):
            async with s.get(url) as r:
                assert r.status == 200
    assert budget.requests == before + 2


async def test_from_route_follows_reloads(server: Scripted, tmp_path: Any) -> None:
    file = tmp_path / "policies.toml"
    template = '[routes.users]\nretry_policy = {{ num_retries = {n}, retry_on = "5xx" }}\n'
    file.write_text(template.format(n=1))
    registry = seawall.config.PolicyRegistry(file, clock=seawall.VirtualClock(), hooks=())
    mw = sa.RetryMiddleware.from_route(registry, "users", budget=None)
    async with session(mw) as s:
        url = server.script("first", 500)  # "5xx": the route's statuses, not the defaults
        async with s.get(url) as r:
            assert r.status == 500
        file.write_text(template.format(n=3))
        registry.reload()
        url = server.script("second", 500)
        async with s.get(url) as r:
            assert r.status == 500
    assert (server.attempts["first"], server.attempts["second"]) == (2, 4)
    with pytest.raises(KeyError):
        sa.RetryMiddleware.from_route(registry, "nobody")


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(TypeError, match="policy"):
        sa.RetryMiddleware(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="budget"):
        sa.RetryMiddleware(budget=3)
    with pytest.raises(TypeError, match="retry_on"):
        sa.RetryMiddleware(retry_on=(int,))  # type: ignore[arg-type]


async def test_response_predicate_history_and_override(server: Scripted) -> None:
    # retry_if_result sees the ClientResponse (its status and headers): a 200 marked stale.
    url = server.script("p", (200, {"x-stale": "1"}), (200, {"x-stale": "1"}), 200)
    p = policy(
        retry_if_result=lambda r: r.headers.get("x-stale") == "1",
        backoff=seawall.Backoff.constant(0.25),
    )
    async with session(sa.RetryMiddleware(p, budget=None)) as s:
        async with s.get(url) as r:
            assert r.status == 200 and "x-stale" not in r.headers
            assert [(a.status, a.wait) for a in r.seawall_history] == [  # type: ignore[attr-defined]
                (200, 0.25),
                (200, 0.25),
                (200, None),
            ]
        once = server.script("once", 503, 200)
        with seawall.http.override(retries=0):
            async with s.get(once) as r:
                assert r.status == 503
    assert (server.attempts["p"], server.attempts["once"]) == (3, 1)


async def test_total_timeout_caps_the_whole_request(server: Scripted) -> None:
    # Each attempt meets a server that takes 1 s: with a total time of 0.3 s and no deadline
    # of the caller's, the attempt is cut at 0.3 s and no other starts.
    url = server.script("slow", "slow")
    loop = asyncio.get_running_loop()
    mw = sa.RetryMiddleware(seawall.RetryPolicy(hooks=()), budget=None, total_timeout=0.3)
    started = loop.time()
    async with session(mw) as s:
        with pytest.raises(aiohttp.ServerTimeoutError):
            await s.get(url)
    assert 0.25 <= loop.time() - started < 0.9
    assert server.attempts["slow"] == 1


def test_total_timeout_is_validated() -> None:
    with pytest.raises(ValueError, match="total_timeout"):
        sa.RetryMiddleware(total_timeout=0)
    with pytest.raises(TypeError, match="'retries'"):
        sa.RetryMiddleware(retries=3)  # type: ignore[call-arg]

"""seawall.httpx.AsyncRetryTransport against a real server (the policy waits on virtual time)."""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from seawall_test_server import READ_TIMEOUT, Server

import seawall
from seawall._strategies.deadline import decode_request_deadline
from seawall.httpx import AsyncRetryTransport

RESET = (httpx.ReadError, httpx.RemoteProtocolError)
TLS = ssl.create_default_context()


def aclient(clock: seawall.VirtualClock, policy_kwargs: Any = None, **kwargs: Any) -> Any:
    p = seawall.RetryPolicy(clock=clock, rng=random.Random(3), hooks=(), **(policy_kwargs or {}))
    kwargs.setdefault("budget", None)
    timeout = kwargs.pop("timeout", 5.0)
    transport = AsyncRetryTransport(p, httpx.AsyncHTTPTransport(verify=TLS), **kwargs)
    return httpx.AsyncClient(transport=transport, timeout=timeout)


@pytest.fixture
def clock() -> seawall.VirtualClock:
    return seawall.VirtualClock()


async def test_503_twice_then_success(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        r = await c.get(server.url + "/flaky/2/503")
    assert r.status_code == 200
    assert r.text == "ok after 3"
    assert server.count("GET", "/flaky/2/503") == 3
    assert len(clock.sleeps) == 2


async def test_gives_up_with_the_last_response(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        r = await c.get(server.url + "/flaky/9/502")
    assert r.status_code == 502
    assert server.count("GET", "/flaky/9/502") == 3


async def test_404_is_not_retried(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        r = await c.get(server.url + "/status/404")
    assert r.status_code == 404
    assert server.count("GET", "/status/404") == 1


async def test_retry_after_is_honoured(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        r = await c.get(server.url + "/flaky/2/429?retry_after=3")
    assert r.status_code == 200
    assert clock.sleeps == [3.0, 3.0]


async def test_retry_after_past_the_deadline_gives_up_now(
    server: Server, clock: seawall.VirtualClock
) -> None:
    async with aclient(clock, {"timeout": 2.0}) as c:
        r = await c.get(server.url + "/flaky/1/503?retry_after=5")
    assert r.status_code == 503
    assert server.count("GET", "/flaky/1/503") == 1
    assert clock.sleeps == []


async def test_post_without_key_is_sent_once(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        r = await c.post(server.url + "/flaky/1/503", content=b"x")
    assert r.status_code == 503
    assert server.count("POST", "/flaky/1/503") == 1


async def test_generated_key_is_the_same_on_every_attempt(
    server: Server, clock: seawall.VirtualClock
) -> None:
    async with aclient(clock, idempotency_key=True) as c:
        r = await c.post(server.url + "/flaky/2/504", json={"order": 1})
    assert r.status_code == 200
    keys = [g.headers["idempotency-key"] for g in server.requests_to("/flaky/2/504")]
    assert len(keys) == 3
    assert len(set(keys)) == 1


async def test_reset_is_retried(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        r1 = await c.get(server.url + "/reset-head/1")
        r2 = await c.get(server.url + "/reset-body/2")
    assert (r1.text, r2.text) == ("ok after 2", "ok after 3")
    assert server.count("GET", "/reset-head/1") == 2
    assert server.count("GET", "/reset-body/2") == 3


async def test_reset_on_patch_is_not_retried(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        with pytest.raises(RESET) as info:
            await c.patch(server.url + "/reset-head/1", content=b"x")
    assert server.count("PATCH", "/reset-head/1") == 1
    assert any("Idempotency-Key" in n for n in getattr(info.value, "__notes__", []))


async def test_read_timeout_is_retried(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock, timeout=httpx.Timeout(5.0, read=READ_TIMEOUT)) as c:
        r = await c.get(server.url + "/stall/1")
    assert r.status_code == 200
    assert server.count("GET", "/stall/1") == 2


async def test_deadline_header_decreases(server: Server, clock: seawall.VirtualClock) -> None:
    policy_kwargs = {"timeout": 4.0, "backoff": seawall.Backoff.constant(1.0)}
    async with aclient(clock, policy_kwargs) as c:
        r = await c.get(server.url + "/flaky/2/503")
    assert r.status_code == 200
    got = [
        decode_request_deadline(g.headers["x-request-deadline"])
        for g in server.requests_to("/flaky/2/503")
    ]
    assert got == pytest.approx([3.995, 2.995, 1.995], abs=0.002)


async def _chunks() -> AsyncIterator[bytes]:
    yield b"a"
    yield b"b"


async def test_streamed_body_is_not_replayed(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        r = await c.put(server.url + "/flaky/1/503", content=_chunks())
    assert r.status_code == 503
    assert [g.body for g in server.requests_to("/flaky/1/503")] == [b"ab"]


async def test_cancellation_is_not_retried(server: Server, clock: seawall.VirtualClock) -> None:
    async with aclient(clock) as c:
        task = asyncio.create_task(c.get(server.url + "/stall/5"))
        for _ in range(200):  # wait (bounded) until the server holds the request
            if server.count("GET", "/stall/5"):
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert server.count("GET", "/stall/5") == 1
    assert clock.sleeps == []


async def test_connection_refused_retried_for_post(
    refused_url: str, clock: seawall.VirtualClock
) -> None:
    async with aclient(clock) as c:
        with pytest.raises(httpx.ConnectError):
            await c.post(refused_url, content=b"x")
    assert len(clock.sleeps) == 2  # three attempts: the request never left


async def test_bad_transport_is_refused() -> None:
    with pytest.raises(TypeError, match="transport"):
        AsyncRetryTransport(transport=httpx.HTTPTransport(verify=TLS))  # type: ignore[arg-type]

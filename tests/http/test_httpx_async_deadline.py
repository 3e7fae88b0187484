"""AsyncRetryTransport bounds each attempt by cancellation: a server that drips bytes slowly
(each read answered in 50 ms, well within httpx's per-read timeouts) cannot outlive the attempt.

Real waits here are small and bounded: a dripping answer would take DRIP_SECONDS (10 s); the
attempts are cut at 0.3-0.4 s, and a client free before WELL_BEFORE (5 s) was cut, however loaded
the machine."""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from typing import Any

import httpx
import pytest
from seawall_test_server import WELL_BEFORE, Server

import seawall
from seawall.httpx import AsyncRetryTransport

TLS = ssl.create_default_context()


def aclient(policy: seawall.RetryPolicy, **kwargs: Any) -> httpx.AsyncClient:
    kwargs.setdefault("budget", None)
    transport = AsyncRetryTransport(policy, httpx.AsyncHTTPTransport(verify=TLS), **kwargs)
    # Per-operation timeouts far longer than the attempt: only cancellation can cut it short.
    return httpx.AsyncClient(transport=transport, timeout=5.0)


def virtual(**kwargs: Any) -> seawall.RetryPolicy:
    return seawall.RetryPolicy(
        clock=seawall.VirtualClock(), rng=random.Random(5), hooks=(), **kwargs
    )


async def test_dripping_head_is_cut_at_the_attempt_timeout_and_retried(server: Server) -> None:
    started = time.monotonic()
    async with aclient(virtual(attempt_timeout=0.3, max_attempts=2)) as c:
        r = await c.get(server.url + "/drip-head/1")
    elapsed = time.monotonic() - started
    assert r.status_code == 200
    assert r.text == "ok after 2"
    assert server.count("GET", "/drip-head/1") == 2
    assert 0.3 <= elapsed < WELL_BEFORE  # cut at 0.3 s; the drip alone would take 10 s


async def test_dripping_body_is_cut_within_the_attempt_when_buffered(server: Server) -> None:
    # DRIP_BYTES declared: read within the attempt, so the attempt timeout covers the body too.
    started = time.monotonic()
    async with aclient(virtual(attempt_timeout=0.3, max_attempts=2)) as c:
        r = await c.get(server.url + "/drip-body/1")
    assert r.text == "ok after 2"
    assert server.count("GET", "/drip-body/1") == 2
    assert time.monotonic() - started < WELL_BEFORE


async def test_streamed_body_is_bounded_by_the_attempt(server: Server) -> None:
    started = time.monotonic()
    client = aclient(virtual(attempt_timeout=0.3), buffer_limit=0)
    async with client as c, c.stream("GET", server.url + "/drip-body/1") as r:
        assert r.status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            await r.aread()
    assert 0.25 <= time.monotonic() - started < WELL_BEFORE
    assert server.count("GET", "/drip-body/1") == 1  # the body was the caller's: no retry


async def test_ambient_deadline_cuts_the_attempt_and_gives_up(server: Server) -> None:
    # The system clock: the deadline and the cancellation measure the same real time.
    policy = seawall.RetryPolicy(hooks=(), rng=random.Random(5))
    started = time.monotonic()
    async with aclient(policy) as c:
        # A plain `with` inside a coroutine cancels at its deadline too: the transport's own
        # attempt timeout at the same instant may report it first (an httpx timeout with a
        # note), or the scope's cancellation does (DeadlineExceeded).
        with (
            pytest.raises((httpx.TimeoutException, seawall.DeadlineExceeded)) as info,
            seawall.deadline(0.4),
        ):
            await c.get(server.url + "/drip-head/5")
    assert 0.35 <= time.monotonic() - started < WELL_BEFORE
    assert server.count("GET", "/drip-head/5") == 1  # no time left for another attempt
    said = [str(info.value), *getattr(info.value, "__notes__", [])]
    assert any("deadline" in n for n in said)


async def test_policy_timeout_cuts_the_attempt(server: Server) -> None:
    policy = seawall.RetryPolicy(hooks=(), timeout=0.4, rng=random.Random(5))
    started = time.monotonic()
    async with aclient(policy) as c:
        with pytest.raises(httpx.TimeoutException):
            await c.get(server.url + "/drip-head/5")
    assert time.monotonic() - started < WELL_BEFORE


async def test_callers_cancellation_is_not_a_timeout(server: Server) -> None:
    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(clock=clock, hooks=(), attempt_timeout=5.0)
    async with aclient(policy) as c:
        task = asyncio.create_task(c.get(server.url + "/drip-head/5"))
        for _ in range(200):  # wait (bounded) until the server holds the request
            if server.count("GET", "/drip-head/5"):
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert server.count("GET", "/drip-head/5") == 1
    assert clock.sleeps == []


async def test_fast_answers_are_untouched(server: Server) -> None:
    async with aclient(virtual(attempt_timeout=0.3)) as c:
        r1 = await c.get(server.url + "/ok")
        async with c.stream("GET", server.url + "/ok") as r2:
            body = await r2.aread()
    assert (r1.text, body) == ("ok", b"ok")

"""Sharp edges of the HTTP integrations, against the real server on 127.0.0.1.

Every integration (httpx sync and async, requests, aiohttp) is driven the same way: one GET
through a policy on virtual time (the waits cost nothing and are recorded), and what the server
received and what the policy decided are compared.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
import seawall.aiohttp
import seawall.httpx
import seawall.requests

Fetch = Callable[[seawall.RetryPolicy, str], int]


def fetch_httpx(policy: seawall.RetryPolicy, url: str) -> int:
    transport = seawall.httpx.RetryTransport(policy, httpx.HTTPTransport(), budget=None)
    with httpx.Client(transport=transport, timeout=5.0) as client:
        return client.get(url).status_code


def fetch_httpx_async(policy: seawall.RetryPolicy, url: str) -> int:
    async def main() -> int:
        inner = httpx.AsyncHTTPTransport()
        transport = seawall.httpx.AsyncRetryTransport(policy, inner, budget=None)
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
            return (await client.get(url)).status_code

    return asyncio.run(main())


def fetch_requests(policy: seawall.RetryPolicy, url: str) -> int:
    with requests.Session() as session:
        session.mount("http://", seawall.requests.RetryAdapter(policy, budget=None))
        return session.get(url, timeout=5.0).status_code


def fetch_aiohttp(policy: seawall.RetryPolicy, url: str) -> int:
    async def main() -> int:
        middleware = seawall.aiohttp.RetryMiddleware(policy, budget=None)
        async with (
            aiohttp.ClientSession(middlewares=[middleware]) as session,
            session.get(url) as response,
        ):
            await response.read()
            return response.status

    return asyncio.run(main())


CLIENTS: dict[str, Fetch] = {
    "httpx": fetch_httpx,
    "httpx-async": fetch_httpx_async,
    "requests": fetch_requests,
    "aiohttp": fetch_aiohttp,
}


class Seen:
    """A policy on virtual time whose events are kept."""

    def __init__(self, **kwargs: Any) -> None:
        self.clock = seawall.VirtualClock()
        self.events: list[seawall.RetryEvent] = []
        self.policy = seawall.RetryPolicy(
            clock=self.clock, rng=random.Random(1), hooks=(self.events.append,), **kwargs
        )

    @property
    def reasons(self) -> list[str | None]:
        return [e.reason for e in self.events if e.kind == "give_up"]


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


# -- Retry-After beyond max_retry_after: give_up is honoured by every integration ------------


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    "retry_after", ["3600", "9" * 32, "hour"], ids=["3600", "32-nines", "date"]
)
def test_give_up_stops_at_a_retry_after_beyond_the_maximum(
    server: Server, client: str, retry_after: str
) -> None:
    if retry_after == "hour":
        retry_after = http_date(3600.0)
    seen = Seen(retry_after_beyond_max="give_up", max_retry_after=60.0)
    path = "/flaky/5/503"
    status = CLIENTS[client](seen.policy, f"{server.url}{path}?retry_after={retry_after}")
    assert status == 503  # the server's answer, not an exception
    assert server.count("GET", path) == 1  # no retry: the server asked for more than allowed
    assert seen.clock.sleeps == []
    assert seen.reasons == ["retry_after"]


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_clamp_waits_the_maximum_and_retries(server: Server, client: str) -> None:
    seen = Seen(max_retry_after=5.0)  # retry_after_beyond_max="clamp" by default
    path = "/flaky/1/503"
    assert CLIENTS[client](seen.policy, f"{server.url}{path}?retry_after=3600") == 200
    assert server.count("GET", path) == 2
    assert seen.clock.sleeps == [5.0]


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_retry_after_within_the_maximum_is_waited_under_give_up(
    server: Server, client: str
) -> None:
    seen = Seen(retry_after_beyond_max="give_up", max_retry_after=60.0)
    path = "/flaky/1/429"
    assert CLIENTS[client](seen.policy, f"{server.url}{path}?retry_after=12") == 200
    assert server.count("GET", path) == 2
    assert seen.clock.sleeps == [12.0]  # larger than the backoff's draw (at most 0.1 s)


#: Retry-After values a hostile or broken server sends: ignored (the backoff's wait), or clamped.
EXTREME_RETRY_AFTER = {
    "negative": "-5",
    "nan": "nan",
    "inf": "inf",
    "exponent": "1e400",
    "hex": "0x10",
    "underscores": "1_000",
    "thousands-of-digits": "9" * 4000,
    "fraction-of-many-digits": "0." + "0" * 60 + "1",
    "padded": "  7  ",
    "latin-1": "5\u00e9",
    "year-9999": "Fri, 31 Dec 9999 23:59:59 GMT",
    "epoch": "Thu, 01 Jan 1970 00:00:00 GMT",
    "not-a-date": "Mon, 99 Foo 2020 25:61:61 GMT",
    "empty": "",
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("value", sorted(EXTREME_RETRY_AFTER))
def test_extreme_retry_after_values_never_crash_nor_wait_past_the_maximum(
    server: Server, client: str, value: str
) -> None:
    seen = Seen(max_retry_after=5.0)
    path = "/flaky/1/503"
    query = urllib.parse.urlencode({"retry_after": EXTREME_RETRY_AFTER[value]})
    assert CLIENTS[client](seen.policy, f"{server.url}{path}?{query}") == 200
    assert server.count("GET", path) == 2
    [wait] = seen.clock.sleeps
    if value in ("padded", "year-9999"):
        assert wait == 5.0  # a valid wait longer than max_retry_after: clamped
    else:
        assert wait <= 0.1  # ignored: the backoff's first draw (full jitter of 0.1 s)

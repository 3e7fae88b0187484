"""Sharp edges of the HTTP integrations, against the real server on 127.0.0.1.

Every integration (httpx sync and async, requests, aiohttp) is driven the same way: one GET
through a policy on virtual time (the waits cost nothing and are recorded), and what the server
received and what the policy decided are compared.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
import seawall.aiohttp
import seawall.config
import seawall.httpx
import seawall.requests
from seawall.httpx import RetryTransport

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


# -- HTTP/2 REFUSED_STREAM: the request was not processed ----------------------------------


@pytest.fixture
def h2_server() -> Iterator[Any]:
    pytest.importorskip("h2")  # the dev extra installs it (httpx's http2 support)
    from h2_test_server import H2Server

    server = H2Server()
    try:
        yield server
    finally:
        server.close()


def h2_client(transport: httpx.BaseTransport) -> httpx.Client:
    return httpx.Client(transport=transport, timeout=5.0)


def h2_transport() -> httpx.HTTPTransport:
    return httpx.HTTPTransport(http1=False, http2=True)  # prior knowledge: h2 in cleartext


def refused_stream_route(clock: seawall.VirtualClock) -> seawall.config.PolicyRegistry:
    routes = {"routes": {"users": {"retry_policy": {"retry_on": "refused-stream"}}}}
    return seawall.config.PolicyRegistry(routes, clock=clock, hooks=())


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_route_retry_on_refused_stream_retries_an_http2_refused_stream(
    h2_server: Any, method: str
) -> None:
    registry = refused_stream_route(seawall.VirtualClock())
    transport = RetryTransport.from_route(registry, "users", h2_transport(), budget=None)
    with h2_client(transport) as client:
        response = client.request(method, f"{h2_server.url}/refuse/2", content=b"order")
    assert (response.status_code, response.http_version) == (200, "HTTP/2")
    assert h2_server.count("/refuse/2") == 3  # a POST too: the server processed none of it


def test_route_retry_on_refused_stream_leaves_other_stream_resets(h2_server: Any) -> None:
    registry = refused_stream_route(seawall.VirtualClock())
    transport = RetryTransport.from_route(registry, "users", h2_transport(), budget=None)
    with h2_client(transport) as client, pytest.raises(httpx.RemoteProtocolError):
        client.get(f"{h2_server.url}/reset/1")
    assert h2_server.count("/reset/1") == 1


def test_a_refused_post_is_retried_by_default_another_reset_is_not(h2_server: Any) -> None:
    seen = Seen()
    transport = RetryTransport(seen.policy, h2_transport(), budget=None)
    with h2_client(transport) as client:
        assert client.post(f"{h2_server.url}/refuse/1", content=b"order").status_code == 200
        with pytest.raises(httpx.RemoteProtocolError) as info:
            client.post(f"{h2_server.url}/reset/1", content=b"order")
    assert (h2_server.count("/refuse/1"), h2_server.count("/reset/1")) == (2, 1)
    assert "not idempotent" in " ".join(getattr(info.value, "__notes__", []))


def test_refused_stream_condition_still_matches_a_refused_connection(refused_url: str) -> None:
    clock = seawall.VirtualClock()
    registry = refused_stream_route(clock)
    transport = RetryTransport.from_route(registry, "users", httpx.HTTPTransport(), budget=None)
    with h2_client(transport) as client, pytest.raises(httpx.ConnectError):
        client.get(refused_url)
    assert len(clock.sleeps) == 2  # three attempts (num_retries = 2)


# -- the per-host budget's warning names the host ------------------------------------------


def test_a_newcomers_script_learns_which_hosts_budget_stopped_it(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    # 12 GETs, each to a resource that fails twice then answers, with the default per-host
    # budget (10% of calls plus 1 retry/s over 10 s): the budget stops retrying after a few.
    policy = seawall.RetryPolicy(clock=seawall.VirtualClock(), rng=random.Random(2))
    transport = RetryTransport(policy, httpx.HTTPTransport())
    statuses = []
    with caplog.at_level(logging.INFO, logger="seawall"), httpx.Client(transport=transport) as c:
        statuses = [c.get(f"{server.url}/flaky/2/503/{i}").status_code for i in range(12)]
    assert 503 in statuses and statuses[0] == 200
    host = server.url  # http://127.0.0.1:<port>, the per-host budget's key
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings, caplog.records
    assert all(w.startswith(f"retry budget exhausted for {host} (RetryBudget(") for w in warnings)
    assert all("more retries allowed 0" in w and "budget=None" in w for w in warnings)
    retried = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert retried and all(m.startswith(f"retry {host} scheduled in ") for m in retried)
    # The remedy the warning gives works as written: the transport's own budget, none here.
    assert "RetryTransport(policy, budget=...), or budget=None" in warnings[0]
    caplog.clear()
    transport = RetryTransport(policy, httpx.HTTPTransport(), budget=None)
    with caplog.at_level(logging.INFO, logger="seawall"), httpx.Client(transport=transport) as c:
        statuses = [c.get(f"{server.url}/flaky/2/503/again-{i}").status_code for i in range(12)]
    assert statuses == [200] * 12
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


# -- the aiohttp log line: host:port, not a ConnectionKey repr -------------------------------


def test_aiohttp_connect_errors_are_logged_by_host_and_port(
    refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen = Seen(max_attempts=2)
    seen.policy = seen.policy.replace(hooks=(seawall.logging_hook,))
    with caplog.at_level(logging.INFO, logger="seawall"), pytest.raises(aiohttp.ClientError):
        fetch_aiohttp(seen.policy, refused_url)
    [line] = [r.getMessage() for r in caplog.records]
    where = refused_url.removeprefix("http://").removesuffix("/ok")  # 127.0.0.1:<port>
    assert f'ClientConnectorError("Cannot connect to host {where} ' in line, line
    assert "ConnectionKey" not in line and len(line) < 200, line

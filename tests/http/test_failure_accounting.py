"""What the HTTP integrations tell the budget: a transient failure that must not be retried is
still a failure of the dependency (it drains the budget), and a permanent answer is a success."""

from __future__ import annotations

import random
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
from heard import Heard
from seawall.httpx import AsyncRetryTransport, RetryTransport
from seawall.requests import RetryAdapter

TLS = ssl.create_default_context()
RESET = (httpx.ReadError, httpx.RemoteProtocolError)


def policy() -> seawall.RetryPolicy:
    return seawall.RetryPolicy(clock=seawall.VirtualClock(), rng=random.Random(1), hooks=())


def client(bucket: seawall.TokenBucket, **kwargs: Any) -> httpx.Client:
    transport = RetryTransport(policy(), httpx.HTTPTransport(verify=TLS), budget=bucket, **kwargs)
    return httpx.Client(transport=transport, timeout=5.0)


def _chunks() -> Iterator[bytes]:
    yield b"a"
    yield b"b"


async def _achunks() -> AsyncIterator[bytes]:
    yield b"a"
    yield b"b"


def test_503_to_a_post_without_key_drains_the_bucket(server: Server) -> None:
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    with client(bucket) as c:
        r = c.post(server.url + "/status/503", content=b"pay 10")
    assert r.status_code == 503
    assert server.count("POST", "/status/503") == 1  # still sent once
    assert bucket.tokens == 9.0  # one failure, not a success


@pytest.mark.parametrize("code", [408, 429, 502, 504])
def test_every_transient_status_counts(server: Server, code: int) -> None:
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    with client(bucket) as c:
        assert c.patch(server.url + f"/status/{code}", content=b"x").status_code == code
    assert bucket.tokens == 9.0


def test_reset_on_a_post_drains_the_bucket(server: Server) -> None:
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    with client(bucket) as c, pytest.raises(RESET):
        c.post(server.url + "/reset-head/1", content=b"x")
    assert server.count("POST", "/reset-head/1") == 1
    assert bucket.tokens == 9.0


def test_503_to_a_stream_that_cannot_be_replayed_drains_the_bucket(server: Server) -> None:
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    with client(bucket) as c:
        assert c.put(server.url + "/status/503", content=_chunks()).status_code == 503
    assert server.count("PUT", "/status/503") == 1
    assert bucket.tokens == 9.0


def test_a_permanent_answer_is_a_success(server: Server) -> None:
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    with client(bucket) as c:
        c.post(server.url + "/status/503", content=b"x")  # 9 tokens
        assert c.post(server.url + "/status/404", content=b"x").status_code == 404
        assert c.post(server.url + "/status/500", content=b"x").status_code == 500
    assert bucket.tokens == pytest.approx(9.2)  # two answers: +0.1 each


def test_drained_bucket_stops_retries_of_idempotent_requests(server: Server) -> None:
    # Six failed POSTs take the bucket to 4 of 10 tokens: at half or below, gRPC's throttling
    # refuses retries, so the next GET that meets a 503 is not retried either.
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    with client(bucket) as c:
        for _ in range(6):
            c.post(server.url + "/status/503", content=b"x")
        r = c.get(server.url + "/flaky/1/503")
    assert r.status_code == 503
    assert server.count("GET", "/flaky/1/503") == 1
    assert bucket.tokens == 3.0


async def test_async_transport_counts_the_same(server: Server) -> None:
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    transport = AsyncRetryTransport(policy(), httpx.AsyncHTTPTransport(verify=TLS), budget=bucket)
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
        assert (await c.post(server.url + "/status/503", content=b"x")).status_code == 503
        assert (await c.put(server.url + "/status/502", content=_achunks())).status_code == 502
        with pytest.raises(RESET):
            await c.patch(server.url + "/reset-head/1", content=b"x")
    assert bucket.tokens == 7.0


def test_requests_adapter_counts_the_same(server: Server) -> None:
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    session = requests.Session()
    session.mount("http://", RetryAdapter(policy(), budget=bucket))
    with session:
        assert session.post(server.url + "/status/503", data=b"x", timeout=5).status_code == 503
        with pytest.raises(requests.exceptions.ConnectionError):
            session.post(server.url + "/reset-head/1", data=b"x", timeout=5)
    assert server.count("POST", "/status/503") == 1
    assert server.count("POST", "/reset-head/1") == 1
    assert bucket.tokens == 8.0


@pytest.mark.parametrize(
    ("path", "heard"),
    [
        ("/ok", ["request", "success"]),
        ("/flaky/1/503", ["request", "failure", "retry", "success"]),
        ("/reset-head/1", ["request", "failure", "retry", "success"]),
    ],
)
def test_first_attempt_without_state_tells_the_budget_the_same(
    server: Server, path: str, heard: list[str]
) -> None:
    # A first attempt that succeeds builds no RetryState; one that fails builds it then: the
    # budget hears one request either way, and the failure before the retry.
    budget = Heard()
    with client(budget) as c:  # type: ignore[arg-type]
        assert c.get(server.url + path).status_code == 200
    assert budget.kinds() == heard

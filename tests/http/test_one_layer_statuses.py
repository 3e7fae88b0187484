"""Retry at one layer, for statuses: a policy around a retrying transport does not retry the
status the transport already retried.

``raise_for_status()`` turns the response the transport gave up on into a new exception. The
adversarial run found an outer ``@retry`` on ``HTTPStatusError`` around a ``RetryTransport``
making 9 requests, not 3. The transport now marks the responses it gave up on (and those the
server marked "overloaded"), and the error's ``response`` carries the mark up. Against the real
server; the counts are the server's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
import seawall.httpx
import seawall.requests


def policy(clock: seawall.VirtualClock, **kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("max_attempts", 3)
    return seawall.RetryPolicy(clock=clock, hooks=(), **kwargs)


def test_httpx_status_retried_once_across_layers(server: Server) -> None:
    clock = seawall.VirtualClock()
    transport = seawall.httpx.RetryTransport(policy(clock), budget=None)
    outer = policy(clock, retry_on=httpx.HTTPStatusError)
    with httpx.Client(transport=transport) as client:

        @outer
        def fetch() -> httpx.Response:
            return client.get(server.url + "/status/503").raise_for_status()

        with pytest.raises(httpx.HTTPStatusError) as caught:
            fetch()
    assert server.count("GET", "/status/503") == 3
    assert caught.value.response.status_code == 503
    assert outer.run(lambda: None).ok  # the outer policy itself still works


def test_requests_status_retried_once_across_layers(server: Server) -> None:
    clock = seawall.VirtualClock()
    session = requests.Session()
    session.mount("http://", seawall.requests.RetryAdapter(policy(clock), budget=None))
    outer = policy(clock, retry_on=requests.HTTPError)

    def fetch() -> requests.Response:
        response = session.get(server.url + "/status/503")
        response.raise_for_status()
        return response

    with session:
        outcome = outer.run(fetch)
    assert server.count("GET", "/status/503") == 3
    assert isinstance(outcome.error, requests.HTTPError)
    assert outcome.reason == "exhausted_below"
    assert outcome.attempts == 1


def test_async_httpx_status_retried_once_across_layers(server: Server) -> None:
    clock = seawall.VirtualClock()
    transport = seawall.httpx.AsyncRetryTransport(policy(clock), budget=None)
    outer = policy(clock, retry_on=httpx.HTTPStatusError)

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport) as client:

            async def fetch() -> httpx.Response:
                return (await client.get(server.url + "/status/503")).raise_for_status()

            with pytest.raises(httpx.HTTPStatusError):
                await outer.acall(fetch)

    asyncio.run(main())
    assert server.count("GET", "/status/503") == 3


def test_given_up_at_the_deadline_is_not_retried_above(server: Server) -> None:
    # The transport gives up because the next wait would cross its deadline: already retried.
    clock = seawall.VirtualClock()
    inner = policy(clock, max_attempts=10, timeout=2.5, backoff=seawall.Backoff.constant(1.0))
    transport = seawall.httpx.RetryTransport(inner, budget=None)
    outer = policy(clock, retry_on=httpx.HTTPStatusError)
    with httpx.Client(transport=transport) as client:
        outcome = outer.run(lambda: client.get(server.url + "/status/503").raise_for_status())
    assert outcome.reason == "exhausted_below"
    assert server.count("GET", "/status/503") == 3  # at 0, 1 and 2 s


def test_overloaded_answer_is_not_retried_above(server: Server) -> None:
    clock = seawall.VirtualClock()
    transport = seawall.httpx.RetryTransport(policy(clock), budget=None)
    outer = policy(clock, retry_on=httpx.HTTPStatusError)
    url = server.url + "/flaky/100/503?overloaded=seawall"
    with httpx.Client(transport=transport) as client:
        outcome = outer.run(lambda: client.get(url).raise_for_status())
    assert isinstance(outcome.error, httpx.HTTPStatusError)
    assert server.count("GET", "/flaky/100/503") == 1


def test_a_transport_that_did_not_retry_leaves_the_retry_to_the_layer_above(
    server: Server,
) -> None:
    # One layer retries: here the outer one, since the transport makes a single attempt.
    clock = seawall.VirtualClock()
    transport = seawall.httpx.RetryTransport(policy(clock, max_attempts=1), budget=None)
    outer = policy(clock, retry_on=httpx.HTTPStatusError)
    with httpx.Client(transport=transport) as client:
        outcome = outer.run(lambda: client.get(server.url + "/status/503").raise_for_status())
    assert outcome.attempts == 3
    assert server.count("GET", "/status/503") == 3


def test_a_successful_answer_carries_no_mark(server: Server) -> None:
    clock = seawall.VirtualClock()
    transport = seawall.httpx.RetryTransport(policy(clock), budget=None)
    with httpx.Client(transport=transport) as client:
        response = client.get(server.url + "/flaky/1/503")
    assert response.status_code == 200
    assert not hasattr(response, "__seawall_exhausted__")

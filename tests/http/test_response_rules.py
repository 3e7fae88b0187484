"""Response predicates (the policy's retry_if_result), per-request overrides and the retry
history, with httpx (sync and async) and requests, against the real test server."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
from seawall.http import HttpAttempt, override
from seawall.httpx import AsyncRetryTransport, RetryTransport
from seawall.requests import RetryAdapter


def policy(**kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("backoff", seawall.Backoff.constant(0.5))
    return seawall.RetryPolicy(
        clock=seawall.VirtualClock(), rng=random.Random(1), hooks=(), **kwargs
    )


def client(p: seawall.RetryPolicy, **kwargs: Any) -> httpx.Client:
    return httpx.Client(transport=RetryTransport(p, budget=None, **kwargs), timeout=5.0)


def session(p: seawall.RetryPolicy, **kwargs: Any) -> requests.Session:
    s = requests.Session()
    s.mount("http://", RetryAdapter(p, budget=None, **kwargs))
    return s


def body_says_fail(response: Any) -> bool:
    text = response.text
    return bool(text == "fail")


# -- retry_if_result sees the response ----------------------------------------------------------


def test_httpx_predicate_retries_a_200_whose_body_says_fail(server: Server) -> None:
    p = policy(retry_if_result=body_says_fail)
    with client(p) as c:
        r = c.get(server.url + "/flaky/2/200")
    assert (r.status_code, r.text) == (200, "ok after 3")
    assert server.count("GET", "/flaky/2/200") == 3
    assert r.extensions["seawall.history"] == (
        HttpAttempt(200, None, 0.5),
        HttpAttempt(200, None, 0.5),
        HttpAttempt(200, None, None),
    )
    assert r.elapsed.total_seconds() >= 0  # the client's own bookkeeping is intact


def test_httpx_predicate_gives_up_with_the_last_response(server: Server) -> None:
    p = policy(retry_if_result=body_says_fail, max_attempts=2)
    with client(p) as c:
        r = c.get(server.url + "/flaky/5/200")
    assert (r.status_code, r.text) == (200, "fail")  # the caller reads the body still
    assert server.count("GET", "/flaky/5/200") == 2


def test_predicate_never_makes_a_post_without_key_be_sent_twice(server: Server) -> None:
    p = policy(retry_if_result=body_says_fail)
    with client(p) as c:
        r = c.post(server.url + "/flaky/2/200", content=b"x")
    assert r.text == "fail"
    assert server.count("POST", "/flaky/2/200") == 1


def test_async_predicate_and_history(server: Server) -> None:
    async def main() -> httpx.Response:
        transport = AsyncRetryTransport(policy(retry_if_result=body_says_fail), budget=None)
        async with httpx.AsyncClient(transport=transport) as c:
            return await c.get(server.url + "/flaky/1/200")

    r = asyncio.run(main())
    assert r.text == "ok after 2"
    assert [a.status for a in r.extensions["seawall.history"]] == [200, 200]


def test_requests_predicate_reads_the_body(server: Server) -> None:
    with session(policy(retry_if_result=body_says_fail)) as s:
        r = s.get(server.url + "/flaky/2/200")
    assert r.text == "ok after 3"
    assert server.count("GET", "/flaky/2/200") == 3
    assert [a.wait for a in r.seawall_history] == [0.5, 0.5, None]  # type: ignore[attr-defined]


def test_statuses_still_decide_first(server: Server) -> None:
    # A 404 is not a retry status: the predicate decides; a 503 is retried without asking it.
    asked: list[int] = []

    def never(response: Any) -> bool:
        asked.append(response.status_code)
        return False

    with client(policy(retry_if_result=never)) as c:
        assert c.get(server.url + "/status/404").status_code == 404
        assert c.get(server.url + "/flaky/1/503").status_code == 200
    assert asked == [404, 200]


# -- per-request overrides ----------------------------------------------------------------------


def test_httpx_extension_sends_once(server: Server) -> None:
    with client(policy()) as c:
        r = c.get(server.url + "/flaky/2/503", extensions={"seawall": {"retries": 0}})
        assert r.status_code == 503
        assert server.count("GET", "/flaky/2/503") == 1
        assert r.extensions["seawall.history"] == (HttpAttempt(503, None, None),)
        # The transport's own policy for the next request.
        assert c.get(server.url + "/flaky/2/503").status_code == 200
    assert server.count("GET", "/flaky/2/503") == 3


def test_httpx_extension_with_a_policy(server: Server) -> None:
    five = policy(max_attempts=5)
    with client(policy(max_attempts=2)) as c:
        r = c.get(server.url + "/flaky/4/502", extensions={"seawall": five})
    assert r.status_code == 200
    assert server.count("GET", "/flaky/4/502") == 5


def test_extension_wins_over_an_override_block(server: Server) -> None:
    with client(policy()) as c, override(retries=0):
        assert c.get(server.url + "/flaky/1/503").status_code == 503
        r = c.get(server.url + "/flaky/1/504", extensions={"seawall": {"max_attempts": 2}})
        assert r.status_code == 200


def test_requests_override_block(server: Server) -> None:
    with session(policy()) as s:
        with override(retries=0):
            assert s.get(server.url + "/flaky/1/503").status_code == 503
        assert s.get(server.url + "/flaky/1/504").status_code == 200
    assert server.count("GET", "/flaky/1/503") == 1
    assert server.count("GET", "/flaky/1/504") == 2


def test_bad_overrides_are_refused_by_name(server: Server) -> None:
    with (
        pytest.raises(TypeError, match=r"'retires': .* did you mean 'retries'"),
        override(retires=0),
    ):
        pass
    typo = pytest.raises(TypeError, match=r"'max_attempt': .* did you mean 'max_attempts'")
    with typo, override(max_attempt=2):
        pass
    with pytest.raises(ValueError, match="retries"), override(retries=-1):
        pass
    with pytest.raises(ValueError, match="max_attempts"), override(max_attempts=0):
        pass
    with client(policy()) as c:
        with pytest.raises(TypeError, match="seawall override"):
            c.get(server.url + "/ok", extensions={"seawall": 3})
        with pytest.raises(TypeError, match=r"'attempts': .* did you mean 'max_attempts'"):
            c.get(server.url + "/ok", extensions={"seawall": {"attempts": 1}})
    assert server.count("GET", "/ok") == 0


# -- history --------------------------------------------------------------------------------------


def test_history_of_retry_after_waits(server: Server) -> None:
    with client(policy()) as c:
        r = c.get(server.url + "/flaky/2/429?retry_after=3")
    assert r.extensions["seawall.history"] == (
        HttpAttempt(429, None, 3.0),
        HttpAttempt(429, None, 3.0),
        HttpAttempt(200, None, None),
    )


def test_history_of_errors_is_on_the_error(refused_url: str) -> None:
    with client(policy()) as c, pytest.raises(httpx.ConnectError) as info:
        c.get(refused_url)
    history = info.value.seawall_history  # type: ignore[attr-defined]
    assert [(a.status, type(a.error), a.wait) for a in history] == [
        (None, httpx.ConnectError, 0.5),
        (None, httpx.ConnectError, 0.5),
        (None, httpx.ConnectError, None),
    ]
    assert history[-1].error is info.value


def test_requests_history_of_a_first_answer(server: Server) -> None:
    with session(policy()) as s:
        r = s.get(server.url + "/status/404")
    assert r.seawall_history == (HttpAttempt(404, None, None),)  # type: ignore[attr-defined]


def test_an_unhashable_override_applies_to_its_request(server: Server) -> None:
    events: list[str] = []
    hooks = [lambda event: events.append(event.kind)]  # a list: the override cannot be cached
    with client(policy()) as c:
        r = c.get(server.url + "/flaky/1/503", extensions={"seawall": {"hooks": hooks}})
    assert r.status_code == 200
    assert events == ["retry"]


# -- a predicate that raises ----------------------------------------------------------------------


class Recording(httpx.HTTPTransport):
    """A real transport that keeps the responses it returned."""

    def __init__(self) -> None:
        super().__init__()
        self.responses: list[httpx.Response] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.responses.append(response)
        return response


class ARecording(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.responses: list[httpx.Response] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.responses.append(response)
        return response


def broken_predicate(response: Any) -> bool:
    raise LookupError("the predicate is broken")


def test_a_raising_predicate_closes_the_unread_response(server: Server) -> None:
    inner = Recording()
    p = policy(retry_if_result=broken_predicate)
    # buffer_limit=0: the body stays on the connection, unread, when the predicate runs.
    transport = RetryTransport(p, inner, budget=None, buffer_limit=0)
    with httpx.Client(transport=transport, timeout=5.0) as c, pytest.raises(LookupError):
        c.get(server.url + "/ok")
    assert [r.is_closed for r in inner.responses] == [True]
    assert server.count("GET", "/ok") == 1


async def test_a_raising_predicate_closes_the_unread_response_async(server: Server) -> None:
    inner = ARecording()
    p = policy(retry_if_result=broken_predicate)
    transport = AsyncRetryTransport(p, inner, budget=None, buffer_limit=0)
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
        with pytest.raises(LookupError):
            await c.get(server.url + "/ok")
    assert [r.is_closed for r in inner.responses] == [True]


def test_a_raising_predicate_releases_the_requests_connection(server: Server) -> None:
    p = policy(retry_if_result=broken_predicate)
    adapter = RetryAdapter(p, budget=None)
    s = requests.Session()
    s.mount("http://", adapter)
    with s:
        with pytest.raises(LookupError):
            s.get(server.url + "/ok", timeout=5, stream=True)
        pools = adapter.poolmanager.pools
        (pool,) = (pools[key] for key in pools.keys())  # noqa: SIM118 (a container, not a dict)
        assert pool.num_connections == 1
        assert pool.pool is not None and pool.pool.full()  # back in the pool

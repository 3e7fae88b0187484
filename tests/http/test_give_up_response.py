"""When the policy gives up after a retried response, the caller gets that response, as httpx and
requests would return it without retries, and no discarded response holds its connection.

The give-up under test happens between attempts: the wait before the next attempt overshoots (as
a real sleep on a busy machine can), so that attempt has no time left and ``begin_attempt``
refuses it. A virtual clock whose sleeps overshoot plays that part; the server is real.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
import seawall.httpx
from seawall.httpx import RetryTransport
from seawall.requests import RetryAdapter


class LateClock(seawall.VirtualClock):
    """Virtual time whose every sleep lasts *late* seconds longer than asked."""

    __slots__ = ("late",)

    def __init__(self, late: float) -> None:
        super().__init__()
        self.late = late

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.advance(self.late)


class Interrupted(BaseException):
    """Stands for a KeyboardInterrupt raised during a wait."""


class InterruptedClock(seawall.VirtualClock):
    def sleep(self, seconds: float) -> None:
        raise Interrupted


def policy(clock: seawall.VirtualClock, **kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("max_attempts", 5)
    return seawall.RetryPolicy(
        clock=clock,
        rng=random.Random(7),
        backoff=seawall.Backoff.constant(0.1),
        hooks=(),
        **kwargs,
    )


class Recording(httpx.BaseTransport):
    """A real HTTP transport that keeps every response it hands to the retry transport."""

    def __init__(self, **kwargs: Any) -> None:
        self.inner = httpx.HTTPTransport(**kwargs)
        self.responses: list[httpx.Response] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        self.responses.append(response)
        return response

    def close(self) -> None:
        self.inner.close()


def httpx_client(p: seawall.RetryPolicy, inner: httpx.BaseTransport, **kwargs: Any) -> httpx.Client:
    transport = RetryTransport(p, inner, budget=None, **kwargs)
    return httpx.Client(transport=transport, timeout=5.0)


# -- httpx ------------------------------------------------------------------------------------


@pytest.mark.parametrize("buffer_limit", [1 << 20, 0], ids=["body-in-memory", "body-unread"])
def test_httpx_wait_past_the_deadline_returns_the_last_response(
    server: Server, buffer_limit: int
) -> None:
    clock = LateClock(late=5.0)
    events: list[seawall.RetryEvent] = []
    p = policy(clock, timeout=1.0).replace(hooks=(events.append,))
    recording = Recording()
    with httpx_client(p, recording, buffer_limit=buffer_limit) as c:
        r = c.get(server.url + "/flaky/10/503")
        assert r.status_code == 503
        assert r.text == "fail"  # readable, as httpx returns it
    assert server.count("GET", "/flaky/10/503") == 1
    assert clock.sleeps == [0.1]
    assert [(e.kind, e.reason) for e in events] == [("retry", None), ("give_up", "deadline")]
    assert all(response.is_closed for response in recording.responses)


def test_httpx_streamed_last_response_is_readable(server: Server) -> None:
    clock = LateClock(late=5.0)
    with (
        httpx_client(policy(clock, timeout=1.0), Recording(), buffer_limit=0) as c,
        c.stream("GET", server.url + "/flaky/10/503") as r,
    ):
        assert r.status_code == 503
        assert b"".join(r.iter_raw()) == b"fail"


def test_httpx_gives_up_before_any_attempt_with_deadline_exceeded(server: Server) -> None:
    # No response yet: nothing to return, the caller gets DeadlineExceeded as before.
    clock = LateClock(late=5.0)
    with (
        seawall.deadline(0.0),
        httpx_client(policy(clock), Recording()) as c,
        pytest.raises(seawall.DeadlineExceeded),
    ):
        c.get(server.url + "/ok")
    assert server.count("GET", "/ok") == 0


def test_httpx_discarded_responses_release_a_one_connection_pool(server: Server) -> None:
    # With one connection in the pool, a retried response still holding its connection would
    # make the next attempt wait for the pool (PoolTimeout).
    clock = seawall.VirtualClock()
    recording = Recording(limits=httpx.Limits(max_connections=1))
    transport = RetryTransport(policy(clock), recording, budget=None, buffer_limit=0)
    with httpx.Client(transport=transport, timeout=httpx.Timeout(5.0, pool=0.5)) as c:
        r = c.get(server.url + "/flaky/3/503")
        assert r.status_code == 200
        assert r.text == "ok after 4"
    assert len(recording.responses) == 4
    assert all(response.is_closed for response in recording.responses)


def test_httpx_interrupted_wait_closes_the_kept_response(server: Server) -> None:
    recording = Recording()
    with (
        httpx_client(policy(InterruptedClock()), recording, buffer_limit=0) as c,
        pytest.raises(Interrupted),
    ):
        c.get(server.url + "/flaky/10/503")
    assert len(recording.responses) == 1
    assert recording.responses[0].is_closed


# -- requests ---------------------------------------------------------------------------------


class RecordingAdapter(RetryAdapter):
    """The real adapter, keeping every response that urllib3 produced for an attempt."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.responses: list[requests.Response] = []

    def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        response = super().build_response(req, resp)
        self.responses.append(response)
        return response


def session(adapter: RetryAdapter) -> requests.Session:
    s = requests.Session()
    s.mount("http://", adapter)
    return s


def released(response: requests.Response) -> bool:
    """Whether urllib3 gave the response's connection back (or closed it)."""
    raw = response.raw
    return raw.closed or raw.connection is None


@pytest.mark.parametrize("stream", [False, True], ids=["read", "stream"])
def test_requests_wait_past_the_deadline_returns_the_last_response(
    server: Server, stream: bool
) -> None:
    clock = LateClock(late=5.0)
    adapter = RecordingAdapter(policy(clock, timeout=1.0), budget=None)
    with session(adapter) as s:
        r = s.get(server.url + "/flaky/10/503", stream=stream, timeout=5.0)
        assert r.status_code == 503
        assert r.text == "fail"
    assert server.count("GET", "/flaky/10/503") == 1
    assert clock.sleeps == [0.1]
    assert adapter.responses == [r]


@pytest.mark.parametrize("stream", [False, True], ids=["read", "stream"])
def test_requests_discarded_responses_are_closed(server: Server, stream: bool) -> None:
    adapter = RecordingAdapter(policy(seawall.VirtualClock()), budget=None)
    with session(adapter) as s:
        r = s.get(server.url + "/flaky/3/503", stream=stream, timeout=5.0)
        assert r.status_code == 200
        assert r.text == "ok after 4"
    assert len(adapter.responses) == 4
    assert all(released(response) for response in adapter.responses[:3])


def test_requests_interrupted_wait_closes_the_kept_response(server: Server) -> None:
    adapter = RecordingAdapter(policy(InterruptedClock()), budget=None)
    with session(adapter) as s, pytest.raises(Interrupted):
        s.get(server.url + "/flaky/10/503", stream=True, timeout=5.0)
    assert len(adapter.responses) == 1
    assert released(adapter.responses[0])


# -- httpx, async -----------------------------------------------------------------------------


class LateAsyncClock(LateClock):
    async def asleep(self, seconds: float) -> None:
        await super().asleep(seconds)
        self.advance(self.late)


class RecordingAsync(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.responses: list[httpx.Response] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.responses.append(response)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("buffer_limit", [1 << 20, 0], ids=["body-in-memory", "body-unread"])
def test_async_httpx_wait_past_the_deadline_returns_the_last_response(
    server: Server, buffer_limit: int
) -> None:
    clock = LateAsyncClock(late=5.0)
    p = policy(clock, timeout=1.0)
    recording = RecordingAsync()

    async def main() -> tuple[int, str]:
        transport = seawall.httpx.AsyncRetryTransport(
            p, recording, budget=None, buffer_limit=buffer_limit
        )
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
            r = await c.get(server.url + "/flaky/10/503")
            return r.status_code, (await r.aread()).decode()

    assert asyncio.run(main()) == (503, "fail")
    assert server.count("GET", "/flaky/10/503") == 1
    assert all(response.is_closed for response in recording.responses)

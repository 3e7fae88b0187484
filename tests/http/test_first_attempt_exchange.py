"""The one first-attempt path (``seawall._policy.http.first``) as every integration takes it.

The path and each integration's part of it (its ``Exchange``: sending and closing) are tested
against the real test server: a budget whose ``after`` fails releases the response nobody will
read, in each of the four integrations; the path's record is built once per host and holds
only what the path reads; the path's two compiled functions show their lines in tracebacks.
"""

from __future__ import annotations

import asyncio
import linecache
import random
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
import seawall.aiohttp
from heard import Heard
from seawall._policy.http import first as first_module
from seawall._policy.http.first import FirstAttemptPath
from seawall.httpx import AsyncRetryTransport, RetryTransport
from seawall.requests import RetryAdapter


class BudgetBroke(Exception):
    """Raised by the budget's ``after``: the first attempt was answered, the budget failed."""


class AfterFails(Heard):
    """A budget whose first_attempt() capability offers an ``after`` that raises."""

    def first_attempt(self) -> tuple[None, Callable[[], None]]:
        return None, self.broken

    def broken(self) -> None:
        self.heard.append("after")
        raise BudgetBroke


def policy() -> seawall.RetryPolicy:
    return seawall.RetryPolicy(clock=seawall.VirtualClock(), rng=random.Random(3), hooks=())


class Recording(httpx.BaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.responses: list[httpx.Response] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        self.responses.append(response)
        return response


class AsyncRecording(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.responses: list[httpx.Response] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.responses.append(response)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class RecordingAdapter(RetryAdapter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.responses: list[requests.Response] = []

    def build_response(self, req: Any, resp: Any) -> requests.Response:
        response = super().build_response(req, resp)
        self.responses.append(response)
        return response


# The body is left unread within the attempt (buffer_limit=0, or a stream): closing it is what
# gives its connection back.


def test_httpx_a_failing_budget_after_the_answer_closes_it(server: Server) -> None:
    budget, recording = AfterFails(), Recording()
    transport = RetryTransport(policy(), recording, budget=budget, buffer_limit=0)
    with httpx.Client(transport=transport, timeout=5.0) as client, pytest.raises(BudgetBroke):
        client.get(server.url + "/ok")
    assert budget.heard == ["after"]
    assert [r.is_closed for r in recording.responses] == [True]


def test_httpx_async_a_failing_budget_after_the_answer_closes_it(server: Server) -> None:
    budget, recording = AfterFails(), AsyncRecording()
    transport = AsyncRetryTransport(policy(), recording, budget=budget, buffer_limit=0)

    async def send() -> None:
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
            with pytest.raises(BudgetBroke):
                await client.get(server.url + "/ok")

    asyncio.run(send())
    assert budget.heard == ["after"]
    assert [r.is_closed for r in recording.responses] == [True]


def test_requests_a_failing_budget_after_the_answer_closes_it(server: Server) -> None:
    budget = AfterFails()
    adapter = RecordingAdapter(policy(), budget=budget)
    with requests.Session() as session:
        session.mount("http://", adapter)
        with pytest.raises(BudgetBroke):
            session.get(server.url + "/ok", stream=True, timeout=5.0)
    assert budget.heard == ["after"]
    raw = [r.raw for r in adapter.responses]
    assert len(raw) == 1 and (raw[0].closed or raw[0].connection is None)


def test_aiohttp_a_failing_budget_after_the_answer_releases_it(server: Server) -> None:
    budget = AfterFails()
    seen: list[aiohttp.ClientResponse] = []

    async def recording(
        request: aiohttp.ClientRequest,
        handler: Callable[[aiohttp.ClientRequest], Awaitable[aiohttp.ClientResponse]],
    ) -> aiohttp.ClientResponse:
        response = await handler(request)
        seen.append(response)
        return response

    retry = seawall.aiohttp.RetryMiddleware(policy(), budget=budget, buffer_limit=0)

    async def send() -> None:
        async with aiohttp.ClientSession(middlewares=[retry, recording]) as session:
            with pytest.raises(BudgetBroke):
                await session.get(server.url + "/ok")

    asyncio.run(send())
    assert budget.heard == ["after"]
    assert [r.closed for r in seen] == [True]


def test_the_record_is_built_once_per_host_and_names_what_the_path_reads(
    server: Server,
) -> None:
    transport = RetryTransport(seawall.RetryPolicy(hooks=()), total_timeout=12.0)
    with httpx.Client(transport=transport, timeout=5.0) as client:
        for _ in range(3):
            assert client.get(server.url + "/ok").status_code == 200
    ready = transport._policies.ready
    assert ready is not None and len(ready) == 1
    (path,) = ready.values()
    assert isinstance(path, FirstAttemptPath)
    assert (path.total, path.limit, path.keyed) == (12.0, 1 << 20, None)
    # The derived policy of the host: the per-host budget, named after the host.
    assert path.host.policy.name == server.url.rstrip("/")
    assert path.answers[200][0] == seawall.http.HttpAttempt(200, None, None)
    assert 503 not in path.answers  # retried: never returned by the path as it is


def test_the_path_shows_its_lines_in_a_traceback(server: Server) -> None:
    # The path is one text compiled twice: a failure inside it names its lines.
    class Broken(RetryTransport):
        def _send_first(self, *args: Any) -> Any:
            raise ZeroDivisionError  # not a transport error: not retried, raised as it is

    transport = Broken(seawall.RetryPolicy(hooks=()))
    client = httpx.Client(transport=transport)
    with client, pytest.raises(ZeroDivisionError) as caught:
        client.get(server.url + "/ok")
    frames = traceback.extract_tb(caught.value.__traceback__)
    # Where the path sent it, and where it handed the error over to the retries (which raised
    # it again, as one the rules do not retry).
    path_lines = [f.line for f in frames if f.name == "first_attempt"]
    assert "response = exchange._send_first(request, path, started)" in path_lines
    assert "return exchange._retrying(request, call, outcome)" in path_lines
    for f in frames:
        if f.name == "first_attempt":
            assert f.filename == "<seawall HTTP: first_attempt>"
            assert linecache.getline(f.filename, f.lineno or 0).strip() == f.line
    assert first_module.first_attempt.__module__ == "seawall._policy.http.first"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_httpx_a_request_without_timeouts_is_capped_by_the_total_time(
    server: Server, asynchronous: bool
) -> None:
    # A request built without httpx's timeout extension (not through a client) has no
    # timeouts to fit the total time: the first attempt does not go as it is, but with each
    # timeout capped by the time left, as through HttpCall; the same after a request whose
    # timeouts were found to fit (they are remembered, and must not match "none").
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(dict(request.extensions.get("timeout") or {}))
        return httpx.Response(200)

    mock = httpx.MockTransport(answer)
    total = 7.0
    fitting = {"timeout": dict.fromkeys(("connect", "read", "write", "pool"), 1.0)}
    requests_ = [
        httpx.Request("GET", server.url + "/ok"),  # nothing remembered yet
        httpx.Request("GET", server.url + "/ok", extensions=fitting),
        httpx.Request("GET", server.url + "/ok"),  # other timeouts remembered
    ]
    if asynchronous:
        transport: Any = AsyncRetryTransport(transport=mock, total_timeout=total)

        async def send_all() -> None:
            for request in requests_:
                assert (await transport.handle_async_request(request)).status_code == 200

        asyncio.run(send_all())
    else:
        transport = RetryTransport(transport=mock, total_timeout=total)
        for request in requests_:
            assert transport.handle_request(request).status_code == 200
    capped = dict.fromkeys(("connect", "read", "write", "pool"), pytest.approx(total, abs=1))
    assert sent == [capped, fitting["timeout"], capped]

"""The HTTP integrations' first-attempt path (``Policies.first``): a first attempt answered at
once returns without an ``HttpCall``; any other outcome hands over to one.

Each request is sent twice, against the real test server: once as the transport sends it, once
inside an empty ``seawall.http.override()`` block, which changes no setting but takes the path
through ``Policies.start`` and ``HttpCall`` from the start. Both must give the same response,
history, budget calls, events and number of attempts on the server.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
from heard import Heard
from seawall._core.errors import _EXHAUSTED_MARK
from seawall._policy import http as rules
from seawall.httpx import AsyncRetryTransport, RetryTransport
from seawall.requests import RetryAdapter

TLS = ssl.create_default_context()

# (method, path): plain answers (the first-attempt path returns them), and every other
# outcome (a retried status, an overloaded answer, a 4xx/5xx answer, resets before and within
# the body, a body declared too long, a request that must not be retried).
CASES = [
    ("GET", "/ok"),
    ("GET", "/status/204"),
    ("GET", "/status/304"),
    ("HEAD", "/ok"),
    ("POST", "/ok"),
    ("GET", "/status/404"),
    ("GET", "/status/500"),
    ("GET", "/status/503"),
    ("GET", "/flaky/1/503"),
    ("GET", "/flaky/2/429?retry_after=1"),
    ("GET", "/flaky/1/503?overloaded=envoy"),
    ("GET", "/reset-head/1"),
    ("GET", "/reset-body/1"),
    ("POST", "/flaky/1/503"),
    ("POST", "/reset-head/1"),
]


class HeardFirst(Heard):
    """The same, offering the first_attempt() capability (a deposit before, nothing after)."""

    def first_attempt(self) -> tuple[Callable[[], None], None]:
        return self.deposit, None

    def deposit(self) -> None:
        self.heard.append("deposit")


def outcome_of(response: Any, history: Any, status: int, body: bytes) -> tuple[Any, ...]:
    return (
        status,
        body,
        tuple((a.status, type(a.error).__name__ if a.error else None, a.wait) for a in history),
        getattr(response, _EXHAUSTED_MARK, False),
    )


def error_of(exc: BaseException) -> tuple[Any, ...]:
    history = getattr(exc, rules.HISTORY_ATTRIBUTE, ())
    return (
        type(exc).__name__,
        tuple((a.status, type(a.error).__name__ if a.error else None, a.wait) for a in history),
    )


def event_of(e: seawall.RetryEvent) -> tuple[Any, ...]:
    return (e.kind, e.attempt, type(e.error).__name__, e.delay, e.elapsed, e.reason)


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which of Policies.start and Policies.resume each request went through."""
    taken: list[str] = []
    start, resume = rules.Policies.start, rules.Policies.resume

    def counted_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        taken.append("start")
        return start(self, *args, **kwargs)

    def counted_resume(self: Any, *args: Any, **kwargs: Any) -> Any:
        taken.append("resume")
        return resume(self, *args, **kwargs)

    monkeypatch.setattr(rules.Policies, "start", counted_start)
    monkeypatch.setattr(rules.Policies, "resume", counted_resume)
    return taken


def retry_policy(events: list[seawall.RetryEvent]) -> seawall.RetryPolicy:
    return seawall.RetryPolicy(
        clock=seawall.VirtualClock(), rng=random.Random(7), hooks=[events.append]
    )


def both_ways(send: Callable[[bool, str], tuple[Any, list[str], list[Any]]], path: str) -> None:
    """*send(forced, path)* once each way; the server keeps a count per path, so the forced
    request goes to the same route spelt with a trailing slash (the same answers)."""
    route, _, query = path.partition("?")
    again = route + "/" + ("?" + query if query else "")
    assert send(False, path) == send(True, again)


def first_path_taken(taken: list[str], method: str, path: str) -> None:
    """A plain answer to a first attempt builds no HttpCall; anything else resumes one."""
    plain = path in ("/ok", "/status/204", "/status/304")
    assert taken == ([] if plain else ["resume"]), (method, path)


@pytest.mark.parametrize("budget", [Heard, HeardFirst])
@pytest.mark.parametrize(("method", "path"), CASES)
def test_httpx_sync_both_paths_agree(
    server: Server, paths: list[str], method: str, path: str, budget: type[Heard]
) -> None:
    def send(forced: bool, path: str) -> tuple[Any, list[str], list[Any]]:
        events: list[seawall.RetryEvent] = []
        heard = budget()
        transport = RetryTransport(
            retry_policy(events), httpx.HTTPTransport(verify=TLS), budget=heard
        )
        with httpx.Client(transport=transport, timeout=5.0) as c:
            paths.clear()
            try:
                if forced:
                    with seawall.http.override():
                        r = c.request(method, server.url + path, content=b"x")
                else:
                    r = c.request(method, server.url + path, content=b"x")
                    first_path_taken(paths, method, path)
                seen: Any = outcome_of(r, r.extensions[rules.HISTORY_KEY], r.status_code, r.content)
            except httpx.HTTPError as exc:
                seen = error_of(exc)
        count = server.count(method, path.partition("?")[0])
        return (seen, count), heard.heard, [event_of(e) for e in events]

    both_ways(send, path)


@pytest.mark.parametrize(("method", "path"), CASES)
async def test_httpx_async_both_paths_agree(
    server: Server, paths: list[str], method: str, path: str
) -> None:
    async def asend(forced: bool, path: str) -> tuple[Any, list[str], list[Any]]:
        events: list[seawall.RetryEvent] = []
        heard = HeardFirst()
        transport = AsyncRetryTransport(
            retry_policy(events), httpx.AsyncHTTPTransport(verify=TLS), budget=heard
        )
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
            paths.clear()
            try:
                if forced:
                    with seawall.http.override():
                        r = await c.request(method, server.url + path, content=b"x")
                else:
                    r = await c.request(method, server.url + path, content=b"x")
                    first_path_taken(paths, method, path)
                seen: Any = outcome_of(r, r.extensions[rules.HISTORY_KEY], r.status_code, r.content)
            except httpx.HTTPError as exc:
                seen = error_of(exc)
        count = server.count(method, path.partition("?")[0])
        return (seen, count), heard.heard, [event_of(e) for e in events]

    route, _, query = path.partition("?")
    again = route + "/" + ("?" + query if query else "")
    assert await asend(False, path) == await asend(True, again)


@pytest.mark.parametrize("budget", [Heard, HeardFirst])
@pytest.mark.parametrize(("method", "path"), CASES)
def test_requests_both_paths_agree(
    server: Server, paths: list[str], method: str, path: str, budget: type[Heard]
) -> None:
    def send(forced: bool, path: str) -> tuple[Any, list[str], list[Any]]:
        events: list[seawall.RetryEvent] = []
        heard = budget()
        with requests.Session() as s:
            s.mount("http://", RetryAdapter(retry_policy(events), budget=heard))
            paths.clear()
            try:
                if forced:
                    with seawall.http.override():
                        r = s.request(method, server.url + path, data=b"x", timeout=5)
                else:
                    r = s.request(method, server.url + path, data=b"x", timeout=5)
                    first_path_taken(paths, method, path)
                seen: Any = outcome_of(r, r.seawall_history, r.status_code, r.content)  # type: ignore[attr-defined]
            except requests.RequestException as exc:
                seen = error_of(exc)
        count = server.count(method, path.partition("?")[0])
        return (seen, count), heard.heard, [event_of(e) for e in events]

    both_ways(send, path)


@pytest.mark.parametrize(
    ("timeout", "total"),
    [
        (None, 30.0),  # no httpx timeout: capped by the total time
        (60.0, 30.0),  # longer than the total time: capped
        (None, None),  # no limit at all: sent as it is
        (5.0, None),
    ],
)
def test_httpx_timeouts_beyond_the_total_time_are_capped_on_both_paths(
    server: Server, paths: list[str], timeout: float | None, total: float | None
) -> None:
    # A request whose timeouts do not fit the total time is not sent as it is: the
    # first-attempt path hands over before sending, and the request goes with capped
    # timeouts, as through HttpCall.
    sent: list[dict[str, Any]] = []

    class Recording(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(dict(request.extensions["timeout"]))
            return super().handle_request(request)

    def send(forced: bool) -> tuple[Any, ...]:
        sent.clear()
        heard = HeardFirst()
        transport = RetryTransport(
            seawall.RetryPolicy(hooks=()), Recording(), budget=heard, total_timeout=total
        )
        with httpx.Client(transport=transport, timeout=timeout) as c:
            paths.clear()
            if forced:
                with seawall.http.override():
                    r = c.get(server.url + "/ok")
            else:
                r = c.get(server.url + "/ok")
            fits = total is None or (timeout is not None and timeout <= total)
            if not forced:
                assert paths == ([] if fits else ["resume"])
        capped = {k: v is not None and (total is None or v <= total) for k, v in sent[0].items()}
        return r.status_code, r.extensions[rules.HISTORY_KEY], heard.heard, capped

    assert send(False) == send(True)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_httpx_timeouts_found_to_fit_are_remembered_by_value(
    server: Server, paths: list[str], asynchronous: bool
) -> None:
    # The transport remembers the last timeouts found within the total time (with a
    # millisecond to spare), by value: the same four timeouts again are sent as they are;
    # other values, a dict the caller changed since, or timeouts at the very end of the total
    # time are checked again, each request on its own.
    sent: list[dict[str, Any]] = []
    total = 30.0

    def timeouts(value: float | None) -> dict[str, float | None]:
        return dict.fromkeys(("connect", "read", "write", "pool"), value)

    mine = timeouts(5.0)
    edge = total - 0.0005  # within the total time, but not by a millisecond: not remembered
    sequence = [mine, timeouts(60.0), mine, timeouts(5.0), timeouts(edge), timeouts(None)]

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(dict(request.extensions["timeout"]))
        return httpx.Response(200)

    def expected(value: dict[str, float | None]) -> tuple[list[str], dict[str, float | None]]:
        fits = all(v is not None and v <= total for v in value.values())
        capped = pytest.approx(total, abs=1.0)  # the time left, a moment after it started
        return ([] if fits else ["resume"]), (value if fits else dict.fromkeys(value, capped))

    want = [expected(dict(v)) for v in sequence]
    want.append((["resume"], {**timeouts(5.0), "read": pytest.approx(total, abs=1.0)}))
    mock = httpx.MockTransport(answer)
    got: list[tuple[list[str], dict[str, float | None]]] = []
    if asynchronous:
        transport: Any = AsyncRetryTransport(transport=mock, total_timeout=total)

        async def run() -> None:
            async with httpx.AsyncClient(transport=transport) as c:
                for value in sequence:
                    paths.clear()
                    await c.get(server.url + "/ok", extensions={"timeout": value})
                    got.append((list(paths), sent[-1]))
                mine["read"] = 60.0  # changed by the caller after it was found to fit
                paths.clear()
                await c.get(server.url + "/ok", extensions={"timeout": mine})
                got.append((list(paths), sent[-1]))

        import asyncio

        asyncio.run(run())
    else:
        with httpx.Client(transport=RetryTransport(transport=mock, total_timeout=total)) as c:
            for value in sequence:
                paths.clear()
                c.get(server.url + "/ok", extensions={"timeout": value})
                got.append((list(paths), sent[-1]))
            mine["read"] = 60.0
            paths.clear()
            c.get(server.url + "/ok", extensions={"timeout": mine})
            got.append((list(paths), sent[-1]))
    assert got == want


def test_first_attempt_path_skipped_when_it_does_not_apply(
    server: Server, paths: list[str]
) -> None:
    # Each of these takes HttpCall from the start: a policy with a timeout (its first attempt
    # needs a RetryState), a result predicate, an ambient deadline, a per-request override,
    # an Idempotency-Key to add.
    url = server.url + "/ok"

    def taken(transport: RetryTransport, **kwargs: Any) -> list[str]:
        paths.clear()
        with httpx.Client(transport=transport, timeout=5.0) as c:
            assert c.request(kwargs.pop("method", "GET"), url, **kwargs).status_code == 200
        return list(paths)

    assert taken(RetryTransport(seawall.RetryPolicy(timeout=10.0))) == ["start"]
    assert taken(RetryTransport(seawall.RetryPolicy(retry_if_result=lambda r: False))) == ["start"]
    with seawall.deadline(10.0):
        assert taken(RetryTransport()) == ["start"]
    assert taken(RetryTransport(), extensions={"seawall": {"retries": 0}}) == ["start"]
    assert taken(RetryTransport(idempotency_key=True), method="POST", content=b"x") == ["start"]
    # ... and a POST without a key to add takes the first-attempt path.
    assert taken(RetryTransport(), method="POST", content=b"x") == []


def test_integrations_look_the_record_up_themselves_until_it_does_not_apply(
    server: Server, first_calls: list[Any]
) -> None:
    # While nothing else applies, an integration reads the record Policies.first would return
    # from Policies.ready (the first request of a host builds it through first()). A handle
    # to follow, an Idempotency-Key due, a per-request override, an override block or an
    # ambient deadline used once in the process: first() is called each time.
    url = server.url + "/ok"

    def calls(transport: RetryTransport, method: str = "GET", **kwargs: Any) -> int:
        with httpx.Client(transport=transport, timeout=5.0) as c:
            for _ in range(3):
                assert c.request(method, url, content=b"x", **kwargs).status_code == 200
        count = len(first_calls)
        first_calls.clear()
        return count

    def adapter_calls(adapter: RetryAdapter) -> int:
        with requests.Session() as s:
            s.mount("http://", adapter)
            for _ in range(3):
                assert s.get(url, timeout=5).status_code == 200
        count = len(first_calls)
        first_calls.clear()
        return count

    assert not rules.OVERRIDES.used and not rules.SCOPES.used  # a fresh process (conftest)
    transport = RetryTransport()
    assert calls(transport) == 1  # built once, then looked up
    host = firsts_host(url)
    assert transport._policies.ready == {host: transport._policies.first("GET", host)}
    first_calls.clear()
    assert adapter_calls(RetryAdapter()) == 1
    assert calls(RetryTransport(idempotency_key=True), "POST") == 3  # keyed: first() decides
    registry = seawall.config.PolicyRegistry(
        {"routes": {"api": {"retry_policy": {"num_retries": 1}}}}, hooks=()
    )
    assert calls(RetryTransport.from_route(registry, "api")) == 3  # a handle: no ready records
    assert calls(RetryTransport(), extensions={"seawall": {"retries": 1}}) == 3
    with seawall.http.override():
        pass
    assert rules.OVERRIDES.used
    assert calls(RetryTransport()) == 3
    assert adapter_calls(RetryAdapter()) == 3


def firsts_host(url: str) -> Any:
    u = httpx.URL(url)
    return (u.scheme, u.raw_host, u.port)

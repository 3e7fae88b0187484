"""seawall.aiohttp.RetryMiddleware against a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import seawall
import seawall.aiohttp as sa
from heard import Heard
from seawall.http import budget_for_host

# A "slow" step answers after SLOW_SECONDS (the test's end releases it at once); a client timed
# as cut by a total time of 0.3 s must be free within WELL_BEFORE: at load 10 on two cores it
# is, well within 5 s, and one that waited for the answer is not.
SLOW_SECONDS = 10.0
WELL_BEFORE = SLOW_SECONDS / 2
# The total time of tests whose quick answers must come within it: at load 10 on two cores one
# loopback answer in a hundred takes half a second.
TOTAL = 1.0


class Scripted:
    """Answers follow a script per path key (the last step repeats); attempts are counted.

    A step is a status, ``(status, headers)``, ``"cut"`` (a body shorter than declared) or
    ``"slow"`` (200 after SLOW_SECONDS, or when the test ends).
    """

    def __init__(self) -> None:
        self.scripts: dict[str, list[Any]] = {}
        self.attempts: dict[str, int] = {}
        self.headers: dict[str, list[dict[str, str]]] = {}
        self.url = ""
        self.release = asyncio.Event()

    def script(self, key: str, *steps: Any) -> str:
        self.scripts[key] = list(steps)
        return f"{self.url}/s/{key}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        n = self.attempts.get(key, 0)
        self.attempts[key] = n + 1
        self.headers.setdefault(key, []).append(dict(request.headers))
        await request.read()
        steps = self.scripts.get(key, [200])
        step = steps[min(n, len(steps) - 1)]
        if step == "cut":
            response = web.StreamResponse(status=200, headers={"Content-Length": "100"})
            await response.prepare(request)
            await response.write(b"partial")
            assert request.transport is not None
            request.transport.close()
            return response
        if step == "slow":
            # asyncio.TimeoutError: distinct from TimeoutError on Python 3.10
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self.release.wait(), SLOW_SECONDS)
            step = 200
        status, headers = step if isinstance(step, tuple) else (step, {})
        return web.Response(status=status, headers=headers, body=f"{key}:{status}".encode())


@pytest.fixture
async def server() -> AsyncIterator[Scripted]:
    state = Scripted()
    app = web.Application()
    app.router.add_route("*", "/s/{key}", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()


def policy(**kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("clock", seawall.VirtualClock())  # waits cost nothing
    return seawall.RetryPolicy(**kwargs)


def session(mw: sa.RetryMiddleware, **kwargs: Any) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(middlewares=[mw], **kwargs)


def watched(mw: sa.RetryMiddleware) -> list[Any]:
    """The tasks *mw*'s watchdog holds now. Before Python 3.11 (no Task.cancelling()) there
    is no watchdog: each attempt has its own timer."""
    if not sa._WATCHED:
        assert mw._watchdog is None
        return []
    assert mw._watchdog is not None
    return list(mw._watchdog.inflight)


async def test_retries_transient_statuses(server: Scripted) -> None:
    url = server.script("a", 503, 502, 200)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s, s.get(url) as r:
        assert (r.status, await r.text()) == (200, "a:200")
    assert server.attempts["a"] == 3


async def test_gives_up_returning_the_last_response(server: Scripted) -> None:
    url = server.script("a", 503)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s, s.get(url) as r:
        assert (r.status, await r.text()) == (503, "a:503")
    assert server.attempts["a"] == 3


async def test_other_statuses_and_overload_are_not_retried(server: Scripted) -> None:
    missing = server.script("missing", 404)
    shed = server.script("shed", (503, {"x-seawall-overloaded": "1"}), 200)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s:
        async with s.get(missing) as r:
            assert r.status == 404
        async with s.get(shed) as r:
            assert r.status == 503
    assert (server.attempts["missing"], server.attempts["shed"]) == (1, 1)


async def test_post_needs_an_idempotency_key(server: Scripted) -> None:
    plain = server.script("plain", 503, 200)
    keyed = server.script("keyed", 503, 503, 200)
    async with (
        session(sa.RetryMiddleware(policy(), budget=None)) as s,
        s.post(plain, data=b"x") as r,
    ):
        assert r.status == 503
    async with (
        session(sa.RetryMiddleware(policy(), budget=None, idempotency_key=True)) as s,
        s.post(keyed, json={"a": 1}) as r,
    ):
        assert r.status == 200
    assert (server.attempts["plain"], server.attempts["keyed"]) == (1, 3)
    keys = {h.get("Idempotency-Key") for h in server.headers["keyed"]}
    assert len(keys) == 1 and None not in keys


async def test_streamed_body_is_not_replayed(server: Scripted) -> None:
    url = server.script("stream", 503, 200)

    async def body() -> AsyncIterator[bytes]:
        yield b"chunk"

    mw = sa.RetryMiddleware(policy(), budget=None)
    async with session(mw) as s, s.put(url, data=body()) as r:
        assert r.status == 503
    assert server.attempts["stream"] == 1


async def test_retry_after_replaces_the_backoff(server: Scripted) -> None:
    url = server.script("a", (503, {"Retry-After": "2"}), (429, {"Retry-After": "1e9"}), 200)
    clock = seawall.VirtualClock()
    delays: list[float] = []
    p = policy(clock=clock, hooks=[lambda e: delays.append(e.delay)], max_retry_after=30.0)
    async with session(sa.RetryMiddleware(p, budget=None)) as s, s.get(url) as r:
        assert r.status == 200
    # "1e9" is not delay-seconds: ignored, the backoff applies (at most its cap).
    assert delays[0] == 2.0 and delays[1] <= seawall.Backoff().cap


async def test_deadline_headers_and_attempt_timeout(server: Scripted) -> None:
    url = server.script("a", 200)
    async with (
        session(sa.RetryMiddleware(seawall.RetryPolicy(), budget=None)) as s,
        seawall.deadline(10.0),
        s.get(url) as r,
    ):
        assert r.status == 200
    (seen,) = server.headers["a"]
    assert 5000 < int(seen["x-request-deadline"]) <= 10_000
    assert "grpc-timeout" in seen

    slow = server.script("slow", "slow", 200)
    # An attempt timeout that the quick answer meets on a loaded machine too.
    p = seawall.RetryPolicy(attempt_timeout=1.0, backoff=seawall.Backoff(base=0.01))
    async with session(sa.RetryMiddleware(p, budget=None)) as s, s.get(slow) as r:
        assert r.status == 200  # the slow attempt was cancelled at 1 s and retried
    assert server.attempts["slow"] == 2


async def test_body_cut_short_is_retried_within_the_attempt(server: Scripted) -> None:
    url = server.script("cut", "cut", 200)
    async with session(sa.RetryMiddleware(policy(), budget=None)) as s, s.get(url) as r:
        assert (r.status, await r.text()) == (200, "cut:200")
    assert server.attempts["cut"] == 2


async def test_discarded_responses_release_their_connections(server: Scripted) -> None:
    """One connection in the pool and no buffering: a discarded response that kept its
    connection would leave the next attempt waiting for the pool forever."""
    url = server.script("a", 503, 503, 200)
    mw = sa.RetryMiddleware(policy(), budget=None, buffer_limit=0)
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=5)
    async with session(mw, connector=connector, timeout=timeout) as s, s.get(url) as r:
        assert r.status == 200
    assert server.attempts["a"] == 3


async def test_never_sent_is_retried_for_any_method() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    events: list[str] = []
    p = policy(hooks=[lambda e: events.append(e.kind)])
    async with session(sa.RetryMiddleware(p, budget=None)) as s:
        with pytest.raises(aiohttp.ClientConnectorError):
            await s.post(f"http://127.0.0.1:{port}/x", data=b"x")
    assert events == ["retry", "retry", "give_up"]


async def test_per_host_budget_is_shared(server: Scripted) -> None:
    url = server.script("a", 200)
    budget = budget_for_host(server.url)
    assert isinstance(budget, seawall.RetryBudget)
    before = budget.requests
    async with (
        session(sa.RetryMiddleware(policy())) as s1,
        session(sa.RetryMiddleware(policy())) as s2,
    ):
        for s in (s1, s2):
            async with s.get(url) as r:
                assert r.status == 200
    assert budget.requests == before + 2


async def test_from_route_follows_reloads(server: Scripted, tmp_path: Any) -> None:
    file = tmp_path / "policies.toml"
    template = '[routes.users]\nretry_policy = {{ num_retries = {n}, retry_on = "5xx" }}\n'
    file.write_text(template.format(n=1))
    registry = seawall.config.PolicyRegistry(file, clock=seawall.VirtualClock(), hooks=())
    mw = sa.RetryMiddleware.from_route(registry, "users", budget=None)
    async with session(mw) as s:
        url = server.script("first", 500)  # "5xx": the route's statuses, not the defaults
        async with s.get(url) as r:
            assert r.status == 500
        file.write_text(template.format(n=3))
        registry.reload()
        url = server.script("second", 500)
        async with s.get(url) as r:
            assert r.status == 500
    assert (server.attempts["first"], server.attempts["second"]) == (2, 4)
    with pytest.raises(KeyError):
        sa.RetryMiddleware.from_route(registry, "nobody")


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(TypeError, match="policy"):
        sa.RetryMiddleware(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="budget"):
        sa.RetryMiddleware(budget=3)
    with pytest.raises(TypeError, match="retry_on"):
        sa.RetryMiddleware(retry_on=(int,))  # type: ignore[arg-type]


async def test_response_predicate_history_and_override(server: Scripted) -> None:
    # retry_if_result sees the ClientResponse (its status and headers): a 200 marked stale.
    url = server.script("p", (200, {"x-stale": "1"}), (200, {"x-stale": "1"}), 200)
    p = policy(
        retry_if_result=lambda r: r.headers.get("x-stale") == "1",
        backoff=seawall.Backoff.constant(0.25),
    )
    async with session(sa.RetryMiddleware(p, budget=None)) as s:
        async with s.get(url) as r:
            assert r.status == 200 and "x-stale" not in r.headers
            assert [(a.status, a.wait) for a in r.seawall_history] == [  # type: ignore[attr-defined]
                (200, 0.25),
                (200, 0.25),
                (200, None),
            ]
        once = server.script("once", 503, 200)
        with seawall.http.override(retries=0):
            async with s.get(once) as r:
                assert r.status == 503
    assert (server.attempts["p"], server.attempts["once"]) == (3, 1)


async def test_total_timeout_caps_the_whole_request(server: Scripted) -> None:
    # Each attempt meets a server that takes 10 s: with a total time of 0.3 s and no deadline
    # of the caller's, the attempt is cut at 0.3 s and no other starts.
    url = server.script("slow", "slow")
    loop = asyncio.get_running_loop()
    mw = sa.RetryMiddleware(seawall.RetryPolicy(hooks=()), budget=None, total_timeout=0.3)
    started = loop.time()
    async with session(mw) as s:
        with pytest.raises(aiohttp.ServerTimeoutError):
            await s.get(url)
    assert 0.25 <= loop.time() - started < WELL_BEFORE
    assert server.attempts["slow"] == 1


def test_total_timeout_is_validated() -> None:
    with pytest.raises(ValueError, match="total_timeout"):
        sa.RetryMiddleware(total_timeout=0)
    with pytest.raises(TypeError, match="'retries'"):
        sa.RetryMiddleware(retries=3)  # type: ignore[call-arg]


async def test_from_route_follows_the_route_error_conditions(
    server: Scripted, tmp_path: Any
) -> None:
    file = tmp_path / "policies.toml"
    file.write_text(
        '[routes.users]\nretry_policy = { num_retries = 2, retry_on = "connect-failure" }\n'
    )
    registry = seawall.config.PolicyRegistry(file, clock=seawall.VirtualClock(), hooks=())
    mw = sa.RetryMiddleware.from_route(registry, "users", budget=None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    async with session(mw) as s:
        with pytest.raises(aiohttp.ClientConnectorError) as error:
            await s.get(refused)
        assert len(error.value.seawall_history) == 3  # type: ignore[attr-defined]
        cut = server.script("cut", "cut", 200)
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.get(cut) as r:
                await r.read()
    assert server.attempts["cut"] == 1  # a body cut short is not a connect failure


# -- the first-attempt path -------------------------------------------------------------------

FIRST_ATTEMPT_CASES = [
    ("GET", (200,)),
    ("GET", (204,)),
    ("HEAD", (200,)),
    ("POST", (200,)),
    ("GET", (404,)),
    ("GET", (500,)),
    ("GET", (503, 200)),
    ("GET", ((429, {"Retry-After": "1"}), 200)),
    ("GET", ((503, {"x-envoy-overloaded": "1"}),)),
    ("GET", ("cut", 200)),
    ("POST", (503, 200)),
    ("POST", ("cut", 200)),
    ("GET", ("slow", 200)),  # the first attempt outlives the total time (a real clock)
]


@pytest.mark.parametrize("case", range(len(FIRST_ATTEMPT_CASES)))
async def test_first_attempt_path_and_full_path_agree(server: Scripted, case: int) -> None:
    # The same script sent on the middleware's first-attempt path, then inside an empty
    # override() block (no setting changes, every request goes through HttpCall): the same
    # answer, history, budget calls, events and attempts. With a server slower than the
    # total time, the watchdog on one path and within()'s timer on the other cut it alike.
    method, steps = FIRST_ATTEMPT_CASES[case]
    slow = steps[0] == "slow"

    async def send(forced: bool) -> tuple[Any, ...]:
        key = f"case{case}-{forced}"
        url = server.script(key, *steps)
        events: list[seawall.RetryEvent] = []
        budget = Heard()
        clock = seawall.SystemClock() if slow else seawall.VirtualClock()
        mw = sa.RetryMiddleware(
            policy(hooks=[events.append], rng=random.Random(7), clock=clock),
            budget=budget,  # type: ignore[arg-type]
            total_timeout=TOTAL,
        )
        async with session(mw) as s:
            try:
                if forced:
                    with seawall.http.override():
                        r = await s.request(method, url, data=b"x")
                else:
                    r = await s.request(method, url, data=b"x")
                async with r:
                    body = await r.read()
                history = r.seawall_history  # type: ignore[attr-defined]
                seen: Any = (r.status, body.rpartition(b":")[2])  # the key, less the path
            except aiohttp.ClientError as exc:
                history = exc.seawall_history  # type: ignore[attr-defined]
                seen = type(exc).__name__
        shown = [(a.status, type(a.error).__name__ if a.error else None, a.wait) for a in history]
        kinds = [(e.kind, e.attempt, type(e.error).__name__, e.delay, e.reason) for e in events]
        return seen, shown, budget.heard, kinds, server.attempts[key]

    fast, full = await send(False), await send(True)
    assert fast == full
    if slow:
        assert fast[0] == "ServerTimeoutError"


async def test_watchdog_cuts_each_attempt_at_its_own_deadline(server: Scripted) -> None:
    # Three requests to a server that takes 10 s, started 0.1 s apart, and quick ones between:
    # each slow one is cut TOTAL after it started (one loop timer serves them all), the quick
    # ones are answered, and nothing is left watched.
    slow = server.script("slow", "slow")
    quick = server.script("quick", 200)
    mw = sa.RetryMiddleware(seawall.RetryPolicy(hooks=()), budget=None, total_timeout=TOTAL)
    loop = asyncio.get_running_loop()

    async with session(mw) as s:

        async def cut() -> float:
            started = loop.time()
            with pytest.raises(aiohttp.ServerTimeoutError):
                await s.get(slow)
            return loop.time() - started

        tasks = []
        for _ in range(3):
            tasks.append(asyncio.ensure_future(cut()))
            async with s.get(quick) as r:
                assert r.status == 200
            await asyncio.sleep(0.1)
        took = await asyncio.gather(*tasks)
    assert all(TOTAL - 0.05 <= t < WELL_BEFORE for t in took), took
    assert server.attempts == {"slow": 3, "quick": 3}
    assert watched(mw) == []


async def test_watchdog_reads_the_loop_clock_when_the_policy_has_another(
    server: Scripted,
) -> None:
    # The watchdog takes the policy's reading at the start of an attempt as its own only when
    # both read the same clock. With a virtual clock (at 0, far behind the loop's), a quick
    # answer is not cut at once and a slow one is cut after the total time of the loop's.
    quick = server.script("quick", 200)
    slow = server.script("slow", "slow")
    clock = seawall.VirtualClock()
    mw = sa.RetryMiddleware(
        seawall.RetryPolicy(clock=clock, max_attempts=1, hooks=()), budget=None, total_timeout=TOTAL
    )
    loop = asyncio.get_running_loop()
    async with session(mw) as s:
        async with s.get(quick) as r:
            assert r.status == 200
        assert watched(mw) == []
        assert not sa._WATCHED or not mw._watchdog.same_clock  # type: ignore[union-attr]
        started = loop.time()
        with pytest.raises(aiohttp.ServerTimeoutError):
            await s.get(slow)
        assert TOTAL - 0.05 <= loop.time() - started < WELL_BEFORE
    assert server.attempts == {"quick": 1, "slow": 1}
    # ... and with the system clock, the policy's reading is the watchdog's.
    assert sa._Watchdog(loop, 0.3, time.monotonic).same_clock


async def test_watched_attempt_cancelled_from_outside_is_cancelled(server: Scripted) -> None:
    # A cancellation that is not the watchdog's stays a cancellation (as with asyncio.timeout):
    # the caller's task is cancelled, no timeout is raised and nothing is retried.
    slow = server.script("slow", "slow")
    mw = sa.RetryMiddleware(policy(hooks=()), budget=None, total_timeout=5.0)
    async with session(mw) as s:
        task = asyncio.ensure_future(s.get(slow))
        for _ in range(500):  # wait (bounded) until the server holds the request
            if server.attempts.get("slow"):
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert task.cancelled()
    assert server.attempts["slow"] == 1
    assert watched(mw) == []


async def test_quick_answers_leave_nothing_watched(server: Scripted) -> None:
    # The watchdog keeps only the attempts in flight: after many quick answers, some of them
    # concurrent, its queue is empty (bounded memory whatever the request rate).
    url = server.script("quick", 200)
    mw = sa.RetryMiddleware(policy(hooks=()), budget=None)

    async def get(s: aiohttp.ClientSession) -> int:
        async with s.get(url) as r:
            return r.status

    async with session(mw) as s:
        for _ in range(10):
            assert await asyncio.gather(*(get(s) for _ in range(5))) == [200] * 5
    assert watched(mw) == []
    assert server.attempts["quick"] == 50


async def test_instant_time_keeps_the_attempt_timer(server: Scripted) -> None:
    # Inside testing.instant() the first attempt is bounded by within()'s timer (armed for the
    # grace, the rest skipped), not by the watchdog.
    url = server.script("slow", "slow")
    mw = sa.RetryMiddleware(policy(hooks=()), budget=None, total_timeout=30.0)
    async with session(mw) as s:
        with seawall.testing.instant(grace=0.1), pytest.raises(aiohttp.ServerTimeoutError):
            await s.get(url)
    assert mw._watchdog is None


async def test_no_total_time_no_watchdog(server: Scripted) -> None:
    # total_timeout=None: the first attempt is not bounded by the middleware at all (aiohttp's
    # own ClientTimeout still is), so no watchdog is made; a retried status still retries.
    url = server.script("p", 503, 200)
    mw = sa.RetryMiddleware(policy(hooks=()), budget=None, total_timeout=None)
    async with session(mw) as s, s.get(url) as r:
        assert r.status == 200
        assert [a.status for a in r.seawall_history] == [503, 200]  # type: ignore[attr-defined]
    assert mw._watchdog is None
    assert server.attempts["p"] == 2


async def test_request_within_an_attempt_of_the_same_task(server: Scripted) -> None:
    # A later middleware that sends a request of its own (through the same seawall
    # middleware, in the same task) while the outer attempt is watched: the inner request has
    # its own timer and answers; the outer one stays watched and is cut at its own deadline.
    quick = server.script("quick", 200)
    slow = server.script("slow", "slow")
    mw = sa.RetryMiddleware(seawall.RetryPolicy(max_attempts=1, hooks=()), total_timeout=TOTAL)
    seen: list[Any] = []

    async def fetch_first(request: aiohttp.ClientRequest, handler: Any) -> Any:
        async with s.get(quick, middlewares=[mw]) as r:
            seen.append((r.status, watched(mw)))
        return await handler(request)

    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(middlewares=[mw, fetch_first]) as s:
        started = loop.time()
        with pytest.raises(aiohttp.ServerTimeoutError):
            await s.get(slow)
        took = loop.time() - started
    outer = [asyncio.current_task()] if sa._WATCHED else []
    assert seen == [(200, outer)]  # the outer attempt, still watched
    assert TOTAL - 0.05 <= took < WELL_BEFORE
    assert watched(mw) == []
    assert server.attempts == {"quick": 1, "slow": 1}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() came with 3.11")
async def test_task_with_a_pending_cancellation_keeps_its_own_timer(server: Scripted) -> None:
    # A task that swallowed a cancellation (cancelling() > 0) and then sends a request: the
    # attempt is bounded by its own timer, which still turns its expiry into a timeout.
    slow = server.script("slow", "slow")
    mw = sa.RetryMiddleware(seawall.RetryPolicy(max_attempts=1, hooks=()), total_timeout=0.3)
    loop = asyncio.get_running_loop()

    async def swallow_then_send(s: aiohttp.ClientSession) -> float:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1)
        assert task.cancelling() == 1
        started = loop.time()
        with pytest.raises(aiohttp.ServerTimeoutError):
            await s.get(slow)
        return loop.time() - started

    async with session(mw) as s:
        took = await asyncio.ensure_future(swallow_then_send(s))
    assert 0.25 <= took < WELL_BEFORE
    assert watched(mw) == []
    assert server.attempts["slow"] == 1


@pytest.mark.parametrize("slots", [True, False], ids=["URL fields", "URL properties"])
async def test_url_fields_name_the_same_budget(
    server: Scripted, slots: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The middleware keys a request by (scheme, encoded authority), read off yarl's URL
    # fields or (when yarl changes them) through its properties: either way the budget of the
    # spelled-out origin hears the request, whatever the spelling.
    assert sa._URL_SLOTS  # the installed yarl: the fields are read
    monkeypatch.setattr(sa, "_URL_SLOTS", slots)
    url = server.script(f"k{slots}", 200, 200, 200)
    port = url.split(":")[2].split("/")[0]
    budget = budget_for_host(f"http://127.0.0.1:{port}")
    assert isinstance(budget, seawall.RetryBudget)
    before = budget.requests
    spellings = [url, url.replace("http://", "HTTP://"), url.replace("http://", "http://u:p@")]
    async with session(sa.RetryMiddleware(policy())) as s:
        for spelled in spellings:
            async with s.get(spelled) as r:
                assert r.status == 200
    assert budget.requests == before + 3


def test_yarl_or_asyncio_changes_fall_back_to_the_public_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Checked at import: a yarl whose URL fields are gone (or disagree with its properties)
    # sends the key through the properties; an asyncio whose current_task is not the Python
    # lookup of _current_tasks is called as it is.
    assert sa._url_slots_work()

    class Moved:
        def __init__(self, text: str) -> None:
            self.scheme, self.raw_authority = "http", "api.test"

    monkeypatch.setattr(sa.yarl, "URL", Moved)
    assert not sa._url_slots_work()
    Moved._scheme, Moved._netloc = "http", "other.test"  # type: ignore[attr-defined]
    assert not sa._url_slots_work()

    if sys.version_info < (3, 12):  # current_task in Python: the lookup it makes
        assert sa._task_getter() == asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
    else:
        assert sa._task_getter() is asyncio.current_task
    monkeypatch.setattr(asyncio, "current_task", len)  # a C function: called as it is
    assert sa._task_getter() is len


async def test_the_current_task_as_asyncio_tells_it() -> None:
    loop = asyncio.get_running_loop()
    assert sa._current_task(loop) is asyncio.current_task()
    other = asyncio.new_event_loop()
    try:
        assert sa._current_task(other) is None  # no task running there
    finally:
        other.close()


async def test_record_looked_up_by_the_middleware_until_it_does_not_apply(
    server: Scripted, first_calls: list[Any]
) -> None:
    # As the httpx transports do (tests/http/test_first_attempt_path.py): the first request of
    # a host builds its record through Policies.first, the next ones read it from
    # Policies.ready; once an override block was used in the process, first() decides each.
    called = first_calls
    url = server.script("r", *([200] * 6))
    async with session(sa.RetryMiddleware(policy())) as s:
        for _ in range(3):
            async with s.get(url) as r:
                assert r.status == 200
        assert len(called) == 1
        with seawall.http.override():
            pass
        for _ in range(3):
            async with s.get(url) as r:
                assert r.status == 200
    assert len(called) == 4
    assert server.attempts["r"] == 6

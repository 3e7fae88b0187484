"""LoadShedder on virtual time: admission, LIFO queue, priorities, deadlines, rejections.

The middleware is driven as an ASGI application (scope, receive, send), exactly as a server
drives it; the protected app holds each request for a fixed virtual service time. The tests
run on asyncio and on trio (an ASGI server such as hypercorn serves either).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import anyio
import pytest

import seawall
from backends import Run
from seawall.instrumentation import Counters
from seawall.server import OVERLOADED_HEADER, LoadShedder, parse_priority
from seawall.testing import VirtualClock
from seawall.testing import run as run_asyncio


class SlowApp:
    """An ASGI app that holds each request for ``service`` virtual seconds."""

    def __init__(self, clock: VirtualClock, service: float = 1.0) -> None:
        self.clock = clock
        self.service = service
        self.started: list[tuple[str, float]] = []
        self.remaining: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        self.started.append((scope["path"], self.clock.now()))
        self.remaining.append(seawall.remaining())
        await anyio.sleep(self.service)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class Reply:
    def __init__(self, messages: list[Any], at: float) -> None:
        self.status: int = messages[0]["status"]
        self.headers = {bytes(k).decode(): bytes(v).decode() for k, v in messages[0]["headers"]}
        self.body = b"".join(m.get("body", b"") for m in messages[1:])
        self.at = at


async def request(
    app: Any, clock: VirtualClock, path: str = "/", headers: Iterable[tuple[str, str]] = ()
) -> Reply:
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }
    await app(scope, receive, send)
    return Reply(sent, clock.now())


async def burst(
    app: Any, clock: VirtualClock, paths: list[str], gap: float = 0.01, **kw: Any
) -> list[Reply]:
    """Start one request per path, *gap* virtual seconds apart; all replies, in path order."""
    replies: dict[int, Reply] = {}

    async def one(i: int, path: str) -> None:
        replies[i] = await request(app, clock, path, **kw)

    async with anyio.create_task_group() as tg:
        for i, path in enumerate(paths):
            tg.start_soon(one, i, path)
            await anyio.sleep(gap)
    return [replies[i] for i in range(len(paths))]


def test_within_capacity_everything_runs_at_once(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock)
    shedder = LoadShedder(app, max_concurrency=4, clock=clock)
    replies = run(burst(shedder, clock, ["/a", "/b", "/c", "/d"], gap=0.0), clock)
    assert [r.status for r in replies] == [200] * 4
    assert [r.at for r in replies] == [1.0] * 4
    assert shedder.stats.admitted == 4
    assert shedder.stats.in_flight == 0
    assert shedder.stats.queued == 0


def test_queue_is_served_newest_first(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock)
    shedder = LoadShedder(app, max_concurrency=1, max_queue=3, max_queue_wait=10.0, clock=clock)
    replies = run(burst(shedder, clock, ["/0", "/1", "/2", "/3"]), clock)
    assert [r.status for r in replies] == [200] * 4
    assert [path for path, _ in app.started] == ["/0", "/3", "/2", "/1"]
    # Each waiter got the slot the moment the previous request finished.
    assert [round(t, 6) for _, t in app.started] == [0.0, 1.0, 2.0, 3.0]
    assert shedder.stats.in_flight == 0
    assert shedder.stats.queued == 0


def test_full_queue_sheds_its_oldest_entry_with_503_retry_after_and_overload_header(
    run: Run,
) -> None:
    clock = VirtualClock()
    app = SlowApp(clock)
    shedder = LoadShedder(app, max_concurrency=1, max_queue=1, retry_after=2.5, clock=clock)
    first, older, newer = run(burst(shedder, clock, ["/0", "/1", "/2"]), clock)
    assert first.status == 200
    assert older.status == 503
    assert older.headers["retry-after"] == "3"
    assert older.headers[OVERLOADED_HEADER] == "1"
    assert older.at == pytest.approx(0.02)  # rejected the moment the newer one arrived
    assert newer.status == 200
    assert [path for path, _ in app.started] == ["/0", "/2"]
    assert shedder.stats.shed["queue_full"] == 1


def test_no_queue_rejects_at_once_with_429_when_asked(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock)
    shedder = LoadShedder(
        app, max_concurrency=1, max_queue=0, status=429, retry_after=None, clock=clock
    )
    ok, rejected = run(burst(shedder, clock, ["/0", "/1"]), clock)
    assert (ok.status, rejected.status) == (200, 429)
    assert "retry-after" not in rejected.headers
    assert rejected.at == pytest.approx(0.01)
    assert rejected.body == b"overloaded\n"


def test_least_urgent_requests_are_shed_first(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock)
    shedder = LoadShedder(
        app,
        max_concurrency=1,
        max_queue=2,
        max_queue_wait=10.0,
        priority_header="X-Priority",
        clock=clock,
    )

    async def main() -> list[Reply]:
        replies: dict[str, Reply] = {}

        async def one(path: str, urgency: str) -> None:
            replies[path] = await request(shedder, clock, path, [("x-priority", urgency)])

        async with anyio.create_task_group() as tg:
            for path, urgency in [
                ("/run", "3"),
                ("/u1", "1"),
                ("/u5", "5"),
                ("/u6", "6"),
                ("/u0", "u=0, i"),
            ]:
                tg.start_soon(one, path, urgency)
                await anyio.sleep(0.01)
        return [replies[p] for p in ("/run", "/u1", "/u5", "/u6", "/u0")]

    replies = dict(zip(["/run", "/u1", "/u5", "/u6", "/u0"], run(main(), clock), strict=True))
    # /u6 arrived at a full queue (u1, u5) where every entry is more urgent: it is rejected.
    assert replies["/u6"].status == 503
    # /u0 arrived at a full queue and evicted the least urgent entry, /u5.
    assert replies["/u5"].status == 503
    assert [replies[p].status for p in ("/run", "/u1", "/u0")] == [200, 200, 200]
    assert [path for path, _ in app.started] == ["/run", "/u0", "/u1"]
    assert shedder.stats.shed == {"queue_full": 1, "priority": 1, "queue_timeout": 0, "deadline": 0}


def test_waiting_longer_than_max_queue_wait_is_shed(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock, service=5.0)
    shedder = LoadShedder(app, max_concurrency=1, max_queue=4, max_queue_wait=0.5, clock=clock)
    ok, late = run(burst(shedder, clock, ["/0", "/1"], gap=0.1), clock)
    assert ok.status == 200
    assert late.status == 503
    assert late.at == pytest.approx(0.6)
    assert shedder.stats.shed["queue_timeout"] == 1
    assert shedder.stats.queued == 0


def test_expired_propagated_deadline_is_dropped_before_any_work(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock)
    metrics = Counters()
    shedder = LoadShedder(app, max_concurrency=4, metrics=metrics, name="api", clock=clock)
    for headers in ([("x-request-deadline", "0")], [("grpc-timeout", "0n")]):
        reply = run(request(shedder, clock, "/", headers), clock)
        assert reply.status == 504
        assert OVERLOADED_HEADER not in reply.headers
    assert app.started == []
    assert shedder.stats.shed["deadline"] == 2
    assert metrics.get("sheds", "api", "deadline") == 2


def test_propagated_deadline_is_installed_and_clamped_for_the_app(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock, service=0.1)
    shedder = LoadShedder(app, max_concurrency=4, max_request_time=5.0, clock=clock)
    run(request(shedder, clock, "/", [("grpc-timeout", "2S")]), clock)
    run(request(shedder, clock, "/", [("x-request-deadline", "99999999")]), clock)
    run(request(shedder, clock, "/", [("grpc-timeout", "garbage\u00e9")]), clock)
    assert app.remaining == pytest.approx([2.0, 5.0, 5.0])
    no_limit = LoadShedder(app, max_concurrency=4, clock=clock)
    run(request(no_limit, clock, "/"), clock)
    assert app.remaining[-1] == float("inf")


def test_app_running_past_the_deadline_is_cancelled_and_answered_504(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock, service=10.0)
    shedder = LoadShedder(app, max_concurrency=1, clock=clock)
    reply = run(request(shedder, clock, "/", [("x-request-deadline", "1500")]), clock)
    assert reply.status == 504
    assert reply.at == pytest.approx(1.5)
    assert shedder.stats.in_flight == 0


def test_queued_request_is_dropped_when_its_deadline_passes(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock, service=5.0)
    shedder = LoadShedder(app, max_concurrency=1, max_queue_wait=3.0, clock=clock)

    async def main() -> tuple[Reply, Reply]:
        got: dict[str, Reply] = {}

        async def first() -> None:
            got["/0"] = await request(shedder, clock, "/0")

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await anyio.sleep(0.5)
            second = await request(shedder, clock, "/1", [("x-request-deadline", "1000")])
        return got["/0"], second

    first, second = run(main(), clock)
    assert first.status == 200
    assert second.status == 504
    assert second.at == pytest.approx(1.5)
    assert [p for p, _ in app.started] == ["/0"]
    assert shedder.stats.shed["deadline"] == 1


def test_cancelled_waiters_give_their_place_back(run: Run) -> None:
    clock = VirtualClock()
    app = SlowApp(clock)
    shedder = LoadShedder(app, max_concurrency=1, max_queue=4, max_queue_wait=10.0, clock=clock)

    async def main() -> None:
        got: dict[str, Reply] = {}

        async def running() -> None:
            got["/0"] = await request(shedder, clock, "/0")

        async def waiting(scope: anyio.CancelScope) -> None:
            with scope:
                await request(shedder, clock, "/1")
                raise AssertionError("the waiter was not cancelled")

        async with anyio.create_task_group() as tg:
            tg.start_soon(running)
            await anyio.sleep(0.1)
            scope = anyio.CancelScope()
            tg.start_soon(waiting, scope)
            await anyio.sleep(0.1)
            assert shedder.stats.queued == 1
            scope.cancel()
            await anyio.sleep(0)
            await anyio.sleep(0)
            assert shedder.stats.queued == 0
        assert got["/0"].status == 200
        assert shedder.stats.in_flight == 0

    run(main(), clock)
    assert [p for p, _ in app.started] == ["/0"]


def test_waiter_cancelled_just_after_its_grant_hands_the_slot_on() -> None:
    # asyncio only: it cancels a task between its grant and its resumption (call_soon).
    clock = VirtualClock()
    tasks: dict[str, asyncio.Future[Reply]] = {}
    started: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        started.append(scope["path"])
        await asyncio.sleep(1.0)
        if scope["path"] == "/0":
            # Runs before the newest waiter (/2) resumes with its grant: it is cancelled while
            # already owning the slot, and must pass the slot on to /1.
            asyncio.get_running_loop().call_soon(tasks["/2"].cancel)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    shedder = LoadShedder(app, max_concurrency=1, max_queue=4, max_queue_wait=10.0, clock=clock)

    async def main() -> Reply:
        for path in ("/0", "/1", "/2"):
            tasks[path] = asyncio.ensure_future(request(shedder, clock, path))
            await asyncio.sleep(0.1)
        with pytest.raises(asyncio.CancelledError):
            await tasks["/2"]
        await tasks["/0"]
        return await tasks["/1"]

    assert run_asyncio(main(), clock).status == 200
    assert started == ["/0", "/1"]
    assert shedder.stats.in_flight == 0
    assert shedder.stats.queued == 0


def test_non_http_scopes_pass_through(run: Run) -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    shedder = LoadShedder(app, max_concurrency=1, max_queue=0)

    async def noop() -> Any:
        return {}

    async def main() -> None:
        await shedder({"type": "lifespan"}, noop, noop)
        await shedder({"type": "websocket"}, noop, noop)

    asyncio.run(main())
    assert seen == ["lifespan", "websocket"]


async def _app(scope: Any, receive: Any, send: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("kwargs", "exc", "word"),
    [
        ({"max_concurrency": 0}, ValueError, "max_concurrency"),
        ({"max_concurrency": 1.5}, TypeError, "max_concurrency"),
        ({"max_concurrency": 1, "max_queue": -1}, ValueError, "max_queue"),
        ({"max_concurrency": 1, "max_queue_wait": float("nan")}, ValueError, "max_queue_wait"),
        ({"max_concurrency": 1, "status": 500}, ValueError, "status"),
        ({"max_concurrency": 1, "retry_after": -1}, ValueError, "retry_after"),
        ({"max_concurrency": 1, "retry_after": float("inf")}, ValueError, "retry_after"),
        ({"max_concurrency": 1, "priority_header": ""}, TypeError, "priority_header"),
        ({"max_concurrency": 1, "max_request_time": 0}, ValueError, "max_request_time"),
        ({"max_concurrency": 1, "deadline_margin": -0.1}, ValueError, "deadline_margin"),
        ({"max_concurrency": 1, "metrics": object()}, TypeError, "metrics"),
        ({"max_concurrency": 1, "name": 3}, TypeError, "name"),
    ],
)
def test_invalid_configuration_names_the_parameter(
    kwargs: dict[str, Any], exc: type[Exception], word: str
) -> None:
    with pytest.raises(exc, match=word):
        LoadShedder(_app, **kwargs)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"0", 0),
        (b"7", 7),
        (b"9", 7),
        (b"u=1, i", 1),
        (b" u=5 ", 5),
        (b"i", 3),
        (b"-1", 3),
        (b"\xff\xfe", 3),
        (b"1" * 100, 3),
        (b"999999999999", 3),
        (b"", 3),
    ],
)
def test_untrusted_priority_values_never_raise(raw: bytes, expected: int) -> None:
    assert parse_priority(raw) == expected

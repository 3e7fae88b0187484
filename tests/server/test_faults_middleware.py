"""FaultMiddleware under a real uvicorn server on 127.0.0.1, seen by real clients."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

import seawall
import seawall.testing
from seawall import faults
from servers import serve_asgi


class CountingApp:
    """Answers "done" and counts the requests it handled (its side effects)."""

    def __init__(self) -> None:
        self.handled = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.handled += 1
        body = b"done " * 4
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def get(url: str, **kwargs: Any) -> httpx.Response:
    with httpx.Client(timeout=5.0) as c:
        return c.get(url, **kwargs)


def test_status_is_answered_without_the_application() -> None:
    app = CountingApp()
    plan = faults.FaultPlan([faults.Status(503, {"Retry-After": "3"}, b"busy")])
    with serve_asgi(faults.FaultMiddleware(app, plan)) as url:
        response = get(url)
    assert (response.status_code, response.headers["retry-after"], response.content) == (
        503,
        "3",
        b"busy",
    )
    assert app.handled == 0


def test_reset_after_the_send_runs_the_application_and_loses_the_answer() -> None:
    app = CountingApp()
    plan = faults.FaultPlan([faults.Reset(after_send=True)])
    with (
        serve_asgi(faults.FaultMiddleware(app, plan)) as url,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        get(url)
    assert app.handled == 1


@pytest.mark.parametrize("fault", [faults.Reset(), faults.Refuse()], ids=["reset", "refuse"])
def test_reset_before_and_refuse_never_reach_the_application(fault: faults.Fault) -> None:
    app = CountingApp()
    with (
        serve_asgi(faults.FaultMiddleware(app, faults.FaultPlan([fault]))) as url,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        get(url)
    assert app.handled == 0


def test_errors_become_server_errors() -> None:
    app = CountingApp()
    plan = faults.FaultPlan([faults.Error(RuntimeError)])
    with serve_asgi(faults.FaultMiddleware(app, plan)) as url:
        assert get(url).status_code == 500
    assert app.handled == 0


def test_drip_and_latency_slow_the_answer_down() -> None:
    app = CountingApp()
    plan = faults.FaultPlan([faults.Latency(0.1), faults.Drip(chunk=4, interval=0.02)])
    with serve_asgi(faults.FaultMiddleware(app, plan)) as url:
        started = time.monotonic()
        response = get(url)
        took = time.monotonic() - started
    assert response.content == b"done " * 4
    assert took >= 0.1 + 5 * 0.02
    assert app.handled == 1


def test_a_seeded_plan_injects_at_its_rate() -> None:
    app = CountingApp()
    plan = faults.FaultPlan([faults.Status(503, rate=0.3)], seed=5)
    with serve_asgi(faults.FaultMiddleware(app, plan)) as url, httpx.Client() as c:
        statuses = [c.get(url, headers={"Connection": "close"}).status_code for _ in range(200)]
    assert statuses.count(503) == plan.injected["status"]
    assert 35 <= statuses.count(503) <= 85
    assert app.handled == statuses.count(200)


def test_other_scopes_pass_through_untouched() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    middleware = faults.FaultMiddleware(app, faults.FaultPlan([faults.Status(503)]))

    async def main() -> None:
        async def nothing() -> dict[str, Any]:
            return {}

        async def ignore(message: Any) -> None:
            pass

        await middleware({"type": "lifespan"}, nothing, ignore)

    seawall.testing.run(main())
    assert seen == ["lifespan"]
    assert middleware.plan.requests == 0


def test_on_virtual_time_the_waits_cost_nothing() -> None:
    clock = seawall.VirtualClock()
    app = CountingApp()
    plan = faults.FaultPlan([faults.Latency(60.0), faults.Drip(chunk=1, interval=1.0)], clock=clock)
    middleware = faults.FaultMiddleware(app, plan)
    sent: list[Any] = []

    async def main() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: Any) -> None:
            sent.append(message)

        await middleware({"type": "http", "headers": []}, receive, send)

    seawall.testing.run(main(), clock)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert body == b"done " * 4
    assert clock.now() == pytest.approx(60.0 + 20.0)
    assert sent[-1]["more_body"] is False
    assert asyncio.iscoroutinefunction(middleware.__call__)

"""The client fault layers (httpx sync and async, requests) against the real server, under
seawall's retry layers: each fault looks to the retry layer as the real failure would.

The server's own counts show what reached it: a refused connection never does (and is retried
whatever the method), a reset after the send does (and a POST is then not sent again).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
import seawall.httpx
import seawall.requests
from seawall import faults


def policy(**kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("clock", seawall.VirtualClock())
    kwargs.setdefault("max_attempts", 3)
    return seawall.RetryPolicy(hooks=(), **kwargs)


def client(plan: faults.FaultPlan, p: seawall.RetryPolicy | None = None) -> httpx.Client:
    inner = faults.FaultTransport(plan)
    transport = seawall.httpx.RetryTransport(p or policy(), inner, budget=None)
    return httpx.Client(transport=transport, timeout=5.0)


class ChaosRetryAdapter(seawall.requests.RetryAdapter, faults.FaultAdapter):
    """Retries above, faults below: each attempt meets the faults."""


def session(plan: faults.FaultPlan, p: seawall.RetryPolicy | None = None) -> requests.Session:
    s = requests.Session()
    s.mount("http://", ChaosRetryAdapter(p or policy(), plan=plan, budget=None))
    return s


# -- httpx ------------------------------------------------------------------------------------


def test_status_answers_without_reaching_the_server(server: Server) -> None:
    plan = faults.FaultPlan([faults.Status(503, {"Retry-After": "2"}, schedule=faults.nth(1, 2))])
    clock = seawall.VirtualClock()
    with client(plan, policy(clock=clock)) as c:
        response = c.get(server.url + "/ok")
    assert response.status_code == 200
    assert server.count("GET", "/ok") == 1  # the third attempt; the 503s never left
    assert clock.sleeps == [2.0, 2.0]  # the injected Retry-After was honoured
    assert plan.injected == {"status": 2}


def test_a_refused_post_is_retried_and_reaches_the_server_once(server: Server) -> None:
    plan = faults.FaultPlan([faults.Refuse(schedule=faults.nth(1))])
    with client(plan) as c:
        response = c.post(server.url + "/ok", content=b"charge")
    assert response.status_code == 200
    assert server.count("POST", "/ok") == 1


def test_a_post_reset_after_the_send_is_not_sent_again(server: Server) -> None:
    plan = faults.FaultPlan([faults.Reset(after_send=True, schedule=faults.nth(1))])
    with client(plan) as c, pytest.raises(httpx.ReadError):
        c.post(server.url + "/ok", content=b"charge")
    assert server.count("POST", "/ok") == 1  # processed once; the retry layer refused to resend


def test_a_get_reset_before_the_send_is_retried(server: Server) -> None:
    plan = faults.FaultPlan([faults.Reset(schedule=faults.nth(1))])
    with client(plan) as c:
        assert c.get(server.url + "/ok").status_code == 200
    assert server.count("GET", "/ok") == 1


def test_latency_past_the_read_timeout_is_a_read_timeout(server: Server) -> None:
    clock = seawall.VirtualClock()
    plan = faults.FaultPlan([faults.Latency(30.0)], clock=clock)
    with (
        httpx.Client(transport=faults.FaultTransport(plan), timeout=2.0) as c,
        pytest.raises(httpx.ReadTimeout),
    ):
        c.get(server.url + "/ok")
    assert clock.now() == 2.0  # waited the read timeout, on the plan's (virtual) clock
    assert server.count("GET", "/ok") == 0


def test_a_dripped_body_arrives_whole_and_slowly(server: Server) -> None:
    plan = faults.FaultPlan([faults.Drip(chunk=1, interval=0.01)])
    started = time.monotonic()
    with httpx.Client(transport=faults.FaultTransport(plan), timeout=2.0) as c:
        response = c.get(server.url + "/ok")
    assert response.content == b"ok"
    assert time.monotonic() - started >= 0.02


def test_a_drip_slower_than_the_read_timeout_times_out(server: Server) -> None:
    clock = seawall.VirtualClock()
    plan = faults.FaultPlan([faults.Drip(interval=5.0)], clock=clock)
    with (
        httpx.Client(transport=faults.FaultTransport(plan), timeout=1.0) as c,
        pytest.raises(httpx.ReadTimeout),
    ):
        c.get(server.url + "/ok")


def test_injected_errors_are_classified_like_real_ones(server: Server) -> None:
    # A ConnectionError of the application's own is not an httpx error: the transport does not
    # retry it, and it reaches the caller as it is.
    plan = faults.FaultPlan([faults.Error(ConnectionResetError)])
    with client(plan) as c, pytest.raises(ConnectionResetError, match=r"seawall\.faults"):
        c.get(server.url + "/ok")


def test_async_transport_injects_the_same_faults(server: Server) -> None:
    plan = faults.FaultPlan(
        [
            faults.Refuse(schedule=faults.nth(1)),
            faults.Status(503, schedule=faults.nth(2)),
            faults.Drip(chunk=1, interval=0.001, schedule=faults.nth(3)),
        ]
    )

    async def main() -> bytes:
        inner = faults.AsyncFaultTransport(plan)
        transport = seawall.httpx.AsyncRetryTransport(policy(), inner, budget=None)
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
            response = await c.get(server.url + "/ok")
            return response.content

    assert asyncio.run(main()) == b"ok"
    assert plan.injected == {"refuse": 1, "status": 1, "drip": 1}
    assert server.count("GET", "/ok") == 1


# -- requests ---------------------------------------------------------------------------------


def test_requests_status_and_refuse_are_retried(server: Server) -> None:
    plan = faults.FaultPlan(
        [faults.Status(503, schedule=faults.nth(1)), faults.Refuse(schedule=faults.nth(2))]
    )
    with session(plan) as s:
        response = s.post(server.url + "/ok", data=b"x", headers={"Idempotency-Key": "k1"})
    assert response.status_code == 200
    assert server.count("POST", "/ok") == 1


def test_requests_refused_post_without_key_is_retried(server: Server) -> None:
    plan = faults.FaultPlan([faults.Refuse(schedule=faults.nth(1))])
    with session(plan) as s:
        assert s.post(server.url + "/ok", data=b"x").status_code == 200
    assert server.count("POST", "/ok") == 1


def test_requests_post_reset_after_the_send_is_not_sent_again(server: Server) -> None:
    plan = faults.FaultPlan([faults.Reset(after_send=True)])
    with session(plan) as s, pytest.raises(requests.exceptions.ConnectionError):
        s.post(server.url + "/ok", data=b"x")
    assert server.count("POST", "/ok") == 1


def test_requests_drip_and_latency(server: Server) -> None:
    clock = seawall.VirtualClock()
    plan = faults.FaultPlan([faults.Latency(0.5), faults.Drip(chunk=1, interval=0.25)], clock=clock)
    with session(plan, policy(clock=clock)) as s:
        response = s.get(server.url + "/ok", timeout=2.0)
    assert response.content == b"ok"
    assert clock.now() == pytest.approx(0.5 + 2 * 0.25)


def test_requests_latency_past_the_read_timeout(server: Server) -> None:
    clock = seawall.VirtualClock()
    plan = faults.FaultPlan([faults.Latency(10.0)], clock=clock)
    s = requests.Session()
    s.mount("http://", faults.FaultAdapter(plan=plan))
    with s, pytest.raises(requests.exceptions.ReadTimeout):
        s.get(server.url + "/ok", timeout=(1.0, 3.0))
    assert clock.now() == 3.0


def test_requests_fault_adapter_alone_answers_statuses(server: Server) -> None:
    plan = faults.FaultPlan([faults.Status(429, {"Retry-After": "7"}, b"slow down")])
    s = requests.Session()
    s.mount("http://", faults.FaultAdapter(plan=plan))
    with s:
        response = s.get(server.url + "/ok")
    assert (response.status_code, response.headers["retry-after"], response.content) == (
        429,
        "7",
        b"slow down",
    )
    assert server.count("GET", "/ok") == 0

"""Calls made with almost no time left, and calls made with no deadline at all, against the real
server.

Near a deadline the caller gets ``DeadlineExceeded``, a response, or the HTTP library's own
timeout error: never urllib3's ``ValueError("Invalid timeout (0.0, 0.0)")`` nor httpx's
``ConnectError: Operation now in progress`` (a socket given a timeout of zero is non-blocking).
Without any deadline, the transports' default total time bounds what a hostile server can make
the caller wait.
"""

from __future__ import annotations

import asyncio
import collections
import random
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import requests
from seawall_test_server import WELL_BEFORE, Server

import seawall
import seawall.httpx
import seawall.requests
from seawall.http import DEFAULT_TOTAL_TIMEOUT, MIN_ATTEMPT_TIME

TLS = ssl.create_default_context()

# What a caller may see near a deadline: the answer, the policy's refusal to start an attempt,
# or the library's timeout (the attempt started but its time ran out).
ALLOWED = (
    seawall.DeadlineExceeded,
    requests.exceptions.Timeout,
    httpx.TimeoutException,
)


def outcomes(call: Callable[[], Any], deadlines: list[float]) -> collections.Counter[str]:
    seen: collections.Counter[str] = collections.Counter()
    for seconds in deadlines:
        try:
            with seawall.deadline(seconds):
                response = call()
            seen[f"HTTP {response.status_code}"] += 1
        except ALLOWED as exc:
            seen[type(exc).__name__] += 1
        except Exception as exc:
            seen[classify(exc)] += 1
    return seen


def classify(exc: Exception) -> str:
    if isinstance(exc, requests.exceptions.ConnectionError) and "Read timed out" in str(exc):
        # requests reports a read timeout *while reading the body* as a ConnectionError
        # (models.Response.iter_content): the library's own timeout all the same.
        return "ReadTimeout (body)"
    return f"UNEXPECTED {type(exc).__module__}.{type(exc).__name__}: {exc}"


def near(n: int, seed: int, call: Callable[[], Any]) -> list[float]:
    """*n* deadlines around the time *call* takes here (the adversarial run saw the library
    errors under 1.5 ms left; a call takes longer under a tracer or on a busy machine)."""
    took = []
    for _ in range(20):
        started = time.perf_counter()
        call()
        took.append(time.perf_counter() - started)
    typical = sorted(took)[len(took) // 2]
    rng = random.Random(seed)
    # From no time at all to a little more than an attempt needs: across the 1 ms below which
    # no attempt starts, and across the time a call takes here.
    return [rng.uniform(0.0, MIN_ATTEMPT_TIME + 2 * typical) for _ in range(n)]


def unexpected(seen: collections.Counter[str]) -> list[str]:
    return [k for k in seen if k.startswith("UNEXPECTED")]


@pytest.mark.volume  # thousands of real calls: not traced by coverage
@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connections"])
def test_requests_near_a_deadline(server: Server, keep_alive: bool) -> None:
    session = requests.Session()
    session.mount("http://", seawall.requests.RetryAdapter(seawall.RetryPolicy(hooks=())))

    def get() -> requests.Response:
        try:
            return session.get(server.url + "/ok")
        finally:
            if not keep_alive:
                session.close()  # drop the pool: the next call connects afresh

    with session:
        seen = outcomes(get, near(1500, 1, get))
    assert not unexpected(seen), seen
    assert seen["HTTP 200"] > 0 and seen["DeadlineExceeded"] > 0, seen


@pytest.mark.volume  # thousands of real calls: not traced by coverage
@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connections"])
def test_httpx_near_a_deadline(server: Server, keep_alive: bool) -> None:
    transport = seawall.httpx.RetryTransport(seawall.RetryPolicy(hooks=()))
    headers = {} if keep_alive else {"Connection": "close"}
    with httpx.Client(transport=transport) as client:

        def get() -> httpx.Response:
            return client.get(server.url + "/ok", headers=headers)

        seen = outcomes(get, near(1500, 2, get))
    assert not unexpected(seen), seen
    assert seen["HTTP 200"] > 0 and seen["DeadlineExceeded"] > 0, seen


@pytest.mark.volume  # thousands of real calls: not traced by coverage
def test_async_httpx_near_a_deadline(server: Server) -> None:
    async def main() -> collections.Counter[str]:
        seen: collections.Counter[str] = collections.Counter()
        transport = seawall.httpx.AsyncRetryTransport(seawall.RetryPolicy(hooks=()))
        async with httpx.AsyncClient(transport=transport) as client:
            took = []
            for _ in range(20):
                started = time.perf_counter()
                await client.get(server.url + "/ok")
                took.append(time.perf_counter() - started)
            typical = sorted(took)[len(took) // 2]
            rng = random.Random(3)
            for seconds in [rng.uniform(0.0, MIN_ATTEMPT_TIME + 2 * typical) for _ in range(800)]:
                try:
                    async with seawall.deadline(seconds):
                        response = await client.get(server.url + "/ok")
                    seen[f"HTTP {response.status_code}"] += 1
                except ALLOWED as exc:
                    seen[type(exc).__name__] += 1
                except Exception as exc:
                    seen[f"UNEXPECTED {type(exc).__name__}: {exc}"] += 1
        return seen

    seen = asyncio.run(main())
    assert not unexpected(seen), seen


class SteppingClock(seawall.VirtualClock):
    """Virtual time that moves *step* seconds on every reading: the time a busy machine loses
    between deciding to start an attempt and handing its timeout to the HTTP library."""

    __slots__ = ("step",)

    def __init__(self, step: float) -> None:
        super().__init__()
        self.step = step

    def now(self) -> float:
        self.advance(self.step)
        return super().now()


def stepping_cases() -> Iterator[tuple[float, float]]:
    for timeout in (0.0002, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005):
        for fraction in (0.2, 0.34, 0.5, 0.9):
            yield timeout, timeout * fraction


@pytest.mark.parametrize("client_kind", ["requests", "httpx"])
def test_time_lost_between_decision_and_send(server: Server, client_kind: str) -> None:
    seen: collections.Counter[str] = collections.Counter()
    for timeout, step in stepping_cases():
        policy = seawall.RetryPolicy(clock=SteppingClock(step), timeout=timeout, hooks=())
        try:
            if client_kind == "requests":
                with requests.Session() as session:
                    session.mount("http://", seawall.requests.RetryAdapter(policy, budget=None))
                    response: Any = session.get(server.url + "/ok")
            else:
                # One certificate store for all (each default transport loads its own).
                inner = httpx.HTTPTransport(verify=TLS)
                transport = seawall.httpx.RetryTransport(policy, inner, budget=None)
                with httpx.Client(transport=transport) as client:
                    response = client.get(server.url + "/ok")
            seen[f"HTTP {response.status_code}"] += 1
        except ALLOWED as exc:
            seen[type(exc).__name__] += 1
        except Exception as exc:
            seen[classify(exc)] += 1
    assert not unexpected(seen), seen
    # With under MIN_ATTEMPT_TIME left, the policy gives up before sending.
    assert seen["DeadlineExceeded"] > 0, seen


def test_no_attempt_starts_with_less_than_the_minimum(server: Server) -> None:
    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(clock=clock, timeout=MIN_ATTEMPT_TIME / 2, hooks=())
    transport = seawall.httpx.RetryTransport(policy, budget=None)
    with httpx.Client(transport=transport) as client, pytest.raises(seawall.DeadlineExceeded):
        client.get(server.url + "/ok")
    assert server.count("GET", "/ok") == 0


# -- no deadline at all ------------------------------------------------------------------------


def test_default_total_time_bounds_retry_after_waits(server: Server) -> None:
    # The server asks for 10 s before each of 10 attempts: without a limit, 90 s of waits.
    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(
        clock=clock, max_attempts=10, hooks=(), backoff=seawall.Backoff.constant(0.01)
    )
    transport = seawall.httpx.RetryTransport(policy, budget=None)
    with httpx.Client(transport=transport) as client:
        response = client.get(server.url + "/flaky/100/503?retry_after=10")
    assert response.status_code == 503  # the last answer, returned when the next wait won't fit
    assert clock.now() <= DEFAULT_TOTAL_TIMEOUT
    assert server.count("GET", "/flaky/100/503") == 3  # at 0, 10 and 20 s; 30 s is the limit


def test_total_timeout_none_restores_unbounded_waits(server: Server) -> None:
    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(
        clock=clock, max_attempts=10, hooks=(), backoff=seawall.Backoff.constant(0.01)
    )
    transport = seawall.httpx.RetryTransport(policy, budget=None, total_timeout=None)
    with httpx.Client(transport=transport) as client:
        client.get(server.url + "/flaky/100/503?retry_after=10")
    assert clock.now() == pytest.approx(90.0)
    assert server.count("GET", "/flaky/100/503") == 10


@pytest.mark.parametrize("client_kind", ["requests", "httpx", "httpx-async"])
def test_default_total_time_caps_a_stalling_server(server: Server, client_kind: str) -> None:
    # /stall holds each request up to 10 s; the read timeout (30 s) would wait for it. A total
    # time of 0.3 s caps every attempt's timeouts: the caller is free after about 0.3 s.
    policy = seawall.RetryPolicy(hooks=(), max_attempts=5)
    started = time.monotonic()
    with pytest.raises((requests.exceptions.Timeout, httpx.TimeoutException)):
        if client_kind == "requests":
            adapter = seawall.requests.RetryAdapter(policy, budget=None, total_timeout=0.3)
            session = requests.Session()
            session.mount("http://", adapter)
            session.get(server.url + "/stall/10", timeout=30.0)
        elif client_kind == "httpx":
            transport = seawall.httpx.RetryTransport(policy, budget=None, total_timeout=0.3)
            with httpx.Client(transport=transport, timeout=30.0) as client:
                client.get(server.url + "/stall/10")
        else:

            async def main() -> None:
                transport = seawall.httpx.AsyncRetryTransport(
                    policy, budget=None, total_timeout=0.3
                )
                async with httpx.AsyncClient(transport=transport, timeout=30.0) as client:
                    await client.get(server.url + "/stall/10")

            asyncio.run(main())
    assert time.monotonic() - started < WELL_BEFORE


def test_default_total_time_is_not_sent_downstream(server: Server) -> None:
    with httpx.Client(transport=seawall.httpx.RetryTransport(budget=None)) as client:
        client.get(server.url + "/ok")
    (got,) = server.requests_to("/ok")
    assert "grpc-timeout" not in got.headers
    assert "x-request-deadline" not in got.headers


def test_total_timeout_is_validated() -> None:
    with pytest.raises(ValueError, match="total_timeout"):
        seawall.httpx.RetryTransport(total_timeout=0)
    with pytest.raises(TypeError, match="total_timeout"):
        seawall.requests.RetryAdapter(total_timeout="30s")  # type: ignore[arg-type]

"""Pushback and the default retry_on, as seawall now has them after its peers (issue 12).

A zero or past pushback falls back to the jittered backoff (as urllib3 and httpx-retries do);
pushback can be ignored (urllib3's ``respect_retry_after_header=False``) or, beyond
``max_retry_after``, end the call; the default ``retry_on`` knows the popular clients'
transient errors; ``@seawall.retry`` decorates without parentheses (as ``@tenacity.retry``).
"""

from __future__ import annotations

import email.utils
import errno
import time
from typing import Any

import pytest
from compat_httpbin import Httpbin

import seawall

httpx = pytest.importorskip("httpx")
requests = pytest.importorskip("requests")
seawall_httpx = pytest.importorskip("seawall.httpx")

BACKOFF = 0.5  # a fixed backoff, so that "waited at least the backoff" can be checked


class Pushback(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after}")
        self.retry_after = retry_after


def virtual(**kw: Any) -> tuple[seawall.RetryPolicy, seawall.VirtualClock]:
    clock = seawall.VirtualClock()
    kw.setdefault("backoff", seawall.Backoff.constant(BACKOFF))
    kw.setdefault("max_attempts", 2)
    return seawall.RetryPolicy(clock=clock, hooks=(), **kw), clock


def first_fails(error: Exception) -> Any:
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return "ok"

    return fn


# -- a zero pushback falls back to the jittered backoff ---------------------------------


def test_retry_after_zero_exception_waits_the_backoff() -> None:
    policy, _ = virtual()
    outcome = policy.run(first_fails(seawall.RetryAfter(0)))
    assert outcome.ok and outcome.total_delay == BACKOFF


def test_retry_after_zero_attribute_waits_the_backoff() -> None:
    policy, _ = virtual(retry_on=Pushback)
    outcome = policy.run(first_fails(Pushback(0)))
    assert outcome.ok and outcome.total_delay == BACKOFF


def test_a_pushback_longer_than_the_backoff_is_waited_today_and_after() -> None:
    policy, _ = virtual()
    outcome = policy.run(first_fails(seawall.RetryAfter(2.0)))
    assert outcome.ok and outcome.total_delay == 2.0


def _timed_get(server: Httpbin, key: str, query: str) -> tuple[int, float, int]:
    policy = seawall.RetryPolicy(
        max_attempts=2, backoff=seawall.Backoff.constant(BACKOFF), hooks=()
    )
    transport = seawall_httpx.RetryTransport(policy, budget=None)
    with httpx.Client(transport=transport) as client:
        started = time.perf_counter()
        response = client.get(
            f"{server.url}/_compat/pushback?{query}", headers={"x-compat-key": key}
        )
        elapsed = time.perf_counter() - started
    return response.status_code, elapsed, server.count(key)


def test_http_retry_after_zero_waits_the_backoff(httpbin_server: Httpbin) -> None:
    status, elapsed, attempts = _timed_get(httpbin_server, "pushback zero", "retry_after=0")
    assert (status, attempts) == (200, 2)
    assert elapsed >= BACKOFF


def test_http_retry_after_date_in_the_past_waits_the_backoff(httpbin_server: Httpbin) -> None:
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    query = "retry_after=" + past.replace(" ", "+").replace(",", "%2C")
    status, elapsed, attempts = _timed_get(httpbin_server, "pushback past", query)
    assert (status, attempts) == (200, 2)
    assert elapsed >= BACKOFF


# -- a switch to ignore pushback --------------------------------------------------------


def test_honor_retry_after_false_uses_the_backoff() -> None:
    policy, _ = virtual(honor_retry_after=False)
    outcome = policy.run(first_fails(seawall.RetryAfter(30.0)))
    assert outcome.ok and outcome.total_delay == BACKOFF


# -- give up on a pushback beyond max_retry_after ----------------------------------------


def test_a_pushback_beyond_the_maximum_can_give_up_at_once() -> None:
    policy, clock = virtual(max_retry_after=5.0, retry_after_beyond_max="give_up")
    outcome = policy.run(first_fails(seawall.RetryAfter(60.0)))
    assert isinstance(outcome.error, seawall.RetryAfter)
    assert (outcome.attempts, outcome.reason, clock.now()) == (1, "retry_after", 0.0)


def test_a_pushback_beyond_the_maximum_is_clamped_by_default() -> None:
    policy, _ = virtual(max_retry_after=5.0)
    outcome = policy.run(first_fails(seawall.RetryAfter(60.0)))
    assert outcome.ok and outcome.total_delay == 5.0


# -- the default retry_on knows the popular clients' transient errors --------------------


def _transient_errors() -> list[tuple[str, Exception]]:
    request = httpx.Request("GET", "http://127.0.0.1/")
    errors: list[tuple[str, Exception]] = [
        ("httpx.ConnectError", httpx.ConnectError("refused", request=request)),
        ("httpx.ReadTimeout", httpx.ReadTimeout("slow", request=request)),
        ("httpx.RemoteProtocolError", httpx.RemoteProtocolError("cut", request=request)),
        ("requests.ConnectionError", requests.ConnectionError("refused")),
        ("requests.Timeout", requests.Timeout("slow")),
        ("OSError(EHOSTUNREACH)", OSError(errno.EHOSTUNREACH, "no route to host")),
        ("OSError(ENETUNREACH)", OSError(errno.ENETUNREACH, "network is unreachable")),
    ]
    try:
        import aiohttp
    except ImportError:
        pass
    else:
        errors.append(("aiohttp.ServerDisconnectedError", aiohttp.ServerDisconnectedError()))
        errors.append(("aiohttp.ClientConnectionError", aiohttp.ClientConnectionError("reset")))
    return errors


@pytest.mark.parametrize(
    "error", [e for _, e in _transient_errors()], ids=[n for n, _ in _transient_errors()]
)
def test_the_default_policy_retries_a_transient_client_error(error: Exception) -> None:
    policy, _ = virtual()
    outcome = policy.run(first_fails(error))
    assert outcome.ok and outcome.attempts == 2


def test_the_default_policy_still_does_not_retry_a_bug() -> None:
    policy, _ = virtual()
    outcome = policy.run(first_fails(ValueError("bug")))
    assert isinstance(outcome.error, ValueError) and outcome.attempts == 1


# -- the decorator without parentheses --------------------------------------------------


def test_retry_decorates_without_parentheses() -> None:
    calls: list[int] = []

    def fn() -> int:
        calls.append(1)
        return len(calls)

    decorated = seawall.retry(fn)
    assert decorated() == 1
    assert calls == [1]

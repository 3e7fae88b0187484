"""seawall.httpx.RetryTransport against a real server: assertions on what the server received."""

from __future__ import annotations

import email.utils
import random
import ssl
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from seawall_test_server import READ_TIMEOUT, WELL_BEFORE, Server

import seawall
from seawall._policy.http import budget_for_host
from seawall._strategies.deadline import decode_grpc_timeout, decode_request_deadline
from seawall.httpx import PER_HOST, RetryTransport

# A TCP reset surfaces as a read error or as a message cut short, depending on timing.
RESET = (httpx.ReadError, httpx.RemoteProtocolError)


def policy(clock: seawall.VirtualClock, **kwargs: Any) -> seawall.RetryPolicy:
    kwargs.setdefault("hooks", ())
    return seawall.RetryPolicy(clock=clock, rng=random.Random(7), **kwargs)


# Building a TLS context costs ~0.1 s; the tests speak plain HTTP, so they share one.
TLS = ssl.create_default_context()


def client(p: seawall.RetryPolicy, **kwargs: Any) -> httpx.Client:
    transport_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k != "timeout"}
    transport_kwargs.setdefault("budget", None)
    inner = httpx.HTTPTransport(verify=TLS)
    return httpx.Client(
        transport=RetryTransport(p, inner, **transport_kwargs), timeout=kwargs.get("timeout", 5.0)
    )


@pytest.fixture
def clock() -> seawall.VirtualClock:
    return seawall.VirtualClock()


def test_503_twice_then_success(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + "/flaky/2/503")
    assert r.status_code == 200
    assert r.text == "ok after 3"
    assert server.count("GET", "/flaky/2/503") == 3
    assert len(clock.sleeps) == 2  # full-jitter backoff between the attempts, on virtual time
    assert all(0 <= s <= 1.0 for s in clock.sleeps)


def test_gives_up_with_the_last_response(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock, max_attempts=4)) as c:
        r = c.get(server.url + "/flaky/10/503")
    assert r.status_code == 503
    assert r.text == "fail"  # the final response is readable as httpx would return it
    assert server.count("GET", "/flaky/10/503") == 4


@pytest.mark.parametrize("code", [408, 429, 502, 504])
def test_transient_statuses_are_retried(
    server: Server, clock: seawall.VirtualClock, code: int
) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + f"/flaky/1/{code}")
    assert r.status_code == 200
    assert server.count("GET", f"/flaky/1/{code}") == 2


@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 422, 500, 501])
def test_other_statuses_are_not_retried(
    server: Server, clock: seawall.VirtualClock, code: int
) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + f"/status/{code}")
    assert r.status_code == code
    assert server.count("GET", f"/status/{code}") == 1
    assert clock.sleeps == []


def test_retry_statuses_are_configurable(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock), retry_statuses={500}) as c:
        assert c.get(server.url + "/flaky/1/500").status_code == 200
        assert c.get(server.url + "/flaky/1/503").status_code == 503
    assert server.count("GET", "/flaky/1/500") == 2
    assert server.count("GET", "/flaky/1/503") == 1


def test_retry_after_seconds_replaces_backoff(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + "/flaky/1/429?retry_after=7")
    assert r.status_code == 200
    assert clock.sleeps == [7.0]
    assert server.count("GET", "/flaky/1/429") == 2


def test_retry_after_http_date(server: Server, clock: seawall.VirtualClock) -> None:
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    with client(policy(clock)) as c:
        r = c.get(server.url + "/flaky/1/503", params={"retry_after": date})
    assert r.status_code == 200
    assert len(clock.sleeps) == 1
    assert 27.0 <= clock.sleeps[0] <= 30.0  # whole seconds on the wire, and time passes


def test_retry_after_past_date_waits_the_jittered_backoff(
    server: Server, clock: seawall.VirtualClock
) -> None:
    # "Now" from every server at once would make every client retry in lockstep: the policy
    # waits the larger of the pushback and its own jittered backoff.
    date = email.utils.formatdate(time.time() - 3600, usegmt=True)
    p = policy(clock)
    with client(p) as c:
        r = c.get(server.url + "/flaky/1/503", params={"retry_after": date})
    assert r.status_code == 200
    assert len(clock.sleeps) == 1
    assert 0.0 < clock.sleeps[0] <= p.backoff.raw(0)
    assert clock.sleeps[0] == p.backoff.compute(0, random.Random(7))


def test_huge_retry_after_is_clamped(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock, max_retry_after=20.0)) as c:
        r = c.get(server.url + "/flaky/1/429", params={"retry_after": "9" * 30})
    assert r.status_code == 200
    assert clock.sleeps == [20.0]


@pytest.mark.parametrize(
    "value", ["soon", "-5", "NaN", "inf", "1e400", "", "Fri, 99 Foo 2015", "\u00e9", "5 s"]
)
def test_malformed_retry_after_falls_back_to_backoff(
    server: Server, clock: seawall.VirtualClock, value: str
) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + "/flaky/1/503", params={"retry_after": value})
    assert r.status_code == 200
    assert server.count("GET", "/flaky/1/503") == 2
    assert len(clock.sleeps) == 1
    assert 0.0 <= clock.sleeps[0] <= seawall.Backoff().raw(0)  # full jitter on the first retry


def test_retry_after_past_the_deadline_gives_up_now(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with client(policy(clock, timeout=10.0)) as c:
        r = c.get(server.url + "/flaky/1/429?retry_after=30")
    assert r.status_code == 429
    assert server.count("GET", "/flaky/1/429") == 1
    assert clock.sleeps == []  # no wait at all: the answer would come too late


@pytest.mark.parametrize("which", ["envoy", "seawall"])
def test_overloaded_response_is_not_retried(
    server: Server, clock: seawall.VirtualClock, which: str
) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + f"/flaky/1/503?overloaded={which}")
    assert r.status_code == 503
    assert server.count("GET", "/flaky/1/503") == 1


def test_post_without_key_is_sent_once(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        r = c.post(server.url + "/flaky/1/503", content=b"pay 10")
    assert r.status_code == 503
    assert server.count("POST", "/flaky/1/503") == 1


def test_post_with_callers_key_is_retried_with_it(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with client(policy(clock)) as c:
        r = c.post(
            server.url + "/flaky/2/503", content=b"pay 10", headers={"Idempotency-Key": "k-1"}
        )
    assert r.status_code == 200
    got = server.requests_to("/flaky/2/503")
    assert [g.headers["idempotency-key"] for g in got] == ["k-1"] * 3
    assert [g.body for g in got] == [b"pay 10"] * 3


def test_generated_idempotency_key_is_the_same_on_every_attempt(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with client(policy(clock), idempotency_key=True) as c:
        r1 = c.patch(server.url + "/flaky/2/503", json={"a": 1})
        r2 = c.post(server.url + "/flaky/1/502", json={"a": 1})
    assert r1.status_code == r2.status_code == 200
    keys1 = [g.headers["idempotency-key"] for g in server.requests_to("/flaky/2/503")]
    keys2 = [g.headers["idempotency-key"] for g in server.requests_to("/flaky/1/502")]
    assert len(keys1) == 3
    assert len(set(keys1)) == 1
    assert len(keys2) == 2
    assert len(set(keys2)) == 1
    assert keys1[0] != keys2[0]  # one key per logical request
    assert uuid.UUID(keys1[0]).version == 4
    assert r1.request.headers["idempotency-key"] == keys1[0]  # the caller can see it


def test_generated_key_is_not_added_to_idempotent_methods(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with client(policy(clock), idempotency_key=True) as c:
        c.get(server.url + "/ok")
    assert "idempotency-key" not in server.requests_to("/ok")[0].headers


def test_connection_refused_is_retried_even_for_post(
    refused_url: str, clock: seawall.VirtualClock
) -> None:
    events: list[seawall.RetryEvent] = []
    p = policy(clock, hooks=[events.append])
    with client(p) as c, pytest.raises(httpx.ConnectError):
        c.post(refused_url, content=b"x")
    # The request never left, so sending it again cannot duplicate it: 3 attempts.
    assert [e.kind for e in events] == ["retry", "retry", "give_up"]
    assert len(clock.sleeps) == 2


def test_reset_before_the_headers_is_retried(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + "/reset-head/2")
    assert r.status_code == 200
    assert r.text == "ok after 3"
    assert server.count("GET", "/reset-head/2") == 3


def test_reset_mid_body_is_retried(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        r = c.get(server.url + "/reset-body/1")
    assert r.status_code == 200
    assert r.text == "ok after 2"
    assert server.count("GET", "/reset-body/1") == 2


def test_reset_mid_body_without_buffering_reaches_the_caller(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with client(policy(clock), buffer_limit=0) as c, pytest.raises(RESET):
        c.get(server.url + "/reset-body/1")
    assert server.count("GET", "/reset-body/1") == 1


def test_reset_on_post_is_not_retried_and_says_why(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with client(policy(clock)) as c, pytest.raises(RESET) as info:
        c.post(server.url + "/reset-head/1", content=b"x")
    assert server.count("POST", "/reset-head/1") == 1
    assert any("Idempotency-Key" in n for n in getattr(info.value, "__notes__", []))


def test_read_timeout_is_retried(server: Server, clock: seawall.VirtualClock) -> None:
    timeout = httpx.Timeout(5.0, read=READ_TIMEOUT)
    with client(policy(clock), timeout=timeout) as c:
        r = c.get(server.url + "/stall/1")
    assert r.status_code == 200
    assert server.count("GET", "/stall/1") == 2


def test_attempt_timeouts_are_capped_by_the_deadline(
    server: Server, clock: seawall.VirtualClock
) -> None:
    # Configured read timeout 30 s, but only 0.3 s left: the attempt times out at 0.3 s.
    p = policy(clock, timeout=0.3, backoff=seawall.Backoff.constant(1.0))
    started = time.monotonic()
    with client(p, timeout=30.0) as c, pytest.raises(httpx.ReadTimeout):
        c.get(server.url + "/stall/5")
    assert time.monotonic() - started < WELL_BEFORE  # well before the server's stall ends
    assert server.count("GET", "/stall/5") == 1  # a 1 s wait would cross the deadline


def test_deadline_is_sent_downstream_and_decreases(
    server: Server, clock: seawall.VirtualClock
) -> None:
    p = policy(clock, timeout=10.0, backoff=seawall.Backoff.constant(1.5))
    with client(p) as c:
        assert c.get(server.url + "/flaky/2/503").status_code == 200
    got = server.requests_to("/flaky/2/503")
    grpc = [decode_grpc_timeout(g.headers["grpc-timeout"]) for g in got]
    plain = [decode_request_deadline(g.headers["x-request-deadline"]) for g in got]
    assert None not in grpc
    assert None not in plain
    assert grpc == sorted(grpc, reverse=True)
    assert len(set(grpc)) == 3
    # 10 s, then 8.5 s, then 7 s left (virtual time), less the transit margin.
    assert plain == pytest.approx([9.995, 8.495, 6.995], abs=0.002)


def test_ambient_deadline_is_sent_downstream(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c, seawall.deadline(2.0, clock=clock):
        c.get(server.url + "/ok")
        c.get(server.url + "/ok")
    assert [g.headers["x-request-deadline"] for g in server.requests_to("/ok")] == ["1995"] * 2


def test_no_deadline_no_header(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        c.get(server.url + "/ok")
    (got,) = server.requests_to("/ok")
    assert "grpc-timeout" not in got.headers
    assert "x-request-deadline" not in got.headers


def test_deadline_headers_can_be_turned_off(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock, timeout=5.0), deadline_headers=False) as c:
        c.get(server.url + "/ok")
    assert "grpc-timeout" not in server.requests_to("/ok")[0].headers


def _chunks() -> Iterator[bytes]:
    yield b"part1,"
    yield b"part2"


def test_streamed_body_is_not_replayed(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        r = c.put(server.url + "/flaky/1/503", content=_chunks())
    assert r.status_code == 503
    got = server.requests_to("/flaky/1/503")
    assert [g.body for g in got] == [b"part1,part2"]


def test_streamed_body_error_says_why(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c, pytest.raises(RESET) as info:
        c.put(server.url + "/reset-head/1", content=_chunks())
    assert server.count("PUT", "/reset-head/1") == 1
    assert any("cannot be replayed" in n for n in getattr(info.value, "__notes__", []))


def test_bytes_body_is_replayed(server: Server, clock: seawall.VirtualClock) -> None:
    with client(policy(clock)) as c:
        r = c.put(server.url + "/flaky/2/503", content=b"v=2")
    assert r.status_code == 200
    assert [g.body for g in server.requests_to("/flaky/2/503")] == [b"v=2"] * 3


def test_budget_refusal_stops_retries(server: Server, clock: seawall.VirtualClock) -> None:
    budget = seawall.RetryBudget(ratio=0.1, min_per_second=0.0)
    events: list[seawall.RetryEvent] = []
    with client(policy(clock, hooks=[events.append]), budget=budget) as c:
        r = c.get(server.url + "/flaky/5/503")
    assert r.status_code == 503
    assert server.count("GET", "/flaky/5/503") == 1  # 1 request x 10% < 1 retry
    assert [e.kind for e in events] == ["budget_exhausted", "give_up"]


def test_one_budget_per_host_shared_across_clients(
    server: Server, clock: seawall.VirtualClock
) -> None:
    host_budget = budget_for_host(server.url)
    assert isinstance(host_budget, seawall.RetryBudget)
    before = host_budget.requests
    with client(policy(clock), budget=PER_HOST) as a, client(policy(clock), budget=PER_HOST) as b:
        a.get(server.url + "/ok")
        b.get(server.url + "/ok")
    assert host_budget.requests == before + 2
    assert budget_for_host(server.url) is host_budget


def test_policy_budget_wins_over_per_host(server: Server, clock: seawall.VirtualClock) -> None:
    own = seawall.RetryBudget()
    with client(policy(clock, budget=own), budget=PER_HOST) as c:
        c.get(server.url + "/ok")
    assert own.requests == 1


class Recording(httpx.BaseTransport):
    """Wraps the real transport and keeps every response it hands out."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport(verify=TLS)
        self.responses: list[httpx.Response] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        self.responses.append(response)
        return response

    def close(self) -> None:
        self.inner.close()


def test_discarded_responses_are_closed(server: Server, clock: seawall.VirtualClock) -> None:
    recording = Recording()
    transport = RetryTransport(policy(clock), recording, budget=None, buffer_limit=0)
    with httpx.Client(transport=transport, timeout=5.0) as c:
        r = c.get(server.url + "/flaky/2/503")
        assert r.status_code == 200
        assert [x.is_closed for x in recording.responses] == [True, True, True]
        # All three attempts went over one kept-alive connection: nothing leaked.
        pool = recording.inner._pool
        assert len(pool.connections) == 1


def test_kill_switch_makes_one_attempt(server: Server, clock: seawall.VirtualClock) -> None:
    seawall.set_enabled(False)
    with client(policy(clock)) as c:
        r = c.get(server.url + "/flaky/1/503")
    assert r.status_code == 503
    assert server.count("GET", "/flaky/1/503") == 1


def test_default_policy_and_transport(server: Server) -> None:
    with httpx.Client(transport=RetryTransport(), timeout=5.0) as c:
        assert c.get(server.url + "/ok").text == "ok"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"policy": "three"}, TypeError),
        ({"transport": object()}, TypeError),
        ({"budget": 3}, TypeError),
        ({"retry_statuses": [503, 700]}, ValueError),
        ({"retry_statuses": "503"}, TypeError),
        ({"idempotent_methods": ["GET", ""]}, ValueError),
        ({"idempotency_key": "yes"}, TypeError),
        ({"buffer_limit": -1}, ValueError),
        ({"retry_on": (ValueError, "x")}, TypeError),
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    name = next(iter(kwargs))
    with pytest.raises(error, match=name):
        RetryTransport(**kwargs)


def test_enclosing_policy_does_not_multiply_attempts(
    server: Server, clock: seawall.VirtualClock
) -> None:
    # Retry at one layer: the transport's policy gave up after 3 attempts on a retryable
    # error; an enclosing policy passes it through instead of making 3 x 3.
    outer_events: list[seawall.RetryEvent] = []
    outer = seawall.RetryPolicy(
        retry_on=httpx.TransportError, clock=clock, hooks=[outer_events.append]
    )
    with client(policy(clock)) as c, pytest.raises(RESET):
        outer.call(c.get, server.url + "/reset-head/9")
    assert server.count("GET", "/reset-head/9") == 3
    assert [e.reason for e in outer_events] == ["exhausted_below"]


def test_a_content_length_of_unicode_digits_does_not_crash(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with client(policy(clock)) as c:
        try:
            r = c.get(server.url + "/odd-length")
        except httpx.HTTPError:
            pass  # httpx may refuse the answer: its own error, not a crash in seawall
        else:
            assert r.status_code == 200


def test_an_outer_policy_never_resends_a_post_the_transport_refused_to_retry(
    server: Server, clock: seawall.VirtualClock
) -> None:
    outer = seawall.RetryPolicy(retry_on=httpx.TransportError, clock=clock, hooks=())
    timeout = httpx.Timeout(5.0, read=0.2)
    with client(policy(clock), timeout=timeout) as c, pytest.raises(httpx.ReadTimeout):
        outer.call(c.post, server.url + "/stall/3", content=b"pay 10")
    assert server.count("POST", "/stall/3") == 1

"""seawall.requests.RetryAdapter against a real server: assertions on what the server received."""

from __future__ import annotations

import io
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import requests.adapters
import urllib3
from seawall_test_server import READ_TIMEOUT, Server

import seawall
from seawall._core import validate
from seawall._strategies.deadline import decode_grpc_timeout
from seawall.requests import RetryAdapter


@pytest.fixture
def clock() -> seawall.VirtualClock:
    return seawall.VirtualClock()


def session(clock: seawall.VirtualClock, policy_kwargs: Any = None, **kwargs: Any) -> Any:
    p = seawall.RetryPolicy(clock=clock, rng=random.Random(5), hooks=(), **(policy_kwargs or {}))
    kwargs.setdefault("budget", None)
    s = requests.Session()
    s.mount("http://", RetryAdapter(p, **kwargs))
    return s


def test_503_twice_then_success(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r = s.get(server.url + "/flaky/2/503", timeout=5)
    assert r.status_code == 200
    assert r.text == "ok after 3"
    assert server.count("GET", "/flaky/2/503") == 3
    assert len(clock.sleeps) == 2


def test_gives_up_with_the_last_response(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r = s.get(server.url + "/flaky/9/503", timeout=5)
    assert r.status_code == 503
    assert r.text == "fail"
    assert server.count("GET", "/flaky/9/503") == 3


@pytest.mark.parametrize("code", [400, 401, 404, 500])
def test_other_statuses_are_not_retried(
    server: Server, clock: seawall.VirtualClock, code: int
) -> None:
    with session(clock) as s:
        r = s.get(server.url + f"/status/{code}", timeout=5)
    assert r.status_code == code
    assert server.count("GET", f"/status/{code}") == 1


def test_retry_after_seconds_and_clamp(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock, {"max_retry_after": 10.0}) as s:
        s.get(server.url + "/flaky/1/429?retry_after=4", timeout=5)
        s.get(server.url + "/flaky/1/503?retry_after=86400", timeout=5)
    assert clock.sleeps == [4.0, 10.0]


def test_retry_after_past_the_deadline_gives_up_now(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with session(clock, {"timeout": 3.0}) as s:
        r = s.get(server.url + "/flaky/1/429?retry_after=60", timeout=5)
    assert r.status_code == 429
    assert server.count("GET", "/flaky/1/429") == 1


def test_overloaded_is_not_retried(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r = s.get(server.url + "/flaky/1/503?overloaded=envoy", timeout=5)
    assert r.status_code == 503
    assert server.count("GET", "/flaky/1/503") == 1


def test_post_without_key_is_sent_once(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r = s.post(server.url + "/flaky/1/503", data=b"x", timeout=5)
    assert r.status_code == 503
    assert server.count("POST", "/flaky/1/503") == 1


def test_generated_key_is_the_same_on_every_attempt(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with session(clock, idempotency_key=True) as s:
        r = s.post(server.url + "/flaky/2/503", json={"a": 1}, timeout=5)
    assert r.status_code == 200
    got = server.requests_to("/flaky/2/503")
    keys = {g.headers["idempotency-key"] for g in got}
    assert len(got) == 3
    assert len(keys) == 1
    assert uuid.UUID(keys.pop()).version == 4
    assert {g.body for g in got} == {b'{"a": 1}'}


def test_file_body_is_rewound_for_each_attempt(server: Server, clock: seawall.VirtualClock) -> None:
    body = io.BytesIO(b"header;payload")
    body.seek(7)  # requests sends from the current position; so must every retry
    with session(clock) as s:
        r = s.put(server.url + "/flaky/2/502", data=body, timeout=5)
    assert r.status_code == 200
    assert [g.body for g in server.requests_to("/flaky/2/502")] == [b"payload"] * 3


def _gen() -> Iterator[bytes]:
    yield b"one,"
    yield b"two"


def test_generator_body_is_not_replayed(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r = s.put(server.url + "/flaky/1/503", data=_gen(), timeout=5)
    assert r.status_code == 503
    assert [g.body for g in server.requests_to("/flaky/1/503")] == [b"one,two"]


def test_reset_is_retried(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r1 = s.get(server.url + "/reset-head/2", timeout=5)
        r2 = s.get(server.url + "/reset-body/1", timeout=5)
    assert (r1.text, r2.text) == ("ok after 3", "ok after 2")
    assert server.count("GET", "/reset-head/2") == 3
    assert server.count("GET", "/reset-body/1") == 2


def test_reset_on_post_is_not_retried_and_says_why(
    server: Server, clock: seawall.VirtualClock
) -> None:
    with session(clock) as s, pytest.raises(requests.ConnectionError) as info:
        s.post(server.url + "/reset-head/1", data=b"x", timeout=5)
    assert server.count("POST", "/reset-head/1") == 1
    assert any("Idempotency-Key" in n for n in getattr(info.value, "__notes__", []))


def test_streaming_caller_gets_the_body_unread(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r = s.get(server.url + "/ok", timeout=5, stream=True)
        assert r.raw.read() == b"ok"  # the adapter did not consume it
        r.close()


def test_read_timeout_is_retried(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock) as s:
        r = s.get(server.url + "/stall/1", timeout=(5, READ_TIMEOUT))
    assert r.status_code == 200
    assert server.count("GET", "/stall/1") == 2


def test_read_timeout_capped_by_deadline(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock, {"timeout": 0.3}) as s, pytest.raises(requests.ReadTimeout):
        s.get(server.url + "/stall/5", timeout=30)
    assert server.count("GET", "/stall/5") >= 1


def test_connection_refused_is_retried(refused_url: str, clock: seawall.VirtualClock) -> None:
    with session(clock) as s, pytest.raises(requests.ConnectionError):
        s.post(refused_url, data=b"x", timeout=5)
    assert len(clock.sleeps) == 2  # never sent, so safe even for POST


def test_deadline_headers_decrease(server: Server, clock: seawall.VirtualClock) -> None:
    policy_kwargs = {"timeout": 5.0, "backoff": seawall.Backoff.constant(2.0)}
    with session(clock, policy_kwargs) as s:
        s.get(server.url + "/flaky/2/503", timeout=5)
    got = [
        decode_grpc_timeout(g.headers["grpc-timeout"]) for g in server.requests_to("/flaky/2/503")
    ]
    assert got == pytest.approx([4.995, 2.995, 0.995], abs=0.002)


def test_budget_refusal_stops_retries(server: Server, clock: seawall.VirtualClock) -> None:
    with session(clock, budget=seawall.RetryBudget(ratio=0.5, min_per_second=0.0)) as s:
        s.get(server.url + "/flaky/9/503", timeout=5)
        s.get(server.url + "/flaky/9/504", timeout=5)
    # 2 requests x 50% = 1 retry in all.
    assert server.count("GET", "/flaky/9/503") + server.count("GET", "/flaky/9/504") == 3


def test_max_retries_is_refused() -> None:
    with pytest.raises(TypeError, match="max_retries"):
        RetryAdapter(max_retries=3)


def test_bad_retry_on_is_refused() -> None:
    with pytest.raises(TypeError, match="retry_on"):
        RetryAdapter(retry_on=("x",))  # type: ignore[arg-type]


def test_a_content_length_of_unicode_digits_does_not_crash(
    server: Server, clock: seawall.VirtualClock
) -> None:
    # "²".isdigit() is True but int("²") fails: the header is untrusted input.
    with session(clock) as s:
        try:
            r = s.get(server.url + "/odd-length", timeout=5)
        except requests.RequestException:
            pass  # the client library may refuse the answer: that is its own, documented error
        else:
            assert r.status_code == 200
    assert server.count("GET", "/odd-length") >= 1


def test_an_outer_policy_never_resends_a_post_the_adapter_refused_to_retry(
    server: Server, clock: seawall.VirtualClock
) -> None:
    outer = seawall.RetryPolicy(retry_on=requests.RequestException, clock=clock, hooks=())
    with session(clock) as s, pytest.raises(requests.RequestException):
        outer.call(s.post, server.url + "/stall/3", data=b"pay 10", timeout=0.2)
    assert server.count("POST", "/stall/3") == 1


class _Spy(requests.adapters.HTTPAdapter):
    """What RetryAdapter hands to requests' HTTPAdapter.send for each attempt."""

    sent: list[tuple[float | None, float | None]]

    def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        timeout = kwargs["timeout"]
        if isinstance(timeout, urllib3.Timeout):
            timeout = (timeout.connect_timeout, timeout.read_timeout)
        self.sent.append(timeout)
        return super().send(request, **kwargs)


class _SpiedAdapter(RetryAdapter, _Spy):
    pass


@pytest.mark.parametrize("forced", [False, True], ids=["first-attempt path", "HttpCall"])
def test_first_attempt_timeouts_are_the_callers_capped_by_the_total_time(
    server: Server, forced: bool
) -> None:
    # Whichever path a first attempt takes, it goes with the caller's timeouts, each capped by
    # the total time (no limit at all becomes the total time). The first-attempt path keeps
    # what it sent for a timeout and total; a urllib3 Timeout the caller changes in between
    # is read again.
    adapter = _SpiedAdapter(seawall.RetryPolicy(hooks=()), total_timeout=20.0)
    adapter.sent = []
    mine = urllib3.Timeout(connect=3.0, read=50.0)
    with requests.Session() as s:
        s.mount("http://", adapter)
        timeouts: list[Any] = [None, None, 5, 50.0, (2.0, None), (2.0, 8.0), mine, mine]
        for i, timeout in enumerate(timeouts):
            if i == len(timeouts) - 1:
                mine._read = 4.0  # changed by the caller since it was last sent
            if forced:
                with seawall.http.override():
                    s.get(server.url + "/ok", timeout=timeout)
            else:
                s.get(server.url + "/ok", timeout=timeout)
    near = pytest.approx(20.0, abs=1.0)  # the time left at the start of the attempt
    assert adapter.sent == [
        (near, near),
        (near, near),
        (5.0, 5.0),
        (near, near),
        (2.0, near),
        (2.0, 8.0),
        (3.0, near),
        (3.0, 4.0),
    ]


@pytest.mark.parametrize("forced", [False, True], ids=["first-attempt path", "HttpCall"])
def test_first_attempt_timeouts_without_a_total_time(server: Server, forced: bool) -> None:
    # With total_timeout=None, the caller's timeouts go as they are, beyond the longest wait
    # seawall accepts cut to it, on either path.
    adapter = _SpiedAdapter(seawall.RetryPolicy(hooks=()), total_timeout=None)
    adapter.sent = []
    with requests.Session() as s:
        s.mount("http://", adapter)
        for timeout in (None, 5, (2.0, None), 1e12):
            if forced:
                with seawall.http.override():
                    s.get(server.url + "/ok", timeout=timeout)
            else:
                s.get(server.url + "/ok", timeout=timeout)
    longest = validate.MAX_SECONDS
    assert adapter.sent == [(None, None), (5.0, 5.0), (2.0, None), (longest, longest)]

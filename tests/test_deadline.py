"""Deadline scopes, header codecs, server intake, and how RetryPolicy respects the deadline."""

import math
import random
import subprocess
import sys
import threading

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seawall
from backends import BACKENDS, Run
from seawall import Backoff, DeadlineExceeded, RetryEvent, RetryPolicy, VirtualClock
from seawall.propagation import (
    Deadline,
    deadline_header_counts,
    decode_grpc_timeout,
    decode_request_deadline,
    encode_grpc_timeout,
    encode_request_deadline,
    timeout_from_headers,
)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


# -- scopes ------------------------------------------------------------------------------------


def test_remaining_is_infinite_without_a_deadline() -> None:
    assert seawall.remaining() == math.inf
    assert seawall.propagation.deadline_headers() == {}


def test_scope_sets_and_restores_the_ambient_deadline(clock: VirtualClock) -> None:
    with seawall.deadline(2.0, clock=clock) as d:
        assert d == Deadline(2.0, clock)
        clock.advance(0.5)
        assert seawall.remaining() == pytest.approx(1.5)
    assert seawall.remaining() == math.inf


def test_nested_scopes_keep_the_earlier_deadline(clock: VirtualClock) -> None:
    with seawall.deadline(1.0, clock=clock):
        with seawall.deadline(5.0, clock=clock) as inner:
            assert inner.at == 1.0  # an inner scope cannot extend the time left
            assert seawall.remaining() == 1.0
        with seawall.deadline(0.25, clock=clock):
            assert seawall.remaining() == 0.25  # ...but it can shorten it
        assert seawall.remaining() == 1.0


def test_scope_accepts_an_absolute_deadline(clock: VirtualClock) -> None:
    with seawall.deadline(at=Deadline(3.0, clock)):
        assert seawall.remaining() == 3.0
    assert Deadline(3.0, clock).expired is False
    clock.advance(3.0)
    assert Deadline(3.0, clock).expired is True


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        ((), {}, TypeError, "exactly one"),
        ((1.0,), {"at": Deadline(1.0)}, TypeError, "exactly one"),
        (("1",), {}, TypeError, "seconds must be a number"),
        ((True,), {}, TypeError, "seconds must be a number"),
        ((math.nan,), {}, ValueError, "NaN"),
    ],
)
def test_scope_rejects_bad_arguments(
    args: tuple[object, ...], kwargs: dict[str, object], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        seawall.deadline(*args, **kwargs)  # type: ignore[arg-type]


def test_the_first_deadline_of_a_process_reaches_policies_built_before_it() -> None:
    # A policy's first attempt reads the ambient deadline only once one has been made ambient
    # in the process: a fresh interpreter checks that the first scope ever entered applies at
    # once, to call(), acall() and decorated functions built before it, sync and async.
    script = """
import asyncio, seawall
policy = seawall.RetryPolicy(hooks=(), backoff=seawall.Backoff.constant(30.0), max_attempts=3)
def down():
    raise ConnectionError("down")
async def adown():
    raise ConnectionError("down")
calls = (
    lambda: policy.call(down),
    policy(down),
    lambda: asyncio.run(policy.acall(adown)),
    lambda: asyncio.run(policy(adown)()),
)
reasons = []
with seawall.deadline(1.0):
    for call in calls:
        try:
            call()
        except ConnectionError as error:
            reasons.append(error.__notes__[-1].rsplit("(", 1)[1].rstrip(")"))
print(*reasons)
"""
    # Without the deadline, each call would wait 30 s before its second attempt.
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=20, check=True
    )
    assert done.stdout.split() == ["deadline"] * 4


def test_ambient_deadline_is_per_thread_and_per_task(clock: VirtualClock) -> None:
    seen: list[float] = []
    with seawall.deadline(1.0, clock=clock):
        t = threading.Thread(target=lambda: seen.append(seawall.remaining()))
        t.start()
        t.join()
    assert seen == [math.inf]  # a new thread starts with a fresh context


# -- codecs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "grpc", "ms"),
    [
        (0.0, "0n", "0"),
        (-3.0, "0n", "0"),
        (1e-9, "1n", "0"),
        (0.05, "50000000n", "50"),
        (0.1, "100000u", "100"),
        (0.3, "300000u", "300"),
        (0.57, "570000u", "570"),
        (1.5, "1500000u", "1500"),
        (99.999999, "99999999u", "99999"),
        (100.0, "100000m", "100000"),
        (123456.789, "123456S", "99999999"),
        (60.0 * 99_999_999, "99999999M", "99999999"),
        (1e300, "99999999H", "99999999"),
    ],
)
def test_encoders_pick_the_finest_unit_and_round_down(seconds: float, grpc: str, ms: str) -> None:
    assert encode_grpc_timeout(seconds) == grpc
    assert encode_request_deadline(seconds) == ms


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_encoders_reject_non_finite_values(bad: float) -> None:
    with pytest.raises(ValueError, match="seconds must be finite"):
        encode_grpc_timeout(bad)
    with pytest.raises(ValueError, match="seconds must be finite"):
        encode_request_deadline(bad)


@pytest.mark.parametrize("bad", ["1", None, True])
def test_encoders_reject_non_numbers(bad: object) -> None:
    with pytest.raises(TypeError, match="seconds"):
        encode_grpc_timeout(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("100m", 0.1),
        ("5S", 5.0),
        ("2M", 120.0),
        ("1H", 3600.0),
        ("250u", 0.00025),
        ("7n", 7e-9),
        ("0n", 0.0),
        ("99999999S", 99_999_999.0),
        (b"100m", 0.1),
        (" 100m\t", 0.1),  # optional whitespace around a field value
        ("00000001S", 1.0),
    ],
)
def test_decode_grpc_timeout_accepts_the_spec(value: str | bytes, seconds: float) -> None:
    assert decode_grpc_timeout(value) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "m",
        "100",
        "-5S",
        "+5S",
        "1.5S",
        "123456789S",  # 9 digits: longer than the spec allows
        "5s",  # unit letters are case-sensitive: "s" is not a unit
        "5 S",
        "5Sx",
        "\uff11\uff10\uff10m",  # full-width digits are not ASCII
        "100\u00b5",
        b"\xff\xfe",
        "5e3m",
        "0x10S",
        "9" * 5000,
        None,
        17,
    ],
)
def test_decode_grpc_timeout_ignores_garbage(value: object) -> None:
    assert decode_grpc_timeout(value) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1500", 1.5), ("0", 0.0), (b"250", 0.25), (" 42 ", 0.042), ("99999999", 99_999.999)],
)
def test_decode_request_deadline_accepts_milliseconds(value: str | bytes, seconds: float) -> None:
    assert decode_request_deadline(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    ["", "-1", "1.5", "1e3", "100m", "123456789", "٣", "\x00", b"\xc3\xa9", "9" * 10_000, None],
)
def test_decode_request_deadline_ignores_garbage(value: object) -> None:
    assert decode_request_deadline(value) is None  # type: ignore[arg-type]


# -- client side: outgoing headers ---------------------------------------------------------------


def test_deadline_headers_carry_the_time_left_minus_the_margin(clock: VirtualClock) -> None:
    with seawall.deadline(2.0, clock=clock):
        clock.advance(0.5)
        assert seawall.propagation.deadline_headers(margin=0.1) == {
            "grpc-timeout": "1400000u",
            "x-request-deadline": "1400",
        }
        default = seawall.propagation.deadline_headers()
        assert decode_grpc_timeout(default["grpc-timeout"]) == pytest.approx(
            1.5 - seawall.propagation.DEFAULT_TRANSIT_MARGIN
        )
        assert seawall.propagation.deadline_headers(grpc_timeout=False) == {
            "x-request-deadline": "1495"
        }
        assert seawall.propagation.deadline_headers(request_deadline=False) == {
            "grpc-timeout": "1495000u"
        }


def test_deadline_headers_say_zero_when_the_margin_eats_the_time_left(clock: VirtualClock) -> None:
    with seawall.deadline(0.004, clock=clock):
        assert seawall.propagation.deadline_headers(margin=0.005) == {
            "grpc-timeout": "0n",
            "x-request-deadline": "0",
        }
    with seawall.deadline(1.0, clock=clock):
        clock.advance(5.0)  # long past: still encodable, as zero
        assert seawall.propagation.deadline_headers()["grpc-timeout"] == "0n"


def test_deadline_headers_for_an_explicit_time_left() -> None:
    assert seawall.propagation.deadline_headers(0.25, margin=0.0) == {
        "grpc-timeout": "250000u",
        "x-request-deadline": "250",
    }
    assert seawall.propagation.deadline_headers(math.inf) == {}


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"margin": -0.1}, ValueError, "margin must be >= 0, got -0.1"),
        ({"margin": math.nan}, ValueError, "margin must be finite"),
        ({"margin": "1"}, TypeError, "margin must be a number"),
        ({"seconds": "1"}, TypeError, "seconds must be a number"),
        ({"seconds": math.nan}, ValueError, "seconds must not be NaN"),
    ],
)
def test_deadline_headers_reject_bad_arguments(
    kwargs: dict[str, object], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        seawall.propagation.deadline_headers(**kwargs)  # type: ignore[arg-type]


# -- server side: intake ---------------------------------------------------------------------


def test_intake_reads_either_header_in_any_case() -> None:
    assert timeout_from_headers({"grpc-timeout": "300m"}, max_seconds=10) == pytest.approx(0.3)
    assert timeout_from_headers({"X-Request-Deadline": "700"}, max_seconds=10) == 0.7
    assert timeout_from_headers([(b"Grpc-Timeout", b"2S")], max_seconds=10) == 2.0
    assert timeout_from_headers([("x-request-deadline", "40")], max_seconds=10) == 0.04


def test_intake_takes_the_shortest_valid_value_and_subtracts_the_margin() -> None:
    headers = [
        (b"grpc-timeout", b"3S"),
        (b"x-request-deadline", b"2500"),
        (b"grpc-timeout", b"4S"),
        (b"content-type", b"text/plain"),
    ]
    assert timeout_from_headers(headers, max_seconds=10, margin=0.5) == 2.0


def test_intake_clamps_to_the_server_maximum_and_counts_it() -> None:
    before = deadline_header_counts()
    assert timeout_from_headers({"grpc-timeout": "99999999H"}, max_seconds=30.0) == 30.0
    after = deadline_header_counts()
    assert after.clamped == before.clamped + 1
    assert after.accepted == before.accepted + 1
    assert after.invalid == before.invalid


def test_intake_without_a_header_gives_the_server_maximum() -> None:
    before = deadline_header_counts()
    assert timeout_from_headers({}, max_seconds=5.0) == 5.0
    assert timeout_from_headers({"accept": "*/*"}, max_seconds=5.0) == 5.0
    assert deadline_header_counts() == before  # nothing read, nothing counted


@pytest.mark.parametrize(
    "headers",
    [
        {"grpc-timeout": "-5S"},
        {"grpc-timeout": "1.5S"},
        {"grpc-timeout": "123456789m"},
        {"x-request-deadline": "-100"},
        {"x-request-deadline": "99999999999999999999999"},
        {"x-request-deadline": "ünïcode"},
        [(b"grpc-timeout", b"\xff\xfe\xfd")],
        [(b"x-request-deadline", b"1e9")],
        [("grpc-timeout", None)],
        [("grpc-timeout", 5)],
    ],
)
def test_intake_ignores_and_counts_invalid_values(headers: object) -> None:
    before = deadline_header_counts()
    assert timeout_from_headers(headers, max_seconds=5.0) == 5.0  # type: ignore[arg-type]
    after = deadline_header_counts()
    assert after.invalid == before.invalid + 1
    assert after.accepted == before.accepted


def test_intake_uses_the_valid_header_when_the_other_is_garbage() -> None:
    before = deadline_header_counts()
    headers = {"grpc-timeout": "soon", "x-request-deadline": "250"}
    assert timeout_from_headers(headers, max_seconds=5.0) == 0.25
    after = deadline_header_counts()
    assert (after.accepted - before.accepted, after.invalid - before.invalid) == (1, 1)


def test_intake_skips_items_that_are_not_headers() -> None:
    junk = [("grpc-timeout",), 42, (None, b"1S"), (b"grpc-timeout", b"1S", b"x")]
    assert timeout_from_headers(junk, max_seconds=5.0) == 5.0  # type: ignore[arg-type]


def test_intake_reports_an_expired_client_deadline_as_zero_or_less() -> None:
    assert timeout_from_headers({"grpc-timeout": "0n"}, max_seconds=5.0) == 0.0
    assert timeout_from_headers({"grpc-timeout": "1m"}, max_seconds=5.0, margin=0.01) < 0


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"max_seconds": 0}, ValueError, "max_seconds must be > 0, got 0"),
        ({"max_seconds": math.inf}, ValueError, "max_seconds must be finite"),
        ({"max_seconds": "5"}, TypeError, "max_seconds must be a number"),
        ({"max_seconds": 5, "margin": -1}, ValueError, "margin must be >= 0, got -1"),
    ],
)
def test_intake_rejects_bad_configuration(
    kwargs: dict[str, object], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        timeout_from_headers({}, **kwargs)  # type: ignore[arg-type]


def test_intake_rejects_headers_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="headers must be"):
        timeout_from_headers("grpc-timeout: 1S", max_seconds=5.0)  # type: ignore[arg-type]


def test_deadline_from_headers_installs_the_clamped_deadline(clock: VirtualClock) -> None:
    with seawall.propagation.deadline_from_headers(
        {"grpc-timeout": "2S"}, max_seconds=10, clock=clock
    ):
        assert seawall.remaining() == 2.0
    with seawall.propagation.deadline_from_headers(
        {"grpc-timeout": "20S"}, max_seconds=10, clock=clock
    ):
        assert seawall.remaining() == 10.0
    with (
        seawall.propagation.deadline_from_headers(
            {"grpc-timeout": "1m"}, max_seconds=10, clock=clock
        ),
        pytest.raises(DeadlineExceeded, match="gave up before attempt 1"),
    ):
        RetryPolicy(clock=clock, min_attempt_time=0.01).call(lambda: "never runs")


def test_intake_works_with_httpx_headers_and_repeated_names() -> None:
    httpx = pytest.importorskip("httpx")
    headers = httpx.Headers([("grpc-timeout", "5S"), ("Grpc-Timeout", "2S")])
    assert timeout_from_headers(headers, max_seconds=10) == 2.0


# -- RetryPolicy inside a deadline ------------------------------------------------------------


def test_attempt_timeout_is_the_smaller_of_attempt_timeout_and_time_left(
    clock: VirtualClock,
) -> None:
    seen: list[float] = []

    def work() -> str:
        seen.append(seawall.remaining())
        raise ConnectionError("down")

    policy = RetryPolicy(
        max_attempts=3, attempt_timeout=0.5, backoff=Backoff.constant(0.1), clock=clock, hooks=()
    )
    with seawall.deadline(1.2, clock=clock), pytest.raises(ConnectionError):
        policy.call(work)
    # Attempt 1 at t=0: min(0.5, 1.2); attempt 2 at t=0.1: min(0.5, 1.1); attempt 3 at t=0.2.
    assert seen == pytest.approx([0.5, 0.5, 0.5])
    seen.clear()
    clock2 = VirtualClock()
    policy = policy.replace(clock=clock2)
    with seawall.deadline(0.7, clock=clock2), pytest.raises(ConnectionError):
        policy.call(work)
    assert seen == pytest.approx([0.5, 0.5, 0.5])  # 0.7-0.1 and 0.7-0.2 still exceed 0.5
    seen.clear()
    clock3 = VirtualClock()
    with seawall.deadline(0.3, clock=clock3), pytest.raises(ConnectionError):
        policy.replace(clock=clock3).call(work)
    assert seen == pytest.approx([0.3, 0.2, 0.1])  # the deadline is tighter: it wins


def test_no_wait_crosses_the_deadline(clock: VirtualClock) -> None:
    events: list[RetryEvent] = []
    policy = RetryPolicy(
        max_attempts=10,
        backoff=Backoff(base=0.2, multiplier=2.0, jitter="none"),
        clock=clock,
        hooks=[events.append],
    )

    def work() -> None:
        clock.advance(0.05)
        raise ConnectionError("down")

    with seawall.deadline(1.0, clock=clock), pytest.raises(ConnectionError) as info:
        policy.call(work)
    # t=0.05 wait 0.2, t=0.3 wait 0.4, t=0.75: a wait of 0.8 would cross 1.0: give up now.
    assert clock.sleeps == pytest.approx([0.2, 0.4])
    assert clock.now() == pytest.approx(0.75)
    assert events[-1].kind == "give_up"
    assert events[-1].reason == "deadline"
    assert "gave up after 3 attempts" in str(getattr(info.value, "__notes__", None))


def test_min_attempt_time_fails_fast_before_doing_work(clock: VirtualClock) -> None:
    calls: list[float] = []

    def work() -> None:
        calls.append(clock.now())
        clock.advance(0.4)
        raise ConnectionError("slow")

    policy = RetryPolicy(
        max_attempts=5, min_attempt_time=0.4, backoff=Backoff.constant(0.0), clock=clock, hooks=()
    )
    with seawall.deadline(1.0, clock=clock), pytest.raises(ConnectionError):
        policy.call(work)
    # At 0.4 s, 0.6 s are left: attempt 2 runs. At 0.8 s only 0.2 s are left: no attempt 3.
    assert calls == [0.0, 0.4]
    with (
        seawall.deadline(0.3, clock=clock),
        pytest.raises(DeadlineExceeded, match=r"gave up before attempt 1: 0\.300 s left"),
    ):
        policy.call(work)
    assert calls == [0.0, 0.4]  # no work was done


def test_deadline_exceeded_from_below_is_retried_only_within_the_calls_own_deadline(
    clock: VirtualClock,
) -> None:
    calls = 0

    def work() -> None:
        nonlocal calls
        calls += 1
        clock.advance(0.3)
        raise DeadlineExceeded("the hop below ran out of time")

    policy = RetryPolicy(max_attempts=5, retry_on=TimeoutError, clock=clock, hooks=())
    # Under the same ambient deadline the hop's deadline is this call's: gone for every layer.
    with seawall.deadline(0.3, clock=clock), pytest.raises(DeadlineExceeded):
        policy.call(work)
    assert calls == 1
    # A tighter deadline below (one attempt's) passing is one slow attempt: retried.
    calls = 0
    with pytest.raises(DeadlineExceeded):
        policy.call(work)
    assert calls == 5


def test_async_policy_attempt_is_cancelled_at_the_deadline(run: Run) -> None:
    clock = VirtualClock()
    started: list[float] = []

    async def slow() -> str:
        started.append(clock.now())
        await anyio.sleep(10)
        return "late"

    async def main() -> None:
        policy = RetryPolicy(max_attempts=3, clock=clock, hooks=())
        async with seawall.deadline(1.0, clock=clock):
            await policy.acall(slow)

    with pytest.raises(DeadlineExceeded):
        run(main(), clock)
    assert started == [0.0]
    assert clock.now() == pytest.approx(1.0)  # cancelled at the deadline, not at 10 s


def test_async_attempts_get_the_smaller_of_attempt_timeout_and_time_left(run: Run) -> None:
    clock = VirtualClock()
    attempts: list[tuple[float, float]] = []  # (start, time left seen by the attempt)

    async def hang() -> str:
        attempts.append((clock.now(), seawall.remaining()))
        await anyio.sleep(100)
        return "never"

    async def main() -> str:
        policy = RetryPolicy(
            max_attempts=5,
            attempt_timeout=0.5,
            backoff=Backoff.constant(0.05),
            clock=clock,
            hooks=(),
        )
        with seawall.deadline(1.3, clock=clock):
            return await policy.acall(hang)

    with pytest.raises(TimeoutError) as info:
        run(main(), clock)
    # The caller gets the last attempt's own timeout, with a note saying why the policy stopped.
    assert type(info.value) is TimeoutError
    assert "(deadline)" in str(getattr(info.value, "__notes__", None))
    # 0.0: 0.5 s (attempt_timeout); 0.55: 0.5 s; 1.1: only 0.2 s left, the deadline wins.
    assert [a for a, _ in attempts] == pytest.approx([0.0, 0.55, 1.1])
    assert [left for _, left in attempts] == pytest.approx([0.5, 0.5, 0.2])
    assert clock.now() == pytest.approx(1.3)  # the last attempt was cut at the deadline


def test_policy_timeout_and_ambient_deadline_the_earlier_wins(clock: VirtualClock) -> None:
    seen: list[float] = []

    def work() -> str:
        seen.append(seawall.remaining())
        return "ok"

    with seawall.deadline(5.0, clock=clock):
        RetryPolicy(timeout=2.0, clock=clock).call(work)
        RetryPolicy(timeout=9.0, clock=clock).call(work)
    assert seen == [2.0, 5.0]


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(
    edge=st.floats(min_value=0.05, max_value=5.0),
    cost=st.floats(min_value=0.0, max_value=1.0),
    base=st.floats(min_value=0.0, max_value=1.0),
    attempt_timeout=st.one_of(st.none(), st.floats(min_value=0.01, max_value=2.0)),
    min_attempt_time=st.floats(min_value=0.0, max_value=0.5),
)
def test_async_policy_never_outlives_the_ambient_deadline(
    backend: str,
    edge: float,
    cost: float,
    base: float,
    attempt_timeout: float | None,
    min_attempt_time: float,
) -> None:
    clock = VirtualClock()
    starts: list[tuple[float, float]] = []

    async def work() -> str:
        starts.append((clock.now(), seawall.remaining()))
        await anyio.sleep(cost)
        raise ConnectionError("down")

    async def main() -> None:
        policy = RetryPolicy(
            max_attempts=10,
            backoff=Backoff(base=base, jitter="full") if base else Backoff.constant(0.0),
            attempt_timeout=attempt_timeout,
            min_attempt_time=min_attempt_time,
            clock=clock,
            rng=random.Random(0),
            hooks=(),
        )
        async with seawall.deadline(edge, clock=clock):
            await policy.acall(work)

    with pytest.raises((ConnectionError, TimeoutError)):
        seawall.testing.run(main(), clock, backend=backend)
    assert clock.now() <= edge + 1e-9
    for start, left in starts:
        # Every attempt started with at least min_attempt_time before the deadline...
        assert edge - start >= min_attempt_time - 1e-9
        assert start < edge
        # ...and saw as its deadline the tighter of attempt_timeout and the time left.
        want = min(edge - start, attempt_timeout if attempt_timeout is not None else math.inf)
        assert left == pytest.approx(want, abs=1e-9)

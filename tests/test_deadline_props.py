"""Property tests for the deadline header codecs: round trips, and garbage never raises."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seawall
from seawall.propagation import (
    decode_grpc_timeout,
    decode_request_deadline,
    encode_grpc_timeout,
    encode_request_deadline,
    timeout_from_headers,
)

GRPC_MAX = 99_999_999 * 3600.0
UNITS = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "S": 1.0, "M": 60.0, "H": 3600.0}

seconds = st.floats(min_value=0.0, max_value=GRPC_MAX, allow_nan=False)


@pytest.mark.volume
@given(seconds)
def test_grpc_round_trip_never_adds_time_and_loses_under_one_unit(s: float) -> None:
    text = encode_grpc_timeout(s)
    assert 2 <= len(text) <= 9
    assert text[:-1].isdigit()
    assert text[-1] in UNITS
    back = decode_grpc_timeout(text)
    assert back is not None
    # Never more than was left (up to the half nanosecond the encoder rounds to)...
    assert back <= s + 5e-10 + s * 1e-15
    # ...and less only by under one unit of the finest unit that fits 8 digits.
    unit = UNITS[text[-1]]
    assert s - back < unit + s * 1e-15
    if text[-1] != "n":
        # A coarser unit is used only when the value overflows 8 digits in the finer one (at most
        # 1000 or 60 times finer), so at least 99999999 / 1000 ~ 1e5 units remain: loss under
        # 1e-5 of the value (e.g. 0.55859375 s is sent as 558593u, 0.75 us less).
        assert s - back <= s * 1e-5


@given(st.integers(min_value=0, max_value=99_999_999), st.sampled_from(sorted(UNITS)))
def test_grpc_decode_then_encode_keeps_the_value(value: int, unit: str) -> None:
    s = decode_grpc_timeout(f"{value}{unit}")
    assert s is not None
    assert s == value * UNITS[unit] or math.isclose(s, value * UNITS[unit], rel_tol=1e-12)
    again = decode_grpc_timeout(encode_grpc_timeout(s))
    assert again is not None
    assert math.isclose(again, s, rel_tol=1e-7, abs_tol=1e-9)


@given(st.floats(min_value=0.0, max_value=99_999.999, allow_nan=False))
def test_request_deadline_round_trip_rounds_down_to_the_millisecond(s: float) -> None:
    text = encode_request_deadline(s)
    assert text.isdigit()
    assert len(text) <= 8
    back = decode_request_deadline(text)
    assert back is not None
    assert back <= s + 5e-10 + s * 1e-15
    assert s - back < 0.001 + s * 1e-15


@given(st.floats(allow_nan=False))
def test_encoders_always_give_valid_header_values(s: float) -> None:
    if not math.isfinite(s):
        return
    for value in (encode_grpc_timeout(s), encode_request_deadline(s)):
        assert value.isascii()
        assert 0 < len(value) <= 9
    assert decode_grpc_timeout(encode_grpc_timeout(s)) is not None
    assert decode_request_deadline(encode_request_deadline(s)) is not None


garbage = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    st.text(alphabet="0123456789HMSmun-+. \t", max_size=12),
    st.text(alphabet="0123456789", min_size=9, max_size=400),
    st.none(),
    st.integers(),
    st.floats(),
)


@pytest.mark.volume
@given(garbage)
@settings(max_examples=300)
def test_decoders_never_raise_and_give_sane_values(value: object) -> None:
    for decode in (decode_grpc_timeout, decode_request_deadline):
        out = decode(value)  # type: ignore[arg-type]
        assert out is None or (math.isfinite(out) and out >= 0.0)


header_names = st.sampled_from(
    ["grpc-timeout", "Grpc-Timeout", "x-request-deadline", "X-REQUEST-DEADLINE", "accept", ""]
)
header_value = st.one_of(st.text(max_size=20), st.binary(max_size=20), st.none(), st.integers())


@pytest.mark.volume
@given(
    st.lists(
        st.tuples(st.one_of(header_names, header_names.map(str.encode)), header_value),
        max_size=6,
    ),
    st.floats(min_value=1e-3, max_value=1e6),
    st.floats(min_value=0.0, max_value=10.0),
)
@settings(max_examples=300)
def test_intake_never_raises_and_never_exceeds_the_server_maximum(
    headers: list[tuple[object, object]], max_seconds: float, margin: float
) -> None:
    before = seawall.propagation.deadline_header_counts()
    allowed = timeout_from_headers(headers, max_seconds=max_seconds, margin=margin)  # type: ignore[arg-type]
    after = seawall.propagation.deadline_header_counts()
    assert allowed <= max_seconds
    assert math.isfinite(allowed)
    assert allowed >= -margin
    names = [n.decode() if isinstance(n, bytes) else str(n) for n, _ in headers]
    ours = [n for n in names if n.lower() in ("grpc-timeout", "x-request-deadline")]
    # Every value under one of our names was either accepted or counted as invalid.
    read = (after.accepted - before.accepted) + (after.invalid - before.invalid)
    assert read == len(ours)


def test_grpc_precision_at_the_nanosecond_to_microsecond_switch() -> None:
    # 9 digits of nanoseconds do not fit: microseconds it is, rounded down.
    assert encode_grpc_timeout(0.55859375) == "558593u"


@given(st.floats(min_value=1e-4, max_value=99_999_999 * 3600.0, allow_nan=False))
def test_grpc_loss_is_under_one_part_in_100000_as_the_docs_say(s: float) -> None:
    # docs/deadlines.md: "under one part in 100,000 (1e-5) for any time of 0.1 ms or more".
    sent = decode_grpc_timeout(encode_grpc_timeout(s))
    assert sent is not None
    assert sent <= s
    assert (s - sent) / s < 1e-5


def test_grpc_worst_case_of_the_docs() -> None:
    assert encode_grpc_timeout(100.8125) == "100812m"
    loss = (100.8125 - 100.812) / 100.8125
    assert 4e-6 < loss < 1e-5  # "about 5 parts in a million": more than the old "under 1e-6"


def test_grpc_nanoseconds_round_down() -> None:
    # 1,881,806.67 ns: rounding to the nearest nanosecond would give the callee 0.33 ns more.
    assert encode_grpc_timeout(0.0018818066742179078) == "1881806n"

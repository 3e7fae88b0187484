import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seawall import Backoff

JITTERS = ["none", "full", "equal", "decorrelated"]


def test_raw_doubles_to_the_cap() -> None:
    b = Backoff(base=10, multiplier=2, cap=100, jitter="none")
    assert [b.raw(n) for n in range(6)] == [10, 20, 40, 80, 100, 100]


@pytest.mark.parametrize("n", [60, 1_000, 10_000, 10**9])
def test_raw_is_overflow_safe(n: int) -> None:
    assert Backoff(base=0.1, cap=20).raw(n) == 20.0
    assert Backoff(base=0.1, multiplier=1.0001, cap=20).raw(n) <= 20.0


def test_no_jitter_is_the_raw_sequence() -> None:
    b = Backoff(base=1, multiplier=3, cap=50, jitter="none")
    assert list(itertools.islice(b.delays(), 5)) == [1, 3, 9, 27, 50]


def test_full_jitter_keeps_spreading_at_the_cap() -> None:
    # Far past the cap, delays must still differ: jitter applies to the capped value.
    b = Backoff(base=1, cap=4, jitter="full")
    rng = random.Random(7)
    delays = [b.compute(50, rng) for _ in range(200)]
    assert all(0 <= d <= 4 for d in delays)
    assert len(set(delays)) == 200
    assert max(delays) - min(delays) > 3


def test_equal_jitter_bounds() -> None:
    b = Backoff(base=1, cap=8, jitter="equal")
    rng = random.Random(1)
    for n in range(10):
        raw = b.raw(n)
        for _ in range(50):
            assert raw / 2 <= b.compute(n, rng) <= raw


def test_decorrelated_jitter_bounds_and_growth() -> None:
    b = Backoff(base=1, cap=100, jitter="decorrelated")
    rng = random.Random(3)
    previous = None
    for _ in range(200):
        d = b.compute(0, rng, previous)
        low = 1.0
        high = min(100.0, 3 * (previous if previous is not None else 1.0))
        assert low <= d <= max(low, high)
        previous = d
    # It grows from base towards the cap.
    assert max(itertools.islice(b.delays(random.Random(3)), 50)) > 20


def test_constant_and_linear() -> None:
    c = Backoff.constant(0.5)
    assert [c.raw(n) for n in range(4)] == [0.5] * 4
    lin = Backoff.linear(base=1, step=2, cap=6, jitter="none")
    assert [lin.raw(n) for n in range(5)] == [1, 3, 5, 6, 6]


def test_immediate_first_retry() -> None:
    b = Backoff(base=1, cap=10, jitter="full", immediate_first=True)
    rng = random.Random(0)
    delays = list(itertools.islice(b.delays(rng), 4))
    assert delays[0] == 0.0
    assert 0 < delays[1] <= 1
    assert b.raw(1) == 1 and b.raw(2) == 2


def test_hundred_clients_full_jitter_spread_no_jitter_lockstep() -> None:
    # 100 clients fail at the same instant t=0 and schedule their first retry.
    rng = random.Random(42)
    full = Backoff(base=1.0, jitter="full")
    none = Backoff(base=1.0, jitter="none")
    full_times = {full.compute(0, rng) for _ in range(100)}
    none_times = {none.compute(0, rng) for _ in range(100)}
    assert len(full_times) >= 50
    assert none_times == {1.0}


def test_same_seed_same_delays() -> None:
    for jitter in JITTERS:
        b = Backoff(jitter=jitter)  # type: ignore[arg-type]
        a = list(itertools.islice(b.delays(random.Random(5)), 20))
        c = list(itertools.islice(b.delays(random.Random(5)), 20))
        assert a == c


def test_frozen_and_replace() -> None:
    b = Backoff()
    with pytest.raises(AttributeError):
        b.base = 3  # type: ignore[misc]
    b2 = b.replace(cap=5.0)
    assert b2.cap == 5.0 and b.cap == 20.0
    with pytest.raises(ValueError, match="cap"):
        b.replace(cap=-1)


@pytest.mark.parametrize(
    ("kwargs", "exc", "word"),
    [
        ({"base": -1}, ValueError, "base"),
        ({"base": math.nan}, ValueError, "base"),
        ({"base": math.inf}, ValueError, "base"),
        ({"cap": math.inf}, ValueError, "cap"),
        ({"cap": -0.5, "base": 0}, ValueError, "cap"),
        ({"cap": 0.01, "base": 1}, ValueError, "cap"),
        ({"multiplier": 0.5}, ValueError, "multiplier"),
        ({"multiplier": math.nan}, ValueError, "multiplier"),
        ({"jitter": "sometimes"}, ValueError, "jitter"),
        ({"jitter": 3}, TypeError, "jitter"),
        ({"base": "1"}, TypeError, "base"),
        ({"base": True}, TypeError, "base"),
        ({"step": -1}, ValueError, "step"),
        ({"immediate_first": 1}, TypeError, "immediate_first"),
    ],
)
def test_bad_input(kwargs: dict[str, object], exc: type[Exception], word: str) -> None:
    with pytest.raises(exc, match=word):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_negative_index_rejected() -> None:
    with pytest.raises(ValueError, match="n must be"):
        Backoff().raw(-1)


@pytest.mark.volume
@given(
    base=st.floats(0, 100),
    multiplier=st.floats(1, 10),
    extra=st.floats(0, 1000),
    jitter=st.sampled_from(JITTERS),
    n=st.integers(0, 100_000),
    seed=st.integers(0, 2**32),
)
def test_every_delay_within_bounds(
    base: float, multiplier: float, extra: float, jitter: str, n: int, seed: int
) -> None:
    b = Backoff(base=base, multiplier=multiplier, cap=base + extra, jitter=jitter)  # type: ignore[arg-type]
    raw = b.raw(n)
    assert 0 <= raw <= b.cap
    d = b.compute(n, random.Random(seed), previous=raw)
    assert 0 <= d <= b.cap
    if jitter == "none":
        assert d == raw
    elif jitter == "full":
        assert d <= raw
    elif jitter == "equal":
        assert raw / 2 <= d <= raw


@pytest.mark.volume
@given(base=st.floats(0.001, 10), extra=st.floats(0, 100), n=st.integers(0, 200))
def test_raw_is_monotonic(base: float, extra: float, n: int) -> None:
    b = Backoff(base=base, cap=base + extra, jitter="none")
    assert b.raw(n) <= b.raw(n + 1)

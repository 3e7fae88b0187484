"""The shared parameter checks: types, ranges, and messages that name the parameter and value."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

import seawall
from seawall._core import validate as _validate


@pytest.mark.parametrize("bad", [True, "1", None, [1.0], 1j])
def test_number_refuses_non_numbers_and_bools(bad: object) -> None:
    with pytest.raises(TypeError, match=r"^limit must be a number, got "):
        _validate.number("limit", bad)


def test_number_converts_ints_and_keeps_nan_without_bounds() -> None:
    assert _validate.number("limit", 3) == 3.0
    assert type(_validate.number("limit", 3)) is float
    assert math.isnan(_validate.number("limit", math.nan))
    assert _validate.number("limit", -math.inf) == -math.inf


@pytest.mark.parametrize(
    ("kwargs", "value", "message"),
    [
        ({"minimum": 0.0}, -1, r"^x must be >= 0, got -1$"),
        ({"minimum": 0.0}, math.nan, r"^x must be >= 0, got nan$"),
        ({"minimum": 0.0, "above": True}, 0, r"^x must be > 0, got 0$"),
        ({"minimum": 1.0, "finite": True}, 0.5, r"^x must be >= 1, got 0.5$"),
        ({"minimum": 0.0, "finite": True}, math.inf, r"^x must be finite, got inf$"),
        ({"minimum": 0.0, "finite": True}, math.nan, r"^x must be finite, got nan$"),
        ({"minimum": 0.0, "finite": True}, -1, r"^x must be >= 0, got -1$"),
        ({"finite": True}, -math.inf, r"^x must be finite, got -inf$"),
        ({"finite": True}, math.nan, r"^x must be finite, got nan$"),
    ],
)
def test_number_range_messages(kwargs: dict[str, object], value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _validate.number("x", value, **kwargs)  # type: ignore[arg-type]


def test_number_accepts_the_edges_of_its_range() -> None:
    assert _validate.number("x", 0, minimum=0.0) == 0.0
    assert _validate.number("x", math.inf, minimum=0.0) == math.inf
    assert _validate.number("x", 1e-300, minimum=0.0, above=True) == 1e-300
    assert _validate.number("x", -5.5, finite=True) == -5.5


def test_seconds_defaults_allow_zero_and_infinity() -> None:
    assert _validate.seconds("timeout", 0) == 0.0
    assert _validate.seconds("timeout", math.inf) == math.inf
    with pytest.raises(TypeError, match=r"^timeout must be a number of seconds, got '1s'$"):
        _validate.seconds("timeout", "1s")
    with pytest.raises(ValueError, match=r"^timeout must be >= 0, got -0.5$"):
        _validate.seconds("timeout", -0.5)


def test_seconds_options() -> None:
    with pytest.raises(ValueError, match=r"^open_duration must be > 0, got 0$"):
        _validate.seconds("open_duration", 0, zero=False, finite=True)
    with pytest.raises(ValueError, match=r"^margin must be finite, got inf$"):
        _validate.seconds("margin", math.inf, finite=True)
    assert _validate.seconds("open_duration", 2, zero=False, finite=True) == 2.0


def test_optional_seconds() -> None:
    assert _validate.optional_seconds("timeout", None) is None
    assert _validate.optional_seconds("timeout", 1) == 1.0
    # Zero is "no time at all" for a timeout: refused unless asked for.
    with pytest.raises(ValueError, match=r"^timeout must be > 0 or None, got 0$"):
        _validate.optional_seconds("timeout", 0)
    assert _validate.optional_seconds("min_attempt_time", 0, zero=True) == 0.0
    with pytest.raises(TypeError, match=r"^timeout must be a number of seconds or None, got "):
        _validate.optional_seconds("timeout", False)
    with pytest.raises(ValueError, match=r"^retry_after must be finite or None, got inf$"):
        _validate.optional_seconds("retry_after", math.inf, zero=True, finite=True)


def test_ratio_closed_and_half_open() -> None:
    assert _validate.ratio("p", 0) == 0.0
    assert _validate.ratio("p", 1) == 1.0
    with pytest.raises(ValueError, match=r"^p must be between 0 and 1, got 1.5$"):
        _validate.ratio("p", 1.5)
    with pytest.raises(ValueError, match=r"^p must be between 0 and 1, got nan$"):
        _validate.ratio("p", math.nan)
    with pytest.raises(ValueError, match=r"^failure_ratio must be > 0 and <= 1, got 0$"):
        _validate.ratio("failure_ratio", 0, zero=False)
    with pytest.raises(TypeError, match=r"^p must be a number, got True$"):
        _validate.ratio("p", True)


def test_count() -> None:
    assert _validate.count("n", 0) == 0
    assert _validate.count("n", 7, minimum=7) == 7
    with pytest.raises(ValueError, match=r"^max_attempts must be >= 1, got 0$"):
        _validate.count("max_attempts", 0, minimum=1)
    for bad in (True, 2.0, "3", None):
        with pytest.raises(TypeError, match=r"^n must be an int, got "):
            _validate.count("n", bad)


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: seawall.RetryPolicy(max_attempts=0), "max_attempts"),
        (lambda: seawall.RetryPolicy(timeout=-1), "timeout"),
        (lambda: seawall.RetryPolicy(max_retry_after=None), "max_retry_after"),  # type: ignore[arg-type]
        (lambda: seawall.Backoff(multiplier=0.5), "multiplier"),
        (lambda: seawall.Backoff(base=math.inf), "base"),
        (lambda: seawall.CircuitBreaker(failure_ratio=0), "failure_ratio"),
        (lambda: seawall.CircuitBreaker(open_duration=0), "open_duration"),
        (lambda: seawall.LatencyTracker(max_buckets=1), "max_buckets"),
        (lambda: seawall.LatencyTracker(half_life=0), "half_life"),
        (lambda: seawall.VirtualClock().advance(-1), "seconds"),
    ],
)
def test_public_constructors_name_the_parameter(build: Callable[[], object], name: str) -> None:
    with pytest.raises((TypeError, ValueError), match=rf"^{name} must be "):
        build()

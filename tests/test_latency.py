"""LatencyTracker: accuracy against exact quantiles, bounded memory, decay, thread safety."""

import math
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seawall import LatencyTracker, VirtualClock


def exact(sorted_samples: list[float], q: float) -> float:
    # The lower neighbour, the rank convention the sketch documents (as DDSketch does).
    return sorted_samples[math.floor(q * (len(sorted_samples) - 1))]


@pytest.mark.volume
def test_accuracy_on_a_million_heavy_tailed_samples() -> None:
    rng = random.Random(20261130)
    # Pareto with shape 1.2 (infinite variance): a heavy tail like real service latencies,
    # scaled so that the median is about 10 ms and p99.9 several seconds.
    samples = [0.008 * rng.paretovariate(1.2) for _ in range(1_000_000)]
    tracker = LatencyTracker(half_life=None)
    record = tracker.record
    sizes = []
    for i, s in enumerate(samples):
        record(s)
        if i in (999, 99_999):
            sizes.append(tracker.bucket_count)
    sizes.append(tracker.bucket_count)
    samples.sort()
    assert tracker.count == 1_000_000
    for q in (0.5, 0.95, 0.99, 0.999):
        got = tracker.quantile(q)
        want = exact(samples, q)
        assert got is not None
        assert abs(got - want) / want <= 0.02, (q, got, want)
        # The sketch's own guarantee is tighter: its relative_accuracy (1%).
        assert abs(got - want) / want <= tracker.relative_accuracy + 1e-12, (q, got, want)
    # Memory: the buckets grow with the log of the value range, not with the number of samples.
    # From 1e5 to 1e6 samples only a few more of the rarest tail values appear.
    assert sizes[-1] <= 2048
    assert sizes[-1] < 1500
    assert sizes[-1] - sizes[1] < 200
    assert tracker.p99() == tracker.quantile(0.99)
    assert tracker.p999() == tracker.quantile(0.999)


@pytest.mark.volume
@given(
    st.lists(st.floats(min_value=1e-6, max_value=1e4, allow_nan=False), min_size=1, max_size=300),
    st.floats(min_value=0.0, max_value=1.0),
    st.sampled_from([0.001, 0.01, 0.05]),
)
@settings(max_examples=200, deadline=None)
def test_every_quantile_is_within_the_relative_accuracy(
    samples: list[float], q: float, alpha: float
) -> None:
    tracker = LatencyTracker(alpha, half_life=None)
    for s in samples:
        tracker.record(s)
    want = exact(sorted(samples), q)
    got = tracker.quantile(q)
    assert got is not None
    assert abs(got - want) <= alpha * want * (1 + 1e-9)


def test_empty_tracker_answers_none() -> None:
    tracker = LatencyTracker()
    assert tracker.quantile(0.5) is None
    assert tracker.p50() is None
    assert tracker.p95() is None
    assert tracker.count == 0
    assert tracker.bucket_count == 0
    assert tracker.suggest_timeout() is None
    assert tracker.suggest_timeout(default=2.5) == 2.5


def test_zero_and_tiny_latencies_count_as_zero() -> None:
    tracker = LatencyTracker(half_life=None, min_latency=1e-6)
    for _ in range(90):
        tracker.record(0.0)
    for _ in range(10):
        tracker.record(0.5)
    tracker.record(1e-7)
    assert tracker.quantile(0.5) == 0.0
    assert tracker.quantile(0.0) == 0.0
    assert tracker.quantile(1.0) == pytest.approx(0.5, rel=0.01)
    assert tracker.bucket_count == 2  # the zero bucket and the 0.5 s one


def test_integers_are_accepted() -> None:
    tracker = LatencyTracker(half_life=None)
    tracker.record(2)
    assert tracker.quantile(0.5) == pytest.approx(2.0, rel=0.01)


@pytest.mark.volume
def test_decay_follows_the_live_distribution() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=60.0, clock=clock)
    rng = random.Random(7)
    for _ in range(10_000):
        tracker.record(rng.uniform(0.09, 0.11))  # the old regime: about 100 ms
    assert tracker.p50() == pytest.approx(0.1, rel=0.05)
    clock.advance(600.0)  # ten half-lives later the old samples weigh 1/1024 each
    for _ in range(1_000):
        tracker.record(rng.uniform(0.9, 1.1))  # the dependency got ten times slower
    # Ten times as many old samples, but they now count for less than 1% of the weight.
    assert tracker.p50() == pytest.approx(1.0, rel=0.05)
    assert tracker.p95() == pytest.approx(1.1, rel=0.05)
    assert tracker.count == 11_000

    without_decay = LatencyTracker(half_life=None, clock=clock)
    rng = random.Random(7)
    for _ in range(10_000):
        without_decay.record(rng.uniform(0.09, 0.11))
    for _ in range(1_000):
        without_decay.record(rng.uniform(0.9, 1.1))
    assert without_decay.p50() == pytest.approx(0.1, rel=0.05)  # stuck in the past


def test_long_idle_periods_neither_overflow_nor_keep_forgotten_buckets() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=1.0, clock=clock)
    for ms in range(1, 501):
        tracker.record(ms / 1000)
    assert tracker.bucket_count > 100
    for _ in range(50):
        clock.advance(3600.0)  # an hour: weights would reach exp(2500) without rescaling
        tracker.record(0.25)
    assert tracker.bucket_count == 1
    assert tracker.quantile(0.0) == pytest.approx(0.25, rel=0.01)
    assert tracker.quantile(1.0) == pytest.approx(0.25, rel=0.01)


@pytest.mark.volume
def test_rescaling_keeps_the_quantiles() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=10.0, clock=clock)
    rng = random.Random(3)
    samples = []
    # One sample per 10 ms of virtual time for 1000 s: the exponent passes the rescale threshold
    # (60 = about 87 half-lives) several times.
    for _ in range(100_000):
        clock.advance(0.01)
        s = rng.lognormvariate(-3.0, 0.5)
        samples.append(s)
        tracker.record(s)
    # Decay only changes weights by time; this stationary stream keeps its quantiles.
    recent = sorted(samples[-20_000:])
    for q in (0.5, 0.9, 0.99):
        assert tracker.quantile(q) == pytest.approx(exact(recent, q), rel=0.05)


def test_memory_is_bounded_by_collapsing_the_lowest_buckets() -> None:
    tracker = LatencyTracker(half_life=None, max_buckets=64)
    values = [10 ** (k / 10) for k in range(-90, 40)]  # 1 ns to 10^4 s: ~1500 buckets' worth
    for v in values:
        tracker.record(v)
    assert tracker.bucket_count <= 64
    ordered = sorted(values)
    # The top of the distribution, where timeouts come from, keeps its accuracy...
    for q in (0.9, 0.99, 1.0):
        assert tracker.quantile(q) == pytest.approx(exact(ordered, q), rel=0.01)
    # ...the bottom was merged upward, so low quantiles read high, never below the truth.
    low = tracker.quantile(0.01)
    assert low is not None
    assert low >= exact(ordered, 0.01)


@pytest.mark.volume
def test_thread_safety_under_concurrent_records_and_queries() -> None:
    tracker = LatencyTracker(half_life=30.0)
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(5_000):
                tracker.record(rng.expovariate(10.0))
        except BaseException as exc:  # pragma: no cover - only on a bug
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(200):
                value = tracker.quantile(0.99)
                assert value is None or value > 0
        except BaseException as exc:  # pragma: no cover - only on a bug
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert tracker.count == 20_000
    # Exponential with mean 100 ms: p50 = ln 2 / 10.
    assert tracker.p50() == pytest.approx(math.log(2) / 10, rel=0.05)


def test_time_records_the_block_on_the_trackers_clock() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=None, clock=clock)
    with tracker.time():
        clock.advance(0.25)
    with pytest.raises(ZeroDivisionError), tracker.time():
        clock.advance(0.75)
        1 / 0  # noqa: B018
    assert tracker.count == 2
    assert tracker.quantile(0.0) == pytest.approx(0.25, rel=0.01)
    assert tracker.quantile(1.0) == pytest.approx(0.75, rel=0.01)


def test_reset_forgets_everything() -> None:
    tracker = LatencyTracker()
    tracker.record(1.0)
    tracker.reset()
    assert tracker.count == 0
    assert tracker.quantile(0.5) is None
    tracker.record(0.5)
    assert tracker.quantile(0.5) == pytest.approx(0.5, rel=0.01)
    assert "count=1" in repr(tracker)


def test_suggest_timeout_from_measured_latency() -> None:
    tracker = LatencyTracker(half_life=None)
    for ms in range(1, 1001):
        tracker.record(ms / 1000)
    p999 = tracker.quantile(0.999)
    assert p999 is not None
    assert p999 == pytest.approx(0.999, rel=0.01)
    assert tracker.suggest_timeout() == pytest.approx(p999 * 1.2)
    assert tracker.suggest_timeout(0.99, margin=0.0) == tracker.p99()
    assert tracker.suggest_timeout(maximum=0.5) == 0.5
    assert tracker.suggest_timeout(0.5, minimum=2.0) == 2.0
    assert tracker.suggest_timeout(min_samples=5000, default=3.0) == 3.0


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"relative_accuracy": 0}, ValueError, "relative_accuracy must be >= 1e-06 and < 1, got 0"),
        ({"relative_accuracy": 1.5}, ValueError, "relative_accuracy"),
        ({"relative_accuracy": "0.01"}, TypeError, "relative_accuracy must be a number"),
        ({"half_life": 0}, ValueError, "half_life must be > 0 or None, got 0"),
        ({"half_life": math.nan}, ValueError, "half_life"),
        ({"max_buckets": 1}, ValueError, "max_buckets must be >= 2, got 1"),
        ({"max_buckets": 10.0}, TypeError, "max_buckets must be an int"),
        ({"min_latency": 0}, ValueError, "min_latency must be > 0"),
        ({"clock": object()}, TypeError, "clock must implement"),
    ],
)
def test_invalid_configuration_is_rejected(
    kwargs: dict[str, object], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        LatencyTracker(**kwargs)  # type: ignore[arg-type]


def test_infinite_half_life_means_no_decay() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=math.inf, clock=clock)
    tracker.record(0.1)
    clock.advance(1e9)
    tracker.record(10.0)
    tracker.record(10.0)
    assert tracker.quantile(0.0) == pytest.approx(0.1, rel=0.01)


@pytest.mark.parametrize(
    ("value", "exc"),
    [(-0.1, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("1", TypeError)],
)
def test_record_rejects_invalid_latencies(value: object, exc: type[Exception]) -> None:
    tracker = LatencyTracker()
    with pytest.raises(exc, match="seconds must be"):
        tracker.record(value)  # type: ignore[arg-type]
    assert tracker.count == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t: t.quantile(1.5), "q must be between 0 and 1, got 1.5"),
        (lambda t: t.quantile(math.nan), "q must be between 0 and 1"),
        (lambda t: t.suggest_timeout(margin=-1), "margin must be >= 0"),
        (lambda t: t.suggest_timeout(minimum=2, maximum=1), "minimum and maximum"),
        (lambda t: t.suggest_timeout(min_samples=0), "min_samples must be >= 1, got 0"),
    ],
)
def test_invalid_query_arguments_are_rejected(call: object, match: str) -> None:
    tracker = LatencyTracker()
    tracker.record(0.1)
    with pytest.raises(ValueError, match=match):
        call(tracker)  # type: ignore[operator]


@pytest.mark.volume
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=1e-6, max_value=1e4, allow_nan=False),
            st.floats(min_value=0.0, max_value=30.0),
        ),
        min_size=1,
        max_size=200,
    ),
    st.floats(min_value=0.0, max_value=1.0),
)
@settings(max_examples=200, deadline=None)
def test_decayed_quantiles_match_the_exact_weighted_quantile(
    samples: list[tuple[float, float]], q: float
) -> None:
    # Each sample arrives after a pause; its weight is 2 ** (arrival / half_life).
    clock = VirtualClock()
    half_life = 10.0
    tracker = LatencyTracker(0.01, half_life=half_life, clock=clock)
    weighted = []
    for value, pause in samples:
        clock.advance(pause)
        tracker.record(value)
        weighted.append((value, 2.0 ** (clock.now() / half_life)))
    weighted.sort()
    total = sum(w for _, w in weighted)
    rank = q * total
    slack = 1e-9 * total
    # The exact answer is the first value whose cumulative weight passes the rank; floating-point
    # sums taken in another order may land on a neighbour when the rank sits on a boundary.
    candidates = []
    seen = 0.0
    for value, w in weighted:
        if seen <= rank + slack and seen + w > rank - slack:
            candidates.append(value)
        seen += w
    candidates.append(weighted[-1][0])  # q = 1 reads the largest
    got = tracker.quantile(q)
    assert got is not None
    assert any(abs(got - c) <= 0.01 * c * (1 + 1e-9) for c in candidates), (got, candidates)

"""The cheap paths make the decisions of the general ones.

Backoff delays come from a table and an inlined uniform draw; a policy with a timeout makes its
first attempt without a RetryState; a RetryBudget reads the clock once every few deposits on a
busy client; an AdaptiveThrottle skips its arithmetic while the probability is known to be 0.
Each is checked here against the plain definition it replaces.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable

import pytest

import seawall
from backends import Run
from seawall import (
    AdaptiveThrottle,
    Backoff,
    Budget,
    RetryBudget,
    RetryPolicy,
    Throttled,
    VirtualClock,
)

JITTERS = ["none", "full", "equal", "decorrelated"]

# The larger cases, and the second driver over the same lines, are volume (pyproject.toml).
VOLUME = pytest.mark.volume


# -- Backoff ----------------------------------------------------------------------------------


@pytest.mark.parametrize("jitter", JITTERS)
@pytest.mark.parametrize("immediate_first", [False, True])
def test_compute_draws_what_random_uniform_draws(jitter: str, immediate_first: bool) -> None:
    b = Backoff(base=0.05, multiplier=1.7, cap=3.0, step=0.01, jitter=jitter)  # type: ignore[arg-type]
    b = b.replace(immediate_first=immediate_first)
    ours, theirs = random.Random(11), random.Random(11)
    previous: float | None = None
    for n in [*range(150), 10**6]:  # past the table's end too
        raw = b.raw(n)
        if jitter == "full":
            expected = theirs.uniform(0.0, raw)
        elif jitter == "none" or raw == 0.0:
            expected = raw
        elif jitter == "equal":
            expected = theirs.uniform(raw / 2.0, raw)
        else:
            prev = b.base if previous is None or previous < b.base else previous
            expected = min(b.cap, theirs.uniform(b.base, 3.0 * prev))
        got = b.compute(n, ours, previous)
        assert got == expected, n
        previous = got


def test_the_raw_table_does_not_change_equality_or_repr() -> None:
    used, fresh = Backoff(), Backoff()
    used.compute(40)
    assert used == fresh and hash(used) == hash(fresh) and repr(used) == repr(fresh)
    with pytest.raises(ValueError, match="n must be >= 0"):
        used.compute(-1)


# -- a policy's first attempt under a timeout ------------------------------------------------


def test_first_attempt_sees_the_tighter_of_timeout_and_attempt_timeout() -> None:
    clock = VirtualClock(start=100.0)
    policy = RetryPolicy(timeout=10.0, attempt_timeout=4.0, clock=clock, hooks=())
    seen: list[float] = []

    def fn() -> str:
        seen.append(seawall.remaining())
        return "ok"

    assert policy.call(fn) == "ok"
    assert seen == [4.0]
    assert seawall.remaining() == float("inf")  # restored after the call
    with seawall.deadline(2.0, clock=clock):
        assert policy.call(fn) == "ok"  # the ambient deadline is earlier: kept as it is
        assert seen[-1] == 2.0


def test_failure_after_a_timed_first_attempt_keeps_the_call_deadline() -> None:
    clock = VirtualClock()
    events: list[seawall.RetryEvent] = []
    policy = RetryPolicy(
        max_attempts=5,
        backoff=Backoff.constant(1.0),
        timeout=2.5,
        clock=clock,
        hooks=(events.append,),
    )
    calls: list[float] = []

    def fn() -> None:
        calls.append(clock.now())
        clock.advance(0.25)
        raise ConnectionError("down")

    with pytest.raises(ConnectionError) as info:
        policy.call(fn)
    # Attempts at 0, 1.25; the wait after the second would end at 2.5 + ...: give up then.
    assert calls == [0.0, 1.25]
    assert [e.kind for e in events] == ["retry", "give_up"]
    assert events[-1].reason == "deadline"
    assert events[0].elapsed == 0.25  # measured from the start of the call, as the full path does
    assert "gave up after 2 attempts" in info.value.__notes__[-1]
    assert info.value.__context__ is None  # the first error is not chained to the last one


def test_no_time_left_raises_deadline_exceeded_before_any_attempt() -> None:
    clock = VirtualClock()
    policy = RetryPolicy(timeout=5.0, min_attempt_time=1.0, clock=clock, hooks=())
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1

    with seawall.deadline(0.5, clock=clock), pytest.raises(seawall.DeadlineExceeded):
        policy.call(fn)
    assert calls == 0


def test_async_timed_first_attempt_is_cancelled_at_its_timeout(run: Run) -> None:
    clock = VirtualClock()
    policy = RetryPolicy(
        max_attempts=2, backoff=Backoff.constant(0.0), attempt_timeout=1.0, clock=clock, hooks=()
    )
    starts: list[float] = []

    async def slow() -> str:
        starts.append(clock.now())
        if len(starts) == 1:
            await clock.asleep(5.0)  # cancelled after 1 s: a TimeoutError, retried
        return "second"

    assert run(policy.acall(slow), clock) == "second"
    assert starts == [0.0, 1.0]
    assert clock.now() == pytest.approx(1.0)


# -- RetryBudget: clock reads every `stride` deposits -------------------------------------------


def exact_window_requests(times: list[float], now: float, window: float) -> int:
    """Deposits whose slice is still in the window (the definition, counted one by one)."""
    size = window / 10
    current = int(now // size)
    return sum(1 for t in times if int(t // size) > current - 10)


@pytest.mark.parametrize(
    "per_slice", [500, pytest.param(5000, marks=VOLUME), pytest.param(40_000, marks=VOLUME)]
)
def test_budget_request_count_is_exact_or_a_little_low(per_slice: int) -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.1, min_per_second=0.0, window=10.0, clock=clock)
    deposit = RetryPolicy(budget=budget, clock=clock, hooks=())(lambda: None)
    times: list[float] = []
    rng = random.Random(4)
    for second in range(25):
        rate = per_slice if second < 15 else per_slice // 20  # then traffic falls sharply
        for _ in range(rate):
            deposit()
            times.append(clock.now())
            clock.advance(rng.uniform(0.0, 2.0 / rate))
        exact = exact_window_requests(times, clock.now(), 10.0)
        counted = budget.requests
        # Never more than the definition: the budget can only err on the strict side, by at
        # most one stride (1/1024 of the busiest recent slice) per slice boundary.
        assert counted <= exact
        assert exact - counted <= max(1, per_slice // 1024) * 10
        if per_slice < 2048:
            assert counted == exact  # a quiet client reads the clock on every deposit


@pytest.mark.volume
def test_budget_on_request_and_the_decorator_count_alike() -> None:
    clocks = VirtualClock(), VirtualClock()
    budgets = [RetryBudget(clock=c) for c in clocks]
    direct = budgets[0].on_request
    decorated = RetryPolicy(budget=budgets[1], clock=clocks[1], hooks=())(lambda: None)
    for step in range(30_000):
        direct()
        decorated()
        for c in clocks:
            c.advance(0.0007 if step % 3 else 0.0001)
    assert budgets[0].requests == budgets[1].requests
    assert budgets[0].available() == budgets[1].available()


# -- AdaptiveThrottle: admissions without arithmetic while p is 0 ------------------------------


class ReferenceThrottle:
    """The SRE-book formula over ten slices, counted plainly, drawing from its own rng."""

    def __init__(
        self, k: float, window: float, clock: VirtualClock, rng: random.Random, min_requests: int
    ) -> None:
        self.k, self.size, self.clock, self.rng = k, window / 10, clock, rng
        self.min_requests = min_requests
        # Requests and accepts per slice index, by the time they happened.
        self.request_log: collections.Counter[int] = collections.Counter()
        self.accept_log: collections.Counter[int] = collections.Counter()

    def _slice(self) -> int:
        return int(self.clock.now() // self.size)

    def in_window(self, log: collections.Counter[int]) -> int:
        current = self._slice()
        return sum(log[i] for i in range(current - 9, current + 1))

    def count_request(self) -> None:
        self.request_log[self._slice()] += 1

    def success(self) -> None:
        self.accept_log[self._slice()] += 1

    def probability(self) -> float:
        requests, accepts = self.in_window(self.request_log), self.in_window(self.accept_log)
        if requests < self.min_requests:
            return 0.0
        return max(0.0, (requests - self.k * accepts) / (requests + 1))

    def admit(self) -> bool:
        p = self.probability()
        self.count_request()
        return p == 0.0 or not self.rng.random() < p


def throttled_calls(
    throttle: AdaptiveThrottle, clock: VirtualClock, driver: str
) -> Callable[[bool], bool]:
    """A call that is answered or not: through the throttle's methods, or a decorated function
    (the inlined path). Returns whether the call was admitted."""
    if driver == "methods":

        def by_methods(answered: bool) -> bool:
            try:
                throttle.on_request()
            except Throttled:
                return False
            if answered:
                throttle.on_success()
            return True

        return by_methods
    policy = RetryPolicy(max_attempts=1, budget=throttle, clock=clock, hooks=())
    outcome: list[bool] = [False]

    @policy
    def dependency() -> None:
        if not outcome[0]:
            raise ConnectionError("not answered")

    def by_decorator(answered: bool) -> bool:
        outcome[0] = answered
        try:
            dependency()
        except Throttled:
            return False
        except ConnectionError:
            pass
        return True

    return by_decorator


@pytest.mark.parametrize("driver", ["methods", "decorator"])
@pytest.mark.parametrize("min_requests", [0, 20])
@pytest.mark.parametrize(
    "k", [pytest.param(1.0, marks=VOLUME), pytest.param(1.5, marks=VOLUME), 2.0]
)
def test_throttle_admits_exactly_as_the_formula(k: float, min_requests: int, driver: str) -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(
        k=k, window=10.0, clock=clock, rng=random.Random(9), min_requests=min_requests
    )
    reference = ReferenceThrottle(k, 10.0, clock, random.Random(9), min_requests)
    call = throttled_calls(throttle, clock, driver)
    health = random.Random(2)
    decisions: list[bool] = []
    for step in range(6000):
        # Healthy, then an outage (2% answered), then slow recovery: every regime of the formula
        # (with k = 1, even 3% failures make the probability positive now and then).
        answered = health.random() < (0.02 if 1500 <= step < 3500 else 0.97)
        admitted = call(answered)
        assert admitted == reference.admit(), step
        decisions.append(admitted)
        if admitted and answered:
            reference.success()
        clock.advance(0.01)
    assert decisions[3000:3500].count(False) > 250  # the outage did throttle
    if k > 1:
        assert all(decisions[:1500])  # healthy traffic never is


def test_throttle_accept_after_the_slice_ended_counts_in_the_next_one() -> None:
    # A quiet client's call that starts before a slice ends and is answered after it.
    clock = VirtualClock()
    throttle = AdaptiveThrottle(window=10.0, clock=clock, min_requests=0)
    policy = RetryPolicy(budget=throttle, clock=clock, hooks=())
    slow = policy(lambda: clock.advance(1.5))
    clock.advance(0.5)
    slow()  # requested at 0.5 (slice 0), answered at 2.0 (slice 2)
    clock.advance(8.5)  # 10.5: slice 0 has left the window, slice 2 has not
    assert (throttle.requests, throttle.accepts) == (0, 1)


@pytest.mark.parametrize("driver", [pytest.param("methods", marks=VOLUME), "decorator"])
def test_throttle_on_a_busy_client_errs_by_at_most_a_stride_per_slice(driver: str) -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(k=2.0, window=10.0, clock=clock, rng=random.Random(5))
    call = throttled_calls(throttle, clock, driver)
    reference = ReferenceThrottle(2.0, 10.0, clock, random.Random(5), 20)
    health = random.Random(6)
    per_slice = 6000  # slices of 1 s: strides of about 5 after the first 2048 calls of each
    rejected = 0
    for second in range(18):
        answered_share = 0.1 if second >= 5 else 0.99  # an outage from 5 s on
        for _ in range(per_slice):
            answered = health.random() < answered_share
            admitted = call(answered)
            rejected += not admitted
            # The reference sees the same traffic: its counts, not its draws, are compared
            # (once one decision differs, the two draw sequences part ways).
            reference.count_request()
            if admitted and answered:
                reference.success()
            clock.advance(1.0 / per_slice)
        bound = (per_slice // 1024) * 10  # a stride per slice boundary in the window
        for counted, exact in [
            (throttle.requests, reference.in_window(reference.request_log)),
            (throttle.accepts, reference.in_window(reference.accept_log)),
        ]:
            assert counted <= exact  # expired a little early, never kept too long
            assert exact - counted <= bound, second
        if second < 5:
            assert rejected == 0  # healthy traffic is never throttled
        assert throttle.rejection_probability() == pytest.approx(reference.probability(), abs=1e-3)
    assert rejected > 20_000  # the outage was throttled


def _hammer(throttle: AdaptiveThrottle, clock: VirtualClock) -> Callable[[], None]:
    def step() -> None:
        throttle.on_request()
        throttle.on_success()
        clock.advance(0.001)

    return step


@pytest.mark.volume
def test_throttle_healthy_traffic_is_never_throttled_across_slices() -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(window=1.0, clock=clock, rng=random.Random(1))
    step = _hammer(throttle, clock)
    for _ in range(20_000):  # 20 windows of 1 s at 1000 calls a second
        step()
    assert throttle.rejection_probability() == 0.0
    assert throttle.requests == throttle.accepts


# -- RetryBudget: a busy client's first slice ---------------------------------------------------


class CountingClock(VirtualClock):
    """A virtual clock that counts how often it is read."""

    reads = 0

    def now(self) -> float:
        self.reads += 1
        return super().now()


@pytest.mark.parametrize("driver", [pytest.param("methods", marks=VOLUME), "decorator"])
def test_budget_amortises_clock_reads_within_a_long_first_slice(driver: str) -> None:
    # A busy client on a long window: no slice ends for a long time, yet after 2048 deposits in
    # the slice, the clock is read only once every 1/1024 of the slice's deposits so far.
    clock = CountingClock()
    budget = RetryBudget(ratio=0.1, min_per_second=0.0, window=3600.0, clock=clock)
    call = (
        budget.on_request
        if driver == "methods"
        else RetryPolicy(budget=budget, clock=clock, hooks=())(lambda: None)
    )
    times: list[float] = []
    for _ in range(300_000):  # 360 s slices: the first one ends after 240,000 deposits
        call()
        times.append(clock.now())
        clock.advance(0.0015)
    clock.reads -= len(times)  # the test's own reads
    assert clock.reads < 30_000  # far fewer than one a deposit
    exact = exact_window_requests(times, clock.now(), 3600.0)
    assert exact - 240 <= budget.requests <= exact  # at most a stride: 0.1% of the slice


# -- TokenBucket and RetryQuota: the decorator's inlined success path ---------------------------


def _mixed_traffic(seed: int) -> list[int]:
    """Failures before success per call: mostly 0, bursts of failing calls."""
    rng = random.Random(seed)
    return [3 if 300 <= i < 360 else (1 if rng.random() < 0.1 else 0) for i in range(1000)]


@pytest.mark.parametrize(
    "make", [lambda: seawall.TokenBucket(max_tokens=10, token_ratio=0.1), seawall.RetryQuota]
)
def test_decorator_leaves_bucket_and_quota_as_the_methods_do(make: Callable[[], Budget]) -> None:
    budgets = [make(), make()]
    clock = VirtualClock()
    policies = [
        RetryPolicy(max_attempts=3, backoff=Backoff.constant(0.0), budget=b, clock=clock, hooks=())
        for b in budgets
    ]

    def level(budget: Budget) -> float:
        return budget.tokens if isinstance(budget, seawall.TokenBucket) else budget.available  # type: ignore[attr-defined]

    full = lowest = level(budgets[0])
    for failures in _mixed_traffic(3):
        left = [failures, failures]

        def attempt(i: int, left: list[int] = left) -> str:
            if left[i]:
                left[i] -= 1
                raise ConnectionError("flaky")
            return "ok"

        outcomes = []
        for i, how in enumerate(["call", "decorator"]):
            try:
                if how == "call":
                    outcomes.append(policies[i].call(attempt, i))  # the budget's methods
                else:
                    outcomes.append(policies[i](attempt)(i))  # the inlined success path
            except ConnectionError:
                outcomes.append("failed")
        assert outcomes[0] == outcomes[1]
        assert level(budgets[0]) == level(budgets[1])
        lowest = min(lowest, level(budgets[0]))
    assert lowest < full  # the bursts did spend some: both paths refilled alike

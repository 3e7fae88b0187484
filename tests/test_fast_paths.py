"""The cheap paths make the decisions of the general ones.

Backoff delays come from a table and an inlined uniform draw; a policy with a timeout makes its
first attempt without a RetryState; a RetryBudget reads the clock once every few deposits on a
busy client; an AdaptiveThrottle skips its arithmetic while the probability is known to be 0.
Each is checked here against the plain definition it replaces.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

import seawall
from seawall import AdaptiveThrottle, Backoff, RetryBudget, RetryPolicy, Throttled, VirtualClock

JITTERS = ["none", "full", "equal", "decorrelated"]


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


def test_async_timed_first_attempt_is_cancelled_at_its_timeout() -> None:
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

    assert seawall.testing.run(policy.acall(slow), clock) == "second"
    assert starts == [0.0, 1.0]


# -- RetryBudget: clock reads every `stride` deposits -------------------------------------------


def exact_window_requests(times: list[float], now: float, window: float) -> int:
    """Deposits whose slice is still in the window (the definition, counted one by one)."""
    size = window / 10
    current = int(now // size)
    return sum(1 for t in times if int(t // size) > current - 10)


@pytest.mark.parametrize("per_slice", [500, 5000, 40_000])
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

    def __init__(self, k: float, window: float, clock: VirtualClock, rng: random.Random) -> None:
        self.k, self.size, self.clock, self.rng = k, window / 10, clock, rng
        self.requests: list[float] = []
        self.accepts: list[float] = []

    def _in_window(self, times: list[float]) -> int:
        current = int(self.clock.now() // self.size)
        return sum(1 for t in times if int(t // self.size) > current - 10)

    def admit(self) -> bool:
        requests = self._in_window(self.requests)
        accepts = self._in_window(self.accepts)
        self.requests.append(self.clock.now())
        excess = requests - self.k * accepts
        if excess <= 0:
            return True
        return not self.rng.random() < excess / (requests + 1)

    def success(self) -> None:
        self.accepts.append(self.clock.now())


@pytest.mark.parametrize("k", [1.0, 1.5, 2.0])
def test_throttle_admits_exactly_as_the_formula(k: float) -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(k=k, window=10.0, clock=clock, rng=random.Random(9))
    reference = ReferenceThrottle(k, 10.0, clock, random.Random(9))
    health = random.Random(2)
    decisions: list[bool] = []
    for step in range(6000):
        # Healthy, then an outage (2% answered), then slow recovery: every regime of the formula
        # (with k = 1, even 3% failures make the probability positive now and then).
        answered = 0.02 if 1500 <= step < 3500 else 0.97
        try:
            throttle.on_request()
            admitted = True
        except Throttled:
            admitted = False
        assert admitted == reference.admit(), step
        decisions.append(admitted)
        if admitted and health.random() < answered:
            throttle.on_success()
            reference.success()
        clock.advance(0.01)
    assert decisions[3000:3500].count(False) > 250  # the outage did throttle
    if k > 1:
        assert all(decisions[:1500])  # healthy traffic never is


def _hammer(throttle: AdaptiveThrottle, clock: VirtualClock) -> Callable[[], None]:
    def step() -> None:
        throttle.on_request()
        throttle.on_success()
        clock.advance(0.001)

    return step


def test_throttle_healthy_traffic_is_never_throttled_across_slices() -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(window=1.0, clock=clock, rng=random.Random(1))
    step = _hammer(throttle, clock)
    for _ in range(20_000):  # 20 windows of 1 s at 1000 calls a second
        step()
    assert throttle.rejection_probability() == 0.0
    assert throttle.requests == throttle.accepts

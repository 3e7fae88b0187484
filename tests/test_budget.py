"""Retry budgets: RetryBudget, TokenBucket, RetryQuota, AdaptiveThrottle, alone and in policies."""

from __future__ import annotations

import contextlib
import math
import random
import sys
import threading
from collections.abc import Callable, Iterator

import anyio
import pytest

import seawall
from backends import Run
from seawall import (
    AdaptiveThrottle,
    Backoff,
    Budget,
    Overloaded,
    RetryBudget,
    RetryEvent,
    RetryPolicy,
    RetryQuota,
    Throttled,
    TokenBucket,
    VirtualClock,
)

FAST = Backoff(base=0.01, multiplier=2.0, cap=0.1)


class Events:
    """A hook that keeps the events it receives."""

    def __init__(self) -> None:
        self.events: list[RetryEvent] = []

    def __call__(self, event: RetryEvent) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[RetryEvent]:
        return [e for e in self.events if e.kind == kind]


class FixedRandom(random.Random):
    """A ``random.Random`` whose draws are all *value*: makes throttling decisions certain."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.fixture
def contention() -> Iterator[None]:
    """Switch threads very often, so that unsafe read-modify-write updates would lose counts."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def run_threads(n: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(n)

    def worker(i: int) -> None:
        barrier.wait()
        target(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- every budget is a Budget ----------------------------------------------------------------


@pytest.mark.parametrize(
    "budget",
    [RetryBudget(), TokenBucket(), RetryQuota.aws_standard(), AdaptiveThrottle()],
    ids=repr,
)
def test_implements_budget_protocol_and_policies_accept_it(budget: Budget) -> None:
    assert isinstance(budget, Budget)
    policy = RetryPolicy(budget=budget, hooks=())
    assert policy.call(lambda: 7) == 7


def test_throttled_is_overloaded() -> None:
    err = Throttled(0.25)
    assert isinstance(err, Overloaded)
    assert seawall.is_permanent(err)
    assert err.probability == 0.25
    assert "25%" in str(err)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "name"),
    [
        (lambda: RetryBudget(ratio=0), "ratio"),
        (lambda: RetryBudget(ratio=-0.5), "ratio"),
        (lambda: RetryBudget(ratio=math.nan), "ratio"),
        (lambda: RetryBudget(ratio=math.inf), "ratio"),
        (lambda: RetryBudget(window=0), "window"),
        (lambda: RetryBudget(window=-1), "window"),
        (lambda: RetryBudget(window=math.nan), "window"),
        (lambda: RetryBudget(min_per_second=-1), "min_per_second"),
        (lambda: RetryBudget(min_per_second=math.nan), "min_per_second"),
        (lambda: TokenBucket(max_tokens=0), "max_tokens"),
        (lambda: TokenBucket(max_tokens=-10), "max_tokens"),
        (lambda: TokenBucket(max_tokens=math.nan), "max_tokens"),
        (lambda: TokenBucket(token_ratio=0), "token_ratio"),
        (lambda: TokenBucket(token_ratio=0.0001), "token_ratio"),
        (lambda: TokenBucket(token_ratio=math.nan), "token_ratio"),
        (lambda: AdaptiveThrottle(k=0.5), "k"),
        (lambda: AdaptiveThrottle(k=0), "k"),
        (lambda: AdaptiveThrottle(k=math.nan), "k"),
        (lambda: AdaptiveThrottle(window=0), "window"),
        (lambda: AdaptiveThrottle(min_requests=-1), "min_requests"),
        (lambda: RetryQuota(capacity=0), "capacity"),
        (lambda: RetryQuota(retry_cost=-1), "retry_cost"),
        (lambda: RetryQuota(timeout_cost=-1), "timeout_cost"),
        (lambda: RetryQuota(success_reward=-1), "success_reward"),
    ],
)
def test_bad_values_raise_value_error_naming_the_parameter(
    factory: Callable[[], object], name: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must "):
        factory()


@pytest.mark.parametrize(
    ("factory", "name"),
    [
        (lambda: RetryBudget(ratio="0.1"), "ratio"),  # type: ignore[arg-type]
        (lambda: RetryBudget(ratio=True), "ratio"),
        (lambda: RetryBudget(window=None), "window"),  # type: ignore[arg-type]
        (lambda: RetryBudget(clock=object()), "clock"),  # type: ignore[arg-type]
        (lambda: TokenBucket(max_tokens="10"), "max_tokens"),  # type: ignore[arg-type]
        (lambda: AdaptiveThrottle(k="2"), "k"),  # type: ignore[arg-type]
        (lambda: AdaptiveThrottle(rng=42), "rng"),  # type: ignore[arg-type]
        (lambda: AdaptiveThrottle(clock="now"), "clock"),  # type: ignore[arg-type]
        (lambda: AdaptiveThrottle(min_requests=2.5), "min_requests"),  # type: ignore[arg-type]
        (lambda: AdaptiveThrottle(min_requests=True), "min_requests"),
        (lambda: RetryQuota(capacity=500.0), "capacity"),  # type: ignore[arg-type]
        (lambda: RetryQuota(retry_cost=True), "retry_cost"),
        (lambda: RetryQuota(is_timeout=3), "is_timeout"),  # type: ignore[arg-type]
    ],
)
def test_wrong_types_raise_type_error_naming_the_parameter(
    factory: Callable[[], object], name: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{name} must "):
        factory()


# -- RetryBudget -----------------------------------------------------------------------------


def test_retry_budget_allows_ratio_of_requests() -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.1, min_per_second=0, window=10, clock=clock)
    for _ in range(30):
        budget.on_request()
    assert budget.available() == 3
    assert [budget.allow_retry(ConnectionError()) for _ in range(4)] == [True] * 3 + [False]
    assert (budget.requests, budget.retries) == (30, 3)
    # A refusal withdraws nothing: another deposit pays for a tenth of a retry, not yet one.
    budget.on_request()
    assert budget.available() == 0
    for _ in range(9):
        budget.on_request()
    assert budget.allow_retry(ConnectionError())


def test_retry_budget_floor_needs_no_deposits() -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.1, min_per_second=2, window=5, clock=clock)
    # 2 retries a second over a 5 s window: 10 retries with no traffic at all.
    allowed = sum(budget.allow_retry(ConnectionError()) for _ in range(20))
    assert allowed == 10


def test_retry_budget_deposits_and_withdrawals_expire_with_the_window() -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=1.0, min_per_second=0, window=10, clock=clock)
    for _ in range(10):
        budget.on_request()
    clock.advance(5)
    for _ in range(10):
        budget.on_request()
    assert budget.requests == 20
    assert budget.allow_retry(ConnectionError())
    clock.advance(5.5)  # t=10.5: the deposits of t=0 left the window; those of t=5 remain
    assert (budget.requests, budget.retries) == (10, 1)
    clock.advance(5)  # t=15.5: everything left the window
    assert (budget.requests, budget.retries, budget.available()) == (0, 0, 0)
    assert not budget.allow_retry(ConnectionError())


def test_retry_budget_memory_is_bounded_and_long_gaps_clear_it() -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.5, min_per_second=0, window=1, clock=clock)
    for _ in range(1000):
        budget.on_request()
        clock.advance(0.013)
    # 13 s of traffic, but only the last second is kept, in ten slices.
    assert len(budget._marks) == len(budget._retries) == 10
    assert 60 <= budget.requests <= 77
    clock.advance(3600)
    assert budget.requests == 0
    budget.on_request()
    budget.on_request()
    assert budget.available() == 1


def test_retry_budget_works_with_the_system_clock() -> None:
    budget = RetryBudget(ratio=0.5, min_per_second=0)
    budget.on_request()
    budget.on_request()
    assert budget.allow_retry(ConnectionError())
    assert not budget.allow_retry(ConnectionError())
    assert "ratio=0.5" in repr(budget)


@pytest.mark.volume
def test_retry_budget_no_lost_updates_with_8_threads(contention: None) -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.5, min_per_second=0, window=10, clock=clock)
    per_thread = 5000

    def deposit(_: int) -> None:
        for _ in range(per_thread):
            budget.on_request()

    run_threads(8, deposit)
    assert budget.requests == 8 * per_thread

    allowed = [0] * 8

    def withdraw(i: int) -> None:
        for _ in range(per_thread):
            if budget.allow_retry(ConnectionError()):
                allowed[i] += 1

    run_threads(8, withdraw)
    # Exactly half the deposits were withdrawn: none lost, none granted twice.
    assert sum(allowed) == 8 * per_thread // 2
    assert budget.retries == 8 * per_thread // 2
    assert budget.available() == 0


def test_retry_budget_no_lost_updates_with_threads_and_sliding_window(contention: None) -> None:
    # Threads deposit and withdraw while the window slides (each thread moves time on).
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.25, min_per_second=0, window=1000, clock=clock)
    lock = threading.Lock()
    allowed = [0] * 8

    def work(i: int) -> None:
        for n in range(2000):
            budget.on_request()
            if n % 4 == 3 and budget.allow_retry(ConnectionError()):
                allowed[i] += 1
            if n % 100 == 0:
                with lock:
                    clock.advance(1.0)

    run_threads(8, work)
    # 8 x 20 advances of 1 s = 160 s: nothing expired from the 1000 s window.
    assert budget.requests == 8 * 2000
    assert budget.retries == sum(allowed)
    assert sum(allowed) <= 0.25 * 8 * 2000


def storm(
    run: Run,
    make_budget: Callable[[VirtualClock], Budget | None],
    requests: int,
    rate: float,
    failure_rate: float = 1.0,
) -> tuple[int, float, Events]:
    """*requests* calls arriving at *rate* per second on virtual time; each attempt fails with
    probability *failure_rate*. Returns the dependency's call count, the elapsed virtual time and
    the policy's events."""
    clock = VirtualClock()
    budget = make_budget(clock)
    events = Events()
    faults = random.Random(7)
    calls = 0

    async def dependency() -> str:
        nonlocal calls
        calls += 1
        if faults.random() < failure_rate:
            raise ConnectionError("down")
        return "ok"

    policy = RetryPolicy(
        max_attempts=3,
        backoff=Backoff(base=0.05, cap=1.0),
        budget=budget,
        clock=clock,
        rng=random.Random(1),
        hooks=(events,),
    )

    async def one(start: float) -> None:
        await anyio.sleep(start)
        try:
            await policy.acall(dependency)
        except ConnectionError:
            assert failure_rate > 0

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(requests):
                tg.start_soon(one, i / rate)

    run(main(), clock)
    return calls, clock.now(), events


@pytest.mark.volume
def test_proof_without_budget_a_dead_dependency_sees_3x(run: Run) -> None:
    calls, _, events = storm(run, lambda clock: None, 10_000, 100.0)
    assert calls == 30_000
    assert not events.kinds("budget_exhausted")


@pytest.mark.volume
def test_proof_retry_budget_bounds_amplification_to_ratio_plus_floor(run: Run) -> None:
    requests = 10_000
    budgets: list[RetryBudget] = []

    def make(clock: VirtualClock) -> RetryBudget:
        budgets.append(RetryBudget(clock=clock))  # the defaults, as docs/budgets.md shows
        return budgets[0]

    calls, elapsed, events = storm(run, make, requests, 100.0)
    budget = budgets[0]
    floor = budget.min_per_second * (elapsed + budget.window)
    assert requests <= calls <= 1.1 * requests + floor
    assert calls < 0.5 * 30_000  # vs. 30,000 without a budget
    # The budget was the binding limit: it refused many retries, and fast (no sleep after).
    refused = events.kinds("budget_exhausted")
    assert len(refused) > requests // 2
    assert all(e.delay == 0.0 for e in refused)
    retries = len(events.kinds("retry"))
    assert calls == requests + retries


@pytest.mark.volume
def test_proof_healthy_dependency_with_1_percent_failures_is_never_refused(run: Run) -> None:
    requests = 10_000
    calls, _, events = storm(
        run, lambda clock: RetryBudget(clock=clock), requests, 100.0, failure_rate=0.01
    )
    assert not events.kinds("budget_exhausted")
    retries = events.kinds("retry")
    assert 50 <= len(retries) <= 200  # about 1% of 10,000, all granted
    assert calls == requests + len(retries)


def test_budget_exhausted_fails_fast_with_the_last_error() -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.1, min_per_second=0, clock=clock)
    events = Events()
    policy = RetryPolicy(max_attempts=5, backoff=FAST, budget=budget, clock=clock, hooks=(events,))
    errors: list[ConnectionError] = []

    def dependency() -> None:
        errors.append(ConnectionError(f"attempt {len(errors) + 1}"))
        raise errors[-1]

    with pytest.raises(ConnectionError) as info:
        policy.call(dependency)
    assert info.value is errors[-1]
    assert len(errors) == 1  # 1 deposit pays for 0.1 retry: refused at once
    assert clock.sleeps == []  # nothing slept
    assert [e.kind for e in events.events] == ["budget_exhausted", "give_up"]
    assert events.events[-1].reason == "budget"


def test_shared_budget_across_policies() -> None:
    clock = VirtualClock()
    budget = RetryBudget(ratio=0.5, min_per_second=0, clock=clock)
    a = RetryPolicy(max_attempts=3, backoff=FAST, budget=budget, clock=clock, hooks=())
    b = RetryPolicy(max_attempts=3, backoff=FAST, budget=budget, clock=clock, hooks=())
    for _ in range(4):
        a.call(lambda: None)
        b.call(lambda: None)
    counter = [0]
    # 8 deposits at ratio 0.5 pay for 4 retries, whichever policy asks; the floor is 0.
    # Each failing call deposits too: 4 calls = 12 deposits in all = 6 retries.
    for policy in (a, b, a, b):
        with pytest.raises(ConnectionError):
            policy.call(always_failing(counter))
    assert counter[0] == 4 + 6
    assert budget.retries == 6


def always_failing(counter: list[int]) -> Callable[[], None]:
    def dependency() -> None:
        counter[0] += 1
        raise ConnectionError("down")

    return dependency


# -- TokenBucket -----------------------------------------------------------------------------


def test_token_bucket_grpc_semantics() -> None:
    bucket = TokenBucket(max_tokens=10, token_ratio=0.1)
    assert bucket.tokens == 10.0
    for _ in range(4):
        bucket.on_failure(ConnectionError())
    assert bucket.tokens == 6.0
    assert bucket.allow_retry(ConnectionError())  # 6 > 10/2
    bucket.on_failure(ConnectionError())
    assert bucket.tokens == 5.0
    assert not bucket.allow_retry(ConnectionError())  # refused at exactly half
    bucket.on_success()
    assert bucket.tokens == 5.1  # thousandths: exact, no float drift
    assert bucket.allow_retry(ConnectionError())
    for _ in range(100):
        bucket.on_success()
    assert bucket.tokens == 10.0  # capped at max_tokens
    for _ in range(50):
        bucket.on_failure(ConnectionError())
    assert bucket.tokens == 0.0  # never below zero
    for _ in range(51):
        bucket.on_success()
    assert bucket.tokens == 5.1
    assert "tokens=5.1" in repr(bucket)


@pytest.mark.parametrize(
    ("ratio", "given_back"),
    [(0.5466, 0.546), (1.005, 1.005), (0.1, 0.1), (0.0019, 0.001), (2, 2.0), (0.29, 0.29)],
)
def test_token_bucket_cuts_off_decimals_beyond_the_third_as_grpc(
    ratio: float, given_back: float
) -> None:
    # gRPC parses tokenRatio from its decimal text into thousandths, digits beyond the third
    # cut off; 1.005 * 1000 is 1004.999... in floating point, which must still give 1005.
    bucket = TokenBucket(max_tokens=10, token_ratio=ratio)
    for _ in range(10):
        bucket.on_failure(ConnectionError())
    bucket.on_success()
    assert bucket.tokens == given_back


def test_token_bucket_allow_retry_takes_nothing() -> None:
    bucket = TokenBucket(max_tokens=4, token_ratio=0.5)
    assert all(bucket.allow_retry(ConnectionError()) for _ in range(100))
    assert bucket.tokens == 4.0


def test_token_bucket_in_a_policy_stops_retries_of_a_dead_dependency() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(max_tokens=10, token_ratio=0.1)
    events = Events()
    policy = RetryPolicy(max_attempts=3, backoff=FAST, budget=bucket, clock=clock, hooks=(events,))
    counter = [0]
    for _ in range(100):
        with pytest.raises(ConnectionError):
            policy.call(always_failing(counter))
    # Call 1: 10 -> 9 (retry), 8 (retry), 7 (max_attempts). Call 2: 6 (retry), 5 (refused:
    # 5 <= 10/2). From then on every failure finds the bucket at or below half: one attempt.
    assert counter[0] == 3 + 2 + 98
    assert len(events.kinds("budget_exhausted")) == 99
    assert bucket.tokens == 0.0
    # Recovery: successes refill it, 0.1 at a time; retries resume above half (51 successes).
    for _ in range(51):
        policy.call(lambda: None)
    assert bucket.allow_retry(ConnectionError())


@pytest.mark.volume
def test_token_bucket_no_lost_updates_with_8_threads(contention: None) -> None:
    bucket = TokenBucket(max_tokens=1000, token_ratio=0.001)

    def fail(_: int) -> None:
        for _ in range(50):
            bucket.on_failure(ConnectionError())

    def succeed(_: int) -> None:
        for _ in range(2000):
            bucket.on_success()

    run_threads(8, fail)
    assert bucket.tokens == 1000 - 8 * 50
    run_threads(8, succeed)
    assert bucket.tokens == 1000 - 8 * 50 + 8 * 2000 * 0.001


# -- RetryQuota (AWS SDK standard mode) ------------------------------------------------------


class ReadTimeout(Exception):
    """Like a client library's timeout class that does not derive from TimeoutError."""


def test_retry_quota_aws_standard_is_todays_botocore() -> None:
    quota = RetryQuota.aws_standard()
    assert (quota.capacity, quota.retry_cost, quota.success_reward) == (500, 14, 1)
    assert quota.allow_retry(ConnectionError())
    assert quota.available == 486
    quota.on_failure(ConnectionError())
    assert quota.allow_retry(TimeoutError())  # no separate timeout cost
    assert quota.available == 472

    class ThrottlingException(Exception):
        pass

    assert quota.allow_retry(ThrottlingException())  # throttling costs 5
    assert quota.available == 467
    quota.on_success()  # refunds the latest retry's cost, 5
    assert quota.available == 472
    quota.on_answer(ValueError("404"))  # an answer refunds nothing
    assert quota.available == 472


def test_retry_quota_per_error_cost() -> None:
    quota = RetryQuota(capacity=100, cost=lambda e: 50 if isinstance(e, KeyError) else 1)
    assert quota.allow_retry(ConnectionError())
    assert quota.available == 99
    assert quota.allow_retry(KeyError())
    assert quota.available == 49
    assert not quota.allow_retry(KeyError())
    with pytest.raises(TypeError, match="cost"):
        RetryQuota(cost=5)  # type: ignore[arg-type]


def test_retry_quota_aws_standard_legacy_values() -> None:
    quota = RetryQuota.aws_standard_legacy()
    assert (quota.capacity, quota.retry_cost, quota.timeout_cost, quota.success_reward) == (
        500,
        5,
        10,
        1,
    )
    assert quota.available == 500
    assert quota.allow_retry(ConnectionError())
    assert quota.available == 495
    quota.on_failure(ConnectionError())
    assert quota.allow_retry(TimeoutError())
    assert quota.available == 485
    quota.on_failure(TimeoutError())
    assert quota.allow_retry(ReadTimeout())  # recognised by its class name
    assert quota.available == 475
    quota.on_success()  # refunds the latest retry's cost, 10
    assert quota.available == 485
    quota.on_success()  # a first-attempt success: +1
    assert quota.available == 486
    assert "available=486" in repr(quota)


def test_retry_quota_custom_timeout_predicate() -> None:
    quota = RetryQuota(capacity=100, is_timeout=lambda e: isinstance(e, KeyError))
    assert quota.allow_retry(KeyError())
    assert quota.available == 90
    quota.on_failure(KeyError())
    assert quota.allow_retry(TimeoutError())
    assert quota.available == 85


def test_retry_quota_in_a_policy_refunds_successful_retries() -> None:
    clock = VirtualClock()
    quota = RetryQuota.aws_standard_legacy()
    policy = RetryPolicy(max_attempts=3, backoff=FAST, budget=quota, clock=clock, hooks=())
    outcomes: Iterator[Exception | str] = iter([ConnectionError(), TimeoutError(), "ok"])

    def flaky() -> str:
        item = next(outcomes)
        if isinstance(item, Exception):
            raise item
        return item

    assert policy.call(flaky) == "ok"
    # Retry 1 cost 5 (lost: it failed), retry 2 cost 10 (refunded: it succeeded).
    assert quota.available == 495


def test_retry_quota_stops_retries_after_capacity_is_spent() -> None:
    clock = VirtualClock()
    quota = RetryQuota.aws_standard_legacy()
    events = Events()
    policy = RetryPolicy(max_attempts=3, backoff=FAST, budget=quota, clock=clock, hooks=(events,))
    counter = [0]
    for _ in range(200):
        with pytest.raises(ConnectionError):
            policy.call(always_failing(counter))
    # 500 tokens pay for 100 retries of cost 5; each call uses two: 50 calls retry, 150 do not.
    assert counter[0] == 200 + 100
    assert quota.available == 0
    assert len(events.kinds("budget_exhausted")) == 150


def test_retry_quota_refunds_the_right_call_across_tasks(run: Run) -> None:
    quota = RetryQuota(capacity=100)
    for _ in range(4):  # spend 20 tokens on retries that failed
        assert quota.allow_retry(ConnectionError())
        quota.on_failure(ConnectionError())
    assert quota.available == 80
    clock = VirtualClock()
    policy = RetryPolicy(max_attempts=2, backoff=FAST, budget=quota, clock=clock, hooks=())
    attempts = 0
    results: list[str] = []

    async def main() -> None:
        step = anyio.Event()

        async def retried() -> str:
            nonlocal attempts
            attempts += 1
            if attempts == 1:
                raise ConnectionError("first attempt fails")
            await step.wait()  # let the other task succeed while this retry holds its cost
            return "retried"

        async def plain() -> str:
            step.set()
            return "plain"

        async def retried_call() -> None:
            results.append(await policy.acall(retried))

        async with anyio.create_task_group() as tg:
            tg.start_soon(retried_call)
            await anyio.sleep(0.2)  # the retry is in flight (its cost withdrawn)
            assert quota.available == 75
            # Not a retry: +1, not the other call's refund.
            assert await policy.acall(plain) == "plain"
            assert quota.available == 76
        assert results == ["retried"]  # refunds its own 5
        assert quota.available == 81

    run(main(), clock)
    assert attempts == 2


def test_retry_quota_forgets_a_cost_left_by_an_interrupted_call() -> None:
    quota = RetryQuota(capacity=100)
    assert quota.allow_retry(ConnectionError())  # then the call ends without an outcome
    quota.on_request()  # the next call starts
    quota.on_success()
    assert quota.available == 96  # +1 for a first-attempt success, no refund of 5


# -- AdaptiveThrottle ------------------------------------------------------------------------


def test_adaptive_throttle_probability_formula() -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(
        k=2, window=60, clock=clock, rng=FixedRandom(0.9999), min_requests=0
    )
    for _ in range(10):
        throttle.on_request()
    for _ in range(3):
        throttle.on_success()
    assert (throttle.requests, throttle.accepts) == (10, 3)
    # max(0, (requests - k * accepts) / (requests + 1)), SRE book chapter 21.
    assert throttle.rejection_probability() == (10 - 2 * 3) / 11
    for _ in range(2):
        throttle.on_success()
    assert throttle.rejection_probability() == 0.0


def test_adaptive_throttle_rejects_locally_with_throttled() -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(k=2, window=60, clock=clock, rng=FixedRandom(0.0), min_requests=0)
    throttle.on_request()  # p = 0 for the very first request: admitted
    with pytest.raises(Throttled) as info:
        throttle.on_request()
    assert info.value.probability == 1 / 2
    assert throttle.requests == 2  # a rejected request still counts as a request
    assert not throttle.allow_retry(ConnectionError())  # retries are requests too
    assert throttle.requests == 3


def test_adaptive_throttle_rejects_nothing_until_min_requests_are_counted() -> None:
    # A client starts 30 calls at once: none has been answered when the later ones start.
    clock = VirtualClock()
    throttle = AdaptiveThrottle(k=2, window=60, clock=clock, rng=FixedRandom(0.0))
    assert throttle.min_requests == 20
    for _ in range(20):
        throttle.on_request()  # fewer than 20 requests before each: admitted
    assert throttle.rejection_probability() == pytest.approx(20 / 21)
    with pytest.raises(Throttled) as info:
        throttle.on_request()  # 20 requests, no accept: the formula applies
    assert info.value.probability == 20 / 21
    # The plain formula rejects the second request already (half of the time).
    plain = AdaptiveThrottle(k=2, window=60, clock=clock, rng=FixedRandom(0.0), min_requests=0)
    plain.on_request()
    with pytest.raises(Throttled):
        plain.on_request()


def test_adaptive_throttle_floor_applies_again_after_a_silence() -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(k=2, window=10, clock=clock, rng=FixedRandom(0.0), min_requests=5)
    for _ in range(30):
        with pytest.raises(Throttled) if throttle.requests >= 5 else contextlib.nullcontext():
            throttle.on_request()  # an outage: nothing is ever accepted
    assert throttle.rejection_probability() > 0.9
    clock.advance(10.0)  # the window slides past all of it
    assert throttle.rejection_probability() == 0.0
    for _ in range(5):
        throttle.on_request()  # a fresh window: the first five are admitted
    assert not throttle.allow_retry(ConnectionError())  # the sixth request is not
    assert "min_requests=5" in repr(throttle)


def test_adaptive_throttle_in_a_policy_does_not_touch_the_dependency() -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(clock=clock, rng=FixedRandom(0.0), min_requests=0)
    events = Events()
    policy = RetryPolicy(
        max_attempts=3, backoff=FAST, budget=throttle, clock=clock, hooks=(events,)
    )
    outer = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=())
    calls = 0

    def shedding() -> None:
        nonlocal calls
        calls += 1
        raise Overloaded()

    with pytest.raises(Overloaded):
        policy.call(shedding)
    assert calls == 1  # Overloaded is never retried
    assert [(e.kind, e.reason) for e in events.events] == [("give_up", "not_retryable")]
    with pytest.raises(Throttled):
        outer.call(policy.call, shedding)
    assert calls == 1  # rejected locally, and the outer policy does not retry Throttled either


@pytest.mark.volume
def test_adaptive_throttle_sheds_during_an_outage_and_recovers() -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(k=2, window=120, clock=clock, rng=random.Random(3))
    healthy = True
    sent = throttled = 0

    def request() -> None:
        nonlocal sent, throttled
        try:
            throttle.on_request()
        except Throttled:
            throttled += 1
            return
        sent += 1
        if healthy:
            throttle.on_success()
        else:
            throttle.on_failure(Overloaded())

    def traffic(seconds: int) -> tuple[int, int]:
        nonlocal sent, throttled
        sent = throttled = 0
        for _ in range(seconds * 20):  # 20 requests a second
            request()
            clock.advance(0.05)
        return sent, throttled

    assert traffic(120) == (2400, 0)  # healthy: nothing throttled
    healthy = False
    sent_out, throttled_out = traffic(120)
    assert throttled_out > 0  # throttling starts once requests outnumber k times the accepts
    sent_out, throttled_out = traffic(120)
    # Once the window holds only the outage, all but a trickle of probes stay in the process.
    assert throttled_out > 0.99 * 2400
    assert sent_out == 2400 - throttled_out
    healthy = True
    # Recovery: each probe that gets through adds an accept, so the probability falls slowly at
    # first, then fast; with 20 requests a second it takes several windows.
    traffic(900)
    assert traffic(120) == (2400, 0)
    assert throttle.rejection_probability() == 0.0


@pytest.mark.volume
def test_adaptive_throttle_no_lost_counts_with_8_threads(contention: None) -> None:
    clock = VirtualClock()
    throttle = AdaptiveThrottle(clock=clock, rng=random.Random(5))

    def healthy(_: int) -> None:
        for _ in range(3000):
            throttle.on_request()
            throttle.on_success()

    run_threads(8, healthy)
    assert (throttle.requests, throttle.accepts) == (8 * 3000, 8 * 3000)
    assert throttle.rejection_probability() == 0.0


def test_adaptive_throttle_with_the_system_clock_and_default_rng() -> None:
    throttle = AdaptiveThrottle()
    for _ in range(100):
        throttle.on_request()
        throttle.on_success()
    assert throttle.rejection_probability() == 0.0
    assert "k=2.0" in repr(throttle)


# -- what a policy tells its budget ------------------------------------------------------------


class RecordingBudget:
    """A Budget that records the calls a policy makes to it."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def on_request(self) -> None:
        self.log.append("request")

    def allow_retry(self, error: BaseException) -> bool:
        self.log.append("allow_retry")
        return True

    def on_success(self) -> None:
        self.log.append("success")

    def on_failure(self, error: BaseException) -> None:
        self.log.append("failure")


def flaky_then(value: str, failures: int) -> Callable[[], str]:
    left = [failures]

    def fn() -> str:
        if left[0]:
            left[0] -= 1
            raise ConnectionError("flaky")
        return value

    return fn


@pytest.mark.parametrize("style", ["call", "decorator", "acall/asyncio", "acall/trio", "timeout"])
def test_policy_tells_the_budget_once_per_call_and_per_attempt(style: str) -> None:
    clock = VirtualClock()
    budget = RecordingBudget()
    timeout = 60.0 if style == "timeout" else None  # a timeout takes the full path
    policy = RetryPolicy(
        max_attempts=3, backoff=FAST, budget=budget, clock=clock, hooks=(), timeout=timeout
    )

    def invoke(fn: Callable[[], str]) -> str:
        if style == "decorator":
            return policy(fn)()
        if style.startswith("acall/"):

            async def afn() -> str:
                return fn()

            backend = style.removeprefix("acall/")
            return seawall.testing.run(policy.acall(afn), clock, backend=backend)
        return policy.call(fn)

    assert invoke(flaky_then("a", 0)) == "a"
    assert budget.log == ["request", "success"]
    budget.log.clear()
    assert invoke(flaky_then("b", 2)) == "b"
    assert budget.log == ["request"] + ["failure", "allow_retry"] * 2 + ["success"]

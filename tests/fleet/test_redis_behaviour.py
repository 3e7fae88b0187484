"""The same behavioural checks against the local objects and their fleet-shared twins.

Each test builds its object through ``objects``, parametrized over ``local`` (the plain
seawall object) and ``shared`` (the seawall.redis twin on a real redis-server, one process).
``objects.settle()`` is one sync for the shared objects (nothing for the local ones): the
shared objects promise the local semantics as of the latest sync. Windows run on a
VirtualClock, which the shared objects' scripts use in place of Redis's TIME.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import seawall
from seawall import (
    AdaptiveThrottle,
    CircuitBreaker,
    CircuitOpen,
    RetryBudget,
    RetryPolicy,
    RetryQuota,
    Throttled,
    TokenBucket,
    VirtualClock,
)
from seawall import redis as fleet_redis
from seawall.lowlevel import BreakerEvent


class FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


class Objects:
    """Builds local or shared objects with the same configuration."""

    def __init__(self, kind: str, clock: VirtualClock, fleet: fleet_redis.Fleet | None) -> None:
        self.kind = kind
        self.clock = clock
        self.fleet = fleet

    def settle(self) -> None:
        if self.fleet is not None:
            assert self.fleet.sync()

    def retry_budget(self, **kw: Any) -> Any:
        if self.fleet is None:
            return RetryBudget(clock=self.clock, **kw)
        return fleet_redis.SharedRetryBudget(self.fleet, "budget", **kw)

    def token_bucket(self, **kw: Any) -> Any:
        if self.fleet is None:
            return TokenBucket(**kw)
        return fleet_redis.SharedTokenBucket(self.fleet, "bucket", **kw)

    def retry_quota(self, **kw: Any) -> Any:
        if self.fleet is None:
            return RetryQuota(**kw)
        return fleet_redis.SharedRetryQuota(self.fleet, "quota", **kw)

    def throttle(self, **kw: Any) -> Any:
        if self.fleet is None:
            return AdaptiveThrottle(clock=self.clock, **kw)
        return fleet_redis.SharedAdaptiveThrottle(self.fleet, "throttle", **kw)

    def breaker(self, **kw: Any) -> Any:
        kw.setdefault("open_jitter", 0.0)
        if self.fleet is None:
            return CircuitBreaker(clock=self.clock, name="breaker", **kw)
        return fleet_redis.SharedCircuitBreaker(self.fleet, "breaker", clock=self.clock, **kw)


@pytest.fixture(params=["local", "shared"])
def objects(request: pytest.FixtureRequest, clock: VirtualClock) -> Objects:
    if request.param == "local":
        return Objects("local", clock, None)
    return Objects("shared", clock, request.getfixturevalue("fleet"))


# -- RetryBudget -------------------------------------------------------------------------------


def test_budget_allows_ratio_of_requests(objects: Objects) -> None:
    budget = objects.retry_budget(ratio=0.1, min_per_second=0.0, window=10.0)
    for _ in range(30):
        budget.on_request()
    assert [budget.allow_retry(ConnectionError()) for _ in range(5)] == [True] * 3 + [False] * 2
    objects.settle()
    assert not budget.allow_retry(ConnectionError())


def test_budget_floor_without_requests(objects: Objects) -> None:
    budget = objects.retry_budget(ratio=0.1, min_per_second=1.0, window=10.0)
    allowed = sum(budget.allow_retry(ConnectionError()) for _ in range(20))
    assert allowed == 10


def test_budget_window_expires(objects: Objects) -> None:
    budget = objects.retry_budget(ratio=0.5, min_per_second=0.0, window=10.0)
    for _ in range(10):
        budget.on_request()
    objects.settle()
    objects.clock.sleep(11.0)
    objects.settle()
    assert not budget.allow_retry(ConnectionError())  # the deposits left the window
    for _ in range(2):
        budget.on_request()
    assert budget.allow_retry(ConnectionError())
    assert not budget.allow_retry(ConnectionError())


def test_budget_bounds_a_policy_against_a_dead_dependency(objects: Objects) -> None:
    budget = objects.retry_budget(ratio=0.1, min_per_second=0.0, window=10.0)
    policy = RetryPolicy(max_attempts=3, budget=budget, clock=objects.clock)
    attempts = 0

    def dead() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("down")

    for _ in range(100):
        with pytest.raises(ConnectionError):
            policy.call(dead)
    assert attempts == 110  # 100 calls and 10% of them retried, instead of 300


# -- TokenBucket -------------------------------------------------------------------------------


def test_bucket_stops_retries_at_half(objects: Objects) -> None:
    bucket = objects.token_bucket(max_tokens=10.0, token_ratio=0.1)
    for _ in range(4):
        bucket.on_failure(ConnectionError())
    assert bucket.allow_retry(ConnectionError())
    objects.settle()
    bucket.on_failure(ConnectionError())
    assert not bucket.allow_retry(ConnectionError())  # 5 tokens: not more than half
    assert bucket.tokens == pytest.approx(5.0)


def test_bucket_refills_on_success_only(objects: Objects) -> None:
    bucket = objects.token_bucket(max_tokens=10.0, token_ratio=0.1)
    for _ in range(6):
        bucket.on_failure(ConnectionError())
    objects.settle()
    for _ in range(10):
        bucket.on_answer(ValueError())  # an answer moves no token
    for _ in range(10):
        bucket.on_success()
    assert not bucket.allow_retry(ConnectionError())  # 5.0
    bucket.on_success()
    assert bucket.allow_retry(ConnectionError())  # 5.1
    objects.settle()
    assert bucket.tokens == pytest.approx(5.1)


# -- RetryQuota --------------------------------------------------------------------------------


def test_quota_costs_and_refunds(objects: Objects) -> None:
    quota = objects.retry_quota(capacity=20, retry_cost=5, timeout_cost=10, success_reward=1)
    assert quota.allow_retry(TimeoutError())  # 10
    assert quota.allow_retry(ConnectionError())  # 5
    quota.on_failure(ConnectionError())
    assert quota.allow_retry(ConnectionError())  # 5: empty now
    assert not quota.allow_retry(ConnectionError())
    quota.on_success()  # refunds the latest retry's cost
    assert quota.allow_retry(ConnectionError())
    objects.settle()
    assert not quota.allow_retry(ConnectionError())


def test_quota_rewards_first_attempt_successes(objects: Objects) -> None:
    quota = objects.retry_quota(capacity=10, retry_cost=5, timeout_cost=5, success_reward=1)
    assert quota.allow_retry(ConnectionError())
    quota.on_failure(ConnectionError())
    assert quota.allow_retry(ConnectionError())
    quota.on_failure(ConnectionError())
    assert not quota.allow_retry(ConnectionError())
    for _ in range(5):
        quota.on_request()
        quota.on_success()
    objects.settle()
    assert quota.allow_retry(ConnectionError())
    quota.on_failure(ConnectionError())
    assert not quota.allow_retry(ConnectionError())


def test_quota_aws_standard_costs(objects: Objects) -> None:
    if objects.fleet is None:
        quota = RetryQuota.aws_standard()
    else:
        quota = fleet_redis.SharedRetryQuota.aws_standard(objects.fleet, "aws")

    class ThrottlingException(Exception):
        pass

    allowed = 0
    while quota.allow_retry(ConnectionError()):  # 14 each
        quota.on_failure(ConnectionError())
        allowed += 1
    assert allowed == 500 // 14
    # 10 tokens are left: two retries after throttling (5 each), then none.
    assert [quota.allow_retry(ThrottlingException()) for _ in range(3)] == [True, True, False]


# -- AdaptiveThrottle --------------------------------------------------------------------------


def test_throttle_rejects_when_dependency_rejects(objects: Objects) -> None:
    throttle = objects.throttle(k=2.0, window=60.0, rng=FixedRandom(0.5), min_requests=10)
    rejected = 0
    for _ in range(100):
        try:
            throttle.on_request()
        except Throttled:
            rejected += 1
            continue
        throttle.on_failure(ConnectionError())
    objects.settle()
    assert rejected > 50
    assert throttle.rejection_probability() > 0.9
    assert not throttle.allow_retry(ConnectionError())


def test_throttle_admits_a_healthy_dependency(objects: Objects) -> None:
    throttle = objects.throttle(k=2.0, window=60.0, rng=FixedRandom(0.0), min_requests=0)
    for _ in range(200):
        throttle.on_request()
        throttle.on_success()
    objects.settle()
    assert throttle.rejection_probability() == 0.0
    assert throttle.allow_retry(ConnectionError())


def test_throttle_forgets_after_the_window(objects: Objects) -> None:
    # Draws of 1.0 never fall below a probability: every call goes out and fails.
    throttle = objects.throttle(k=2.0, window=60.0, rng=FixedRandom(1.0), min_requests=10)
    for _ in range(50):
        throttle.on_request()
        throttle.on_failure(ConnectionError())
    objects.settle()
    assert throttle.rejection_probability() > 0.9
    objects.clock.sleep(61.0)
    objects.settle()
    assert throttle.rejection_probability() == 0.0


# -- CircuitBreaker ----------------------------------------------------------------------------


def _fail(breaker: Any, times: int) -> None:
    def boom() -> None:
        raise ConnectionError("down")

    for _ in range(times):
        with pytest.raises((ConnectionError, CircuitOpen)):
            breaker.call(boom)


@pytest.mark.parametrize("window", ["calls", "seconds"])
def test_breaker_opens_probes_and_closes(objects: Objects, window: str) -> None:
    events: list[BreakerEvent] = []
    shape = {"window_calls": 10} if window == "calls" else {"window_seconds": 10.0}
    breaker = objects.breaker(
        failure_ratio=0.5,
        minimum_calls=4,
        open_duration=5.0,
        half_open_probes=2,
        hooks=[events.append],
        **shape,
    )
    for _ in range(4):
        assert breaker.call(lambda: 1) == 1
    _fail(breaker, 4)
    objects.settle()
    assert breaker.state == "open"
    with pytest.raises(CircuitOpen):
        breaker.call(lambda: 1)
    objects.clock.sleep(5.0)
    first, second = breaker.acquire(), breaker.acquire()
    assert first[1] and second[1]
    with pytest.raises(CircuitOpen):
        breaker.acquire()  # exactly two probes
    breaker.record(first)
    assert breaker.state == "half_open"
    breaker.record(second)
    assert breaker.state == "closed"
    assert [e.new for e in events] == ["open", "half_open", "closed"]


def test_breaker_probe_failure_reopens(objects: Objects) -> None:
    breaker = objects.breaker(minimum_calls=2, window_calls=4, open_duration=1.0)
    _fail(breaker, 2)
    objects.settle()
    objects.clock.sleep(1.0)
    probe = breaker.acquire()
    breaker.record(probe, ConnectionError())
    assert breaker.state == "open"
    objects.clock.sleep(1.0)
    probe = breaker.acquire()
    breaker.release(probe)  # cancelled: the slot goes back
    breaker.record(breaker.acquire())
    assert breaker.state == "closed"


def test_breaker_ignores_permanent_errors(objects: Objects) -> None:
    breaker = objects.breaker(minimum_calls=2, window_calls=4)

    def not_found() -> None:
        raise seawall.Permanent("404")

    for _ in range(6):
        with pytest.raises(seawall.Permanent):
            breaker.call(not_found)
    objects.settle()
    assert breaker.state == "closed"
    assert breaker.metrics()[1] == 0


def test_breaker_isolate_and_reset(objects: Objects) -> None:
    breaker = objects.breaker()
    breaker.isolate()
    with pytest.raises(CircuitOpen):
        breaker.call(lambda: 1)
    breaker.reset()
    assert breaker.call(lambda: 2) == 2


@pytest.mark.parametrize("kind", ["budget", "bucket", "quota", "throttle", "breaker"])
def test_shared_objects_refuse_pickling(fleet: fleet_redis.Fleet, kind: str) -> None:
    import pickle

    build = {
        "budget": lambda: fleet_redis.SharedRetryBudget(fleet, "p"),
        "bucket": lambda: fleet_redis.SharedTokenBucket(fleet, "p"),
        "quota": lambda: fleet_redis.SharedRetryQuota(fleet, "p"),
        "throttle": lambda: fleet_redis.SharedAdaptiveThrottle(fleet, "p"),
        "breaker": lambda: fleet_redis.SharedCircuitBreaker(fleet, "p"),
    }[kind]
    with pytest.raises(TypeError, match="Fleet"):
        pickle.dumps(build())

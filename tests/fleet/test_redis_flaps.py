"""A shared retry budget while Redis flaps, on virtual time: each process has its own proxy in
front of the real redis-server, and the test decides when it drops its connections."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import pytest
from flapping_proxy import FlappingProxy
from fleet_sim import Budget, World, local_retries, quiet
from redis_process import RedisServer

import seawall
from seawall import VirtualClock
from seawall import redis as fleet_redis


@pytest.fixture
def world_factory(
    redis_server: RedisServer, namespace: str, clock: VirtualClock
) -> Iterator[type[World]]:
    worlds: list[World] = []

    class Built(World):
        def __init__(self, **kw: object) -> None:
            super().__init__(redis_server.port, namespace, clock, **kw)  # type: ignore[arg-type]
            worlds.append(self)

    with quiet():
        yield Built
    for world in worlds:
        world.close()


def test_a_flapping_redis_never_grants_a_fresh_floor(world_factory: type[World]) -> None:
    budget = Budget(ratio=0.1, min_per_second=3.0, window=10.0)
    world = world_factory(processes=1, budget=budget)
    calls = 1000
    for n in range(calls):  # 10 s of calls, 10 ms apart: one window
        if n % 50 == 20:
            world.set_up(0, False)  # a 30 ms blip every half second
        elif n % 50 == 23:
            world.set_up(0, True)
        world.call(0)
        world.advance(0.01)
    stats = world.processes[0].fleet.stats()
    assert stats.degraded_periods >= 15  # it did flap, and each time the fleet noticed
    local = local_retries(calls, budget, world.max_attempts, 1000.0)
    # A plain local budget: 10% of 1,000 calls and one floor of 30 (one more as the first
    # slice leaves the window at the end).
    assert 130 <= local <= 131
    # The fleet's bound: 10% of the calls, one floor, and one sync interval's worth of
    # deposits (10 calls) counted late; a fresh floor per flap would allow 20 floors more.
    worth = budget.ratio * 10
    assert world.retries <= budget.ratio * calls + budget.floor + worth
    assert world.retries >= budget.ratio * calls  # what the budget allows was allowed
    print(f"flaps={stats.degraded_periods} calls={calls} retries={world.retries} local={local}")


def test_a_fleet_cut_off_from_redis_keeps_one_floor_for_the_first_window(
    world_factory: type[World],
) -> None:
    budget = Budget(ratio=0.1, min_per_second=3.0, window=10.0)
    world = world_factory(processes=4, budget=budget)
    for n in range(1200):  # 3 s of calls in all, 2.5 ms apart, taking turns
        if n == 400:
            for i in range(4):
                world.set_up(i, False)  # Redis gone for everyone, for the rest of the run
        world.call(n % 4)
        world.advance(0.0025)
    assert all(p.fleet.stats().degraded for p in world.processes)
    # Four plain local budgets would allow 120 + 4 floors of 30 = 240: the processes share
    # what the fleet had left, each in proportion to its requests.
    worth = budget.ratio * 40  # one interval's calls of the whole fleet
    print(f"cut off: {world.retries} retries for {world.calls} calls")
    assert world.retries <= budget.ratio * world.calls + budget.floor + worth


def test_refusals_after_the_fleets_budget_is_spent_cost_no_round_trip(
    world_factory: type[World],
) -> None:
    budget = Budget(ratio=0.1, min_per_second=0.5, window=10.0)
    world = world_factory(processes=1, budget=budget)
    process = world.processes[0]
    for _ in range(100):
        world.call(0)
        world.advance(0.005)
    assert process.budget.available() == 0  # spent: 10 + 5 retries
    before = process.fleet.stats().round_trips
    refused = 0
    for _ in range(200):
        refused += not process.budget.allow_retry(ConnectionError())
        world.advance(0.001)  # within one slice: nothing leaves the window
    assert refused == 200
    assert process.fleet.stats().round_trips == before  # decided without Redis
    for _ in range(10):
        process.budget.on_request()  # ten deposits: room for one retry, at 10%
    assert process.budget.allow_retry(ConnectionError())
    assert process.fleet.stats().round_trips == before + 1
    world.advance(10.0)  # the window slides past the spent retries
    assert process.budget.allow_retry(ConnectionError())


def test_a_restarted_empty_redis_grants_no_fresh_floor(
    world_factory: type[World], redis_server: RedisServer
) -> None:
    budget = Budget(ratio=0.1, min_per_second=3.0, window=10.0)
    world = world_factory(processes=2, budget=budget)
    for n in range(800):  # 4 s of calls to a dead dependency: the budget is spent
        if n in (200, 400, 600):
            world.processes[0].fleet.client.flushall()  # Redis loses everything
        world.call(n % 2)
        world.advance(0.005)
    worth = budget.ratio * 20
    print(f"flushall: {world.retries} retries for {world.calls} calls")
    # Without putting the last view back, each FLUSHALL is a fresh floor (90 more).
    assert world.retries <= budget.ratio * world.calls + budget.floor + worth
    assert world.retries >= budget.ratio * world.calls


def test_a_redis_killed_and_restarted_empty_grants_no_fresh_floor(
    own_redis_server: RedisServer, namespace: str, clock: VirtualClock
) -> None:
    budget = Budget(ratio=0.1, min_per_second=3.0, window=10.0)
    with quiet():
        world = World(own_redis_server.port, namespace, clock, processes=3, budget=budget)
        try:
            for n in range(900):  # 4.5 s of calls to a dead dependency: the budget is spent
                if n in (300, 600):
                    own_redis_server.kill()  # SIGKILL: no persistence, every key is lost
                elif n in (320, 620):
                    own_redis_server.restart()  # on the same port, empty
                world.call(n % 3)
                world.advance(0.005)
        finally:
            world.close()
    assert all(p.fleet.stats().degraded_periods >= 1 for p in world.processes)
    worth = budget.ratio * 20  # the fleet's calls of one interval
    print(f"restart: {world.retries} retries for {world.calls} calls")
    # Two fresh floors (60 more) without the processes putting their parts back.
    assert world.retries <= budget.ratio * world.calls + budget.floor + worth
    assert world.retries >= budget.ratio * world.calls


def _flapping_calls(
    redis_server: RedisServer, namespace: str, clock: VirtualClock, build: Any, calls: int
) -> tuple[int, Any]:
    """*calls* calls to a dead dependency (3 attempts each) under the object *build* makes,
    its Redis dropping out for 3 calls in every 10; returns the attempts and the object."""
    with FlappingProxy(redis_server.port) as proxy:
        fleet = fleet_redis.Fleet(
            proxy.url, namespace=namespace, interval=None, timeout=0.5, clock=clock
        )
        shared = build(fleet)
        policy = seawall.RetryPolicy(
            max_attempts=3, backoff=seawall.Backoff.constant(0.0), budget=shared, clock=clock
        )
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            raise ConnectionError("down")

        with quiet():
            for n in range(calls):
                if n % 10 == 3:
                    proxy.set_up(False)
                elif n % 10 == 6:
                    proxy.set_up(True)
                with contextlib.suppress(ConnectionError, seawall.Throttled):
                    policy.call(attempt)
                clock.sleep(0.01)
                if n % 5 == 4:
                    fleet.sync()  # every 50 ms: once while Redis is away, once after
            fleet.close()
        assert fleet.stats().degraded_periods >= calls // 10 - 1
        return attempts, shared


def _local_calls(budget: Any, calls: int, clock: VirtualClock) -> int:
    policy = seawall.RetryPolicy(
        max_attempts=3, backoff=seawall.Backoff.constant(0.0), budget=budget, clock=clock
    )
    attempts = 0

    def attempt() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("down")

    for _ in range(calls):
        with contextlib.suppress(ConnectionError, seawall.Throttled):
            policy.call(attempt)
        clock.sleep(0.01)
    return attempts


def test_a_token_bucket_hears_what_was_spent_while_redis_was_away(
    redis_server: RedisServer, namespace: str, clock: VirtualClock
) -> None:
    shared, bucket = _flapping_calls(
        redis_server, namespace, clock, lambda f: fleet_redis.SharedTokenBucket(f, "b"), 200
    )
    local = _local_calls(seawall.TokenBucket(), 200, clock)
    print(f"bucket: shared {shared - 200} retries, local {local - 200}")
    assert shared <= local  # never a refill per flap
    assert bucket.tokens <= 5.0  # the fleet's bucket heard the failures


def test_a_retry_quota_hears_what_was_spent_while_redis_was_away(
    redis_server: RedisServer, namespace: str, clock: VirtualClock
) -> None:
    shared, quota = _flapping_calls(
        redis_server,
        namespace,
        clock,
        lambda f: fleet_redis.SharedRetryQuota(f, "q", capacity=500, retry_cost=5),
        200,
    )
    local = _local_calls(seawall.RetryQuota(capacity=500, retry_cost=5), 200, clock)
    print(f"quota: shared {shared - 200} retries, local {local - 200}")
    assert shared <= local
    assert quota.available <= 10


def test_a_throttle_keeps_its_probability_while_redis_flaps(
    redis_server: RedisServer, namespace: str, clock: VirtualClock
) -> None:
    rng = random.Random(7)
    shared, _ = _flapping_calls(
        redis_server,
        namespace,
        clock,
        lambda f: fleet_redis.SharedAdaptiveThrottle(f, "t", rng=rng),
        400,
    )
    local = _local_calls(seawall.AdaptiveThrottle(rng=random.Random(7), clock=clock), 400, clock)
    print(f"throttle: shared {shared} attempts, local {local}")
    # The local throttle rejects most calls to a dependency that never answers; a fresh
    # throttle at every flap would admit (and retry) its first 20 calls each time.
    assert shared <= 1.5 * local

"""Redis killed, restarted, paused; event loops; keys; bad input from Redis and from users."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import prometheus_client
import pytest
import redis
import redis.crc
from redis_process import RedisServer

import seawall
from seawall import Backoff, CircuitOpen, RetryPolicy
from seawall import redis as fleet_redis
from seawall.instrumentation import Counters, MetricsHook
from seawall.instrumentation.prometheus import PrometheusRecorder


def test_killed_and_restarted_redis_is_invisible_to_callers(
    own_redis_server: RedisServer, namespace: str
) -> None:
    events: list[fleet_redis.FleetEvent] = []
    counters = Counters()
    registry = prometheus_client.CollectorRegistry()
    fleet = fleet_redis.Fleet(
        own_redis_server.url,
        namespace=namespace,
        interval=0.05,
        timeout=0.05,
        reconnect=Backoff(base=0.05, cap=0.2),
        hooks=[
            events.append,
            MetricsHook(counters).fleet_hook,
            MetricsHook(PrometheusRecorder(registry)).fleet_hook,
        ],
    )
    budget = fleet_redis.SharedRetryBudget(fleet, "svc")
    bucket = fleet_redis.SharedTokenBucket(fleet, "svc")
    quota = fleet_redis.SharedRetryQuota(fleet, "svc")
    throttle = fleet_redis.SharedAdaptiveThrottle(fleet, "svc")
    breaker = fleet_redis.SharedCircuitBreaker(fleet, "svc", minimum_calls=1000, window_calls=1000)
    policies = [
        RetryPolicy(max_attempts=2, backoff=Backoff.constant(0.0), budget=b)
        for b in (budget, bucket, quota, throttle)
    ]
    unexpected: list[BaseException] = []
    slowest = 0.0
    count = 0

    def flaky() -> int:
        nonlocal count
        count += 1
        if count % 5 == 0:
            raise ConnectionError("the dependency hiccups")
        return count

    def calls(seconds: float) -> None:
        nonlocal slowest
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for policy in policies:
                started = time.monotonic()
                try:
                    breaker.call(policy.call, flaky)
                except (ConnectionError, CircuitOpen):
                    pass
                except BaseException as exc:  # anything else came from Redis: a bug
                    unexpected.append(exc)
                slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.001)

    calls(0.3)
    assert not fleet.stats().degraded
    own_redis_server.kill()
    calls(0.5)
    stats = fleet.stats()
    assert stats.degraded
    assert stats.degraded_periods == 1
    assert stats.sync_failures >= 1
    own_redis_server.restart()
    deadline = time.monotonic() + 5.0
    while fleet.stats().degraded and time.monotonic() < deadline:
        calls(0.05)
    assert not fleet.stats().degraded
    assert [e.kind for e in events] == ["degraded", "recovered"]
    assert events[0].error is not None and "ConnectionError" in events[0].error
    assert counters.get("fleet_transitions", namespace, "degraded") == 1
    assert counters.get("fleet_transitions", namespace, "recovered") == 1
    labels = {"fleet": namespace, "state": "degraded"}
    assert registry.get_sample_value("seawall_fleet_transitions_total", labels) == 1
    assert unexpected == []
    assert slowest < 0.5  # bounded by the fleet's timeout, with room for a busy machine

    # Sharing resumes: another process (another fleet) sees this one's deposits again.
    other = fleet_redis.Fleet(own_redis_server.url, namespace=namespace, interval=None)
    seen = fleet_redis.SharedRetryBudget(other, "svc")
    calls(0.2)
    assert fleet.sync()
    assert other.sync()
    assert seen.requests > 0
    other.close()
    fleet.close()


def test_a_paused_redis_costs_one_timeout_then_nothing(
    own_redis_server: RedisServer, namespace: str
) -> None:
    fleet = fleet_redis.Fleet(
        own_redis_server.url,
        namespace=namespace,
        interval=None,
        timeout=0.05,
    )
    budget = fleet_redis.SharedRetryBudget(fleet, "svc", min_per_second=100.0, lease=1)
    assert budget.allow_retry(ConnectionError())  # a round trip while Redis answers
    own_redis_server.pause()
    try:
        durations = []
        for n in range(20):
            for _ in range(10):
                budget.on_request()
            started = time.monotonic()
            allowed = budget.allow_retry(ConnectionError())
            durations.append(time.monotonic() - started)
            # The first decision's requests went with the round trip that timed out: Redis
            # may have counted them (their room is the fleet's), so it is refused. Then the
            # local budget: 10% of the requests made since.
            assert allowed == (n > 0)
        assert fleet.stats().degraded
        assert max(durations) < 0.5  # one timeout (0.05 s), never a hang
        assert sorted(durations)[-2] < 0.01  # then no round trip at all
    finally:
        own_redis_server.resume()
    assert fleet.sync()
    assert not fleet.stats().degraded
    fleet.close()


async def test_event_loops_never_wait_for_a_budget_round_trip(fleet: fleet_redis.Fleet) -> None:
    budget = fleet_redis.SharedRetryBudget(fleet, "loop", min_per_second=10.0, lease=2)
    before = fleet.stats().round_trips
    assert not budget.allow_retry(ConnectionError())  # empty lease: refused, no round trip
    assert fleet.stats().round_trips == before
    await asyncio.to_thread(fleet.sync)  # the sync thread's job: brings a lease
    assert budget.allow_retry(ConnectionError())
    assert budget.allow_retry(ConnectionError())
    assert fleet.stats().round_trips == before
    policy = RetryPolicy(max_attempts=2, backoff=Backoff.constant(0.0), budget=budget)
    breaker = fleet_redis.SharedCircuitBreaker(fleet, "loop")

    async def ok() -> str:
        return "ok"

    assert await breaker.acall(policy.acall, ok) == "ok"


def test_keys_share_one_hash_tag(fleet: fleet_redis.Fleet, namespace: str) -> None:
    breaker = fleet_redis.SharedCircuitBreaker(fleet, "tagged", window_seconds=10.0)
    breaker.record(breaker.acquire(), ConnectionError())
    assert fleet.sync()
    keys = [k.decode() for k in fleet.client.scan_iter(match=f"{{{namespace}:breaker:*")]
    assert len(keys) == 2
    assert {redis.crc.key_slot(k.encode()) for k in keys} == {
        redis.crc.key_slot(f"{namespace}:breaker:tagged".encode())
    }


def test_malformed_state_from_redis_is_clamped(fleet: fleet_redis.Fleet) -> None:
    breaker = fleet_redis.SharedCircuitBreaker(fleet, "bad", open_duration=2.0, open_jitter=0.5)
    state_key = fleet.keys("breaker", "bad", "state")[0]
    fleet.client.hset(state_key, mapping={"state": "open", "gen": 7, "until": 1e18})
    assert fleet.sync()
    assert breaker.state == "open"
    retry_after = breaker.retry_after()
    assert retry_after is not None and retry_after <= 3.0  # never "open for ages"
    fleet.client.hset(state_key, mapping={"state": "bogus", "gen": 8})
    assert fleet.sync()
    assert breaker.state == "open"  # an unknown state is ignored


def test_per_host_budgets_can_be_the_fleets(fleet: fleet_redis.Fleet) -> None:
    from seawall.http import budget_for_host

    host = f"https://{fleet.namespace}.example:443"
    [shared] = fleet_redis.share_hosts(fleet, [host])
    assert budget_for_host(f"https://{fleet.namespace}.example") is shared
    factory = fleet_redis.host_budgets(fleet)
    assert factory("http://other.example").name == "host:http://other.example"


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"interval": 0}, ValueError, "interval"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": "1"}, TypeError, "timeout"),
        ({"namespace": ""}, ValueError, "namespace"),
        ({"namespace": "a{b}"}, ValueError, "namespace"),
        ({"reconnect": 1.0}, TypeError, "reconnect"),
        ({"clock": object()}, TypeError, "clock"),
    ],
)
def test_fleet_validates_its_parameters(kwargs: dict[str, Any], error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        fleet_redis.Fleet("redis://127.0.0.1:1/0", **{"interval": None, **kwargs})


def test_shared_objects_validate_like_the_local_ones(fleet: fleet_redis.Fleet) -> None:
    with pytest.raises(ValueError, match="ratio"):
        fleet_redis.SharedRetryBudget(fleet, "x", ratio=0)
    with pytest.raises(ValueError, match="lease"):
        fleet_redis.SharedRetryBudget(fleet, "x", lease=0)
    with pytest.raises(ValueError, match="name"):
        fleet_redis.SharedTokenBucket(fleet, "{x}")
    with pytest.raises(TypeError, match="fleet"):
        fleet_redis.SharedRetryQuota(object(), "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="minimum_calls"):
        fleet_redis.SharedCircuitBreaker(fleet, "x", minimum_calls=0)
    assert seawall.redis is fleet_redis


def test_a_fleet_takes_a_client_of_its_own(redis_server: RedisServer, namespace: str) -> None:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=0.5)
    fleet = fleet_redis.Fleet(client, namespace=namespace, interval=None)
    bucket = fleet_redis.SharedTokenBucket(fleet, "own")
    bucket.on_failure(ConnectionError())
    assert fleet.sync()
    assert bucket.tokens == 9.0
    fleet.close()
    with pytest.raises(TypeError, match="url"):
        fleet_redis.Fleet(42, interval=None)  # type: ignore[arg-type]


def test_wakes_are_coalesced(redis_server: RedisServer, namespace: str) -> None:
    fleet = fleet_redis.Fleet(redis_server.url, namespace=namespace, interval=0.2)
    breaker = fleet_redis.SharedCircuitBreaker(
        fleet, "wakes", minimum_calls=10_000, window_calls=10_000
    )
    time.sleep(0.05)
    before = fleet.stats().syncs
    end = time.monotonic() + 0.4
    while time.monotonic() < end:  # a failure on every call: a wake on every call
        with contextlib.suppress(ConnectionError):
            breaker.call(_refuse)
        time.sleep(0.0005)  # fewer failures than minimum_calls: the breaker stays closed
    assert breaker.state == "closed"
    syncs = fleet.stats().syncs - before
    fleet.close()
    # One sync per interval / 10 at most (0.4 s / 0.02 s = 20), not one per failure.
    assert 2 <= syncs <= 25


def _refuse() -> None:
    raise ConnectionError("refused")


async def test_an_event_loop_never_waits_for_a_paused_redis(
    own_redis_server: RedisServer, namespace: str
) -> None:
    # A long timeout: a call that waited for Redis would take half a second.
    fleet = fleet_redis.Fleet(own_redis_server.url, namespace=namespace, interval=0.05, timeout=0.5)
    budget = fleet_redis.SharedRetryBudget(fleet, "loop")
    breaker = fleet_redis.SharedCircuitBreaker(fleet, "loop", minimum_calls=1000, window_calls=1000)
    policy = RetryPolicy(max_attempts=3, backoff=Backoff.constant(0.0), budget=budget)
    failures = 0

    async def flaky() -> str:
        nonlocal failures
        failures += 1
        if failures % 3:
            raise ConnectionError("hiccup")
        return "ok"

    async def calls(seconds: float) -> float:
        slowest = 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.monotonic()
            # On a fast machine the calls reach the breaker's minimum (1,000) within the
            # second, two thirds failing, and the local rules open it while Redis is paused:
            # a refusal is an answer too, and must come as fast.
            with contextlib.suppress(ConnectionError, CircuitOpen):
                await breaker.acall(policy.acall, flaky)
            slowest = max(slowest, time.monotonic() - started)
            await asyncio.sleep(0.001)
        return slowest

    await calls(0.2)
    own_redis_server.pause()
    try:
        slowest = await calls(1.0)
        assert fleet.stats().degraded  # the sync thread timed out, not the loop
    finally:
        own_redis_server.resume()
    assert slowest < 0.25
    fleet.close()

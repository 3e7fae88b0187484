"""Faults of a shared breaker and budget on a real redis-server: probes that never report,
answers that arrive late, keys of the wrong type, keys that never expire, host spellings.

Every test runs on virtual time (the fleet passes its VirtualClock to the scripts) with no
sync thread: the test decides when each round trip happens.
"""

from __future__ import annotations

import contextlib
import logging
import time

import pytest
import redis
from fleet_sim import quiet
from redis_process import RedisServer

import seawall
from seawall import CircuitOpen, VirtualClock
from seawall import redis as fleet_redis


def _open(breaker: fleet_redis.SharedCircuitBreaker, fleet: fleet_redis.Fleet) -> None:
    for _ in range(breaker.minimum_calls):
        with contextlib.suppress(ConnectionError, CircuitOpen):
            breaker.call(_refuse)
    assert fleet.sync()
    assert breaker.state == "open"


def _refuse() -> None:
    raise ConnectionError("refused")


def _breaker(fleet: fleet_redis.Fleet, **kw: object) -> fleet_redis.SharedCircuitBreaker:
    config: dict[str, object] = {
        "minimum_calls": 4,
        "window_calls": 10,
        "open_duration": 5.0,
        "open_jitter": 0.0,
        "probe_timeout": 2.0,
    }
    config.update(kw)
    return fleet_redis.SharedCircuitBreaker(fleet, "probe", **config)  # type: ignore[arg-type]


# -- 6: a probe that never reports ------------------------------------------------------------


def test_a_probe_that_never_reports_expires_after_probe_timeout(
    fleet: fleet_redis.Fleet, redis_server: RedisServer, clock: VirtualClock
) -> None:
    breaker = _breaker(fleet)
    _open(breaker, fleet)
    clock.sleep(5.0)
    lost = breaker.acquire()  # the prober dies with this permit: it never reports
    assert lost[1]
    # Another process of the fleet (its own client and breaker, the same virtual time).
    other = fleet_redis.Fleet(
        redis_server.url, namespace=fleet.namespace, interval=None, timeout=1.0, clock=clock
    )
    twin = _breaker(other)
    assert other.sync()
    with pytest.raises(CircuitOpen) as refused:
        twin.acquire()
    assert refused.value.state == "half_open"  # the slot is taken: wait for its result
    clock.sleep(2.0)  # probe_timeout passes on the scripts' clock
    with pytest.raises(CircuitOpen) as reopened:
        twin.acquire()
    # As the local breaker: the hung probe counts as failed, the breaker opens again...
    assert reopened.value.state == "open"
    assert reopened.value.retry_after == pytest.approx(5.0)
    clock.sleep(5.0)
    probe = twin.acquire()  # ...and then admits a new probe
    assert probe[1]
    twin.record(probe)
    assert twin.state == "closed"
    breaker.record(lost)  # the lost probe's late result belongs to an older state: ignored
    assert fleet.sync()
    assert breaker.state == "closed"
    other.close()


def test_the_local_breaker_expires_a_hung_probe_the_same_way(clock: VirtualClock) -> None:
    # The reference the shared breaker follows.
    breaker = seawall.CircuitBreaker(
        minimum_calls=4,
        window_calls=10,
        open_duration=5.0,
        open_jitter=0.0,
        probe_timeout=2.0,
        clock=clock,
    )
    for _ in range(4):
        with contextlib.suppress(ConnectionError):
            breaker.call(_refuse)
    clock.sleep(5.0)
    assert breaker.acquire()[1]
    with pytest.raises(CircuitOpen) as refused:
        breaker.acquire()
    assert refused.value.state == "half_open"
    clock.sleep(2.0)
    with pytest.raises(CircuitOpen) as reopened:
        breaker.acquire()
    assert reopened.value.state == "open"


# -- 7: a sync answer that lands after a probe was granted ------------------------------------


def test_a_late_sync_answer_never_rolls_the_generation_back(
    fleet: fleet_redis.Fleet, clock: VirtualClock
) -> None:
    breaker = _breaker(fleet)
    _open(breaker, fleet)
    clock.sleep(5.0)
    # The sync thread's round trip runs on Redis first (the breaker is open there)...
    op = breaker._collect()
    [late] = fleet._pipeline([(breaker, op)])
    # ...a caller is granted the probe meanwhile (the breaker is half-open from then on)...
    probe = breaker.acquire()
    assert probe[1]
    # ...and only then does the sync thread apply its (older) answer.
    breaker._apply(op, late)
    assert breaker.state == "half_open"
    breaker.record(probe)  # the probe's result counts, and frees the slot
    assert breaker.state == "closed"
    assert fleet.sync()
    assert breaker.state == "closed"
    state = fleet.client.hgetall(fleet.keys("breaker", "probe", "state")[0])
    assert state[b"state"] == b"closed" and state[b"flight"] == b"0"


def test_a_probes_late_result_never_counts_for_a_later_half_open_period(
    fleet: fleet_redis.Fleet, redis_server: RedisServer, clock: VirtualClock
) -> None:
    breaker = _breaker(fleet, half_open_probes=2)
    _open(breaker, fleet)
    clock.sleep(5.0)
    first = breaker.acquire()
    assert first[1]
    other = fleet_redis.Fleet(
        redis_server.url, namespace=fleet.namespace, interval=None, timeout=1.0, clock=clock
    )
    twin = _breaker(other, half_open_probes=2)
    assert other.sync()
    second = twin.acquire()
    assert second[1]
    twin.record(second, ConnectionError("still down"))  # re-opens the fleet's breaker
    assert twin.state == "open"
    assert fleet.sync()  # this process sees the new open period
    clock.sleep(5.0)
    third = twin.acquire()  # a probe of the next half-open period
    assert third[1]
    breaker.record(first)  # a success of the earlier period: must not count for this one
    assert other.sync()
    assert twin.state == "half_open"
    twin.record(third)
    assert twin.state == "half_open"  # two probes needed: this is the first success


# -- 9: keys --------------------------------------------------------------------------------


def test_breaker_keys_expire_when_idle(fleet: fleet_redis.Fleet) -> None:
    breaker = _breaker(fleet)
    _open(breaker, fleet)
    for key in fleet.keys("breaker", "probe", "state", "window"):
        if fleet.client.exists(key):
            ttl = fleet.client.pttl(key)
            assert 0 < ttl <= 2 * 86_400_000, key
    assert fleet.client.pttl(fleet.keys("breaker", "probe", "state")[0]) > 0
    breaker.isolate()  # held by a person until reset: never expires
    assert fleet.client.pttl(fleet.keys("breaker", "probe", "state")[0]) == -1
    breaker.reset()
    assert fleet.client.pttl(fleet.keys("breaker", "probe", "state")[0]) > 0


def test_a_key_of_the_wrong_type_is_reported_as_such(
    fleet: fleet_redis.Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    broken = fleet_redis.SharedRetryBudget(fleet, "broken", min_per_second=1.0)
    healthy = fleet_redis.SharedRetryBudget(fleet, "healthy", min_per_second=1.0)
    breaker = _breaker(fleet)
    [key] = fleet.keys("budget", "broken", "window")
    fleet.client.rpush(key, "not a hash")
    caplog.set_level(logging.INFO, logger="seawall.redis")
    for _ in range(3):
        healthy.on_request()
        broken.on_request()
        assert fleet.sync()  # Redis answers: the fleet is not degraded
    assert not fleet.stats().degraded
    assert healthy.requests == 3  # the other objects share as before
    _open(breaker, fleet)
    for _ in range(10):
        broken.on_request()
    before = fleet.stats().round_trips
    assert broken.allow_retry(ConnectionError())  # its local budget: 10% of its requests
    assert not broken.allow_retry(ConnectionError())
    assert fleet.stats().round_trips == before  # decided without asking Redis
    text = caplog.text
    assert "unreachable" not in text
    assert "WRONGTYPE" in text and key in text
    assert text.count(key) == 1  # said once, not at every sync
    fleet.client.delete(key)  # someone fixes it
    assert fleet.sync()
    assert "again" in caplog.records[-1].getMessage()
    broken.on_request()
    assert fleet.sync()
    assert broken.requests >= 1


def test_share_hosts_takes_urls_as_origins(fleet: fleet_redis.Fleet) -> None:
    from seawall.http import budget_for_host

    base = f"{fleet.namespace}.example"
    shared = fleet_redis.share_hosts(
        fleet, [f"https://{base}/", f"HTTPS://{base}:443/v1/pay?x=1", f"http://{base}:8080/#a"]
    )
    assert shared[0] is shared[1]
    assert budget_for_host(f"https://{base}") is shared[0]
    assert budget_for_host(f"http://{base}:8080") is shared[2]
    assert shared[0].name == f"host:https://{base}"
    factory = fleet_redis.host_budgets(fleet)
    assert factory(f"https://{base}/path").name == f"host:https://{base}"
    with pytest.raises(ValueError, match="hosts"):
        fleet_redis.share_hosts(fleet, [f"{base}/no-scheme"])


def test_a_redis_refusing_every_write_is_reported_as_refusing(
    own_redis_server: RedisServer,
    namespace: str,
    clock: VirtualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet = fleet_redis.Fleet(
        own_redis_server.url, namespace=namespace, interval=None, timeout=1.0, clock=clock
    )
    budget = fleet_redis.SharedRetryBudget(fleet, "oom")
    assert fleet.sync()
    fleet.client.config_set("maxmemory", 1)  # every write refused: out of memory
    caplog.set_level(logging.WARNING, logger="seawall.redis")
    budget.on_request()
    assert not fleet.sync()
    assert fleet.stats().degraded  # a fleet-wide refusal: every object decides locally
    assert "refuses the fleet's commands" in caplog.text
    assert "OutOfMemoryError" in caplog.text and "unreachable" not in caplog.text
    fleet.client.config_set("maxmemory", 0)
    assert fleet.sync()
    assert not fleet.stats().degraded
    assert budget.requests == 1  # the deposit was kept for the sync that worked
    fleet.close()


# -- a round trip Redis applied but answered after the timeout ----------------------------------


def test_a_sync_redis_applied_after_the_timeout_counts_once(
    own_redis_server: RedisServer, namespace: str, clock: VirtualClock
) -> None:
    fleet = fleet_redis.Fleet(
        own_redis_server.url, namespace=namespace, interval=None, timeout=0.2, clock=clock
    )
    budget = fleet_redis.SharedRetryBudget(fleet, "late", min_per_second=0.0)
    throttle = fleet_redis.SharedAdaptiveThrottle(fleet, "late", min_requests=10**9)
    bucket = fleet_redis.SharedTokenBucket(fleet, "late", max_tokens=100.0)
    quota = fleet_redis.SharedRetryQuota(fleet, "late", capacity=10_000, retry_cost=5)

    def requests(n: int) -> None:
        for _ in range(n):
            budget.on_request()
            throttle.on_request()
            throttle.on_success()

    requests(100)
    for _ in range(10):
        bucket.on_failure(ConnectionError())
    assert quota.allow_retry(ConnectionError())  # one round trip: its cost and a lease
    with quiet():
        assert fleet.sync()
        requests(50)
        for _ in range(5):
            bucket.on_failure(ConnectionError())
        assert quota.allow_retry(ConnectionError())  # from the lease, given back next sync
        # Redis stops answering: the sync is written to its socket and times out...
        own_redis_server.pause()
        try:
            assert not fleet.sync()
        finally:
            own_redis_server.resume()
        # ...and Redis applies it all the same, after the fleet gave up on it.
        window = fleet.keys("throttle", "late", "window")[0]
        with redis.Redis.from_url(own_redis_server.url) as raw:
            deadline = time.monotonic() + 30.0  # an event awaited, not a speed measured
            while _requests_on_redis(raw, window) < 150:
                assert time.monotonic() < deadline, "Redis never ran the sync it received"
                time.sleep(0.01)
        assert fleet.sync()  # sent again: Redis knows the call and applies nothing twice
        assert fleet.sync()
    assert budget.requests == 150
    assert (throttle.requests, throttle.accepts) == (150, 150)
    assert bucket.tokens == pytest.approx(85.0)
    assert quota.available == 10_000 - 10
    fleet.close()


def _requests_on_redis(client: redis.Redis, key: str) -> int:
    fields = client.hgetall(key)
    return sum(int(v) for k, v in fields.items() if k.startswith(b"q"))

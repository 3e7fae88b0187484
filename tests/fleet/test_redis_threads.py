"""Counts accrued by many threads while syncs run are neither lost nor sent twice."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from seawall import redis as fleet_redis


@pytest.fixture
def contention() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def test_no_count_is_lost_or_doubled(fleet: fleet_redis.Fleet, contention: None) -> None:
    budget = fleet_redis.SharedRetryBudget(fleet, "threads", min_per_second=0.0)
    throttle = fleet_redis.SharedAdaptiveThrottle(fleet, "threads", min_requests=10**9)
    done = threading.Event()
    per_thread, threads = 5000, 4

    allowed = [0] * threads

    def work(n: int) -> None:
        for i in range(per_thread):
            budget.on_request()
            throttle.on_request()
            throttle.on_success()
            if i % 100 == 99 and budget.allow_retry(ConnectionError()):
                allowed[n] += 1

    def syncs() -> None:
        while not done.is_set():
            assert fleet.sync()

    syncer = threading.Thread(target=syncs)
    syncer.start()
    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    syncer.join()
    assert fleet.sync()  # gives the lease back, takes another (there was demand)
    assert fleet.sync()  # gives it back: no demand since
    assert budget.requests == per_thread * threads
    assert throttle.requests == per_thread * threads
    assert throttle.accepts == per_thread * threads
    # Every lease went back: the window holds exactly the retries allowed, and the rest of
    # the room is left.
    assert sum(allowed) > 0
    assert budget.retries == sum(allowed)
    assert budget.available() == round(0.1 * per_thread * threads) - sum(allowed)

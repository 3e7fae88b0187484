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

    def work() -> None:
        for _ in range(per_thread):
            budget.on_request()
            throttle.on_request()
            throttle.on_success()

    def syncs() -> None:
        while not done.is_set():
            assert fleet.sync()

    syncer = threading.Thread(target=syncs)
    syncer.start()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    syncer.join()
    assert fleet.sync()
    assert budget.requests == per_thread * threads
    assert throttle.requests == per_thread * threads
    assert throttle.accepts == per_thread * threads
    # Every sync gave its lease back and took a new one: the window holds just the lease now,
    # and nothing of the room leaked.
    assert budget.retries == budget.lease
    assert budget.available() == round(0.1 * per_thread * threads)

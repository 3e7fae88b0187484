"""A real redis-server on a free loopback port, in a temporary directory, for the session.

When redis-server cannot start, the Redis tests are skipped, except under ``CI=true``, where
they fail: a CI machine must run them (``make test`` installs redis-server).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator

import pytest
from redis_process import RedisServer, start_redis

import seawall
from seawall import redis as fleet_redis


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with tempfile.TemporaryDirectory(prefix="seawall-redis-") as directory:
        server = start_redis(directory)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A server of the test's own, which it may kill and restart."""
    with tempfile.TemporaryDirectory(prefix="seawall-redis-") as directory:
        server = start_redis(directory)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace of the test's own: tests never see each other's keys."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clock() -> seawall.VirtualClock:
    return seawall.VirtualClock(start=1000.0)


@pytest.fixture
def fleet(
    redis_server: RedisServer, namespace: str, clock: seawall.VirtualClock
) -> Iterator[fleet_redis.Fleet]:
    """A fleet without a sync thread (tests call sync()), on virtual time."""
    fleet = fleet_redis.Fleet(
        redis_server.url, namespace=namespace, interval=None, timeout=1.0, clock=clock
    )
    try:
        yield fleet
    finally:
        fleet.close()

"""HTTP transports with the default per-host budgets use the fleet's budget for shared hosts."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest
from redis_process import RedisServer

from seawall import Backoff, RetryPolicy, VirtualClock
from seawall import redis as fleet_redis
from seawall.httpx import RetryTransport


class Unavailable(http.server.BaseHTTPRequestHandler):
    hits = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        with Unavailable.lock:
            Unavailable.hits += 1
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sick_server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    Unavailable.hits = 0
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_a_shared_host_budget_bounds_the_transports_retries(
    fleet: fleet_redis.Fleet, redis_server: RedisServer, sick_server: str, clock: VirtualClock
) -> None:
    [budget] = fleet_redis.share_hosts(fleet, [sick_server], ratio=0.1, min_per_second=0.5)
    policy = RetryPolicy(max_attempts=3, backoff=Backoff.constant(0.0))
    with httpx.Client(transport=RetryTransport(policy)) as client:
        for _ in range(30):
            assert client.get(f"{sick_server}/pay").status_code == 503
    # 30 requests; retries: 10% of them plus the floor of 0.5/s over 10 s, for the fleet.
    assert Unavailable.hits == 30 + 3 + 5
    assert fleet.sync()
    # Another process of the fleet (on the same virtual time) sees this one's requests.
    other = fleet_redis.Fleet(
        redis_server.url, namespace=fleet.namespace, interval=None, clock=clock
    )
    seen = fleet_redis.host_budgets(other, 0.1, 0.5)(sick_server)
    assert other.sync()
    assert seen.requests == 30 == budget.requests
    other.close()


def test_a_host_with_a_local_budget_is_refused(fleet: fleet_redis.Fleet) -> None:
    from seawall.http import budget_for_host

    host = f"https://{fleet.namespace}-local.example"
    budget_for_host(host)  # a request went there first: a local budget
    with pytest.raises(ValueError, match="already has a local budget"):
        fleet_redis.share_hosts(fleet, [host])
    again = f"https://{fleet.namespace}-shared.example"
    assert fleet_redis.share_hosts(fleet, [again]) == fleet_redis.share_hosts(fleet, [again])

"""Fleet-shared budgets (seawall.redis) side by side with the local ones, in one run.

Starts its own redis-server on a free loopback port (or uses --url) and measures:

1. Success-path cost: a function that returns at once, decorated by a RetryPolicy with each
   local budget and with its shared twin (the fleet's sync thread running, interval 0.1 s), and
   a CircuitBreaker beside a SharedCircuitBreaker. Interleaved (A B A B ...), best of
   timeit.repeat rounds; ns per call and the ratio shared / local (target <= 1.5).
2. Cost of a retry decision: allow_retry() on a SharedRetryBudget whose room never runs out,
   for several lease sizes: round trips made on the caller's thread per decision, and
   microseconds per decision (a local RetryBudget beside it).
3. Fleet bound overshoot against the flush interval: 4 fleets (one per thread, each its own
   client and sync thread, as 4 processes would be) call a dead dependency for a few seconds
   under one SharedRetryBudget(ratio=0.1, min_per_second=2, window=1). Every request and
   retry is timestamped; the overshoot is the largest excess, over any trailing window, of
   retries over ``ratio * requests + floor`` (measured from the true timestamps), shown in
   retries and in "intervals' worth" (ratio * fleet request rate * interval).

Usage: python benchmarks/redis_budget.py [--url redis://...] [--repeat 7] [--number 20000]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import logging
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from typing import Any

import redis

import seawall
from seawall import redis as fleet_redis


@contextlib.contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        proc = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                directory,
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port)
        for _ in range(100):
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    break
            time.sleep(0.05)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait()


def success_path(fleet: fleet_redis.Fleet, repeat: int, number: int) -> None:
    def target() -> int:
        return 1

    def policy(budget: Any) -> Callable[[], object]:
        return seawall.RetryPolicy(budget=budget, hooks=())(target)

    pairs: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "RetryBudget": (
            policy(seawall.RetryBudget()),
            policy(fleet_redis.SharedRetryBudget(fleet, "bench")),
        ),
        "TokenBucket": (
            policy(seawall.TokenBucket()),
            policy(fleet_redis.SharedTokenBucket(fleet, "bench")),
        ),
        "RetryQuota": (
            policy(seawall.RetryQuota.aws_standard()),
            policy(fleet_redis.SharedRetryQuota.aws_standard(fleet, "bench")),
        ),
        "AdaptiveThrottle": (
            policy(seawall.AdaptiveThrottle()),
            policy(fleet_redis.SharedAdaptiveThrottle(fleet, "bench")),
        ),
        "CircuitBreaker.call": (
            seawall.CircuitBreaker()(target),
            fleet_redis.SharedCircuitBreaker(fleet, "bench")(target),
        ),
    }
    contenders: dict[str, Callable[[], object]] = {"bare call": target}
    for name, (local, shared) in pairs.items():
        contenders[f"local  {name}"] = local
        contenders[f"shared {name}"] = shared
    for fn in contenders.values():  # warm up past a slice of the default windows
        end = time.monotonic() + 1.2
        while time.monotonic() < end:
            for _ in range(1000):
                fn()
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeat):
        for name, fn in contenders.items():
            t = min(timeit.repeat(fn, number=number, repeat=1)) / number
            best[name] = min(best[name], t)
    print("\n## 1. Success path (ns per call; best of rounds)\n")
    print("| budget | local | shared | shared / local |")
    print("|---|---:|---:|---:|")
    print(f"| bare call | {best['bare call'] * 1e9:.0f} | | |")
    for name in pairs:
        local, shared = best[f"local  {name}"], best[f"shared {name}"]
        print(f"| {name} | {local * 1e9:.0f} | {shared * 1e9:.0f} | {shared / local:.2f}x |")


def retry_decisions(fleet: fleet_redis.Fleet, decisions: int) -> None:
    print("\n## 2. Retry decisions (room never runs out)\n")
    print("| budget | lease | round trips per decision | us per decision |")
    print("|---|---:|---:|---:|")
    local = seawall.RetryBudget(min_per_second=1e9)
    started = time.perf_counter()
    for _ in range(decisions):
        local.allow_retry(ConnectionError())
    elapsed = time.perf_counter() - started
    print(f"| local RetryBudget | - | 0 | {elapsed / decisions * 1e6:.2f} |")
    for lease in (1, 4, 16, 64):
        budget = fleet_redis.SharedRetryBudget(
            fleet, f"decisions-{lease}", min_per_second=1e9, lease=lease
        )
        before = fleet.stats().round_trips
        started = time.perf_counter()
        for _ in range(decisions):
            assert budget.allow_retry(ConnectionError())
        elapsed = time.perf_counter() - started
        trips = fleet.stats().round_trips - before
        print(
            f"| SharedRetryBudget | {lease} | {trips / decisions:.3f} | "
            f"{elapsed / decisions * 1e6:.2f} |"
        )
        fleet.remove(budget)


def overshoot(url: str, interval: float, seconds: float, processes: int = 4) -> None:
    namespace = f"bench-{os.getpid()}-{interval}"
    ratio, floor_rate, window = 0.1, 2.0, 1.0
    fleets = [
        fleet_redis.Fleet(url, namespace=namespace, interval=interval) for _ in range(processes)
    ]
    requests: list[float] = []
    retries: list[float] = []
    lock = threading.Lock()

    def run(fleet: fleet_redis.Fleet) -> None:
        budget = fleet_redis.SharedRetryBudget(fleet, "dead", ratio, floor_rate, window)
        policy = seawall.RetryPolicy(
            max_attempts=3, backoff=seawall.Backoff.constant(0.0), budget=budget
        )
        attempts = 0

        def dead() -> None:
            nonlocal attempts
            now = time.monotonic()
            with lock:
                (requests if attempts == 0 else retries).append(now)
            attempts += 1
            raise ConnectionError

        end = time.monotonic() + seconds
        while time.monotonic() < end:
            attempts = 0
            with contextlib.suppress(ConnectionError):
                policy.call(dead)
            time.sleep(0.002)

    threads = [threading.Thread(target=run, args=(f,)) for f in fleets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in fleets:
        f.close()
    requests.sort()
    retries.sort()
    floor = floor_rate * window
    worst = 0.0
    for t in retries:
        if t - retries[0] < window:
            continue  # the first window: the floor alone allowed a burst, as on a local budget
        in_window = bisect.bisect_right(retries, t) - bisect.bisect_right(retries, t - window)
        calls = bisect.bisect_right(requests, t) - bisect.bisect_right(requests, t - window)
        worst = max(worst, in_window - (ratio * calls + floor))
    rate = len(requests) / seconds
    worth = ratio * rate * interval
    print(
        f"| {interval:.3f} | {rate:.0f} | {len(retries) / max(1, len(requests)):.3f} | "
        f"{max(0.0, worst):.1f} | {worth:.1f} | {max(0.0, worst) / worth:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    logging.getLogger("seawall").setLevel(logging.ERROR)  # "budget exhausted" is the point here
    print(
        f"# seawall.redis against the local budgets\n\nPython {platform.python_version()}, "
        f"{os.cpu_count()} cores, {platform.machine()}, redis-py {redis.__version__}, "
        f"seawall {seawall.__version__}"
    )
    with redis_server(args.url) as url:
        server = redis.Redis.from_url(url).info("server")["redis_version"]
        print(f"redis-server {server} on loopback")
        fleet = fleet_redis.Fleet(url, namespace=f"bench-{os.getpid()}", interval=0.1)
        success_path(fleet, args.repeat, args.number)
        retry_decisions(fleet, 2000)
        fleet.close()
        print("\n## 3. Fleet bound overshoot against the flush interval (4 fleets, 1 s window)\n")
        print(
            "| interval (s) | fleet requests/s | retries per request | worst overshoot "
            "(retries) | one interval's worth | overshoot / worth |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for interval in (0.02, 0.05, 0.1, 0.2, 0.5):
            overshoot(url, interval, args.seconds)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

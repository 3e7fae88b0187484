"""How long a fleet's round trips take on a loaded machine, and how often a timeout would fire.

    python tests/fleet/measure_round_trips.py [--seconds 30] [--busy 2]

Starts its own redis-server on loopback and *busy* processes that spin (``while 1: pass``),
then, for *seconds*, makes the fleet's sync round trip (one pipeline of five scripts, as a
fleet with one object of each kind sends) every 10 ms from a thread, while the main thread
keeps Python busy too (as an application would). Prints the latency percentiles and, for
each candidate timeout, how many round trips would have exceeded it. The busy processes and
the server are stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from redis_process import RedisServer  # noqa: E402

import seawall  # noqa: E402
from seawall import redis as fleet_redis  # noqa: E402

CANDIDATES = (0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


def measure(url: str, seconds: float) -> list[float]:
    fleet = fleet_redis.Fleet(url, namespace="measure", interval=None, timeout=5.0)
    fleet_redis.SharedRetryBudget(fleet, "m")
    fleet_redis.SharedTokenBucket(fleet, "m")
    fleet_redis.SharedRetryQuota(fleet, "m")
    fleet_redis.SharedAdaptiveThrottle(fleet, "m")
    breaker = fleet_redis.SharedCircuitBreaker(fleet, "m")
    samples: list[float] = []
    stop = threading.Event()

    def syncs() -> None:
        while not stop.is_set():
            breaker.record(breaker.acquire())  # something to send
            started = time.perf_counter()
            assert fleet.sync()
            samples.append(time.perf_counter() - started)
            time.sleep(0.01)

    thread = threading.Thread(target=syncs)
    thread.start()
    end = time.monotonic() + seconds
    policy = seawall.RetryPolicy(max_attempts=1)
    while time.monotonic() < end:  # the application's own work holds the GIL too
        for _ in range(1000):
            policy.call(int, "1")
    stop.set()
    thread.join()
    fleet.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--busy", type=int, default=2)
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)]
    try:
        with tempfile.TemporaryDirectory(prefix="seawall-redis-") as directory:
            server = RedisServer(directory)
            server.start()
            try:
                samples = measure(server.url, args.seconds)
            finally:
                server.stop()
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    samples.sort()
    n = len(samples)

    def pct(q: float) -> float:
        return 1000 * samples[min(n - 1, int(q * n))]

    print(
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {args.busy} busy "
        f"processes, {n} sync round trips in {args.seconds:g} s"
    )
    print(
        f"median {1000 * statistics.median(samples):.2f} ms, p99 {pct(0.99):.1f} ms, "
        f"p99.9 {pct(0.999):.1f} ms, max {1000 * samples[-1]:.1f} ms"
    )
    for timeout in CANDIDATES:
        over = sum(s > timeout for s in samples)
        print(f"timeout {1000 * timeout:g} ms: {over} of {n} round trips over ({over / n:.3%})")


if __name__ == "__main__":
    main()

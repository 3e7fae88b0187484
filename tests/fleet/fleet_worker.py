"""One process of a test fleet: ``python fleet_worker.py MODE URL NAMESPACE [ARG]``.

It builds its objects, prints ``ready``, waits for a line on stdin (the go signal), does its
part and prints one JSON line with what it saw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
import time
from typing import Any

import seawall
from seawall import redis as fleet_redis


def dead() -> None:
    raise ConnectionError("the dependency is down")


def amplify(fleet: fleet_redis.Fleet | None, calls: int) -> dict[str, Any]:
    """*calls* calls to a dead dependency, each allowed 3 attempts, under one budget."""
    budget: Any
    if fleet is None:
        budget = seawall.RetryBudget(ratio=0.1, min_per_second=5.0, window=10.0)
    else:
        budget = fleet_redis.SharedRetryBudget(
            fleet, "amplify", ratio=0.1, min_per_second=5.0, window=10.0
        )
    policy = seawall.RetryPolicy(
        max_attempts=3, backoff=seawall.Backoff.constant(0.0), budget=budget
    )
    attempts = 0

    def call() -> None:
        nonlocal attempts
        attempts += 1
        dead()

    go()
    for _ in range(calls):
        with contextlib.suppress(ConnectionError):
            policy.call(call)
        time.sleep(0.0005)  # spread the calls over a few sync intervals
    return {"calls": calls, "attempts": attempts}


def watch(fleet: fleet_redis.Fleet) -> dict[str, Any]:
    """Healthy calls until the breaker fails fast; when that happened."""
    breaker = breaker_of(fleet)
    go()
    calls = 0
    deadline = time.time() + 5.0
    while time.time() < deadline:
        try:
            breaker.call(lambda: None)
        except seawall.CircuitOpen:
            return {"failed_fast_at": time.time(), "calls": calls}
        calls += 1
        time.sleep(0.01)  # fewer calls than the opener's failures: the ratio can tip
    return {"failed_fast_at": None, "calls": calls}


def open_it(fleet: fleet_redis.Fleet) -> dict[str, Any]:
    """Failing calls until this process sees the breaker open; when it saw it."""
    opened: list[float] = []
    breaker = breaker_of(fleet, hooks=[lambda e: opened.append(time.time())])
    go()
    time.sleep(0.3)  # let the watchers make healthy calls first
    while not opened:
        with contextlib.suppress(ConnectionError, seawall.CircuitOpen):
            breaker.call(dead)
        time.sleep(0.002)
    return {"opened_at": opened[0]}


def probe(fleet: fleet_redis.Fleet, seconds: float) -> dict[str, Any]:
    """Ask for permits for *seconds*; keep every probe permit (never report it)."""
    breaker = breaker_of(fleet, open_duration=0.5, half_open_probes=2)
    go()
    probes = refused = 0
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            permit = breaker.acquire()
        except seawall.CircuitOpen:
            refused += 1
        else:
            if permit[1]:
                probes += 1
            else:
                breaker.record(permit)
        time.sleep(0.001)
    return {"probes": probes, "refused": refused}


def hold_probe(fleet: fleet_redis.Fleet) -> dict[str, Any]:
    """Ask until a probe is granted, say when, then hang with it (the test kills us)."""
    breaker = breaker_of(fleet, open_duration=0.5, probe_timeout=1.0)
    go()
    while True:
        try:
            permit = breaker.acquire()
        except seawall.CircuitOpen:
            time.sleep(0.005)
            continue
        if permit[1]:
            print(json.dumps({"probe_at": time.time()}), flush=True)
            time.sleep(3600)  # hung: never reports
        breaker.record(permit)


def amplify_paced(fleet: fleet_redis.Fleet, calls: int, pause: float) -> dict[str, Any]:
    """As amplify, *pause* seconds between calls (the fleet's default interval and timeout)."""
    budget = fleet_redis.SharedRetryBudget(
        fleet, "amplify", ratio=0.1, min_per_second=5.0, window=10.0
    )
    policy = seawall.RetryPolicy(
        max_attempts=3, backoff=seawall.Backoff.constant(0.0), budget=budget
    )
    attempts = 0

    def call() -> None:
        nonlocal attempts
        attempts += 1
        dead()

    go()
    started = time.monotonic()
    for _ in range(calls):
        with contextlib.suppress(ConnectionError):
            policy.call(call)
        time.sleep(pause)
    return {"calls": calls, "attempts": attempts, "seconds": time.monotonic() - started}


def breaker_of(fleet: fleet_redis.Fleet, **config: Any) -> fleet_redis.SharedCircuitBreaker:
    config.setdefault("open_duration", 30.0)
    return fleet_redis.SharedCircuitBreaker(
        fleet, "breaker", minimum_calls=10, window_calls=50, open_jitter=0.0, **config
    )


def go() -> None:
    print("ready", flush=True)
    sys.stdin.readline()


def main() -> None:
    mode, url, namespace = sys.argv[1:4]
    arg = sys.argv[4] if len(sys.argv) > 4 else ""
    fleet = None
    if mode == "amplify-paced":
        logging.getLogger("seawall.redis").setLevel(logging.ERROR)  # it flaps on purpose
        fleet = fleet_redis.Fleet(url, namespace=namespace)  # the defaults
    elif mode != "amplify-local":
        fleet = fleet_redis.Fleet(url, namespace=namespace, interval=0.05, timeout=0.5)
    if mode == "amplify-paced":
        assert fleet is not None
        calls, pause = arg.split(":")
        result = amplify_paced(fleet, int(calls), float(pause))
    elif mode.startswith("amplify"):
        result = amplify(fleet, int(arg))
    elif mode == "watch":
        assert fleet is not None
        result = watch(fleet)
    elif mode == "open":
        assert fleet is not None
        result = open_it(fleet)
    elif mode == "probe":
        assert fleet is not None
        result = probe(fleet, float(arg))
    elif mode == "hold-probe":
        assert fleet is not None
        result = hold_probe(fleet)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    if fleet is not None:
        result["stats"] = dataclasses.asdict(fleet.stats())
        fleet.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

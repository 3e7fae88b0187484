"""Bounded memory on virtual time: a clock that runs a million retried calls keeps kilobytes.

``VirtualClock`` used to keep every wait it was asked for (about 65 MB per million retried
calls, found by the adversarial run); it now keeps the latest ``keep_sleeps`` of them and
counts the rest. Measured with :mod:`tracemalloc`, which counts Python allocations exactly.
"""

from __future__ import annotations

import random
import tracemalloc

import anyio
import pytest

import seawall
import seawall.testing
from backends import Run


def traced_growth(fn: object) -> int:
    """Bytes still allocated after *fn()* returns, of what it allocated."""
    assert callable(fn)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_clock_running_many_retried_calls_keeps_bounded_memory() -> None:
    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(clock=clock, rng=random.Random(0), hooks=(), max_attempts=3)

    def failing_twice() -> str:
        state = {"left": 2}

        def call() -> str:
            if state["left"]:
                state["left"] -= 1
                raise ConnectionError("down")
            return "ok"

        return policy.call(call)

    def run(calls: int = 50_000) -> None:
        for _ in range(calls):  # two waits each
            failing_twice()

    # Warm up first: caches, the kept waits' deque and a coverage tracer's own records fill
    # once; what grows after that grows with the number of calls.
    run(1_000)
    grown = traced_growth(run)
    assert clock.sleep_count == 102_000
    assert len(clock.sleeps) == 1000
    # The waits kept: 1,000 floats in a deque, some 40 KB. Every wait kept would be ~3.3 MB.
    assert grown < 400_000, grown


def test_sleeps_keeps_the_latest_and_counts_all() -> None:
    clock = seawall.VirtualClock(keep_sleeps=3)
    for s in (1.0, 2.0, 3.0, 4.0, 5.0):
        clock.sleep(s)
    assert clock.sleeps == [3.0, 4.0, 5.0]
    assert clock.sleep_count == 5
    assert clock.slept == 15.0
    assert clock.now() == 15.0
    nothing = seawall.VirtualClock(keep_sleeps=0)
    nothing.sleep(1.0)
    assert nothing.sleeps == [] and nothing.sleep_count == 1


def test_async_sleeps_are_counted_too(run: Run) -> None:
    clock = seawall.VirtualClock(keep_sleeps=2)

    async def main() -> None:
        for s in (0.5, 1.5, 2.5):
            await clock.asleep(s)

    run(main(), clock)
    assert clock.sleeps == [1.5, 2.5]
    assert clock.sleep_count == 3
    assert clock.now() == pytest.approx(4.5)


@pytest.mark.parametrize("bad", [-1, 10**7, 1.5, True, None])
def test_keep_sleeps_is_validated(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="keep_sleeps"):
        seawall.VirtualClock(keep_sleeps=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("start", [0.0, 1.7e9, 1e12, -1e12])
def test_virtual_time_timers_fire_at_large_readings(start: float, run: Run) -> None:
    # At 1.7e9 s a float moves in steps of 2.4e-7 s: a fixed 1e-9 s timer resolution vanished
    # in the rounding and a timer reached exactly was never run (the loop spun forever).
    clock = seawall.VirtualClock(start=start)

    async def main() -> float:
        began = anyio.current_time()
        for _ in range(100):
            await anyio.sleep(0.01)
        return anyio.current_time() - began

    assert run(main(), clock) == pytest.approx(1.0, rel=1e-3)
    assert clock.now() - start == pytest.approx(1.0, rel=1e-3)

"""The simulator's asyncio loop (seawall.sim._loop.SimEventLoop): virtual time without a
selector, timers at one instant in the order they were set, and the hedge scenario's attempts
as futures giving the same run as attempts as tasks."""

from __future__ import annotations

import asyncio

import pytest

from seawall import VirtualClock
from seawall.sim import _hedge, hedge
from seawall.sim._loop import SimEventLoop


def _run(main: object, clock: VirtualClock | None = None) -> object:
    loop = SimEventLoop(clock)
    try:
        return loop.run_until_complete(main)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_time_jumps_to_each_timer_and_sleeps_are_virtual() -> None:
    clock = VirtualClock(start=100.0)
    seen: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        seen.append((name, clock.now()))

    async def main() -> float:
        await asyncio.gather(sleeper("b", 3600.0), sleeper("a", 1.5), sleeper("c", 7200.0))
        return clock.now()

    assert _run(main(), clock) == 7300.0
    assert seen == [("a", 101.5), ("b", 3700.0), ("c", 7300.0)]


def test_timers_due_at_one_instant_run_in_the_order_they_were_set() -> None:
    loop = SimEventLoop()
    order: list[int] = []
    for i in range(50):
        loop.call_at(2.0, order.append, i)
    loop.call_at(1.0, order.append, -1)
    loop.call_at(3.0, loop.stop)
    loop.run_forever()
    loop.close()
    assert order == [-1, *range(50)]


def test_timeouts_and_cancellation_follow_virtual_time() -> None:
    clock = VirtualClock()

    async def main() -> tuple[bool, float]:
        try:
            await asyncio.wait_for(asyncio.sleep(10.0), timeout=2.0)
        except asyncio.TimeoutError:
            return True, clock.now()
        return False, clock.now()

    assert _run(main(), clock) == (True, 2.0)


def test_cancelled_timers_never_run_and_are_swept_from_the_heap() -> None:
    loop = SimEventLoop()
    ran: list[int] = []
    handles = [loop.call_at(float(i), ran.append, i) for i in range(1, 1001)]
    for h in handles[:900]:
        h.cancel()
    loop.call_soon(loop.stop)
    loop.run_forever()  # one turn: more than half the timers are cancelled, so they go
    assert len(loop._timers) == 100
    loop.call_at(2000.0, loop.stop)
    loop.run_forever()
    loop.close()
    assert ran == list(range(901, 1001))


def test_every_task_waiting_with_no_timer_is_a_deadlock_not_a_hang() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()  # nothing will ever resolve it

    with pytest.raises(RuntimeError, match="deadlocked"):
        _run(main())


def test_virtual_clock_asleep_waits_on_the_loops_timers() -> None:
    clock = VirtualClock()
    woke: list[tuple[str, float]] = []

    async def via_clock() -> None:
        await clock.asleep(5.0)
        woke.append(("clock", clock.now()))

    async def via_asyncio() -> None:
        await asyncio.sleep(1.0)
        woke.append(("asyncio", clock.now()))

    async def main() -> None:
        await asyncio.gather(via_clock(), via_asyncio())

    _run(main(), clock)
    assert woke == [("asyncio", 1.0), ("clock", 5.0)]


def test_hedge_attempts_as_futures_give_the_run_that_tasks_give(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = hedge(requests=300, quantiles=(0.95, 0.99), seed=4)
    monkeypatch.setattr(_hedge, "_FUTURE_ATTEMPTS", False)
    assert hedge(requests=300, quantiles=(0.95, 0.99), seed=4) == fast
    assert fast.get("p95").hedges > 0 and fast.get("p95").wins > 0

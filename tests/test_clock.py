import asyncio
import math

import pytest

from seawall import SystemClock, VirtualClock
from seawall.testing import run


def test_virtual_clock_jumps() -> None:
    c = VirtualClock(start=5)
    c.sleep(3600)
    assert c.now() == 3605
    c.advance(1.5)
    assert c.now() == 3606.5
    assert c.sleeps == [3600]
    with pytest.raises(ValueError, match="seconds"):
        c.advance(-1)
    with pytest.raises(ValueError, match="start"):
        VirtualClock(start=math.nan)


def test_virtual_event_loop_runs_concurrent_timers_on_one_timeline() -> None:
    clock = VirtualClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.asleep(seconds)
        woke.append((name, clock.now()))

    async def main() -> None:
        await asyncio.gather(sleeper("a", 30), sleeper("b", 10), sleeper("c", 3600))

    run(main(), clock)
    assert woke == [("b", 10), ("a", 30), ("c", 3600)]
    assert clock.now() == 3600


def test_asyncio_timeouts_follow_virtual_time() -> None:
    clock = VirtualClock()

    async def main() -> float:
        # asyncio.TimeoutError is TimeoutError from 3.11 on; distinct on 3.10.
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(asyncio.sleep(100), timeout=7)
        return asyncio.get_running_loop().time()

    assert run(main(), clock) == pytest.approx(7)


def test_virtual_clock_on_a_plain_loop_jumps_at_once() -> None:
    clock = VirtualClock()
    asyncio.run(clock.asleep(50))
    assert clock.now() == 50


def test_system_clock_is_monotonic() -> None:
    c = SystemClock()
    a = c.now()
    c.sleep(0)
    assert c.now() >= a
    asyncio.run(c.asleep(0))

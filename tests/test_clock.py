import asyncio
import math

import anyio
import pytest

from backends import Run
from seawall import SystemClock, VirtualClock
from seawall.testing import run as run_on_asyncio


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


def test_virtual_time_runs_concurrent_timers_on_one_timeline(run: Run) -> None:
    clock = VirtualClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.asleep(seconds)
        woke.append((name, clock.now()))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper, "a", 30)
            tg.start_soon(sleeper, "b", 10)
            tg.start_soon(sleeper, "c", 3600)

    run(main(), clock)
    assert woke == [("b", 10), ("a", 30), ("c", 3600)]
    assert clock.now() == 3600


def test_the_librarys_timeouts_follow_virtual_time(run: Run) -> None:
    clock = VirtualClock()

    async def main() -> float:
        with pytest.raises(TimeoutError), anyio.fail_after(7):
            await anyio.sleep(100)
        return anyio.current_time()

    assert run(main(), clock) == pytest.approx(7)
    assert clock.now() == pytest.approx(7)


def test_asyncio_wait_for_follows_virtual_time() -> None:
    # asyncio's own wait_for on seawall's VirtualEventLoop: asyncio only.
    clock = VirtualClock()

    async def main() -> float:
        # asyncio.TimeoutError is TimeoutError from 3.11 on; distinct on 3.10.
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(asyncio.sleep(100), timeout=7)
        return asyncio.get_running_loop().time()

    assert run_on_asyncio(main(), clock) == pytest.approx(7)


def test_virtual_clock_on_a_plain_loop_jumps_at_once(backend: str) -> None:
    # A plain event loop, not one on virtual time: asyncio.run or trio.run with its own clock.
    clock = VirtualClock()
    anyio.run(clock.asleep, 50, backend=backend)
    assert clock.now() == 50


def test_system_clock_is_monotonic(backend: str) -> None:
    c = SystemClock()
    a = c.now()
    c.sleep(0)
    assert c.now() >= a
    anyio.run(c.asleep, 0, backend=backend)
    assert c.now() >= a

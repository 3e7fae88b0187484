"""The async entry points on trio, and on anyio's trio and asyncio backends.

Waits and cancellations run on trio's MockClock with autojump: virtual time, no real sleeps.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import trio
import trio.testing

import seawall
import seawall.testing


def run_virtual(fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run *fn* on trio with virtual time (the clock jumps whenever every task waits)."""
    return trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


class Flaky:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        await trio.lowlevel.checkpoint()
        if self.calls <= self.failures:
            raise ConnectionError(f"failure {self.calls}")
        return "ok"


def test_decorator_and_acall_retry_on_trio() -> None:
    flaky = Flaky(2)
    policy = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff(base=10.0))

    @policy
    async def decorated() -> str:
        return await flaky()

    async def main() -> tuple[str, float]:
        start = trio.current_time()
        result = await decorated()
        return result, trio.current_time() - start

    result, waited = run_virtual(main)
    assert (result, flaky.calls) == ("ok", 3)
    assert 0.0 <= waited <= 30.0  # the jittered waits, on trio's (virtual) clock

    again = Flaky(5)
    with pytest.raises(ConnectionError, match="failure 3"):
        run_virtual(lambda: policy.acall(again))
    assert again.calls == 3


def test_virtual_clock_policy_on_trio() -> None:
    clock = seawall.VirtualClock()
    flaky = Flaky(2)
    policy = seawall.RetryPolicy(clock=clock, backoff=seawall.Backoff.constant(5.0))
    assert trio.run(policy.acall, flaky) == "ok"
    assert clock.now() == 10.0
    assert clock.sleeps == [5.0, 5.0]


def test_attempt_timeout_cancels_a_slow_attempt_on_trio() -> None:
    calls = []

    async def slow_then_fast() -> str:
        calls.append(trio.current_time())
        if len(calls) == 1:
            await trio.sleep(100)  # cancelled at the attempt's timeout
        return "fast"

    policy = seawall.RetryPolicy(attempt_timeout=1.0, backoff=seawall.Backoff.constant(0.5))
    assert run_virtual(lambda: policy.acall(slow_then_fast)) == "fast"
    assert len(calls) == 2
    assert calls[1] - calls[0] == pytest.approx(1.5)


def test_successful_call_inside_a_deadline_on_trio() -> None:
    async def main() -> tuple[str, float]:
        async with seawall.deadline(2.0):
            left = seawall.remaining()
            result = await seawall.RetryPolicy().acall(Flaky(0))
        return result, left

    result, left = run_virtual(main)
    assert result == "ok"
    assert 0.0 < left <= 2.0
    assert seawall.remaining() == math.inf


def test_deadline_cancels_the_block_on_trio() -> None:
    async def main() -> None:
        async with seawall.deadline(1.0):
            await trio.sleep(100)

    with pytest.raises(seawall.DeadlineExceeded):
        run_virtual(main)


def test_block_api_on_trio() -> None:
    flaky = Flaky(1)
    policy = seawall.RetryPolicy(attempt_timeout=5.0)

    async def main() -> str:
        async for attempt in policy.attempts():
            async with attempt:
                return await flaky()
        raise AssertionError("unreachable")

    assert run_virtual(main) == "ok"
    assert flaky.calls == 2


def test_trio_cancellation_is_never_retried() -> None:
    flaky = Flaky(0)

    async def cancelled() -> str:
        flaky.calls += 1
        await trio.sleep(100)
        return "never"

    async def main() -> None:
        with trio.move_on_after(1.0):
            await seawall.RetryPolicy(max_attempts=5).acall(cancelled)

    run_virtual(main)
    assert flaky.calls == 1


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_anyio_backends(backend: str) -> None:
    flaky = Flaky(1)
    policy = seawall.RetryPolicy(backoff=seawall.Backoff(base=0.001, cap=0.002))

    async def main() -> str:
        async def attempt() -> str:
            flaky.calls += 1
            await anyio.sleep(0)
            if flaky.calls == 1:
                raise ConnectionError("once")
            return "ok"

        async with seawall.deadline(5.0):
            return await policy.acall(attempt)

    assert anyio.run(main, backend=backend) == "ok"
    assert flaky.calls == 2


def test_hedge_on_trio_first_answer_wins_and_losers_are_cancelled() -> None:
    cancelled: list[int] = []
    starts: list[float] = []

    async def replica(name: int) -> str:
        starts.append(trio.current_time())
        try:
            await trio.sleep(10.0 if name == 0 else 1.0)
        except trio.Cancelled:
            cancelled.append(name)
            raise
        return f"replica {name}"

    async def main() -> str:
        return await seawall.hedge(replica, delay=0.5, max_attempts=2, replicas=[0, 1])

    assert run_virtual(main) == "replica 1"
    assert cancelled == [0]
    assert starts[1] - starts[0] == pytest.approx(0.5)


def test_hedge_on_trio_failures() -> None:
    calls: list[int] = []

    async def refused() -> str:
        calls.append(1)
        raise ConnectionError("refused")

    async def bad() -> str:
        calls.append(2)
        raise ValueError("bad input")

    # A retryable failure sends the next hedge at once; the last error is raised, unchanged.
    with pytest.raises(ConnectionError, match="refused"):
        run_virtual(lambda: seawall.hedge(refused, delay=5.0, max_attempts=3))
    assert calls == [1, 1, 1]
    with pytest.raises(ValueError, match="bad input"):
        run_virtual(lambda: seawall.hedge(bad, delay=5.0, max_attempts=3))
    assert calls == [1, 1, 1, 2]


def test_pipeline_with_breaker_and_hedge_on_trio() -> None:
    flaky = Flaky(1)
    pipeline = seawall.Pipeline(
        retry=seawall.RetryPolicy(backoff=seawall.Backoff.constant(1.0)),
        breaker=seawall.CircuitBreaker(),
        hedge=seawall.Hedge(delay=5.0),
    )
    assert run_virtual(lambda: pipeline.acall(flaky)) == "ok"
    assert flaky.calls == 2


def test_asyncio_users_import_neither_trio_nor_sniffio() -> None:
    import subprocess
    import sys

    code = (
        "import asyncio, sys, seawall\n"
        "async def ok():\n"
        "    return 1\n"
        "async def main():\n"
        "    async with seawall.deadline(5):\n"
        "        await seawall.RetryPolicy(attempt_timeout=1).acall(ok)\n"
        "        await seawall.hedge(ok, delay=1)\n"
        "        await seawall.SystemClock().asleep(0)\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in ('trio', 'sniffio', 'anyio') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_trio_clock_puts_trio_on_a_virtual_clock() -> None:
    """trio's timers and VirtualClock.asleep share one timeline: concurrent waits overlap."""
    clock = seawall.VirtualClock(start=100.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float, wait: Callable[[float], Awaitable[None]]) -> None:
        await wait(seconds)
        woke.append((name, clock.now()))

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper, "trio", 3.0, trio.sleep)
            nursery.start_soon(sleeper, "policy clock", 2.0, clock.asleep)
        return trio.current_time()

    ended = seawall.testing.run(main(), clock, backend="trio")
    assert woke == [("policy clock", 102.0), ("trio", 103.0)]  # 3 s in all, not 5
    assert ended == clock.now() == 103.0
    assert clock.sleeps == [2.0]


def test_run_refuses_an_unknown_backend() -> None:
    async def main() -> None:
        raise AssertionError("never started")

    with pytest.raises(ValueError, match="backend"):
        seawall.testing.run(main(), backend="curio")
    with pytest.raises(TypeError, match="clock"):
        seawall.testing.trio_clock(trio.testing.MockClock())  # type: ignore[arg-type]

"""A half-open probe has its own timeout: one that hangs cannot keep the breaker half-open.

The adversarial run saw a probe hang while the dependency had recovered: every other call was
rejected as "half-open, probe in flight" for as long as the probe hung (245 calls in 2.5 s).
Probes that have not answered within ``probe_timeout`` now count as failed: the breaker re-opens,
and after the open period a fresh probe finds the dependency healthy. On virtual time.
"""

from __future__ import annotations

import random

import anyio
import pytest

import seawall
from backends import Run
from seawall.lowlevel import BreakerEvent


def opened(clock: seawall.VirtualClock, **kwargs: object) -> seawall.CircuitBreaker:
    breaker = seawall.CircuitBreaker(
        minimum_calls=2,
        window_calls=2,
        open_duration=10.0,
        open_jitter=0.0,
        clock=clock,
        rng=random.Random(0),
        **kwargs,  # type: ignore[arg-type]
    )
    for _ in range(2):
        breaker.record(breaker.acquire(), ConnectionError("down"))
    assert breaker.state == "open"
    return breaker


def test_a_hung_probe_reopens_the_breaker_after_probe_timeout() -> None:
    clock = seawall.VirtualClock()
    breaker = opened(clock, probe_timeout=2.0)
    clock.advance(10.0)
    hung = breaker.acquire()  # the probe; it never reports
    assert hung[1] is True
    clock.advance(1.9)
    with pytest.raises(seawall.CircuitOpen) as waiting:
        breaker.acquire()
    assert waiting.value.state == "half_open"
    clock.advance(0.1)
    with pytest.raises(seawall.CircuitOpen) as reopened:
        breaker.acquire()
    assert reopened.value.state == "open"
    assert reopened.value.retry_after == pytest.approx(10.0)
    assert breaker.state == "open"
    # The hung probe's late success belongs to the old generation: it changes nothing.
    breaker.record(hung, None)
    assert breaker.state == "open"
    clock.advance(10.0)
    probe = breaker.acquire()
    breaker.record(probe, None)
    assert breaker.state == "closed"


def test_probe_timeout_defaults_to_the_open_duration() -> None:
    clock = seawall.VirtualClock()
    breaker = opened(clock)
    assert breaker.probe_timeout == breaker.open_duration == 10.0
    clock.advance(10.0)
    breaker.acquire()
    clock.advance(9.99)
    with pytest.raises(seawall.CircuitOpen, match="half-open"):
        breaker.acquire()
    clock.advance(0.01)
    with pytest.raises(seawall.CircuitOpen, match="open"):
        breaker.acquire()
    assert breaker.state == "open"


@pytest.mark.parametrize("probe_timeout", [0.5, None])
def test_a_healthy_dependency_is_served_again_despite_a_hung_probe(
    probe_timeout: float | None, run: Run
) -> None:
    # Callers every 10 ms for 30 s; the dependency recovered, but the first probe hangs for an
    # hour. Without a probe timeout every caller after it was rejected.
    clock = seawall.VirtualClock()
    # None: the default (the open duration), given by leaving the argument out.
    breaker = opened(clock, **({} if probe_timeout is None else {"probe_timeout": probe_timeout}))
    hold = probe_timeout or 10.0
    answered: list[float] = []
    rejected: list[float] = []

    async def dependency(first: list[bool]) -> str:
        if not first:
            first.append(True)
            await anyio.sleep(3600.0)  # the hung probe
        return "ok"

    async def main() -> None:
        first: list[bool] = []
        await anyio.sleep(10.0)  # the breaker's open period ends

        async def caller() -> None:
            try:
                await breaker.acall(dependency, first)
                answered.append(anyio.current_time())
            except seawall.CircuitOpen:
                rejected.append(anyio.current_time())

        async with anyio.create_task_group() as tasks:
            for _ in range(3000):  # 30 s of callers
                tasks.start_soon(caller)
                await anyio.sleep(0.01)
            while len(answered) + len(rejected) < 3000 - 1:
                await anyio.sleep(0.01)  # every caller but the hung probe has its answer
            tasks.cancel_scope.cancel()  # the hung probe

    run(main(), clock)
    assert breaker.state == "closed"
    # Rejected only while the probe hung (probe_timeout) and the breaker was open again (10 s).
    assert len(rejected) <= (hold + 10.0) / 0.01 + 2
    assert len(answered) == 3000 - 1 - len(rejected)
    assert max(rejected) <= 10.0 + hold + 10.0 + 0.02


def test_the_reopen_hook_runs_outside_the_lock() -> None:
    clock = seawall.VirtualClock()
    seen: list[tuple[str, str]] = []
    breaker: seawall.CircuitBreaker

    def hook(event: BreakerEvent) -> None:
        seen.append((event.new, breaker.state))  # reads the breaker: would deadlock under it

    breaker = opened(clock, probe_timeout=1.0, hooks=[hook])
    clock.advance(10.0)
    breaker.acquire()
    clock.advance(1.0)
    with pytest.raises(seawall.CircuitOpen):
        breaker.acquire()
    assert seen[-2:] == [("half_open", "half_open"), ("open", "open")]


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), 10**400, 1e10])
def test_probe_timeout_is_validated(bad: float) -> None:
    with pytest.raises(ValueError, match="probe_timeout"):
        seawall.CircuitBreaker(probe_timeout=bad)
    with pytest.raises(TypeError, match="probe_timeout"):
        seawall.CircuitBreaker(probe_timeout="1s")  # type: ignore[arg-type]

"""``testing.instant()`` runs the system clock on instant time: waits pass at once, the
deadlines that bound a call see them pass, and the timeouts seawall enforces on blocked async
code fire after a short grace instead of their whole length."""

from __future__ import annotations

import asyncio
import time

import pytest
import trio

import seawall
from seawall import Backoff, DeadlineExceeded, RetryPolicy

pytest_plugins = ["pytester"]


def always_down() -> None:
    raise ConnectionError("down")


def test_a_timeout_allows_the_attempts_it_allows_in_production() -> None:
    # Attempts at t = 0, 4 and 8 s; a fourth would start after the 10 s timeout.
    policy = RetryPolicy(max_attempts=10, backoff=Backoff.constant(4.0), timeout=10.0, hooks=())
    start = time.monotonic()
    with seawall.testing.instant():
        outcome = policy.run(always_down)
    assert (outcome.attempts, outcome.reason, outcome.total_delay) == (3, "deadline", 8.0)
    assert time.monotonic() - start < 2.0  # nothing slept


def test_an_ambient_deadline_sees_the_skipped_waits() -> None:
    policy = RetryPolicy(max_attempts=10, backoff=Backoff.constant(4.0), hooks=())
    with seawall.testing.instant(), seawall.deadline(10.0):
        outcome = policy.run(always_down)
        assert seawall.remaining() < 2.0 + 0.5  # 8 s of the 10 skipped
    assert (outcome.attempts, outcome.reason) == (3, "deadline")


def test_outside_instant_the_system_clock_is_real_again() -> None:
    with seawall.testing.instant():
        seawall.SystemClock().sleep(3600.0)
    start = time.monotonic()
    seawall.SystemClock().sleep(0.01)
    assert time.monotonic() - start >= 0.01


async def hang() -> None:
    await asyncio.sleep(3600)


def hanging_policy() -> RetryPolicy:
    return RetryPolicy(
        max_attempts=3, attempt_timeout=30.0, backoff=Backoff.constant(1.0), hooks=()
    )


def test_a_hanging_asyncio_attempt_times_out_after_the_grace() -> None:
    async def main() -> seawall.Outcome[None]:
        with seawall.testing.instant(grace=0.05):
            # Without instant time: three attempts of 30 s each; the guard gives 10 s.
            return await asyncio.wait_for(hanging_policy().arun(hang), 10.0)

    start = time.monotonic()
    outcome = asyncio.run(main())
    assert outcome.attempts == 3
    assert isinstance(outcome.error, TimeoutError)
    assert outcome.reason == "attempts_exhausted"
    assert time.monotonic() - start < 5.0


def test_a_hanging_trio_attempt_times_out_after_the_grace() -> None:
    async def hang_trio() -> None:
        await trio.sleep(3600)

    async def main() -> seawall.Outcome[None]:
        with seawall.testing.instant(grace=0.05), trio.fail_after(10.0):
            return await hanging_policy().arun(hang_trio)

    outcome = trio.run(main)
    assert outcome.attempts == 3
    assert isinstance(outcome.error, TimeoutError)


def test_a_fast_attempt_inside_the_grace_is_not_cut_short() -> None:
    async def quick() -> str:
        await asyncio.sleep(0.001)
        return "ok"

    async def main() -> str:
        with seawall.testing.instant(grace=0.5):
            return await hanging_policy().acall(quick)

    assert asyncio.run(main()) == "ok"


@pytest.mark.parametrize("form", ["async with", "with"])
def test_a_deadline_scope_cancels_blocked_code_after_the_grace(form: str) -> None:
    async def main() -> None:
        with seawall.testing.instant(grace=0.05):
            if form == "async with":
                async with seawall.deadline(60.0):
                    await asyncio.sleep(3600)
            else:
                with seawall.deadline(60.0):
                    await asyncio.sleep(3600)

    start = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        asyncio.run(asyncio.wait_for(main(), 10.0))
    assert time.monotonic() - start < 5.0


def test_grace_is_validated() -> None:
    with pytest.raises(ValueError, match="grace"), seawall.testing.instant(grace=-1.0):
        pass  # pragma: no cover - never entered


def test_the_fixture_makes_attempt_timeouts_instant(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
import asyncio, time
import seawall

def test_hang(seawall_instant):
    policy = seawall.RetryPolicy(max_attempts=3, attempt_timeout=30.0, hooks=())

    async def hang():
        await asyncio.sleep(3600)

    start = time.monotonic()
    outcome = asyncio.run(asyncio.wait_for(policy.arun(hang), 10.0))
    assert outcome.attempts == 3
    assert time.monotonic() - start < 5.0
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)

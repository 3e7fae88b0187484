"""``fn.statistics``: what the calls of a decorated function did, counted as they end."""

from __future__ import annotations

import asyncio
import threading

import pytest

import seawall
from seawall import Backoff, Permanent, RetryPolicy, VirtualClock
from seawall.lowlevel import RetryStatistics


def flaky(pattern: list[bool]) -> tuple[list[int], object]:
    """A function failing (True) or succeeding (False) by *pattern*, cyclically."""
    calls = [0]

    def fn() -> int:
        failing = pattern[calls[0] % len(pattern)]
        calls[0] += 1
        if failing:
            raise ConnectionError("reset")
        return calls[0]

    return calls, fn


def counted(clock: VirtualClock, **kwargs: object) -> RetryPolicy:
    return RetryPolicy(
        backoff=Backoff.constant(0.5), clock=clock, hooks=(), statistics=True, **kwargs
    )  # type: ignore[arg-type]


def test_counts_calls_attempts_retries_waits_and_give_ups() -> None:
    clock = VirtualClock()
    # call 1: fails twice, then succeeds; call 2: succeeds at once; call 3: fails 3 times.
    _, fn = flaky([True, True, False, False, True, True, True])
    wrapped = counted(clock, max_attempts=3)(fn)
    assert isinstance(wrapped.statistics, RetryStatistics)
    wrapped()
    wrapped()
    with pytest.raises(ConnectionError):
        wrapped()
    assert wrapped.statistics.as_dict() == {
        "calls": 3,
        "attempts": 3 + 1 + 3,
        "retries": 2 + 0 + 2,
        "give_ups": {"attempts_exhausted": 1},
        "total_delay": 4 * 0.5,
    }
    assert clock.slept == 4 * 0.5  # the waits counted are the waits made
    s = wrapped.statistics
    assert (s.calls, s.attempts, s.retries, s.total_delay) == (3, 7, 4, 2.0)
    assert s.give_ups == {"attempts_exhausted": 1}
    assert "calls=3" in repr(s)


def test_give_ups_by_reason() -> None:
    clock = VirtualClock()

    @counted(clock, max_attempts=3)
    def refuses() -> None:
        raise Permanent("no")

    @counted(clock, max_attempts=3, timeout=0.7)
    def slow() -> None:
        raise ConnectionError("reset")

    for fn in (refuses, slow):
        with pytest.raises((Permanent, ConnectionError)):
            fn()
    assert refuses.statistics.give_ups == {"not_retryable": 1}
    assert refuses.statistics.as_dict()["attempts"] == 1
    # 0.5 s waited once; a second wait would cross the 0.7 s timeout.
    assert slow.statistics.as_dict() == {
        "calls": 1,
        "attempts": 2,
        "retries": 1,
        "give_ups": {"deadline": 1},
        "total_delay": 0.5,
    }


def test_reset_starts_from_zero_and_counting_goes_on() -> None:
    clock = VirtualClock()
    _, fn = flaky([True, False])
    wrapped = counted(clock)(fn)
    for _ in range(5):
        wrapped()
    assert wrapped.statistics.calls == 5
    wrapped.statistics.reset()
    assert wrapped.statistics.as_dict() == {
        "calls": 0,
        "attempts": 0,
        "retries": 0,
        "give_ups": {},
        "total_delay": 0.0,
    }
    wrapped()
    assert (wrapped.statistics.calls, wrapped.statistics.attempts) == (1, 2)


def test_each_decorated_function_counts_its_own_calls() -> None:
    clock = VirtualClock()
    policy = counted(clock)
    a = policy(lambda: 1)
    b = policy(lambda: 2)
    a()
    a()
    b()
    assert (a.statistics.calls, b.statistics.calls) == (2, 1)
    once = a.retry_with(max_attempts=1)
    once()
    assert once.statistics is not a.statistics
    assert a.statistics.calls == 2


def test_off_by_default() -> None:
    assert RetryPolicy(hooks=())(lambda: 1).statistics is None
    with pytest.raises(TypeError, match="statistics"):
        RetryPolicy(statistics="yes")  # type: ignore[arg-type]


def test_policies_off_the_first_attempt_path_count_too() -> None:
    """A policy with an attempt timeout runs every call in the retrying loop; an ambient
    deadline sends a fast policy's call there too."""
    clock = VirtualClock()
    _, fn = flaky([True, False])
    timed = counted(clock, attempt_timeout=5.0)(fn)
    timed()
    _, fn2 = flaky([True, False])
    plain = counted(clock)(fn2)
    with seawall.deadline(60.0, clock=clock):
        plain()
    for wrapped in (timed, plain):
        assert wrapped.statistics.as_dict()["attempts"] == 2
        assert wrapped.statistics.calls == 1


def test_async_functions_count_alike() -> None:
    clock = VirtualClock()
    calls = [0]

    @counted(clock)
    async def fetch() -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise ConnectionError("reset")
        return calls[0]

    async def main() -> None:
        await fetch()  # one retry
        await fetch()  # first attempt

    asyncio.run(main())
    assert fetch.statistics.as_dict()["calls"] == 2
    assert fetch.statistics.as_dict()["attempts"] == 3
    assert fetch.statistics.retries == 1


def test_threads_calling_one_function_lose_no_count() -> None:
    clock = VirtualClock()
    wrapped = counted(clock)(lambda: 1)
    local = threading.local()

    def fails_every_other_attempt() -> int:
        local.n = getattr(local, "n", 0) + 1  # per thread: each call fails once, then succeeds
        if local.n % 2:
            raise ConnectionError("reset")
        return local.n

    retried = counted(clock)(fails_every_other_attempt)

    def work() -> None:
        for _ in range(2000):
            wrapped()
            retried()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrapped.statistics.calls == 8000
    assert retried.statistics.as_dict()["calls"] == 8000
    assert retried.statistics.as_dict()["attempts"] == 16000


@pytest.mark.parametrize(
    "pattern",
    [[True] * 5, [True, False], [True, True, True, False], [False], [True, True, False, True]],
)
def test_a_call_without_hooks_counts_as_one_with_hooks(pattern: list[bool]) -> None:
    # Without hooks (and no deadline, no timeouts), a retried call reads no clock and its
    # retry decisions begin the next attempt themselves; with a hook it takes the general
    # loop. Both must count the same attempts, waits and give-ups.
    seen: list[seawall.RetryEvent] = []
    results = []
    for hooks in ((), (seen.append,)):
        clock = VirtualClock()
        _, fn = flaky(pattern)
        policy = RetryPolicy(
            backoff=Backoff.constant(0.25),
            clock=clock,
            hooks=hooks,
            statistics=True,
            max_attempts=4,
        )
        wrapped = policy(fn)
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append(wrapped())
            except ConnectionError:
                outcomes.append(None)
        results.append((outcomes, wrapped.statistics.as_dict(), clock.slept))
    assert results[0] == results[1]
    stats = results[1][1]
    assert stats["retries"] == sum(e.kind == "retry" for e in seen)
    assert stats["attempts"] == stats["retries"] + stats["calls"]

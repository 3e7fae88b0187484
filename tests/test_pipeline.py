import math
from typing import Any

import anyio
import pytest

import seawall
from backends import Run
from seawall import (
    Backoff,
    CircuitBreaker,
    CircuitOpen,
    DeadlineExceeded,
    Hedge,
    Pipeline,
    RetryPolicy,
    VirtualClock,
)


def policy(clock: VirtualClock, **kwargs: Any) -> RetryPolicy:
    kwargs.setdefault("max_attempts", 5)
    kwargs.setdefault("backoff", Backoff.constant(1.0))
    return RetryPolicy(clock=clock, hooks=(), **kwargs)


def breaker(clock: VirtualClock, **kwargs: Any) -> CircuitBreaker:
    kwargs.setdefault("minimum_calls", 3)
    kwargs.setdefault("window_calls", 10)
    kwargs.setdefault("open_duration", 100.0)
    kwargs.setdefault("open_jitter", 0.0)
    return CircuitBreaker(clock=clock, **kwargs)


def test_empty_pipeline_just_calls(run: Run) -> None:
    pipe = Pipeline()
    assert pipe.call(divmod, 7, 2) == (3, 1)

    async def double(x: int) -> int:
        return 2 * x

    assert run(pipe.acall(double, 4)) == 8


def test_retry_through_breaker_sync() -> None:
    clock = VirtualClock()
    cb = breaker(clock)
    pipe = Pipeline(retry=policy(clock), breaker=cb)
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("reset")
        return "ok"

    assert pipe.call(flaky) == "ok"
    assert calls == 3
    assert cb.metrics() == (3, 2, 0)  # each retry attempt passed the breaker


def test_breaker_opening_stops_the_retries_at_once() -> None:
    clock = VirtualClock()
    cb = breaker(clock)
    pipe = Pipeline(retry=policy(clock, max_attempts=10), breaker=cb)
    calls = 0

    def down() -> str:
        nonlocal calls
        calls += 1
        raise ConnectionError("down")

    with pytest.raises(CircuitOpen) as info:
        pipe.call(down)
    # Three attempts opened the breaker; the fourth was refused and not retried.
    assert calls == 3
    assert info.value.retry_after == pytest.approx(99.0)  # refused 1 s after it opened
    assert clock.sleeps == [1.0, 1.0, 1.0]


def test_sync_total_timeout_is_the_retry_deadline() -> None:
    clock = VirtualClock()
    pipe = Pipeline(timeout=2.5, retry=policy(clock, max_attempts=100), clock=clock)
    seen: list[float] = []

    def down() -> str:
        seen.append(seawall.remaining())
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        pipe.call(down)
    assert seen == [2.5, 1.5, 0.5]  # no wait crossed the deadline
    assert clock.now() == 2.0


def test_sync_attempt_timeout_is_visible_to_the_attempt() -> None:
    clock = VirtualClock()
    pipe = Pipeline(timeout=10.0, attempt_timeout=0.5, clock=clock)
    assert pipe.call(seawall.remaining) == 0.5


def test_async_attempt_timeout_counts_as_a_breaker_failure(run: Run) -> None:
    clock = VirtualClock()
    cb = breaker(clock)
    pipe = Pipeline(retry=policy(clock, max_attempts=10), breaker=cb, attempt_timeout=0.2)
    started = 0

    async def hang() -> str:
        nonlocal started
        started += 1
        await anyio.sleep(60)
        return "late"

    async def main() -> None:
        with pytest.raises(CircuitOpen):
            await pipe.acall(hang)
        # Three attempts of 0.2 s, separated by 1 s waits, then the open breaker refused.
        assert clock.now() == pytest.approx(3 * 0.2 + 3 * 1.0)

    run(main(), clock)
    assert started == 3
    assert cb.state == "open"


def test_async_total_timeout_cancels_and_is_not_a_breaker_failure(run: Run) -> None:
    clock = VirtualClock()
    cb = breaker(clock)
    pipe = Pipeline(timeout=5.0, retry=policy(clock), breaker=cb)

    async def hang() -> str:
        await anyio.sleep(60)
        return "late"

    async def main() -> None:
        with pytest.raises(DeadlineExceeded):
            await pipe.acall(hang)
        assert clock.now() == pytest.approx(5.0)

    run(main(), clock)
    assert cb.metrics() == (0, 0, 0)  # the caller's deadline, not the dependency's failure


def test_hedge_is_inside_the_attempt_timeout(run: Run) -> None:
    clock = VirtualClock()
    starts: list[float] = []

    async def slow_then_fast() -> str:
        starts.append(clock.now())
        await anyio.sleep(1.0 if len(starts) % 2 else 0.05)
        return "ok"

    hedge = Hedge(0.1, clock=clock)
    pipe = Pipeline(retry=policy(clock), attempt_timeout=0.3, hedge=hedge)

    async def main() -> None:
        assert await pipe.acall(slow_then_fast) == "ok"
        assert clock.now() == pytest.approx(0.15)

    run(main(), clock)
    assert starts == [0.0, pytest.approx(0.1)]
    assert hedge.hedges == 1


def test_attempt_timeout_bounds_the_hedged_group_and_retry_follows(run: Run) -> None:
    clock = VirtualClock()
    starts: list[float] = []

    async def always_slow() -> str:
        starts.append(clock.now())
        await anyio.sleep(10.0)
        return "late"

    pipe = Pipeline(
        retry=policy(clock, max_attempts=2),
        attempt_timeout=0.3,
        hedge=Hedge(0.1, max_attempts=3, clock=clock),
    )

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await pipe.acall(always_slow)

    run(main(), clock)
    # Two retry attempts, each a hedged group of three started 0.1 s apart, cut at 0.3 s.
    assert [round(t, 6) for t in starts] == [0.0, 0.1, 0.2, 1.3, 1.4, 1.5]


class Ledger:
    def __init__(self) -> None:
        self.requests = self.successes = self.failures = self.withdrawals = 0

    def on_request(self) -> None:
        self.requests += 1

    def allow_retry(self, error: BaseException) -> bool:
        self.withdrawals += 1
        return True

    def on_success(self) -> None:
        self.successes += 1

    def on_failure(self, error: BaseException) -> None:
        self.failures += 1


def test_shared_budget_counts_each_call_once(run: Run) -> None:
    clock = VirtualClock()
    budget = Ledger()
    hedge = Hedge(0.1, budget=budget, clock=clock)

    async def slow() -> str:
        await anyio.sleep(1.0)
        return "ok"

    pipe = Pipeline(retry=policy(clock, budget=budget), hedge=hedge)
    run(pipe.acall(slow), clock)
    assert budget.requests == 1
    assert budget.successes == 1
    assert budget.withdrawals == 1  # the hedge


def test_decorators(run: Run) -> None:
    clock = VirtualClock()
    pipe = Pipeline(retry=policy(clock), breaker=breaker(clock))

    @pipe
    def add(a: int, b: int) -> int:
        return a + b

    @pipe
    async def aadd(a: int, b: int) -> int:
        return a + b

    assert add(1, 2) == 3
    assert add.__name__ == "add"
    assert run(aadd(2, 3)) == 5


def test_hedging_needs_asyncio() -> None:
    pipe = Pipeline(hedge=Hedge(0.1))
    with pytest.raises(TypeError, match="acall"):
        pipe.call(print)
    with pytest.raises(TypeError, match="async def"):
        pipe(print)


def test_repr_lists_layers() -> None:
    text = repr(Pipeline(timeout=1.0, attempt_timeout=0.5))
    assert text == "Pipeline(timeout=1.0, attempt_timeout=0.5)"


@pytest.mark.parametrize(
    ("kwargs", "exc", "word"),
    [
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": math.nan}, ValueError, "timeout"),
        ({"attempt_timeout": "1"}, TypeError, "attempt_timeout"),
        ({"retry": 3}, TypeError, "retry"),
        ({"breaker": object()}, TypeError, "breaker"),
        ({"hedge": 0.1}, TypeError, "hedge"),
        ({"clock": 1}, TypeError, "clock"),
    ],
)
def test_invalid_configuration(kwargs: dict[str, Any], exc: type[Exception], word: str) -> None:
    with pytest.raises(exc, match=word):
        Pipeline(**kwargs)

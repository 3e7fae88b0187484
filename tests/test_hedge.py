import functools
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import seawall
from backends import Run
from seawall import Hedge, LatencyTracker, Overloaded, Permanent, VirtualClock


class Server:
    """A fake dependency on virtual time: each request takes the next latency from *latencies*."""

    def __init__(self, *latencies: float, errors: dict[int, BaseException] | None = None) -> None:
        self.latencies = list(latencies)
        self.errors = errors or {}
        self.started: list[tuple[float, Any]] = []
        self.cancelled: list[int] = []
        self.finished: list[int] = []

    async def __call__(self, replica: Any = None) -> str:
        n = len(self.started)
        self.started.append((anyio.current_time(), replica))
        try:
            await anyio.sleep(self.latencies[n % len(self.latencies)])
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(n)
            raise
        finally:
            self.finished.append(n)
        if n in self.errors:
            raise self.errors[n]
        return f"answer {n}"


Virtual = Callable[[Callable[[VirtualClock], Awaitable[Any]]], Any]


@pytest.fixture
def virtual(run: Run) -> Virtual:
    """``virtual(main)``: ``main(clock)`` run on a fresh VirtualClock, on the test's backend."""

    def virtual(main: Callable[[VirtualClock], Awaitable[Any]]) -> Any:
        clock = VirtualClock()

        async def wrapper() -> Any:
            return await main(clock)

        return run(wrapper(), clock)

    return virtual


def test_fast_answer_makes_no_extra_attempt(virtual: Virtual) -> None:
    server = Server(0.01)

    async def main(clock: VirtualClock) -> None:
        assert await seawall.hedge(server, delay=0.05, clock=clock) == "answer 0"
        assert clock.now() == pytest.approx(0.01)

    virtual(main)
    assert len(server.started) == 1


def test_slow_answer_is_hedged_and_the_loser_is_cancelled(virtual: Virtual) -> None:
    server = Server(10.0, 0.02)

    async def main(clock: VirtualClock) -> None:
        policy = Hedge(0.05, clock=clock)
        assert await policy.acall(server) == "answer 1"
        # The hedge started at 50 ms and answered 20 ms later.
        assert clock.now() == pytest.approx(0.07)
        # Cancellation reached the loser's await, and its cleanup ran before we got the answer.
        assert server.cancelled == [0]
        assert sorted(server.finished) == [0, 1]
        assert (policy.calls, policy.hedges, policy.wins) == (1, 1, 1)

    virtual(main)
    assert [round(t, 6) for t, _ in server.started] == [0.0, 0.05]


def test_first_attempt_may_still_win_after_the_hedge_started(virtual: Virtual) -> None:
    server = Server(0.06, 1.0)

    async def main(clock: VirtualClock) -> None:
        assert await seawall.hedge(server, delay=0.05, clock=clock) == "answer 0"
        assert clock.now() == pytest.approx(0.06)

    virtual(main)
    assert server.cancelled == [1]


def test_replicas_receive_one_attempt_each(virtual: Virtual) -> None:
    server = Server(10.0, 10.0, 0.01)

    async def main(clock: VirtualClock) -> str:
        return await seawall.hedge(
            server, delay=0.1, max_attempts=3, replicas=["a", "b", "c"], clock=clock
        )

    assert virtual(main) == "answer 2"
    assert [r for _, r in server.started] == ["a", "b", "c"]
    assert sorted(server.cancelled) == [0, 1]


def test_caller_cancellation_reaches_every_attempt(virtual: Virtual) -> None:
    server = Server(10.0)

    async def main(clock: VirtualClock) -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(functools.partial(seawall.hedge, server, delay=0.05, max_attempts=3))
            await anyio.sleep(1.0)
            assert len(server.started) == 3
            tasks.cancel_scope.cancel()  # the caller cancels the call
        assert sorted(server.cancelled) == [0, 1, 2]

    virtual(main)


def test_retryable_failure_starts_the_next_attempt_at_once(virtual: Virtual) -> None:
    server = Server(0.01, 0.01, errors={0: ConnectionError("reset")})

    async def main(clock: VirtualClock) -> None:
        assert await seawall.hedge(server, delay=1.0, clock=clock) == "answer 1"
        assert clock.now() == pytest.approx(0.02)

    virtual(main)


def test_fatal_error_ends_the_call_and_cancels_the_rest(virtual: Virtual) -> None:
    server = Server(10.0, 0.01, errors={1: Permanent("404")})

    async def main(clock: VirtualClock) -> None:
        with pytest.raises(Permanent):
            await seawall.hedge(server, delay=0.05, clock=clock)
        assert server.cancelled == [0]

    virtual(main)


def test_every_attempt_failing_raises_the_last_error(virtual: Virtual) -> None:
    first, second = ConnectionError("one"), ConnectionError("two")
    server = Server(0.01, 0.01, errors={0: first, 1: second})

    async def main(clock: VirtualClock) -> None:
        with pytest.raises(ConnectionError) as info:
            await seawall.hedge(server, delay=1.0, clock=clock)
        assert info.value is second

    virtual(main)


class CountingBudget:
    """A Budget that allows *allowed* withdrawals and counts every call it receives."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.requests = self.successes = self.failures = self.withdrawals = 0
        self.reasons: list[BaseException] = []

    def on_request(self) -> None:
        self.requests += 1

    def allow_retry(self, error: BaseException) -> bool:
        self.reasons.append(error)
        if self.allowed <= 0:
            return False
        self.allowed -= 1
        self.withdrawals += 1
        return True

    def on_success(self) -> None:
        self.successes += 1

    def on_failure(self, error: BaseException) -> None:
        self.failures += 1


def test_hedges_draw_from_the_budget_and_stop_when_it_is_empty(virtual: Virtual) -> None:
    budget = CountingBudget(allowed=2)
    server = Server(1.0)

    async def main(clock: VirtualClock) -> None:
        policy = Hedge(0.1, budget=budget, clock=clock)
        for _ in range(5):
            await policy.acall(server)
        assert policy.hedges == 2

    virtual(main)
    assert len(server.started) == 7
    assert budget.requests == 5
    assert budget.successes == 5
    assert all(isinstance(e, seawall.lowlevel.HedgeDelayPassed) for e in budget.reasons)


def test_allow_hedge_is_preferred_when_the_budget_has_it(virtual: Virtual) -> None:
    class HedgeAware(CountingBudget):
        def __init__(self) -> None:
            super().__init__(allowed=100)
            self.hedge_asks = 0

        def allow_hedge(self, error: BaseException) -> bool:
            self.hedge_asks += 1
            return False

    budget = HedgeAware()
    server = Server(1.0)

    async def main(clock: VirtualClock) -> None:
        await seawall.hedge(server, delay=0.1, budget=budget, clock=clock)

    virtual(main)
    assert budget.hedge_asks == 1
    assert budget.withdrawals == 0
    assert len(server.started) == 1


def test_budget_sees_overload_as_failure_and_permanent_as_answer(virtual: Virtual) -> None:
    budget = CountingBudget(allowed=10)

    async def main(clock: VirtualClock) -> None:
        with pytest.raises(Overloaded):
            await seawall.hedge(Server(0.01, errors={0: Overloaded()}), delay=1, budget=budget)
        with pytest.raises(Permanent):
            await seawall.hedge(Server(0.01, errors={0: Permanent()}), delay=1, budget=budget)

    virtual(main)
    assert (budget.failures, budget.successes) == (1, 1)


def test_max_extra_load_bounds_hedges(virtual: Virtual) -> None:
    server = Server(1.0)  # every attempt is slow: unbounded, every call would hedge

    async def main(clock: VirtualClock) -> None:
        policy = Hedge(0.1, max_extra_load=0.05, clock=clock)
        for _ in range(400):
            await policy.acall(server)
        assert policy.calls == 400
        # 5 % of 400 calls, plus at most the saved-up tokens.
        assert 15 <= policy.hedges <= 0.05 * 400 + 5

    virtual(main)


def test_adaptive_delay_follows_the_trackers_percentile() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=None, clock=clock)
    policy = Hedge(tracker, quantile=0.5, min_samples=10, clock=clock)
    assert policy.delay == math.inf  # no data: hedge only after failures
    for ms in range(1, 101):
        tracker.record(ms / 1000)
    assert policy.delay == pytest.approx(0.050, rel=0.03)
    floor = Hedge(tracker, quantile=0.5, min_delay=0.2, clock=clock)
    assert floor.delay == 0.2


def test_adaptive_hedge_records_call_latency(virtual: Virtual) -> None:
    server = Server(0.01, 0.01, 0.01, 0.5, 0.01)

    async def main(clock: VirtualClock) -> None:
        tracker = LatencyTracker(half_life=None, clock=clock)
        policy = Hedge(tracker, quantile=0.5, min_samples=3, clock=clock)
        for _ in range(3):
            await policy.acall(server)
        assert tracker.count == 3
        assert policy.delay == pytest.approx(0.01, rel=0.03)
        start = clock.now()
        assert await policy.acall(server) == "answer 4"  # the 0.5 s one was hedged at p50
        assert clock.now() - start == pytest.approx(0.02, rel=0.05)

    virtual(main)


def test_kill_switch_turns_hedging_off(virtual: Virtual) -> None:
    server = Server(1.0)

    async def main(clock: VirtualClock) -> None:
        await Hedge(0.1, name="search", clock=clock).acall(server)

    seawall.set_enabled(False, name="search")
    virtual(main)
    assert len(server.started) == 1


def test_decorator_preserves_the_function(backend: str) -> None:
    policy = Hedge(0.05)

    @policy
    async def fetch(key: str) -> str:
        return key.upper()

    assert fetch.__name__ == "fetch"
    assert anyio.run(fetch, "k", backend=backend) == "K"
    with pytest.raises(TypeError, match="async def"):
        policy(lambda: None)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "word"),
    [
        ((-1,), {}, ValueError, "delay"),
        (("1",), {}, TypeError, "delay"),
        ((0.1,), {"max_attempts": 0}, ValueError, "max_attempts"),
        ((0.1,), {"max_attempts": 2.0}, TypeError, "max_attempts"),
        ((0.1,), {"quantile": 1.0}, ValueError, "quantile"),
        ((0.1,), {"min_samples": -1}, ValueError, "min_samples"),
        ((0.1,), {"max_extra_load": 1.5}, ValueError, "max_extra_load"),
        ((0.1,), {"max_extra_load": "5%"}, TypeError, "max_extra_load"),
        ((0.1,), {"budget": object()}, TypeError, "budget"),
        ((0.1,), {"replicas": []}, ValueError, "replicas"),
        ((0.1,), {"replicas": "ab"}, TypeError, "replicas"),
        ((0.1,), {"retry_on": 3}, TypeError, "retry_on"),
        ((0.1,), {"clock": 3}, TypeError, "clock"),
    ],
)
def test_invalid_configuration(
    args: tuple[Any, ...], kwargs: dict[str, Any], exc: type[Exception], word: str
) -> None:
    with pytest.raises(exc, match=word):
        Hedge(*args, **kwargs)


# -- the proof: heavy-tailed servers, hedged at their live p95 -----------------------------------


def heavy_tail_latency(rng: random.Random) -> float:
    """A log-normal body around 10 ms; 3 % of requests hit a Pareto tail (GC, queueing, disk)."""
    body = rng.lognormvariate(math.log(0.010), 0.4)
    if rng.random() < 0.03:
        return body + 0.1 * rng.paretovariate(1.2)
    return body


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_load(
    run: Run, hedged: bool, seed: int, calls: int = 4000, workers: int = 20
) -> tuple[float, int]:
    """*calls* calls from *workers* concurrent clients; returns (p99 latency, requests sent)."""
    clock = VirtualClock()
    rng = random.Random(seed)
    requests = 0

    async def server(replica: int) -> int:
        nonlocal requests
        requests += 1
        await anyio.sleep(heavy_tail_latency(rng))
        return replica

    tracker = LatencyTracker(half_life=None, clock=clock)
    policy = Hedge(tracker, quantile=0.95, max_extra_load=0.1, replicas=[0, 1], clock=clock)
    latencies: list[float] = []

    async def client(n: int) -> None:
        for _ in range(n):
            start = clock.now()
            if hedged:
                await policy.acall(server)
            else:
                await server(0)
                tracker.record(clock.now() - start)
            latencies.append(clock.now() - start)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(workers):
                tasks.start_soon(client, calls // workers)

    run(main(), clock)
    return p(latencies, 0.99), requests


@pytest.mark.volume
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hedging_at_p95_cuts_p99_by_half_with_few_extra_requests(seed: int, run: Run) -> None:
    base_p99, base_requests = run_load(run, hedged=False, seed=seed)
    hedged_p99, hedged_requests = run_load(run, hedged=True, seed=seed)
    extra = hedged_requests / base_requests - 1
    assert base_requests == 4000
    assert hedged_p99 * 2 <= base_p99, (base_p99, hedged_p99)
    assert 0.02 <= extra <= 0.10, extra

import contextlib
import random
import threading
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seawall
from backends import Run
from seawall import (
    CircuitBreaker,
    CircuitOpen,
    Overloaded,
    Permanent,
    Pipeline,
    RetryPolicy,
    VirtualClock,
)
from seawall.lowlevel import BreakerEvent


class Boom(ConnectionError):
    pass


def ok() -> str:
    return "ok"


def fail() -> str:
    raise Boom("down")


def make(clock: VirtualClock, **kwargs: object) -> CircuitBreaker:
    defaults: dict[str, object] = {
        "minimum_calls": 4,
        "window_calls": 10,
        "open_duration": 10.0,
        "open_jitter": 0.0,
        "clock": clock,
    }
    defaults.update(kwargs)
    return CircuitBreaker(**defaults)  # type: ignore[arg-type]


def test_stays_closed_below_minimum_calls() -> None:
    breaker = make(VirtualClock())
    for _ in range(3):
        with pytest.raises(Boom):
            breaker.call(fail)
    assert breaker.state == "closed"
    assert breaker.metrics() == (3, 3, 0)


def test_opens_on_failure_ratio_and_fails_fast_with_retry_after() -> None:
    clock = VirtualClock()
    breaker = make(clock, failure_ratio=0.5)
    calls = 0

    def counted() -> str:
        nonlocal calls
        calls += 1
        return ok()

    breaker.call(counted)
    breaker.call(counted)
    with pytest.raises(Boom):
        breaker.call(fail)
    assert breaker.state == "closed"  # 1 of 3, and below minimum_calls
    with pytest.raises(Boom):
        breaker.call(fail)  # 2 of 4 failed: ratio 0.5 reached with 4 calls
    assert breaker.state == "open"
    clock.advance(4.0)
    with pytest.raises(CircuitOpen) as info:
        breaker.call(counted)
    assert calls == 2  # the rejected call was not made
    assert info.value.retry_after == pytest.approx(6.0)
    assert isinstance(info.value, Overloaded)
    assert breaker.retry_after() == pytest.approx(6.0)


def test_count_window_slides() -> None:
    breaker = make(VirtualClock(), window_calls=4, minimum_calls=4, failure_ratio=0.75)
    for fn in (fail, fail, ok, ok, ok, fail, fail):
        with contextlib.suppress(Boom):
            breaker.call(fn)
    # The last four are ok, ok, fail, fail: 50 %, below 75 %; the first two slid out.
    assert breaker.metrics() == (4, 2, 0)
    assert breaker.state == "closed"
    with pytest.raises(Boom):
        breaker.call(fail)  # ok, fail, fail, fail: 75 %
    assert breaker.state == "open"


def test_time_window_forgets_old_calls() -> None:
    clock = VirtualClock()
    breaker = make(clock, window_calls=None, window_seconds=10.0, minimum_calls=4)
    for _ in range(3):
        with pytest.raises(Boom):
            breaker.call(fail)
    clock.advance(11.0)  # those failures are out of the window now
    assert breaker.metrics() == (0, 0, 0)
    with pytest.raises(Boom):
        breaker.call(fail)
    assert breaker.state == "closed"
    for _ in range(3):
        clock.advance(1.0)
        with pytest.raises(Boom):
            breaker.call(fail)
    assert breaker.state == "open"


def test_permanent_errors_count_as_successes() -> None:
    breaker = make(VirtualClock())

    def not_found() -> str:
        raise Permanent("404")

    for _ in range(10):
        with pytest.raises(Permanent):
            breaker.call(not_found)
    assert breaker.state == "closed"
    assert breaker.metrics() == (10, 0, 0)


def test_failure_on_classes_and_predicate() -> None:
    breaker = make(VirtualClock(), failure_on=(KeyError,))
    for _ in range(6):
        with pytest.raises(Boom):
            breaker.call(fail)
    assert breaker.state == "closed"
    picky = make(VirtualClock(), failure_on=lambda exc: "fatal" in str(exc))
    for _ in range(4):
        with pytest.raises(ValueError):
            picky.call(lambda: (_ for _ in ()).throw(ValueError("fatal")))
    assert picky.state == "open"


def test_slow_calls_open_the_breaker() -> None:
    clock = VirtualClock()
    breaker = make(clock, slow_call_duration=1.0, slow_call_ratio=0.5)

    def slow() -> str:
        clock.advance(2.0)
        return "late"

    breaker.call(ok)
    breaker.call(ok)
    assert breaker.call(slow) == "late"
    assert breaker.state == "closed"
    breaker.call(slow)
    assert breaker.state == "open"
    assert breaker.metrics() == (4, 0, 2)  # slow successes are not failures


def trip(breaker: CircuitBreaker) -> None:
    for _ in range(breaker.minimum_calls):
        with contextlib.suppress(Boom, CircuitOpen):
            breaker.call(fail)
    assert breaker.state == "open"


def test_half_open_single_probe_closes_on_success() -> None:
    clock = VirtualClock()
    events: list[BreakerEvent] = []
    breaker = make(clock, hooks=[events.append], name="db")
    trip(breaker)
    clock.advance(10.0)
    assert breaker.state == "half_open"
    assert breaker.call(ok) == "ok"
    assert breaker.state == "closed"
    assert [(e.old, e.new) for e in events] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]
    assert events[0].breaker == "db"
    assert events[0].failure_ratio == 1.0
    assert events[1].at == 10.0


def test_half_open_probe_failure_reopens() -> None:
    clock = VirtualClock()
    breaker = make(clock)
    trip(breaker)
    clock.advance(10.0)
    with pytest.raises(Boom):
        breaker.call(fail)
    assert breaker.state == "open"
    assert breaker.retry_after() == pytest.approx(10.0)


def test_half_open_admits_exactly_n_concurrent_probes() -> None:
    clock = VirtualClock()
    breaker = make(clock, half_open_probes=2)
    trip(breaker)
    clock.advance(10.0)
    first = breaker.acquire()
    second = breaker.acquire()
    with pytest.raises(CircuitOpen) as info:
        breaker.acquire()
    assert info.value.state == "half_open"
    breaker.record(first, None)
    assert breaker.state == "half_open"  # one of two probes in
    with pytest.raises(CircuitOpen):
        breaker.acquire()  # the slot of a finished probe is not given again
    breaker.record(second, None)
    assert breaker.state == "closed"


def test_half_open_concurrent_tasks_only_one_probe_runs(run: Run) -> None:
    clock = VirtualClock()
    breaker = make(clock)
    trip(breaker)
    clock.advance(10.0)
    started = 0
    results: list[object] = []

    async def main() -> None:
        gate = anyio.Event()

        async def probe() -> str:
            nonlocal started
            started += 1
            await gate.wait()
            return "ok"

        async def caller() -> None:
            try:
                results.append(await breaker.acall(probe))
            except CircuitOpen as error:
                results.append(error)

        async with anyio.create_task_group() as tasks:
            for _ in range(20):
                tasks.start_soon(caller)
            while started < 1 or len(results) < 19:  # trio runs new tasks in any order
                await anyio.sleep(0)
            gate.set()

    run(main(), clock)
    assert started == 1
    assert results.count("ok") == 1
    assert sum(isinstance(r, CircuitOpen) for r in results) == 19
    assert breaker.state == "closed"


def test_cancelled_probe_frees_its_slot_and_is_not_a_failure(run: Run) -> None:
    clock = VirtualClock()
    breaker = make(clock)
    trip(breaker)
    clock.advance(10.0)

    entered = 0

    async def hang() -> str:
        nonlocal entered
        entered += 1
        await anyio.Event().wait()
        return "never"

    async def fine() -> str:
        return "ok"

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(breaker.acall, hang)
            while not entered:  # the probe has its slot
                await anyio.sleep(0)
            with pytest.raises(CircuitOpen):
                await breaker.acall(hang)  # the one probe slot is taken
            tasks.cancel_scope.cancel()  # the probe's caller cancels it
        assert entered == 1
        assert breaker.state == "half_open"  # not re-opened by the cancellation
        assert await breaker.acall(fine) == "ok"

    run(main(), clock)
    assert breaker.state == "closed"


def test_caller_cancellation_is_not_recorded_while_closed(run: Run) -> None:
    breaker = make(VirtualClock())

    entered = 0

    async def hang() -> None:
        nonlocal entered
        entered += 1
        await anyio.Event().wait()

    async def main() -> None:
        for n in range(1, 11):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(breaker.acall, hang)
                while entered < n:  # the call is in, then its caller cancels it
                    await anyio.sleep(0)
                tasks.cancel_scope.cancel()

    run(main())
    assert entered == 10
    assert breaker.metrics() == (0, 0, 0)
    assert breaker.state == "closed"


def test_async_failures_are_recorded(run: Run) -> None:
    breaker = make(VirtualClock())

    async def down() -> None:
        raise Boom("down")

    async def main() -> None:
        for _ in range(4):
            with pytest.raises(Boom):
                await breaker.acall(down)

    run(main())
    assert breaker.state == "open"


def test_late_result_from_an_older_state_is_ignored() -> None:
    clock = VirtualClock()
    breaker = make(clock)
    slow_permit = breaker.acquire()  # admitted while closed
    trip(breaker)
    clock.advance(10.0)
    probe = breaker.acquire()
    breaker.record(slow_permit, None)  # must not count as the probe's success
    assert breaker.state == "half_open"
    breaker.record(probe, Boom("still down"))
    assert breaker.state == "open"


def test_open_jitter_stretches_open_duration_within_bounds() -> None:
    durations = set()
    for seed in range(20):
        clock = VirtualClock()
        breaker = make(clock, open_jitter=0.5, rng=random.Random(seed))
        trip(breaker)
        left = breaker.retry_after()
        assert left is not None
        assert 10.0 <= left <= 15.0
        durations.add(round(left, 6))
    assert len(durations) > 10  # spread out, not one value


def test_isolate_and_reset() -> None:
    clock = VirtualClock()
    breaker = make(clock)
    breaker.isolate()
    clock.advance(1e6)
    assert breaker.state == "isolated"
    with pytest.raises(CircuitOpen) as info:
        breaker.call(ok)
    assert info.value.retry_after is None
    assert breaker.retry_after() is None
    breaker.reset()
    assert breaker.state == "closed"
    assert breaker.call(ok) == "ok"
    trip(breaker)
    breaker.reset()
    assert breaker.metrics() == (0, 0, 0)
    assert breaker.call(ok) == "ok"


def test_open_breaker_is_not_retried_by_a_policy() -> None:
    clock = VirtualClock()
    breaker = make(clock)
    trip(breaker)
    policy = RetryPolicy(max_attempts=5, clock=clock, hooks=())
    made = 0

    def guarded() -> str:
        nonlocal made
        made += 1
        return breaker.call(ok)

    with pytest.raises(CircuitOpen):
        policy.call(guarded)
    assert made == 1
    assert clock.sleeps == []


def test_decorator_sync_and_async(backend: str) -> None:
    breaker = make(VirtualClock())

    @breaker
    def add(a: int, b: int = 1) -> int:
        return a + b

    @breaker
    async def aadd(a: int) -> int:
        return a + 1

    assert add(1, b=2) == 3
    assert add.__name__ == "add"
    assert anyio.run(aadd, 1, backend=backend) == 2
    assert breaker.metrics() == (2, 0, 0)


def test_hook_errors_do_not_break_calls(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: BreakerEvent) -> None:
        raise RuntimeError("metrics down")

    breaker = make(VirtualClock(), hooks=[broken])
    trip(breaker)
    assert "failed on a state_change event" in caplog.text


def test_threads_never_wait_for_each_other_during_calls() -> None:
    # Eight threads block inside the protected call at the same time: the lock is not held.
    breaker = CircuitBreaker(minimum_calls=1000, window_calls=1000)
    barrier = threading.Barrier(8, timeout=5)
    errors: list[BaseException] = []

    def inside() -> None:
        barrier.wait()

    def worker() -> None:
        try:
            for _ in range(50):
                breaker.call(lambda: None)
            breaker.call(inside)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == []
    assert breaker.metrics() == (8 * 51, 0, 0)


@pytest.mark.volume
@settings(max_examples=60, deadline=None)
@given(
    outcomes=st.lists(st.booleans(), min_size=1, max_size=200),
    window=st.integers(1, 30),
    minimum=st.integers(1, 30),
    ratio=st.floats(0.05, 1.0),
)
def test_never_opens_below_threshold(
    outcomes: list[bool], window: int, minimum: int, ratio: float
) -> None:
    minimum = min(minimum, window)
    breaker = CircuitBreaker(
        window_calls=window, minimum_calls=minimum, failure_ratio=ratio, clock=VirtualClock()
    )
    seen: list[bool] = []
    for failed in outcomes:
        try:
            breaker.call(fail if failed else ok)
        except CircuitOpen:
            break
        except Boom:
            pass
        seen.append(failed)
        last = seen[-window:]
        should_open = len(last) >= minimum and sum(last) / len(last) >= ratio and failed
        assert (breaker.state == "open") == should_open


@pytest.mark.parametrize(
    ("kwargs", "exc", "word"),
    [
        ({"failure_ratio": 0}, ValueError, "failure_ratio"),
        ({"failure_ratio": 1.5}, ValueError, "failure_ratio"),
        ({"failure_ratio": "1"}, TypeError, "failure_ratio"),
        ({"minimum_calls": 0}, ValueError, "minimum_calls"),
        ({"minimum_calls": 5.0}, TypeError, "minimum_calls"),
        ({"window_calls": 5, "minimum_calls": 10}, ValueError, "window_calls"),
        ({"window_calls": 5, "window_seconds": 1.0}, TypeError, "window_seconds"),
        ({"window_seconds": -1.0}, ValueError, "window_seconds"),
        ({"slow_call_duration": float("nan")}, ValueError, "slow_call_duration"),
        ({"open_duration": 0}, ValueError, "open_duration"),
        ({"open_jitter": -0.1}, ValueError, "open_jitter"),
        ({"half_open_probes": 0}, ValueError, "half_open_probes"),
        ({"failure_on": 3}, TypeError, "failure_on"),
        ({"clock": object()}, TypeError, "clock"),
        ({"rng": 3}, TypeError, "rng"),
        ({"hooks": [1]}, TypeError, "hooks"),
    ],
)
def test_invalid_configuration(kwargs: dict[str, object], exc: type[Exception], word: str) -> None:
    with pytest.raises(exc, match=word):
        CircuitBreaker(**kwargs)  # type: ignore[arg-type]


def test_exported() -> None:
    assert seawall.CircuitBreaker is CircuitBreaker
    assert issubclass(seawall.CircuitOpen, seawall.Overloaded)


def test_generator_functions_are_refused() -> None:
    def gen() -> Iterator[int]:
        yield 1

    async def agen() -> AsyncIterator[int]:
        yield 1

    for fn in (gen, agen):
        with pytest.raises(TypeError, match="generator"):
            CircuitBreaker()(fn)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="generator"):
            Pipeline(breaker=CircuitBreaker())(fn)  # type: ignore[arg-type]

import inspect
import random
from collections.abc import Awaitable, Callable

import anyio
import pytest

import seawall
from backends import Run
from seawall import Backoff, DeadlineExceeded, RetryPolicy, VirtualClock


def vpolicy(clock: VirtualClock, **kw: object) -> RetryPolicy:
    kw.setdefault("rng", random.Random(0))
    kw.setdefault("hooks", ())
    return RetryPolicy(clock=clock, **kw)  # type: ignore[arg-type]


def failing_then(n: int, work: float = 0.0) -> Callable[[], Awaitable[str]]:
    calls = []

    async def fn() -> str:
        calls.append(1)
        if work:
            await anyio.sleep(work)
        if len(calls) <= n:
            raise ConnectionError(f"attempt {len(calls)}")
        return "ok"

    fn.calls = calls  # type: ignore[attr-defined]
    return fn


def test_acall_retries_on_virtual_time(run: Run) -> None:
    clock = VirtualClock()
    fn = failing_then(2, work=0.5)
    p = vpolicy(clock, backoff=Backoff.constant(10.0))
    assert run(p.acall(fn), clock) == "ok"
    assert len(fn.calls) == 3  # type: ignore[attr-defined]
    assert clock.now() == pytest.approx(3 * 0.5 + 2 * 10.0)


def test_attempt_timeout_cancels_the_slow_attempt(run: Run) -> None:
    clock = VirtualClock()
    cancelled = []

    async def slow() -> str:
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            cancelled.append(clock.now())
            raise
        return "never"

    p = vpolicy(clock, attempt_timeout=2.0, backoff=Backoff.constant(1.0))
    out = run(p.arun(slow), clock)
    assert isinstance(out.error, TimeoutError) and out.attempts == 3
    # Each attempt is cut at 2 s; waits of 1 s between them.
    assert cancelled == [pytest.approx(t) for t in (2.0, 5.0, 8.0)]
    assert clock.now() == pytest.approx(8.0)


def test_timeout_bounds_the_whole_async_call(run: Run) -> None:
    clock = VirtualClock()

    async def slow() -> str:
        await anyio.sleep(3600)
        return "never"

    p = vpolicy(clock, timeout=5.0, max_attempts=10, backoff=Backoff.constant(0.5))
    out = run(p.arun(slow), clock)
    assert isinstance(out.error, TimeoutError)
    assert clock.now() <= 5.0 + 1e-9


def test_callers_cancellation_is_never_retried(run: Run) -> None:
    clock = VirtualClock()
    calls = []

    async def slow() -> str:
        calls.append(1)
        await anyio.sleep(100)
        return "never"

    async def main() -> None:
        with anyio.move_on_after(1) as scope:  # the caller cancels the call after 1 s
            await vpolicy(clock, retry_on=BaseException).acall(slow)
        assert scope.cancelled_caught

    run(main(), clock)
    assert calls == [1]
    assert clock.now() == pytest.approx(1.0)


def test_async_decorator_and_signature(run: Run) -> None:
    clock = VirtualClock()
    p = vpolicy(clock)
    calls = []

    @p
    async def fetch(key: str, *, default: int = 0) -> int:
        calls.append(key)
        if len(calls) == 1:
            raise TimeoutError
        return default + 1

    assert inspect.iscoroutinefunction(fetch)
    assert str(inspect.signature(fetch)) == "(key: str, *, default: int = 0) -> int"
    assert run(fetch("k", default=4), clock) == 5
    assert calls == ["k", "k"]


def test_async_for_attempts(run: Run) -> None:
    clock = VirtualClock()
    fn = failing_then(1)

    async def main() -> str:
        result = ""
        async for attempt in vpolicy(clock, backoff=Backoff.constant(3.0)).attempts():
            with attempt:
                result = await fn()
        return result

    assert run(main(), clock) == "ok"
    assert clock.now() == pytest.approx(3.0)


def test_ambient_async_deadline_cancels_and_fails_fast(run: Run) -> None:
    clock = VirtualClock()
    fn = failing_then(100, work=0.4)

    async def main() -> None:
        async with seawall.deadline(1.0, clock=clock):
            await vpolicy(clock, max_attempts=10, backoff=Backoff.constant(0.1)).acall(fn)

    with pytest.raises(ConnectionError, match="attempt 2"):
        run(main(), clock)
    # 0.4 of work + 0.1 wait + 0.4 of work = 0.9 s: a third attempt would start with too little
    # left, so the policy gives up at once with the last error instead of sleeping into the wall.
    assert len(fn.calls) == 2  # type: ignore[attr-defined]
    assert clock.now() == pytest.approx(0.9)


def test_async_deadline_scope_cancels_work_past_it(run: Run) -> None:
    clock = VirtualClock()
    cancelled = []

    async def child() -> None:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            cancelled.append(clock.now())
            raise

    async def main() -> None:
        async with seawall.deadline(2.0, clock=clock), anyio.create_task_group() as tasks:
            tasks.start_soon(child)
            tasks.start_soon(child)

    with pytest.raises(DeadlineExceeded):
        run(main(), clock)
    assert cancelled == [pytest.approx(2.0)] * 2


def test_no_attempt_starts_after_the_deadline_passed(run: Run) -> None:
    clock = VirtualClock()
    fn = failing_then(0)

    async def main() -> str:
        with seawall.deadline(0.0, clock=clock):
            return await vpolicy(clock).acall(fn)

    with pytest.raises(DeadlineExceeded):
        run(main(), clock)
    assert fn.calls == []  # type: ignore[attr-defined]


def test_works_on_a_real_event_loop(backend: str) -> None:
    fn = failing_then(1)
    p = RetryPolicy(backoff=Backoff.constant(0.0), hooks=())
    assert anyio.run(p.acall, fn, backend=backend) == "ok"
    assert len(fn.calls) == 2  # type: ignore[attr-defined]


def test_async_with_attempt_cancels_the_block_at_the_attempt_timeout(run: Run) -> None:
    clock = VirtualClock()
    started: list[float] = []
    cancelled: list[float] = []

    async def main() -> str:
        p = vpolicy(clock, attempt_timeout=2.0, backoff=Backoff.constant(1.0))
        async for attempt in p.attempts():
            async with attempt:
                started.append(clock.now())
                assert seawall.remaining() == pytest.approx(2.0)
                if attempt.number < 3:
                    try:
                        await anyio.sleep(3600)
                    except anyio.get_cancelled_exc_class():
                        cancelled.append(clock.now())
                        raise
                return "third time"
        return "unreachable"

    assert run(main(), clock) == "third time"
    assert started == [pytest.approx(t) for t in (0.0, 3.0, 6.0)]
    assert cancelled == [pytest.approx(t) for t in (2.0, 5.0)]


def test_async_with_attempt_gives_up_with_a_timeout_error(run: Run) -> None:
    clock = VirtualClock()

    async def main() -> None:
        async for attempt in vpolicy(clock, attempt_timeout=1.0, max_attempts=2).attempts():
            async with attempt:
                await anyio.sleep(10)

    with pytest.raises(TimeoutError):
        run(main(), clock)
    assert clock.now() < 3.0


def test_callers_cancellation_of_an_async_with_attempt_is_not_retried(run: Run) -> None:
    clock = VirtualClock()
    entered = []

    async def block() -> None:
        async for attempt in vpolicy(clock, attempt_timeout=5.0, retry_on=BaseException).attempts():
            async with attempt:
                entered.append(attempt.number)
                await anyio.sleep(10)

    async def main() -> None:
        with anyio.move_on_after(1) as scope:  # the caller cancels the block after 1 s
            await block()
        assert scope.cancelled_caught

    run(main(), clock)
    assert entered == [1]

"""RetryQuota: each quota refunds its own call's retry cost when calls on other quotas nest."""

from __future__ import annotations

import asyncio
import contextlib
import io
import pathlib
import re
import sys
import threading
from collections.abc import Iterator

import pytest

from seawall import Backoff, RetryPolicy, RetryQuota, VirtualClock

FAST = Backoff(base=0.01, multiplier=2.0, cap=0.1)
THREADS = 8


@pytest.fixture
def contention() -> Iterator[None]:
    """Switch threads very often, so that state shared by mistake would be overwritten."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def spent(capacity: int, retries: int) -> RetryQuota:
    """A quota below capacity (retries that failed), so that every refund and reward shows."""
    quota = RetryQuota(capacity=capacity)
    for _ in range(retries):
        assert quota.allow_retry(ConnectionError())
        quota.on_failure(ConnectionError())
    return quota


def test_a_call_on_another_quota_inside_a_retry_keeps_the_outer_refund() -> None:
    outer_quota, inner_quota = spent(1000, 20), spent(1000, 20)  # both at 900
    clock = VirtualClock()
    outer = RetryPolicy(max_attempts=2, backoff=FAST, budget=outer_quota, clock=clock, hooks=())
    inner = RetryPolicy(max_attempts=2, backoff=FAST, budget=inner_quota, clock=clock, hooks=())
    attempts = {"outer": 0, "inner": 0}
    during: list[int] = []

    def inner_fn() -> str:
        attempts["inner"] += 1
        if attempts["inner"] == 1:
            raise ConnectionError("inner attempt 1")
        return "inner"

    def outer_fn() -> str:
        attempts["outer"] += 1
        if attempts["outer"] == 1:
            raise ConnectionError("outer attempt 1")
        during.append(outer_quota.available)
        assert inner.call(inner_fn) == "inner"  # retries once: costs 5, refunds 5
        assert inner.call(lambda: "first") == "first"  # a first-attempt success: +1
        return "outer"

    assert outer.call(outer_fn) == "outer"
    assert attempts == {"outer": 2, "inner": 2}
    assert during == [895]  # the outer retry's cost was withdrawn ...
    assert outer_quota.available == 900  # ... and refunded whole, not replaced by a +1
    assert inner_quota.available == 901


def test_a_cost_left_by_an_interrupted_call_is_forgotten_only_by_its_own_quota() -> None:
    a, b = RetryQuota(capacity=100), RetryQuota(capacity=100)
    assert a.allow_retry(ConnectionError())  # a's call is now retrying: holds 5
    b.on_request()  # a call on b starts (and ends) inside it
    b.on_success()
    a.on_success()  # a's retry succeeds: refunded
    assert (a.available, b.available) == (100, 100)
    assert a.allow_retry(ConnectionError())  # then a's call ends without an outcome
    a.on_request()  # the next call on a starts: the stale cost goes
    a.on_success()
    assert a.available == 96


def nested_calls(outer: RetryPolicy, inner: RetryPolicy, seen: list[int]) -> str:
    """One outer call that retries once and, in its retry, makes two calls on the inner policy:
    one that retries once, one that succeeds at once."""
    state = {"outer": 0, "inner": 0}

    def inner_fn() -> str:
        state["inner"] += 1
        if state["inner"] == 1:
            raise ConnectionError("inner attempt 1")
        return "inner"

    def outer_fn() -> str:
        state["outer"] += 1
        if state["outer"] == 1:
            raise ConnectionError("outer attempt 1")
        inner.call(inner_fn)
        inner.call(lambda: "first")
        seen.append(state["outer"] + state["inner"])
        return "outer"

    return outer.call(outer_fn)


def test_nested_quotas_in_threads(contention: None) -> None:
    outer_quota, inner_quota = spent(1000, 20), spent(1000, 20)
    outer = RetryPolicy(max_attempts=2, backoff=FAST, budget=outer_quota, hooks=())
    inner = RetryPolicy(max_attempts=2, backoff=FAST, budget=inner_quota, hooks=())
    barrier = threading.Barrier(THREADS)
    seen: list[int] = []
    results: list[str] = []

    def worker() -> None:
        barrier.wait()
        results.append(nested_calls(outer, inner, seen))

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["outer"] * THREADS
    assert seen == [4] * THREADS  # every thread: 2 outer attempts, 2 inner attempts
    # Each outer retry cost 5 and was refunded; each inner retry too; each thread's
    # first-attempt inner call added 1. (One shared variable gave the outer quota +1 instead of
    # its refund: 900 - 4 * THREADS.)
    assert outer_quota.available == 900
    assert inner_quota.available == 900 + THREADS


async def test_nested_quotas_in_asyncio_tasks() -> None:
    outer_quota, inner_quota = spent(1000, 20), spent(1000, 20)
    clock = VirtualClock()
    outer = RetryPolicy(max_attempts=2, backoff=FAST, budget=outer_quota, clock=clock, hooks=())
    inner = RetryPolicy(max_attempts=2, backoff=FAST, budget=inner_quota, clock=clock, hooks=())
    tasks = 8
    arrived = [0]
    all_in = asyncio.Event()

    async def one() -> str:
        state = {"outer": 0, "inner": 0}

        async def inner_fn() -> str:
            state["inner"] += 1
            if state["inner"] == 1:
                raise ConnectionError("inner attempt 1")
            return "inner"

        async def first() -> str:
            return "first"

        async def outer_fn() -> str:
            state["outer"] += 1
            if state["outer"] == 1:
                raise ConnectionError("outer attempt 1")
            # Every task holds its outer retry's cost before any inner call runs.
            arrived[0] += 1
            if arrived[0] == tasks:
                all_in.set()
            await all_in.wait()
            assert await inner.acall(inner_fn) == "inner"
            await asyncio.sleep(0)  # let the other tasks' inner calls interleave
            assert await inner.acall(first) == "first"
            return "outer"

        return await outer.acall(outer_fn)

    results = await asyncio.gather(*(one() for _ in range(tasks)))
    assert results == ["outer"] * tasks
    assert outer_quota.available == 900
    assert inner_quota.available == 900 + tasks


def test_the_docs_example_prints_what_it_says() -> None:
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "budgets.md").read_text(
        encoding="utf-8"
    )
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "stock_policy" in b]
    assert len(blocks) == 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], "budgets.md", "exec"), {"__name__": "doc_example"})
    expected = [line.split("# -> ", 1)[1] for line in blocks[0].splitlines() if "# -> " in line]
    assert out.getvalue().splitlines() == expected == ["reserved", "100 100"]

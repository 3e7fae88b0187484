"""A Hedge shared between layers and threads: withdrawing-only views, counters under threads,
and failed attempts' latencies in an adaptive delay."""

from __future__ import annotations

import asyncio
import http.server
import random
import sys
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

import seawall
from backends import Run
from seawall import Hedge, LatencyTracker, Pipeline, RetryPolicy, VirtualClock
from seawall.config import PolicyRegistry
from seawall.httpx import AsyncRetryTransport
from seawall.lowlevel import HedgeDelayPassed, HedgeEvent


class Ledger:
    """A Budget that allows every withdrawal and counts every call it receives (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = self.successes = self.failures = self.withdrawals = 0

    def on_request(self) -> None:
        with self.lock:
            self.requests += 1

    def allow_retry(self, error: BaseException) -> bool:
        with self.lock:
            self.withdrawals += 1
        return True

    def on_success(self) -> None:
        with self.lock:
            self.successes += 1

    def on_failure(self, error: BaseException) -> None:
        with self.lock:
            self.failures += 1


def retry_policy(clock: VirtualClock, budget: Any) -> RetryPolicy:
    return RetryPolicy(max_attempts=2, budget=budget, clock=clock, rng=random.Random(1), hooks=())


async def stall_then_answer(replica: str = "") -> str:
    # The hedge passes the replica; the default only lets a type checker see a call without it.
    await anyio.sleep(1.0 if replica == "slow" else 0.01)
    return replica


# -- 1. withdrawing_only(): a view, the caller's Hedge unchanged ----------------------------------


def test_withdrawing_only_view_shares_state_but_reports_nothing(run: Run) -> None:
    clock = VirtualClock()
    budget = Ledger()
    tracker = LatencyTracker(half_life=None, clock=clock)
    hedge = Hedge(0.1, budget=budget, replicas=["slow", "fast"], clock=clock)
    view = hedge.withdrawing_only()
    assert view is not hedge
    assert view.withdrawing_only() is view
    assert (hedge.reports_to_budget, view.reports_to_budget) == (True, False)

    async def main() -> None:
        assert await view.acall(stall_then_answer) == "fast"
        assert await hedge.acall(stall_then_answer) == "fast"

    run(main(), clock)
    # The view withdrew for its hedge but reported neither the request nor the outcome.
    assert (budget.requests, budget.successes, budget.withdrawals) == (1, 1, 2)
    # Counters are one set, whichever object is asked.
    assert (hedge.calls, hedge.hedges, hedge.wins) == (view.calls, view.hedges, view.wins)
    assert (hedge.calls, hedge.hedges, hedge.wins) == (2, 2, 2)

    adaptive = Hedge(tracker, clock=clock)
    adaptive.withdrawing_only().on_success(0.02)
    assert tracker.count == adaptive.recorded == 1


def test_load_bound_tokens_are_shared_with_the_view() -> None:
    hedge = Hedge(0.1, max_extra_load=0.5)
    view = hedge.withdrawing_only()
    hedge.start_call()
    view.start_call()  # two calls at 0.5 each: one token, wherever they were made
    assert view.admit(HedgeDelayPassed("slow"))
    assert not hedge.admit(HedgeDelayPassed("slow"))
    assert hedge.hedges == 1


def test_pipeline_sharing_the_budget_leaves_the_callers_hedge_reporting(run: Run) -> None:
    clock = VirtualClock()
    budget = Ledger()
    hedge = Hedge(0.1, budget=budget, replicas=["slow", "fast"], clock=clock)
    pipe = Pipeline(retry=retry_policy(clock, budget), hedge=hedge)
    assert hedge.reports_to_budget
    assert pipe.hedge is not None and not pipe.hedge.reports_to_budget

    run(pipe.acall(stall_then_answer), clock)
    # One call through the pipeline: the retry layer reports it once, the hedge withdraws.
    assert (budget.requests, budget.successes, budget.withdrawals) == (1, 1, 1)

    # The same Hedge used on its own elsewhere still reports its calls and outcomes.
    run(hedge.acall(stall_then_answer), clock)
    assert (budget.requests, budget.successes, budget.withdrawals) == (2, 2, 2)
    assert (hedge.calls, hedge.hedges, hedge.wins) == (2, 2, 2)


def test_registry_hedge_is_a_view_of_a_hedge_the_registry_owns() -> None:
    registry = PolicyRegistry(
        {
            "routes": {
                "users": {
                    "hedge": {"delay": "50ms"},
                    "retry_policy": {"budget": {"percent_can_retry": 20}},
                }
            }
        }
    )
    hedge = registry.hedge("users").policy
    assert hedge is not None and hedge.budget is not None
    assert not hedge.reports_to_budget


class _Handler(http.server.BaseHTTPRequestHandler):
    """``/slow``: the first request waits 0.3 s, later ones answer at once."""

    protocol_version = "HTTP/1.1"
    seen: list[str]
    first_done: threading.Event

    def do_GET(self) -> None:
        first = not self.seen
        self.seen.append(self.path)
        if first:
            self.first_done.wait(0.3)  # bounded; set when the test ends
        body = b"first" if first else b"hedge"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def slow_server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    done = threading.Event()
    handler = type("Bound", (_Handler,), {"seen": seen, "first_done": done})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        done.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


async def test_transport_sharing_the_budget_leaves_the_callers_hedge_reporting(
    slow_server: tuple[str, list[str]],
) -> None:
    url, seen = slow_server
    budget = Ledger()
    hedge = Hedge(0.05, budget=budget)
    policy = RetryPolicy(clock=VirtualClock(), rng=random.Random(2), hooks=())
    outer = AsyncRetryTransport(policy, httpx.AsyncHTTPTransport(), budget=budget, hedge=hedge)
    assert hedge.reports_to_budget
    assert outer.hedge is not None and not outer.hedge.reports_to_budget
    async with httpx.AsyncClient(transport=outer, timeout=5.0) as client:
        response = await client.get(url + "/slow")
    assert response.text == "hedge"
    assert len(seen) == 2
    # The transport's retry loop reported the request once; the hedge only withdrew.
    assert (budget.requests, budget.withdrawals) == (1, 1)
    assert (hedge.calls, hedge.hedges, hedge.wins) == (1, 1, 1)

    # Used directly, the caller's Hedge reports to the budget (an answer well before 50 ms).
    before = budget.requests, budget.successes

    async def direct() -> str:
        return "direct"

    assert await hedge.acall(direct) == "direct"
    assert (budget.requests, budget.successes) == (before[0] + 1, before[1] + 1)


# -- 2. counters under threads, each with its own event loop -------------------------------------


@pytest.mark.volume
def test_counters_are_exact_with_event_loops_in_several_threads(backend: str) -> None:
    threads, calls_each = 4, 300
    kinds: list[str] = []
    kinds_lock = threading.Lock()

    def hook(event: HedgeEvent) -> None:
        with kinds_lock:
            kinds.append(event.kind)

    # delay=0: every call hedges at once (within the load bound) on the loop's next turn;
    # attempt 1 yields three times, the hedge once, so a hedge that starts answers first.
    fixed = Hedge(0.0, max_extra_load=0.5, replicas=["slow", "fast"], hooks=[hook])
    tracker = LatencyTracker(half_life=None)
    adaptive = Hedge(tracker, min_samples=10**9)  # records every call, never hedges on time

    async def attempt(replica: str) -> str:
        for _ in range(3 if replica == "slow" else 1):
            await anyio.sleep(0)
        return replica

    async def calls() -> list[str]:
        answers = []
        for _ in range(calls_each):
            answers.append(await fixed.acall(attempt))
            await adaptive.acall(attempt, "fast")
        return answers

    answers: list[str] = []
    answers_lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker() -> None:
        barrier.wait()
        got = anyio.run(calls, backend=backend)
        with answers_lock:
            answers.extend(got)

    interval = sys.getswitchinterval()
    # Switch threads as often as the interpreter allows, so that an unguarded update has every
    # chance to interleave (it does on free-threaded builds; under the GIL it rarely can).
    sys.setswitchinterval(1e-6)
    try:
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)

    total = threads * calls_each
    assert len(answers) == total
    assert fixed.calls == adaptive.calls == total
    assert fixed.hedges == kinds.count("hedge") > 0
    assert fixed.wins == kinds.count("win") == answers.count("fast") > 0
    # The load bound held across threads: half a token per call, at most 50 saved up.
    assert fixed.hedges <= 0.5 * total
    assert adaptive.recorded == tracker.count == total


# -- 3. failed attempts' latencies in an adaptive delay ------------------------------------------


def test_a_slow_tail_ending_in_errors_raises_the_adaptive_delay(run: Run) -> None:
    # Every tenth key times out after 1 s on every replica; the others answer in 10 ms.
    def bad(key: int) -> bool:
        return key % 10 == 9

    async def fetch(key: int) -> str:
        await anyio.sleep(1.0 if bad(key) else 0.01)
        if bad(key):
            raise TimeoutError(f"key {key}")
        return f"value {key}"

    async def main(clock: VirtualClock) -> tuple[Hedge, LatencyTracker]:
        tracker = LatencyTracker(half_life=None, clock=clock)
        policy = Hedge(tracker, quantile=0.95, clock=clock)
        for key in range(100):
            if bad(key):
                with pytest.raises(TimeoutError):
                    await policy.acall(fetch, key)
            else:
                await policy.acall(fetch, key)
        return policy, tracker

    clock = VirtualClock()
    policy, tracker = run(main(clock), clock)
    # 90 successes, and each bad key's two attempts (the second started when the first failed,
    # or by the hedge timer): 110 samples, 20 of them at 1 s.
    assert policy.recorded == tracker.count == 110
    assert policy.delay == pytest.approx(1.0, rel=0.03)

    async def probe() -> str:
        await anyio.sleep(0.05)  # slower than the 10 ms answers, far below the 1 s tail
        return "probe"

    hedges = policy.hedges
    assert run(policy.acall(probe), clock) == "probe"
    assert policy.hedges == hedges  # not hedged: the p95 is the tail's, not the answers' 10 ms


def test_on_error_records_the_attempts_own_latency() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=None, clock=clock)
    policy = Hedge(tracker, quantile=0.5, min_samples=1, clock=clock)
    assert policy.on_error(TimeoutError(), latency=0.8) is False
    assert policy.on_error(seawall.Permanent(), latency=0.8) is True
    policy.on_error(ConnectionError())  # no latency given (older drivers): nothing recorded
    policy.on_error(asyncio.CancelledError(), latency=5.0)  # did not answer: not recorded
    assert policy.recorded == tracker.count == 2
    assert policy.delay == pytest.approx(0.8, rel=0.03)


def test_a_failed_later_attempt_records_its_own_duration_not_the_calls(run: Run) -> None:
    # Attempt 1 fails at 0.3 s, attempt 2 (started then) 0.2 s later, attempt 3 answers 0.1 s
    # after that: samples 0.3 and 0.2 (each failed attempt's own time) and 0.6 (the call's).
    plan = {"a": (0.3, True), "b": (0.2, True), "c": (0.1, False)}

    async def attempt(replica: str) -> str:
        took, fails = plan[replica]
        await anyio.sleep(took)
        if fails:
            raise ConnectionError(f"{replica} reset")
        return replica

    async def main(clock: VirtualClock) -> LatencyTracker:
        tracker = LatencyTracker(half_life=None, clock=clock)
        # min_samples out of reach: no hedge on time, each attempt starts when one fails.
        policy = Hedge(
            tracker, max_attempts=3, min_samples=100, replicas=["a", "b", "c"], clock=clock
        )
        assert await policy.acall(attempt) == "c"
        assert clock.now() == pytest.approx(0.6)
        return tracker

    clock = VirtualClock()
    tracker = run(main(clock), clock)
    assert tracker.count == 3
    assert tracker.quantile(0.0) == pytest.approx(0.2, rel=0.03)  # b's own 0.2 s, not 0.5
    assert tracker.quantile(0.5) == pytest.approx(0.3, rel=0.03)
    assert tracker.quantile(1.0) == pytest.approx(0.6, rel=0.03)

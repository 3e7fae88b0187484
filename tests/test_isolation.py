"""tests/conftest.py gives every test a fresh process: what one test leaves, the next never sees.

The first test changes every piece of process-wide state and does not clean up; the second
(pytest runs a module's tests in the order they are written) checks that it starts afresh.
"""

from __future__ import annotations

from typing import Any

import seawall
import seawall.testing
from seawall.http import budget_for_host
from seawall.instrumentation import Counters
from seawall.propagation import DeadlineHeaderCounts, deadline_header_counts, timeout_from_headers
from seawall.sim import SCENARIOS, Scenario, collect_metrics, register_scenario
from seawall.sim._metrics import retry_hooks

BUILT_IN = sorted(SCENARIOS)
HOST = "http://leaky.test:80"
left_behind: list[Any] = []  # kept alive: a scope collected as garbage would close itself


def waits_of_one_retry() -> list[float]:
    clock = seawall.VirtualClock()
    calls = iter([ConnectionError("reset"), None])

    def flaky() -> None:
        error = next(calls)
        if error is not None:
            raise error

    seawall.RetryPolicy(backoff=seawall.Backoff.constant(1.0), clock=clock, hooks=()).call(flaky)
    return clock.sleeps


def test_a_leaves_every_piece_of_process_state_changed() -> None:
    seawall.set_enabled(False, name="payments")
    left_behind.append(seawall.testing.instant())
    left_behind[-1].__enter__()
    assert waits_of_one_retry() == [0.0]
    seawall.set_enabled(False)
    left_behind.append(seawall.deadline(5.0))
    left_behind[-1].__enter__()
    left_behind.append(budget_for_host(HOST))
    timeout_from_headers({"grpc-timeout": "1.5S", "x-request-deadline": "99"}, max_seconds=0.01)
    register_scenario(
        Scenario(
            name="leaked",
            summary="left behind",
            add_arguments=lambda parser: None,
            run=lambda args, progress: None,
            demo=lambda seed, workers, progress: None,
            render=lambda result, console: None,
        )
    )
    left_behind.append(collect_metrics(Counters()))
    left_behind[-1].__enter__()
    assert not seawall.is_enabled()
    assert seawall.remaining() <= 5.0
    assert deadline_header_counts() == DeadlineHeaderCounts(accepted=1, invalid=1, clamped=1)
    assert "leaked" in SCENARIOS
    assert retry_hooks() != ()


def test_b_starts_from_a_fresh_process() -> None:
    assert seawall.is_enabled()
    assert seawall.is_enabled("payments")
    assert waits_of_one_retry() == [1.0]  # not inside instant() any more
    assert seawall.remaining() == float("inf")
    assert budget_for_host(HOST) is not left_behind[2]
    assert deadline_header_counts() == DeadlineHeaderCounts()
    assert sorted(SCENARIOS) == BUILT_IN
    assert retry_hooks() == ()

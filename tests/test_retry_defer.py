"""A retry the budget refuses, deferred instead of given up (RetryState.defer / resume): for a
durable driver, which can wait and ask the budget again."""

from __future__ import annotations

import json

import pytest

import seawall
from seawall.lowlevel import MIN_HOLD, RetryState


class Refusing:
    """A budget that answers retries from a script: the next *refusals* are refused."""

    def __init__(self, refusals: int) -> None:
        self.answers = [False] * refusals
        self.asked: list[str] = []

    def allow_retry(self, error: BaseException) -> bool:
        self.asked.append(type(error).__name__)
        return self.answers.pop() if self.answers else True

    def on_request(self) -> None:  # nothing else to count here
        return None

    on_success = on_request

    def on_failure(self, error: BaseException) -> None:
        return None


def _policy(budget: Refusing, **kwargs: object) -> seawall.RetryPolicy:
    return seawall.RetryPolicy(
        max_attempts=3,
        budget=budget,
        backoff=seawall.Backoff(base=1.0, cap=60.0, jitter="none"),
        hooks=(),
        **kwargs,  # type: ignore[arg-type]
    )


def _failed_once(policy: seawall.RetryPolicy, **kwargs: bool) -> tuple[RetryState, float | None]:
    state = policy.new_state(0.0, **kwargs)
    state.begin_attempt(0.0)
    error = ConnectionError("down")
    return state, state.on_error(error, 1.0)


def test_without_deferring_a_refusal_ends_the_call() -> None:
    state, delay = _failed_once(_policy(Refusing(1)))
    assert delay is None
    assert state.reason == "budget"
    assert not state.deferred


def test_a_refused_retry_is_held_one_backoff_step_further_then_resumed() -> None:
    budget = Refusing(2)
    state, delay = _failed_once(_policy(budget), defer_refusals=True)
    # The retry would have waited raw(0) = 1 s; held back, it waits raw(1) = 2 s.
    assert delay == 2.0
    assert state.deferred and state.holds == 1 and state.reason is None
    assert state.next_retry == 1.0 + 2.0
    assert state.resume(3.0) == 4.0  # refused again: one step further
    assert state.holds == 2
    assert state.resume(7.0) == 0.0  # allowed: the next attempt now
    assert not state.deferred and state.reason is None
    state.begin_attempt(7.0)
    assert state.attempts == 2
    assert state.total_delay == 6.0
    assert budget.asked == ["ConnectionError"] * 3


def test_refused_max_attempts_times_in_a_row_gives_up() -> None:
    error = ConnectionError("down")
    state = _policy(Refusing(10)).new_state(0.0, defer_refusals=True)
    state.begin_attempt(0.0)
    assert state.on_error(error, 0.0) is not None
    assert state.resume(1.0) is not None
    assert state.resume(2.0) is not None  # three holds: max_attempts
    assert state.resume(3.0) is None
    assert state.reason == "budget"
    notes = getattr(error, "__notes__", [])
    assert any("gave up after 1 attempt" in n for n in notes), notes


def test_a_hold_that_would_cross_the_deadline_gives_up() -> None:
    state, delay = _failed_once(_policy(Refusing(1), timeout=2.5), defer_refusals=True)
    assert delay is None  # 1 s + a hold of 2 s > 2.5 s
    assert state.reason == "budget"


def test_holds_travel_in_the_snapshot() -> None:
    policy = _policy(Refusing(5))
    state, _ = _failed_once(policy, defer_refusals=True)
    data = json.loads(json.dumps(state.snapshot(now=1.0, wall_now=1000.0)))
    assert data["holds"] == 1
    again = RetryState.restore(policy, data, now=5.0, wall_now=1004.0, defer_refusals=True)
    assert again.deferred and again.holds == 1
    assert again.resume(5.0) == 4.0  # asked about a stand-in for the restored error
    assert policy.budget.asked[-1] == "_Restored"  # type: ignore[union-attr]
    older = dict(data, version=1)
    del older["holds"]
    assert RetryState.restore(policy, older, now=5.0, wall_now=1004.0).holds == 0
    with pytest.raises(ValueError, match="holds"):
        RetryState.restore(policy, dict(data, holds=-1), now=5.0, wall_now=1004.0)


def test_a_hold_is_never_shorter_than_min_hold() -> None:
    policy = seawall.RetryPolicy(
        budget=Refusing(1), backoff=seawall.Backoff.constant(0.0), hooks=()
    )
    state, delay = _failed_once(policy, defer_refusals=True)
    assert delay == MIN_HOLD
    assert state.deferred

"""A retry's state saved as JSON-compatible data and continued elsewhere (seawall.lowlevel)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

import seawall
from seawall.lowlevel import SNAPSHOT_VERSION, RetryState, one_attempt


def _policy(clock: seawall.VirtualClock, **kwargs: object) -> seawall.RetryPolicy:
    return seawall.RetryPolicy(
        clock=clock,
        rng=random.Random(7),
        hooks=(),
        backoff=seawall.Backoff(base=1.0, cap=60.0),
        **kwargs,  # type: ignore[arg-type]
    )


def test_snapshot_round_trips_through_json_and_continues_the_same_decisions() -> None:
    clock = seawall.VirtualClock(start=100.0)
    policy = _policy(clock, max_attempts=5, timeout=300.0)
    state = policy.new_state(clock.now())
    state.begin_attempt(clock.now())
    delay = state.on_error(ConnectionError("reset by peer"), clock.now())
    assert delay is not None
    data = json.loads(json.dumps(state.snapshot(now=clock.now(), wall_now=1_000.0)))
    assert data["version"] == SNAPSHOT_VERSION
    assert data["attempts"] == 1
    assert data["last_error"] == "ConnectionError: reset by peer"
    assert data["next_retry_at"] == pytest.approx(1_000.0 + delay)
    assert data["deadline_at"] == pytest.approx(1_300.0)
    assert data["reason"] is None

    # Another process, another monotonic clock, 10 s of wall time later.
    other = seawall.VirtualClock(start=5.0)
    twin = _policy(other, max_attempts=5, timeout=300.0)
    restored = RetryState.restore(twin, data, now=other.now(), wall_now=1_010.0)
    assert restored.attempts == 1
    assert restored.next_retry == pytest.approx(5.0 + delay - 10.0)
    assert restored.deadline == pytest.approx(5.0 + 290.0)
    assert restored.last_error == "ConnectionError: reset by peer"
    # Attempts go on counting from where they were: the policy gives up after five in all.
    for _ in range(3):
        restored.begin_attempt(other.now())
        assert restored.on_error(ConnectionError("again"), other.now()) is not None
    restored.begin_attempt(other.now())
    assert restored.on_error(ConnectionError("last"), other.now()) is None
    assert restored.reason == "attempts_exhausted"
    assert restored.attempts == 5
    assert restored.snapshot(now=other.now(), wall_now=2_000.0)["reason"] == "attempts_exhausted"


def test_restore_does_not_count_a_new_request_in_the_budget() -> None:
    clock = seawall.VirtualClock()
    budget = seawall.RetryBudget(ratio=0.5, min_per_second=0.0, clock=clock)
    policy = _policy(clock, budget=budget)
    state = policy.new_state(clock.now())
    assert budget.requests == 1
    RetryState.restore(policy, state.snapshot(now=clock.now(), wall_now=0.0), now=0.0, wall_now=0.0)
    assert budget.requests == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": SNAPSHOT_VERSION + 1}, "newer"),
        ({"version": "1"}, "version"),
        ({"attempts": -1}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"started_at": float("nan")}, "started_at"),
        ({"deadline_at": "soon"}, "deadline_at"),
        ({"next_retry_at": float("inf")}, "next_retry_at"),
        ({"last_error": 42}, "last_error"),
        ({"reason": "bored"}, "reason"),
    ],
)
def test_restore_refuses_rows_it_cannot_trust(change: dict[str, object], message: str) -> None:
    clock = seawall.VirtualClock()
    policy = _policy(clock)
    data = policy.new_state(0.0).snapshot(now=0.0, wall_now=0.0) | change
    with pytest.raises(ValueError, match=message):
        RetryState.restore(policy, data, now=0.0, wall_now=0.0)


def test_restore_refuses_what_is_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="mapping"):
        RetryState.restore(seawall.RetryPolicy(), [1, 2], now=0.0, wall_now=0.0)  # type: ignore[arg-type]


def test_a_long_error_message_is_cut_in_the_summary() -> None:
    clock = seawall.VirtualClock()
    policy = _policy(clock)
    state = policy.new_state(0.0)
    state.begin_attempt(0.0)
    state.on_error(ConnectionError("x" * 10_000), 0.0)
    summary = state.snapshot(now=0.0, wall_now=0.0)["last_error"]
    assert len(summary) == 500
    assert summary.startswith("ConnectionError: xxx")


def test_one_attempt_makes_every_policy_inside_give_up_unmarked() -> None:
    calls = []

    @seawall.retry(max_attempts=5, hooks=(), backoff=seawall.Backoff.constant(0.0))
    def flaky() -> None:
        calls.append(1)
        raise ConnectionError("down")

    with one_attempt(), pytest.raises(ConnectionError) as info:
        flaky()
    assert len(calls) == 1
    # Not marked "already retried": the owner of the retries above may retry it.
    outer = seawall.RetryPolicy(max_attempts=2, hooks=(), backoff=seawall.Backoff.constant(0.0))
    assert outer.run(lambda: (_ for _ in ()).throw(info.value)).attempts == 2
    calls.clear()
    with pytest.raises(ConnectionError):
        flaky()
    assert len(calls) == 5


def test_the_first_one_attempt_of_a_process_applies_at_once_in_every_thread() -> None:
    # The failure path reads the one_attempt() variable only once one_attempt() has been
    # entered in the process: a fresh interpreter checks that the first entry takes effect,
    # for a policy built and already retrying before it, and that other threads keep retrying.
    script = """
import threading, seawall
from seawall.lowlevel import one_attempt
policy = seawall.RetryPolicy(max_attempts=4, hooks=(), backoff=seawall.Backoff.constant(0.0))
def down():
    raise ConnectionError("down")
before = policy.run(down)
with one_attempt():
    inside = policy.run(down)
    other = []
    thread = threading.Thread(target=lambda: other.append(policy.run(down)))
    thread.start()
    thread.join()
after = policy.run(down)
print(before.attempts, inside.attempts, inside.reason, other[0].attempts, after.attempts)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["4", "1", "delegated", "4", "4"]


async def test_one_attempt_applies_to_async_policies_too() -> None:
    calls = []
    policy = seawall.RetryPolicy(max_attempts=3, hooks=(), backoff=seawall.Backoff.constant(0.0))

    async def flaky() -> None:
        calls.append(1)
        raise ConnectionError("down")

    with one_attempt():
        outcome = await policy.arun(flaky)
    assert outcome.attempts == 1
    assert outcome.reason == "delegated"


def test_run_returns_a_locally_throttled_call_as_an_outcome() -> None:
    clock = seawall.VirtualClock()
    throttle = seawall.AdaptiveThrottle(
        k=1.0, window=30.0, clock=clock, min_requests=0, rng=random.Random(0)
    )
    policy = seawall.RetryPolicy(max_attempts=1, hooks=(), budget=throttle)
    outcomes = []
    for _ in range(20):  # a dependency that never answers: the throttle starts shedding
        outcomes.append(policy.run(lambda: (_ for _ in ()).throw(ConnectionError("down"))))
    shed = [o for o in outcomes if isinstance(o.error, seawall.Throttled)]
    assert shed, outcomes
    assert all(o.attempts == 0 and o.reason is None for o in shed)

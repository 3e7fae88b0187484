"""What the HTTP layer reads of a derived policy (``HostPolicy``), from its public fields.

The HTTP layer reads a policy's clock, its budget's first-attempt callables, and whether a
first attempt needs no retry state, through the policy's public fields. The retry core keeps
the same facts for its own first-attempt path; these tests hold the two readings together, so
that a change to either one fails here rather than drifting apart.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

import seawall
from seawall._policy.http.call import HostPolicy, stateless_first
from seawall._policy.http.rules import HttpRules


class Observing:
    """A hook that wants every attempt (as the metrics hooks do)."""

    observes_attempts = True

    def __call__(self, event: seawall.RetryEvent) -> None:
        pass


class NotObserving:
    observes_attempts = "yes"  # not True: the retry core does not count it as observing

    def __call__(self, event: seawall.RetryEvent) -> None:
        pass


BUDGETS: list[Any] = [
    None,
    seawall.RetryBudget(),
    seawall.TokenBucket(),
    seawall.RetryQuota(),
    seawall.AdaptiveThrottle(rng=random.Random(1)),
]
POLICIES = [
    seawall.RetryPolicy(),
    seawall.RetryPolicy(hooks=()),
    seawall.RetryPolicy(hooks=[Observing()]),
    seawall.RetryPolicy(hooks=[NotObserving(), print]),
    seawall.RetryPolicy(timeout=5.0),
    seawall.RetryPolicy(attempt_timeout=1.0),
    seawall.RetryPolicy(retry_if_result=lambda r: False),
    seawall.RetryPolicy(clock=seawall.VirtualClock()),
    seawall.RetryPolicy(clock=seawall.SystemClock()),
    seawall.RetryPolicy(min_attempt_time=2.0),
]


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: type(b).__name__)
@pytest.mark.parametrize("policy", POLICIES, ids=[f"policy{i}" for i in range(len(POLICIES))])
def test_host_policy_reads_what_the_retry_core_keeps(
    policy: seawall.RetryPolicy, budget: Any
) -> None:
    policy = policy.replace(budget=budget)
    host = HostPolicy(policy)
    assert host.policy is policy
    # The retry core's own reading of the same facts (private fields, read here only).
    assert host.clock is policy._clock
    assert host.now is policy._now or host.now == policy._now  # a bound method is made anew
    assert (host.before, host.after) == (policy._before, policy._after)
    assert host.fast is policy._fast


def test_host_policy_reads_the_system_clock_directly() -> None:
    # time.monotonic itself, as the retry core reads it: one call less than SystemClock.now.
    assert HostPolicy(seawall.RetryPolicy()).now is time.monotonic
    clock = seawall.VirtualClock()
    assert HostPolicy(seawall.RetryPolicy(clock=clock)).now == clock.now


@pytest.mark.parametrize(
    ("total", "min_attempt_time", "expected"),
    [(None, 0.0, True), (30.0, 0.0, True), (30.0, 30.0, True), (1.0, 2.0, False)],
)
def test_a_first_attempt_without_state_needs_room_in_the_total_time(
    total: float | None, min_attempt_time: float, expected: bool
) -> None:
    host = HostPolicy(seawall.RetryPolicy(min_attempt_time=min_attempt_time))
    assert stateless_first(host, HttpRules(total_timeout=total)) is expected
    timed = HostPolicy(seawall.RetryPolicy(timeout=5.0))
    assert stateless_first(timed, HttpRules(total_timeout=total)) is False

"""Hedge's sans-I/O decisions, as a driver of its own (the simulator) uses them."""

from __future__ import annotations

import math

import pytest

import seawall
from seawall import Hedge, LatencyTracker, Permanent, VirtualClock
from seawall.lowlevel import HedgeDelayPassed


def test_start_call_returns_the_delay_and_counts_the_call() -> None:
    policy = Hedge(0.05)
    assert policy.start_call() == 0.05
    assert policy.calls == 1


def test_admit_counts_hedges_and_respects_the_load_bound() -> None:
    policy = Hedge(0.05, max_extra_load=0.1)
    admitted = 0
    for _ in range(100):
        policy.start_call()
        if policy.admit(HedgeDelayPassed("slow")):
            admitted += 1
    # 10 % of 100 calls; the reserve of saved-up tokens starts empty.
    assert admitted == policy.hedges == 10


def test_admit_respects_the_kill_switch() -> None:
    policy = Hedge(0.05, name="sansio-search")
    policy.start_call()
    seawall.set_enabled(False, name="sansio-search")
    assert not policy.admit(HedgeDelayPassed("slow"))
    seawall.set_enabled(True, name="sansio-search")
    assert policy.admit(HedgeDelayPassed("slow"))
    assert policy.hedges == 1


def test_on_error_classifies_errors() -> None:
    policy = Hedge(0.05)
    assert policy.on_error(ConnectionError()) is False
    assert policy.on_error(Permanent()) is True
    assert policy.on_error(seawall.Overloaded()) is True
    assert policy.on_error(KeyError("x")) is True


def test_on_success_counts_wins_and_feeds_the_tracker() -> None:
    clock = VirtualClock()
    tracker = LatencyTracker(half_life=None, clock=clock)
    policy = Hedge(tracker, quantile=0.5, min_samples=3, clock=clock)
    assert policy.start_call() == math.inf  # no samples yet: no hedge on time
    for latency in (0.01, 0.01, 0.01):
        policy.on_success(latency)
    policy.on_success(0.06, attempt=2)
    assert policy.wins == 1
    assert tracker.count == 4
    assert policy.start_call() == pytest.approx(0.01, rel=0.03)

"""The event engine: time order, ties, run(until), and the clock budgets read."""

from __future__ import annotations

import pytest

from seawall import Clock, RetryBudget
from seawall.sim import Engine, SimClock


def test_events_run_in_time_order_and_ties_in_scheduling_order() -> None:
    engine = Engine()
    seen: list[tuple[float, str]] = []

    def note(label: str) -> None:
        seen.append((engine.now, label))

    engine.at(2.0, note, "c")
    engine.at(1.0, note, "a")
    engine.at(1.0, note, "b")
    engine.after(0.5, note, "first")
    engine.run()
    assert seen == [(0.5, "first"), (1.0, "a"), (1.0, "b"), (2.0, "c")]
    assert engine.events == 4
    assert len(engine) == 0


def test_events_scheduled_during_a_run_and_in_the_past() -> None:
    engine = Engine()
    seen: list[float] = []

    def chain(n: int) -> None:
        seen.append(engine.now)
        if n:
            engine.after(1.0, chain, n - 1)
            engine.at(engine.now - 5.0, seen.append, -1.0)  # never before now

    engine.at(0.0, chain, 2)
    engine.run()
    assert seen == [0.0, -1.0, 1.0, -1.0, 2.0]


def test_run_until_stops_at_the_horizon_and_resumes() -> None:
    engine = Engine()
    seen: list[float] = []
    for t in (1.0, 2.0, 3.0):
        engine.at(t, seen.append, t)
    engine.run(until=2.5)
    assert seen == [1.0, 2.0]
    assert engine.now == 2.5
    engine.run()
    assert seen == [1.0, 2.0, 3.0]


def test_simclock_reads_engine_time_and_refuses_to_wait() -> None:
    engine = Engine(start=10.0)
    clock = SimClock(engine)
    assert isinstance(clock, Clock)
    assert clock.now() == 10.0
    engine.at(12.5, lambda _: None)
    engine.run()
    assert clock.now() == 12.5
    with pytest.raises(RuntimeError, match="events"):
        clock.sleep(1.0)


def test_a_budget_on_a_simclock_follows_virtual_time() -> None:
    # The budget's window slides with the engine's time, not the wall clock's.
    engine = Engine()
    budget = RetryBudget(ratio=0.1, min_per_second=0.0, window=10.0, clock=SimClock(engine))
    for _ in range(20):
        budget.on_request()
    assert budget.allow_retry(ConnectionError())
    assert budget.allow_retry(ConnectionError())
    assert not budget.allow_retry(ConnectionError())  # 10% of 20 requests: two retries
    engine.at(30.0, lambda _: None)
    engine.run()
    for _ in range(10):
        budget.on_request()
    assert budget.allow_retry(ConnectionError())  # the old withdrawals have expired

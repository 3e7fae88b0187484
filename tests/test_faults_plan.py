"""FaultPlan: seeded, rate- and schedule-driven decisions, free of any HTTP library."""

from __future__ import annotations

import pytest

import seawall
from seawall import faults


def decisions(plan: faults.FaultPlan, n: int) -> list[tuple[float, str | None]]:
    out = []
    for _ in range(n):
        d = plan.decide()
        out.append((d.delay, None if d.fault is None else type(d.fault).__name__))
    return out


def mixed() -> list[faults.Fault]:
    return [
        faults.Latency(0.2, rate=0.3),
        faults.Status(503, {"Retry-After": "1"}, rate=0.1),
        faults.Reset(rate=0.05),
        faults.Drip(rate=0.05),
    ]


def test_the_same_seed_gives_the_same_decisions() -> None:
    a = decisions(faults.FaultPlan(mixed(), seed=11), 2000)
    b = decisions(faults.FaultPlan(mixed(), seed=11), 2000)
    c = decisions(faults.FaultPlan(mixed(), seed=12), 2000)
    assert a == b
    assert a != c


def test_rates_hold_over_many_requests() -> None:
    plan = faults.FaultPlan([faults.Status(503, rate=0.1), faults.Reset(rate=0.2)], seed=3)
    seen = decisions(plan, 20_000)
    statuses = sum(1 for _, kind in seen if kind == "Status")
    resets = sum(1 for _, kind in seen if kind == "Reset")
    assert 1800 <= statuses <= 2200
    # The first fault that fires decides: a reset needs the status not to fire (0.9 x 0.2).
    assert 3300 <= resets <= 3900
    assert plan.injected == {"status": statuses, "reset": resets}
    assert plan.requests == 20_000


def test_latencies_add_up_and_the_first_outcome_wins() -> None:
    plan = faults.FaultPlan(
        [faults.Latency(0.1), faults.Latency(0.25), faults.Refuse(), faults.Status(500)], seed=0
    )
    d = plan.decide()
    assert d.delay == pytest.approx(0.35)
    assert isinstance(d.fault, faults.Refuse)
    assert d.number == 1
    assert plan.injected == {"latency": 2, "refuse": 1}


def test_window_schedules_follow_the_plan_clock() -> None:
    clock = seawall.VirtualClock()
    plan = faults.FaultPlan([faults.Status(503, schedule=faults.window(5.0, 10.0))], clock=clock)
    seen = []
    for _ in range(15):
        seen.append(plan.decide().fault is not None)
        clock.advance(1.0)
    assert seen == [False] * 5 + [True] * 5 + [False] * 5
    plan.restart()
    assert plan.decide().number == 1


def test_nth_schedules_pick_request_numbers() -> None:
    plan = faults.FaultPlan([faults.Refuse(schedule=faults.nth(1, 2, 5))], seed=1)
    assert [plan.decide().fault is not None for _ in range(6)] == [
        True,
        True,
        False,
        False,
        True,
        False,
    ]


def test_a_disabled_plan_lets_everything_through() -> None:
    plan = faults.FaultPlan([faults.Status(503), faults.Latency(1.0)], seed=1)
    plan.enabled = False
    assert decisions(plan, 10) == [(0.0, None)] * 10
    assert not plan.injected


def test_error_faults_make_a_new_exception_each_time() -> None:
    fault = faults.Error(ConnectionResetError)
    first, second = fault.make(), fault.make()
    assert isinstance(first, ConnectionResetError) and first is not second
    made = faults.Error(lambda: TimeoutError("slow")).make()
    assert isinstance(made, TimeoutError)
    with pytest.raises(TypeError, match="error factory must return an exception"):
        faults.Error(lambda: "oops").make()  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: faults.Latency(-1), "seconds"),
        (lambda: faults.Latency(1e10), "seconds"),
        (lambda: faults.Status(600), "status"),
        (lambda: faults.Status(True), "status"),  # type: ignore[arg-type]
        (lambda: faults.Status(503, {"a": 1}), "headers"),  # type: ignore[dict-item]
        (lambda: faults.Status(503, body="x"), "body"),  # type: ignore[arg-type]
        (lambda: faults.Error(ValueError("an instance")), "error"),  # type: ignore[arg-type]
        (lambda: faults.Reset(rate=1.5), "rate"),
        (lambda: faults.Reset(after_send=1), "after_send"),  # type: ignore[arg-type]
        (lambda: faults.Refuse(schedule=3), "schedule"),  # type: ignore[arg-type]
        (lambda: faults.Drip(chunk=0), "chunk"),
        (lambda: faults.Drip(interval=float("nan")), "interval"),
        (lambda: faults.window(5.0, 1.0), "end"),
        (lambda: faults.nth(0), "numbers"),
        (lambda: faults.FaultPlan([object()]), "faults"),  # type: ignore[list-item]
        (lambda: faults.FaultPlan(faults.Refuse()), "faults"),  # type: ignore[arg-type]
        (lambda: faults.FaultPlan([], seed=-1), "seed"),
        (lambda: faults.FaultPlan([], clock=5), "clock"),  # type: ignore[arg-type]
    ],
)
def test_invalid_faults_name_the_parameter(build: object, name: str) -> None:
    assert callable(build)
    with pytest.raises((TypeError, ValueError), match=name):
        build()

"""The simulator's load shedding is the load shedders' own decision core
(seawall.server._admission.Admission), driven by engine events."""

from __future__ import annotations

from typing import Any

import pytest

from seawall.server._admission import Admission, Ticket
from seawall.sim import metastable

SPIKE: dict[str, Any] = {
    "strategies": ("budget_shedding",),
    "duration": 40.0,
    "spike_start": 10.0,
    "spike_end": 15.0,
}


def test_the_simulated_shedder_is_the_real_admission(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[object] = []
    real_enter = Admission.enter

    def enter(self: Admission, priority: int, at: Any, wake: Any) -> Ticket | str | None:
        outcome = real_enter(self, priority, at, wake)
        outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(Admission, "enter", enter)
    r = metastable(**SPIKE)
    assert len(outcomes) > 1000
    assert outcomes.count(None) > 0  # admitted at once
    assert outcomes.count("queue_full") > 0  # the spike hit the limit: shed at once
    assert r.get("budget_shedding").recovered


def test_a_shedder_queue_serves_some_of_the_spike_later(monkeypatch: pytest.MonkeyPatch) -> None:
    granted: list[Ticket] = []
    real_release = Admission.release

    def release(self: Admission) -> None:
        waiting = [t for q in self._queues for t in q]
        real_release(self)
        granted.extend(t for t in waiting if not t.waiting and t.result is None)

    monkeypatch.setattr(Admission, "release", release)
    plain = metastable(**SPIKE).get("budget_shedding")
    assert granted == []  # no queue: nothing waits
    queued = metastable(**SPIKE, shed_queue=50, shed_queue_wait=0.5).get("budget_shedding")
    assert len(granted) > 0  # waiters got the slots of finished requests
    assert queued.success >= plain.success
    assert queued.recovered

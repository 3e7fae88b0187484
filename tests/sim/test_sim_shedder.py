"""The simulator's load shedding is seawall.server.LoadShedder's own decision core (Admission),
and that core makes the shedder's decisions: LIFO, eviction by urgency, limits."""

from __future__ import annotations

from typing import Any

import pytest

from seawall.server._shed import Admission, ShedStats
from seawall.sim import metastable


class W:
    def __init__(self, name: str, priority: int = 3) -> None:
        self.name, self.priority = name, priority


def test_admission_runs_queues_lifo_evicts_and_frees() -> None:
    stats = ShedStats()
    a = Admission(max_concurrency=1, max_queue=2, stats=stats)
    assert a.try_admit() and stats.in_flight == 1
    assert not a.try_admit()
    old, new = W("old"), W("new")
    assert a.enqueue(old) == (None, None, "queue_full")
    assert a.enqueue(new) == (None, None, "queue_full")
    # Full: a newcomer as urgent evicts the oldest; a less urgent one is refused.
    assert a.enqueue(W("lazy", priority=7)) == ("queue_full", None, "queue_full")
    urgent = W("urgent", priority=0)
    assert a.enqueue(urgent) == (None, old, "priority")  # old (urgency 3) is less urgent
    assert stats.queued == 2
    # The slot passes to the most urgent, then to the newest (LIFO).
    assert a.pop_next() is urgent
    assert a.pop_next() is new
    assert a.pop_next() is None
    a.free()
    assert stats.in_flight == 0 and stats.queued == 0
    assert not a.remove(new)


def test_eviction_reason_names_the_less_urgent_victim() -> None:
    a = Admission(max_concurrency=1, max_queue=1, stats=ShedStats())
    assert a.try_admit()
    lazy = W("lazy", priority=5)
    a.enqueue(lazy)
    assert a.enqueue(W("urgent", priority=1)) == (None, lazy, "priority")
    peer = W("peer", priority=1)
    refused, evicted, why = a.enqueue(peer)
    assert (refused, why) == (None, "queue_full") and evicted is not None


def test_the_simulated_shedder_is_the_real_admission(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, int] = {"try_admit": 0, "enqueue": 0}
    real_admit, real_enqueue = Admission.try_admit, Admission.enqueue

    def admit(self: Admission) -> bool:
        calls["try_admit"] += 1
        return real_admit(self)

    def enqueue(self: Admission, waiter: Any) -> tuple[str | None, Any, str]:
        calls["enqueue"] += 1
        return real_enqueue(self, waiter)

    monkeypatch.setattr(Admission, "try_admit", admit)
    monkeypatch.setattr(Admission, "enqueue", enqueue)
    r = metastable(strategies=("budget_shedding",), duration=40.0, spike_start=10.0, spike_end=15.0)
    assert calls["try_admit"] > 1000 and calls["enqueue"] > 0  # the spike hit the limit
    assert r.get("budget_shedding").recovered


def test_a_shedder_queue_serves_some_of_the_spike_later() -> None:
    kw: dict[str, Any] = {
        "strategies": ("budget_shedding",),
        "duration": 40.0,
        "spike_start": 10.0,
        "spike_end": 15.0,
    }
    plain = metastable(**kw).get("budget_shedding")
    queued = metastable(**kw, shed_queue=50, shed_queue_wait=0.5).get("budget_shedding")
    assert queued.success > plain.success  # fewer requests shed at once
    assert queued.recovered

"""Scenario ``fleet``: a budget per process against one budget for the fleet."""

from __future__ import annotations

import json

import pytest

from seawall.cli import main
from seawall.sim import FLEET_STRATEGIES, fleet


def test_a_floor_per_process_does_not_shrink_with_the_fleet() -> None:
    result = fleet((1, 4, 16, 32), rate=2.0, duration=30.0)
    per_process = [result.row("per_process", n).per_request for n in (1, 4, 16, 32)]
    shared = [result.row("shared", n).per_request for n in (1, 4, 16, 32)]
    # Each process's own floor covers all of its retries: three attempts per call, always.
    assert per_process == [3.0] * 4
    # One floor for the fleet: the amplification falls as the fleet grows.
    assert shared == sorted(shared, reverse=True)
    assert shared[-1] < 1.35
    for row in result.rows:
        assert row.per_request <= row.bound + 1e-9


def test_busy_processes_approach_one_plus_ratio() -> None:
    result = fleet((2, 16), rate=100.0, duration=20.0, ratio=0.1, min_per_second=10.0)
    for n in (2, 16):
        local = result.row("per_process", n).per_request
        # 1 + ratio + floor / rate per process, at most the bound (a full first window).
        assert 1.0 + 0.1 + 10.0 / 100.0 - 0.01 <= local <= result.row("per_process", n).bound
        assert result.row("shared", n).per_request < local
    assert result.row("shared", 16).per_request == pytest.approx(1.1, abs=0.03)


def test_deposits_sent_every_sync_interval_change_little() -> None:
    result = fleet((8,), rate=20.0, duration=20.0, sync_interval=0.5)
    shared = result.row("shared", 8).per_request
    synced = result.row("shared_synced", 8).per_request
    assert abs(synced - shared) < 0.05
    assert synced <= result.row("shared_synced", 8).bound + 1e-9


def test_the_same_seed_gives_the_same_result() -> None:
    assert fleet((4,), duration=10.0, seed=3) == fleet((4,), duration=10.0, seed=3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"processes": ()}, "processes"),
        ({"processes": (0,)}, "processes"),
        ({"rate": 0.0}, "rate"),
        ({"window": -1.0}, "window"),
        ({"sync_interval": 0.0}, "sync_interval"),
        ({"processes": (1000,), "rate": 1000.0}, "calls"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        fleet(**kwargs)  # type: ignore[arg-type]


def test_fleet_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "fleet", "--processes", "1", "8", "--duration", "10", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    strategies = {r["strategy"] for r in data["rows"]}
    assert strategies == set(FLEET_STRATEGIES)
    assert main(["sim", "fleet", "--processes", "2", "--duration", "5"]) == 0
    assert "per_process" in capsys.readouterr().out

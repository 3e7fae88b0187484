"""Scenario ``hedge``: fan-out to heavy-tailed servers, without and with hedging at the live p95."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seawall.cli import main
from seawall.instrumentation import Counters, MetricsHook
from seawall.sim import SCENARIOS, hedge


@pytest.mark.volume
@pytest.mark.parametrize("seed", [0, 1])
def test_hedging_at_the_live_p95_cuts_the_p99_with_little_extra_load(seed: int) -> None:
    result = hedge(requests=1000, quantiles=(0.95,), seed=seed)
    none, p95 = result.get("none"), result.get("p95")
    assert none.extra_load == 0 and none.attempts == none.leaf_calls == 10_000
    assert p95.p99 * 2 <= none.p99, (none.p99, p95.p99)
    assert p95.leaf_p99 * 2 <= none.leaf_p99
    assert 0.02 <= p95.extra_load <= 0.10, p95.extra_load
    # Hedging only adds attempts, never delays an answer: the median does not move.
    assert p95.p50 <= none.p50
    assert 0 < p95.wins <= p95.hedges == p95.attempts - p95.leaf_calls


@pytest.mark.volume
def test_same_seed_same_result_other_seed_other_result() -> None:
    a = hedge(requests=300, quantiles=(0.95,), seed=4)
    b = hedge(requests=300, quantiles=(0.95,), seed=4)
    c = hedge(requests=300, quantiles=(0.95,), seed=5)
    assert a == b
    assert a != c


@pytest.mark.volume
def test_hooks_count_the_hedges_the_scenario_reports() -> None:
    counters = Counters()
    result = hedge(requests=300, quantiles=(0.95,), hooks=[MetricsHook(counters).hedge_hook])
    row = result.get("p95")
    assert counters.get("hedges", "hedge-p95") == row.hedges > 0
    assert counters.get("hedge_wins", "hedge-p95") == row.wins


def test_unbounded_hedging_costs_more_load_than_the_bound() -> None:
    bounded = hedge(requests=500, quantiles=(0.8,), max_extra_load=0.1, seed=2).get("p80")
    free = hedge(requests=500, quantiles=(0.8,), max_extra_load=None, seed=2).get("p80")
    assert bounded.extra_load <= 0.105 < free.extra_load


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"requests": 0}, "requests"),
        ({"fanout": 0}, "fanout"),
        ({"quantiles": (1.5,)}, "quantiles"),
        ({"tail_probability": 2.0}, "tail_probability"),
        ({"max_extra_load": 3.0}, "max_extra_load"),
        ({"median": -1.0}, "median"),
    ],
)
def test_invalid_parameters_are_named(kwargs: dict[str, object], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        hedge(**kwargs)  # type: ignore[arg-type]


def test_registered_for_the_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "hedge" in SCENARIOS
    png = tmp_path / "hedge.png"
    assert main(["sim", "hedge", "--requests", "200", "--at", "p95", "--plot", str(png)]) == 0
    out = capsys.readouterr()
    assert "hedge p95" in out.out and "shorter hedging" in out.out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["sim", "hedge", "--requests", "200", "--at", "0.9", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in data["rows"]] == ["none", "p90"]


def test_bad_percentile_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["sim", "hedge", "--at", "p100"])
    assert info.value.code == 2
    assert "--at: must be a percentile" in capsys.readouterr().err


@pytest.mark.volume
def test_demo_version_shows_the_cut() -> None:
    result = SCENARIOS["hedge"].demo(0, 1, None)
    assert result.p99_cut >= 2
    assert list(SCENARIOS).index("hedge") > list(SCENARIOS).index("metastable")

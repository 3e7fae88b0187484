"""``seawall sim NAME --metrics``: the production counters of a run, fed by the real hooks."""

from __future__ import annotations

import json

import pytest

from seawall.cli import main
from seawall.instrumentation import Counters
from seawall.sim import collect_metrics, hedge, sweep
from seawall.sim._metrics import retry_hooks


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


def test_sweep_metrics_match_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "sweep", "--duration", "2", "--p", "0.3", "--splits", "--json", "--metrics"]
    data = run_json(argv, capsys)
    metrics = data["metrics"]
    assert isinstance(metrics, dict)
    for row in data["rows"]:  # type: ignore[attr-defined]
        if row["strategy"] not in ("retries_3", "retry_budget", "token_bucket", "no_retries"):
            continue
        policy = f'policy="sweep-{row["strategy"]}"'
        ok = metrics.get(f'seawall_attempts_total{{{policy},outcome="success"}}', 0)
        failed = metrics.get(f'seawall_attempts_total{{{policy},outcome="failure"}}', 0)
        retries = metrics.get(f"seawall_retries_total{{{policy}}}", 0)
        # One success per request that succeeded; every attempt sent is counted once.
        assert ok == round(row["success"] * row["requests"])
        assert ok + failed == round(row["load"] * row["requests"])
        assert ok + failed == row["requests"] + retries
    assert metrics['seawall_budget_refusals_total{policy="sweep-token_bucket"}'] > 0
    assert any(k.startswith("seawall_breaker_transitions_total{") for k in metrics)


@pytest.mark.volume
def test_hedge_metrics_match_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        ["sim", "hedge", "--requests", "300", "--at", "p95", "--json", "--metrics"], capsys
    )
    metrics = data["metrics"]
    assert isinstance(metrics, dict)
    row = data["rows"][1]  # type: ignore[index]
    assert metrics['seawall_hedges_total{policy="hedge-p95"}'] == row["hedges"] > 0
    assert metrics['seawall_hedge_wins_total{policy="hedge-p95"}'] == row["wins"]


def test_tables_are_followed_by_the_metric_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "storm", "--clients", "5", "--metrics"]) == 0
    out = capsys.readouterr().out
    assert "metrics: what production dashboards would show" in out
    assert 'seawall_retries_total{policy="storm-full"} 20' in out  # 5 clients x 4 retries
    assert 'seawall_give_ups_total{policy="storm-none",reason="attempts_exhausted"} 5' in out


def test_without_metrics_nothing_is_collected_and_json_is_unchanged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert retry_hooks() == ()
    data = run_json(["sim", "amplify", "--requests", "50", "--json"], capsys)
    assert "metrics" not in data


def test_collecting_feeds_scenarios_called_from_python() -> None:
    counters = Counters()
    with collect_metrics(counters):
        result = hedge(requests=200, quantiles=(0.95,))
        sweep(clients=5, duration=1.0, failure_rates=(0.5,), strategies=("retries_3",), splits=())
    assert retry_hooks() == ()
    assert counters.get("hedges", "hedge-p95") == result.get("p95").hedges
    assert counters.get("retries", "sweep-retries_3") > 0

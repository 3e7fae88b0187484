"""Scenario files: arrival shapes, failures, server models, strategies by name or from a seawall
policy file; the CLI's `sim file`, `--policies`, bad files and exact re-runs."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from seawall.cli import main
from seawall.sim._file import read_scenario, run_scenario_file, scenario_plan

POLICIES = textwrap.dedent(
    """
    [routes.users.retry_policy]
    num_retries = 2
    per_try_timeout = "3s"
    back_off = { base = "100ms", max = "2s" }
    budget = { percent_can_retry = 10, min_retries_per_sec = 10 }

    [routes.eager.retry_policy]
    num_retries = 2
    per_try_timeout = "3s"
    back_off = { base = "1ms", max = "1ms" }
    """
)


def _run(arrivals: dict[str, Any], **tables: Any) -> Any:
    data = {"run": {"duration": 40.0}, "arrivals": arrivals, **tables}
    data.setdefault("clients", {"strategies": ["no_retries"]})
    return run_scenario_file(data)


def _offered(r: Any, start: int, end: int) -> float:
    return sum(r.series[0].offered[start:end]) / (end - start)


def test_constant_arrivals_are_evenly_spaced() -> None:
    r = _run({"shape": "constant", "rate": 10.0}, server={"network_mean": 1e-6})
    offered = r.series[0].offered[2:38]
    # One every 0.1 s: 10 a second, give or take one at a bin's edge (Poisson would spread
    # far wider: a standard deviation of about 3).
    assert all(9 <= x <= 11 for x in offered) and 358 <= sum(offered) <= 362


def test_poisson_step_ramp_and_bursts() -> None:
    poisson = _run({"shape": "poisson", "rate": 50.0})
    assert 45 <= _offered(poisson, 2, 38) <= 55
    step = _run({"shape": "step", "rate": 20.0, "steps": [[10, 60], [20, 20]]})
    assert 15 <= _offered(step, 2, 9) <= 25 and 50 <= _offered(step, 11, 19) <= 70
    assert 15 <= _offered(step, 22, 38) <= 25
    ramp = _run({"shape": "ramp", "rate": 10.0, "ramp": {"start": 10, "end": 30, "to": 90}})
    assert _offered(ramp, 2, 9) < 15 and 40 <= _offered(ramp, 18, 22) <= 60
    assert _offered(ramp, 26, 30) > 70 and _offered(ramp, 32, 39) < 15
    bursts = _run({"shape": "bursts", "rate": 5.0, "bursts": [[20, 300]]})
    assert bursts.series[0].offered[20] >= 300 > max(bursts.series[0].offered[:20])


def test_independent_failures_and_correlated_outages() -> None:
    coin = _run({"shape": "poisson", "rate": 50.0}, failures={"probability": 0.5})
    assert 0.45 <= coin.series[0].success <= 0.55
    down = _run(
        {"shape": "constant", "rate": 20.0},
        failures={"outages": [[10, 20]]},
        server={"base_latency": 0.05, "network_mean": 0.01},
    )
    goodput = down.series[0].goodput
    assert max(goodput[11:20]) == 0 and min(goodput[22:38]) >= 18
    stall = _run(
        {"shape": "constant", "rate": 20.0},
        failures={"outages": [[10, 20]], "outage_kind": "stall"},
        server={"base_latency": 0.05, "per_request": 0.0, "network_mean": 0.01},
        clients={"strategies": ["no_retries"], "timeout": 30.0},
    )
    # A stall answers late, not never: the queued requests all finish when it ends.
    assert stall.series[0].success == 1.0 and stall.series[0].goodput[20] >= 190


def test_server_model_from_the_file() -> None:
    limited = _run(
        {"shape": "constant", "rate": 50.0},
        server={"model": "limit", "concurrency": 2, "base_latency": 0.1, "queue_limit": 0},
    )
    assert limited.server == "limit"
    # 2 slots of 100 ms serve at most 20/s; the rest is refused at once.
    assert 14 <= sum(limited.series[0].goodput[5:35]) / 30 <= 20
    assert limited.series[0].success < 0.45


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "policies.toml").write_text(POLICIES)
    (tmp_path / "spike.toml").write_text(
        textwrap.dedent(
            """
            [run]
            duration = 70

            [arrivals]
            shape = "step"
            rate = 40
            steps = [[20, 80], [25, 40]]

            [clients]
            strategies = ["naive"]
            policies = "policies.toml"
            """
        )
    )
    return tmp_path


def test_policies_from_the_users_own_policy_file(files: Path) -> None:
    r = run_scenario_file(read_scenario(files / "spike.toml"))
    assert [s.strategy for s in r.series] == ["naive", "users", "eager"]
    assert r.get("users").recovered  # the route's budget saves it
    assert not r.get("eager").recovered and not r.get("naive").recovered


def test_metrics_name_the_routes(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "file", "--scenario", str(files / "spike.toml"), "--metrics", "--json"]
    assert main(argv) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    assert metrics['seawall_give_ups_total{policy="users",reason="budget"}'] > 0
    assert 'seawall_retries_total{policy="eager"}' in metrics


def test_policies_option_on_a_built_in_scenario(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim", "metastable", "--strategies", "naive", "--duration", "60", "--json"]
    assert main([*argv, "--policies", str(files / "policies.toml")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["strategy"] for s in data["series"]] == ["naive", "users", "eager"]
    assert data["run"]["parameters"]["policies_data"]["routes"]["users"]


def test_a_file_run_reruns_exactly_without_the_file(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim", "file", "--scenario", str(files / "spike.toml"), "--json", "--seeds", "2"]
    assert main([*argv, "--workers", "1"]) == 0
    first = json.loads(capsys.readouterr().out)
    (files / "spike.toml").unlink()
    (files / "policies.toml").unlink()
    (files / "result.json").write_text(json.dumps(first))
    assert main(["sim", "--from", str(files / "result.json"), "--workers", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == first


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"arrivals": {}}, "arrivals.rate is required"),
        ({"arrivals": {"rate": 1, "speed": 2}}, "arrivals.speed: unknown field (expected one of"),
        (
            {"arrivals": {"rate": 1, "rates": 2}},
            "arrivals.rates: unknown field; did you mean 'rate'?",
        ),
        ({"arrivals": {"rate": 1, "shape": "wave"}}, "arrivals.shape must be one of"),
        ({"arrivals": {"rate": -1}}, "arrivals.rate must be a finite number"),
        ({"arrivals": {"rate": 1}, "server": {"model": "x"}}, "server.model must be one of"),
        ({"arrivals": {"rate": 1}, "failures": {"outages": [[5]]}}, "failures.outages[0]"),
        ({"arrivals": {"rate": 1}, "clients": {"strategies": ["x"]}}, "clients.strategies"),
        ({"arrivals": {"rate": 1}, "run": {"duration": 1e308}}, "run.duration"),
        ({"arrivals": {"rate": 1e7}, "run": {"duration": 1e6}}, "the limit is"),
        ({"arrivals": {"rate": 1}, "extra": {}}, "extra: unknown table (expected one of: run,"),
        ({"arrivals": {"rate": 1}, "servr": {}}, "servr: unknown table; did you mean 'server'?"),
    ],
)
def test_bad_scenario_data_is_refused_with_its_path(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scenario_plan(data)


def test_bad_files_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[arrivals\nrate = ")
    cases = [
        (["--scenario", str(tmp_path / "missing.toml")], "No such file"),
        (["--scenario", str(bad)], "invalid TOML"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as exc:
            main(["sim", "file", *extra])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_arrivals_may_be_evenly_spaced() -> None:
    data = {"arrivals": {"shape": "step", "rate": 10, "steps": [[5, 20]], "spacing": "even"}}
    assert scenario_plan(data)["even"] is True
    assert scenario_plan({"arrivals": {"shape": "step", "rate": 10}})["even"] is False
    assert scenario_plan({"arrivals": {"shape": "constant", "rate": 10}})["even"] is True
    even = run_scenario_file(
        {**data, "run": {"duration": 10.0}, "clients": {"strategies": ["naive"]}}
    )
    # 10/s, evenly: 50 first tries in the first 5 s, give or take the one a hop moves across.
    assert sum(even.get("naive").offered[:5]) == pytest.approx(50, abs=1)
    with pytest.raises(ValueError, match=r"arrivals\.spacing"):
        scenario_plan({"arrivals": {"shape": "step", "rate": 10, "spacing": "jittered"}})
    with pytest.raises(ValueError, match=r"arrivals\.spacing"):
        scenario_plan({"arrivals": {"shape": "poisson", "rate": 10, "spacing": "even"}})

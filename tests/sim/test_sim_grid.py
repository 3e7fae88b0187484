"""Grids over any option (`--grid KEY=V1,V2`), and the experiments as files under examples/
(`seawall sim --from FILE.toml`)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from seawall._policy.config import _decode, _read
from seawall.cli import _SUBPARSERS, build_parser, main
from seawall.sim import SCENARIOS
from seawall.sim._file import read_scenario
from seawall.sim._grid import grid_cells, parse_grid
from seawall.sim._trials import NOT_PARAMETERS, run_trials

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))


def _toml(path: pathlib.Path) -> dict[str, Any]:
    return dict(_decode(_read(path), path))  # tomllib, or tomli on Python 3.10


SWEEP = ["sim", "sweep", "--duration", "2", "--p", "0.3", "--splits", "--strategies", "retries_3"]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_grid_values_are_parsed_by_the_option_itself() -> None:
    build_parser()
    occ = _SUBPARSERS["occ"]
    grid = parse_grid(occ, ["base=0.005,0.01", "clients=10,50", "algorithms=full"])
    # --clients takes several values: one per cell.
    assert grid == {"base": [0.005, 0.01], "clients": [[10], [50]], "algorithms": [["full"]]}
    assert len(grid_cells(grid)) == 4
    assert grid_cells({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    for bad, message in [
        (["speed=1,2"], "not an option"),
        (["base"], "KEY=V1"),
        (["base=-1"], "base=-1"),
        (["algorithms=quantum"], "algorithms=quantum"),
        (["base=1", "base=2"], "twice"),
        (
            [
                f"trials={','.join(str(i) for i in range(1, 200))}",
                "clients=" + ",".join(["5"] * 60),
            ],
            "cells",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_grid(occ, bad)


def test_a_grid_runs_every_cell_as_its_own_seeds_would(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        *SWEEP,
        "--grid",
        "clients=5,10",
        "rate=2,4",
        "--seeds",
        "2",
        "--json",
        "--workers",
        "2",
    ]
    doc = _json(argv, capsys)
    assert doc["run"]["grid"] == {"clients": [5, 10], "rate": [2.0, 4.0]}
    assert [c["parameters"] for c in doc["cells"]] == [
        {"clients": 5, "rate": 2.0},
        {"clients": 5, "rate": 4.0},
        {"clients": 10, "rate": 2.0},
        {"clients": 10, "rate": 4.0},
    ]
    # Each cell is exactly the --seeds run with those options (whatever ran beside it).
    cell = doc["cells"][2]
    alone = run_trials("sweep", {**doc["run"]["parameters"], **cell["parameters"]}, [0, 1])
    assert cell["trials"] == alone["trials"] and cell["summary"] == alone["summary"]
    loads = [c["summary"]["retries_3.p0.3.load"]["mean"] for c in doc["cells"]]
    assert all(1.2 < x < 1.6 for x in loads)
    # The document is its own recipe.
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(doc))
    assert _json(["sim", "--from", str(path), "--workers", "1"], capsys) == doc


def test_a_grid_table_lists_each_cell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SWEEP, "--grid", "clients=5,10", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "clients=5" in out and "clients=10" in out and "retries_3.p0.3.load" in out


def test_every_experiment_has_an_example_file() -> None:
    names = set()
    for path in EXAMPLES:
        data = _toml(path)
        if "run" in data and "scenario" in data["run"]:
            names.add(data["run"]["scenario"])
    assert set(SCENARIOS) - {"file"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_files_name_only_real_options(path: pathlib.Path) -> None:
    build_parser()
    data = _toml(path)
    run = data.get("run", {})
    if "scenario" not in run:  # an overload scenario file, for `sim file` and `probe`
        assert read_scenario(path)["arrivals"]
        return
    options = {
        a.dest for a in _SUBPARSERS[run["scenario"]]._actions if a.dest not in NOT_PARAMETERS
    }
    assert set(run.get("parameters", {})) <= options
    assert set(run.get("grid", {})) <= options
    assert path.read_text(encoding="utf-8").startswith("#")  # says what it is, and its source


def test_an_example_runs_as_the_command_would(capsys: pytest.CaptureFixture[str]) -> None:
    from_file = _json(["sim", "--from", str(ROOT / "examples" / "amplify.toml")], capsys)
    direct = _json(["sim", "amplify", "--json"], capsys)  # the defaults are the book's example
    assert from_file == direct
    assert {r["strategy"]: r["per_request"] for r in direct["rows"]}["naive"] == 64.0


def test_a_recipe_with_a_number_of_seeds_gives_means(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        '[run]\nscenario = "amplify"\nseeds = 2\n[run.parameters]\nrequests = 20\nattempts = 3\n'
    )
    doc = _json(["sim", "--from", str(recipe), "--workers", "1"], capsys)
    assert doc["run"]["seeds"] == [0, 1]
    assert doc["summary"]["naive.per_request"]["mean"] == 27.0
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\nscenario = "amplify"\n[run.parameters]\nspeed = 3\n')
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--from", str(bad)])
    assert exc.value.code == 2
    assert "unknown parameter 'speed'" in capsys.readouterr().err

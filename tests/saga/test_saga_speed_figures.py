"""docs/saga.md's speed tables are the ones benchmarks/saga.py prints from the saved figures."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures" / "saga_callers.json"


def bench() -> Any:
    # As when it runs as a script: its own directory first on the path (its shared modules).
    benchmarks = str(ROOT / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    spec = importlib.util.spec_from_file_location("saga_bench", ROOT / "benchmarks" / "saga.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_speed_tables_are_the_saved_figures(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(FIGURES.read_text(encoding="utf-8"))
    bench().summarise(data)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) > 10
    page = (ROOT / "docs" / "saga.md").read_text(encoding="utf-8").splitlines()
    missing = [row for row in rows if row not in page]
    assert not missing, f"docs/saga.md is out of date with {FIGURES.name}: {missing}"


def test_the_saved_figures_are_complete() -> None:
    data = json.loads(FIGURES.read_text(encoding="utf-8"))
    contenders = {"seawall-1w", "seawall-4w", "seawall-4w8", "dbos", "dbos-queue"}
    assert len(data["results"]) == data["rounds"] * len(data["stores"])
    for result in data["results"]:
        assert set(result["contenders"]) == contenders
        assert all(c["runs_per_s"] > 0 for c in result["contenders"].values())
        assert all(v > 0 for v in result["ceilings"].values())
    assert len(data["load_before"]) == 3 and len(data["load_after"]) == 3

"""The published-experiments table in docs/simulator.md is generated from the committed JSON,
and the JSON's trials are what the simulator computes from the JSON's own parameters."""

from __future__ import annotations

import json
import pathlib

from seawall.sim._published import EXPERIMENTS, TABLE_END, TABLE_START, published_table
from seawall.sim._trials import run_trials

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "simulator.md").read_text(encoding="utf-8")
DATA = json.loads((ROOT / "docs" / "figures" / "sim_published.json").read_text(encoding="utf-8"))


def test_the_docs_table_is_the_one_the_json_gives() -> None:
    start = DOC.index(TABLE_START) + len(TABLE_START)
    assert DOC[start : DOC.index(TABLE_END)].strip() == published_table(DATA)


def test_the_json_covers_every_experiment_with_its_run_record() -> None:
    keys = [item["experiment"]["key"] for item in DATA["experiments"]]
    assert keys == [e.key for e in EXPERIMENTS]
    for item in DATA["experiments"]:
        run = item["run"]
        assert run["scenario"] == item["experiment"]["scenario"]
        assert run["seeds"] and run["seawall_version"]
        assert len(item["values"]) == len(run["seeds"])


def _rerun(key: str, seeds: list[int]) -> None:
    (item,) = [i for i in DATA["experiments"] if i["experiment"]["key"] == key]
    run = item["run"]
    doc = run_trials(run["scenario"], run["parameters"], seeds)
    metric = item["experiment"]["metric"]
    positions = [run["seeds"].index(s) for s in seeds]
    assert [t["metrics"].get(metric) for t in doc["trials"]] == [
        item["values"][i] for i in positions
    ]


def test_the_json_trials_come_out_the_same_when_re_run() -> None:
    # The cheap experiments, two seeds each (the JSON holds ten).
    _rerun("sre-amplification", [0, 7])
    _rerun("brooker-n-retries", [3, 9])
    _rerun("metastable-backoff", [0, 5])

"""The README's hedging figures come from the demo's JSON, and nowhere else.

``docs/figures/hedging.json`` is the hedge scenario's result as ``seawall demo`` writes it; the
README's hedging sentences are rendered from it (``tests/hedging_figures.py``), and the
simulator page's example runs the same scenario. These tests fail when any of them drifts.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import hedging_figures as hf


def close(a: Any, b: Any) -> bool:
    """Equal JSON data, floats to 1e-9 (libm may differ in the last bits across machines)."""
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and math.isclose(a, b, rel_tol=1e-9)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_the_recorded_figures_are_what_the_demo_computes() -> None:
    assert close(hf.load(), hf.demo_result()), (
        "docs/figures/hedging.json is out of date with the demo: run "
        "`.venv/bin/python tests/hedging_figures.py`"
    )


def test_the_readme_shows_the_recorded_figures() -> None:
    recorded = hf.load()
    shown = hf.spans(hf.README.read_text(encoding="utf-8"))
    assert set(shown) == {"fan-out", "summary"}
    for name, text in shown.items():
        assert text == hf.render(name, recorded), (
            f"README.md's hedging:{name} is not what docs/figures/hedging.json says: run "
            "`.venv/bin/python tests/hedging_figures.py`"
        )


def test_the_simulator_page_example_prints_the_same_figures() -> None:
    # docs/simulator.md runs hedge(requests=1000, seed=0): the demo's own parameters.
    f = hf.figures(hf.load())
    assert (f["requests"], f["seed"]) == (1000, 0)
    page = (hf.ROOT / "docs" / "simulator.md").read_text(encoding="utf-8")
    assert "r = hedge(requests=1000, quantiles=(0.95,), seed=0)" in page
    for line in (
        f"# -> none p99 {f['p99_ms']} ms extra load 0.0%",
        f"# -> p95 p99 {f['hedged_p99_ms']} ms extra load {f['extra_percent']}%",
        f"# -> p99 cut {f['cut']}x",
    ):
        assert line in page


def test_a_demo_summary_file_is_read_the_same_way(tmp_path: Any) -> None:
    import json

    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"seed": 0, "scenarios": {"hedge": {"result": hf.load()}}}))
    assert hf.from_summary(summary) == hf.load()
    with pytest.raises(KeyError):
        hf.render("nothing", hf.load())

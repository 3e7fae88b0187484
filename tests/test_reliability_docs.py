"""docs/reliability.md shows the figures the soak and property runs wrote, and they hold.

The page's figures section is rendered from ``docs/figures/*.json`` (``make reliability``
writes both); this test fails when the page and the files disagree, so the figures cannot be
edited by hand, and when the files record a broken invariant.
"""

from __future__ import annotations

import figures


def test_the_page_shows_the_recorded_figures() -> None:
    text = figures.PAGE.read_text(encoding="utf-8")
    assert figures.page_figures(text) == figures.render(), (
        "docs/reliability.md is out of date with docs/figures: run `make reliability`"
    )


def test_the_recorded_figures_hold_the_invariants() -> None:
    soak = figures._load(figures.DOC_FIGURES, "soak")
    assert soak["duplicated_posts"] == 0
    assert soak["max_retry_wait_end_seconds"] < soak["deadline_seconds"]
    assert soak["attempts"] - soak["calls"] <= soak["retries_allowed_by_budgets"]
    assert soak["goodput_share_of_capacity"] >= 0.75  # tests/soak: GOODPUT_FLOOR
    assert soak["faults_total"] == sum(soak["faults_injected"].values()) > 0
    assert sum(soak["outcomes"].values()) == soak["calls"]
    for name in ("hostile_constructors", "hostile_config"):
        fuzz = figures._load(figures.DOC_FIGURES, name)
        assert fuzz["escaped"] == 0
        refused = fuzz.get("refused_naming_the_parameter", fuzz.get("refused_naming_the_field"))
        assert refused + fuzz["accepted_and_worked"] == fuzz["values"] > 0

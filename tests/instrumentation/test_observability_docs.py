"""docs/observability.md matches the metric table (its examples run in test_docs_examples.py)."""

from __future__ import annotations

import pathlib

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_the_metric_table_lists_every_metric_with_its_labels() -> None:
    from seawall.instrumentation import METRICS

    text = DOC.read_text(encoding="utf-8")
    for metric in METRICS:
        row = next(line for line in text.splitlines() if f"| `{metric.prometheus_name}` |" in line)
        assert metric.kind in row
        for label in metric.labels:
            assert f"`{label}`" in row

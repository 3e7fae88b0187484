"""The examples in docs/observability.md run and print what their ``# ->`` lines say."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "observability.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_doc_example_prints_what_it_says(code: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "doc_example"})
    expected = [line.split("# -> ", 1)[1] for line in code.splitlines() if "# -> " in line]
    assert expected
    assert out.getvalue().splitlines() == expected


def test_the_metric_table_lists_every_metric_with_its_labels() -> None:
    from seawall.instrumentation import METRICS

    text = DOC.read_text(encoding="utf-8")
    for metric in METRICS:
        row = next(line for line in text.splitlines() if f"| `{metric.prometheus_name}` |" in line)
        assert metric.kind in row
        for label in metric.labels:
            assert f"`{label}`" in row

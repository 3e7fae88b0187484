"""The Python examples in docs/simulator.md run and print what the text says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_every_python_example_runs() -> None:
    blocks = _examples()
    assert len(blocks) == 6
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {"__name__": "docs_example"})
        if "amplify(" in block:
            assert (
                "{'naive': 27.0, 'one_layer': 3.0, 'budget': 1.1, 'budget_every_layer': 1.32}"
                in out.getvalue()
            )
        if "storm(" in block:
            assert "{'none': 100, 'full': 19, 'equal': 25, 'decorrelated': 9}" in out.getvalue()
        if "hedge(" in block:
            lines = out.getvalue().splitlines()
            assert lines[0] == "none p99 1344 ms extra load 0.0%"
            assert lines[1] == "p95 p99 50 ms extra load 5.2%"
            assert lines[2] == "p99 cut 26.8x"
        if "metastable(" in block:
            lines = out.getvalue().splitlines()
            assert lines[0].startswith("naive stays collapsed")
            assert lines[2].startswith("budget recovered")

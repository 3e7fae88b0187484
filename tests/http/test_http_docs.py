"""The examples in docs/http.md run offline and print what their ``# ->`` lines say."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "http.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_doc_example_runs_and_prints_what_it_says(code: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "doc_example"})
    expected = [line.split("# -> ", 1)[1] for line in code.splitlines() if "# -> " in line]
    assert out.getvalue().splitlines() == expected

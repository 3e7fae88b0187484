"""The examples in docs/deadlines.md run, and print what their comments say."""

import contextlib
import io
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "deadlines.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def expected_outputs(code: str) -> list[str | None]:
    """For each print() call, the comment that states its output (None when there is none)."""
    lines = code.splitlines()
    expected: list[str | None] = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("print("):
            continue
        match = re.match(r"\s*print\(.*?\)\s+# (.*)$", line)
        if match:
            expected.append(match.group(1).strip())
        elif i + 1 < len(lines) and lines[i + 1].lstrip().startswith("# "):
            expected.append(lines[i + 1].lstrip()[2:].strip())
        else:
            expected.append(None)
    return expected


def test_the_doc_has_examples() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_doc_example_runs_and_prints_what_it_says(code: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "doc_example"})
    printed = out.getvalue().splitlines()
    expected = expected_outputs(code)
    assert len(printed) == len(expected)
    for got, want in zip(printed, expected, strict=True):
        if want is None:
            continue
        # A comment gives the output, optionally followed by an explanation.
        assert want == got or want.startswith((got + " ", got + ":")), (got, want)

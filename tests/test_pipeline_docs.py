"""The examples in docs/hedging.md and docs/breaker.md run and print what the text says."""

import contextlib
import io
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```\n\s*(prints .*?)(?:\n\n|$)", re.S)


def examples() -> list[tuple[str, str, list[str]]]:
    found = []
    for name in ("hedging.md", "breaker.md"):
        text = (DOCS / name).read_text()
        for i, (code, claim) in enumerate(BLOCK.findall(text)):
            found.append((f"{name}#{i}", code, re.findall(r"`([^`]+)`", claim)))
    return found


EXAMPLES = examples()


@pytest.mark.parametrize(("where", "code", "expected"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_doc_example_prints_what_it_says(where: str, code: str, expected: list[str]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), {"__name__": "__doc_example__"})
    printed = out.getvalue()
    assert expected, where
    for snippet in expected:
        assert snippet in printed, (where, snippet, printed)


def test_every_example_is_checked() -> None:
    blocks = sum((DOCS / n).read_text().count("```python") for n in ("hedging.md", "breaker.md"))
    assert len(EXAMPLES) == blocks

"""The examples in the docs pages that state their output with ``# ->`` lines run and print it.

A line ``print(x)  # -> 42`` says the example prints ``42`` there; the test runs every ``python``
block of each page and compares what it printed with those lines, in order.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = ("config.md", "http.md", "observability.md", "reliability.md", "server.md")


def _blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        found += [(f"{page}#{i}", code) for i, code in enumerate(blocks)]
    return found


BLOCKS = _blocks()


def test_every_page_has_examples() -> None:
    for page in PAGES:
        assert any(where.startswith(page + "#") for where, _ in BLOCKS), page


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_doc_example_prints_what_it_says(where: str, code: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), {"__name__": "doc_example"})
    expected = [line.split("# -> ", 1)[1] for line in code.splitlines() if "# -> " in line]
    assert out.getvalue().splitlines() == expected

"""The examples of docs/fleet.md run against the test redis-server and print what they say."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest
from redis_process import RedisServer

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "fleet.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_the_page_has_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("code", BLOCKS)
def test_fleet_example_prints_what_it_says(
    redis_server: RedisServer, namespace: str, code: str
) -> None:
    code = code.replace("redis://localhost:6379/0", redis_server.url)
    code = code.replace('namespace="shop"', f'namespace="{namespace}"')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "fleet.md", "exec"), {"__name__": "doc_example"})
    expected = [line.split("# -> ", 1)[1] for line in code.splitlines() if "# -> " in line]
    assert out.getvalue().splitlines() == expected

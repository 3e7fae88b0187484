"""The examples in docs/config.md run and print what their ``# ->`` lines say."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "config.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_doc_example_prints_what_it_says(code: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "doc_example"})
    expected = [line.split("# -> ", 1)[1] for line in code.splitlines() if "# -> " in line]
    assert expected
    assert out.getvalue().splitlines() == expected


def test_the_toml_and_yaml_examples_describe_the_same_policies(tmp_path: pathlib.Path) -> None:
    import seawall

    text = DOC.read_text(encoding="utf-8")
    (toml,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    (yaml,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (tmp_path / "p.toml").write_text(toml)
    (tmp_path / "p.yaml").write_text(yaml)
    routes = seawall.load_config(tmp_path / "p.toml")
    assert routes == seawall.load_config(tmp_path / "p.yaml")
    assert routes["users"].num_retries == 3
    assert routes["users"].back_off.cap == 0.25
    assert routes["search"].enabled is False

"""docs/config.md describes what the code does (its examples run in tests/test_docs_examples.py)."""

from __future__ import annotations

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "config.md"


def test_the_toml_and_yaml_examples_describe_the_same_policies(tmp_path: pathlib.Path) -> None:
    import seawall

    text = DOC.read_text(encoding="utf-8")
    (toml,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    (yaml,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (tmp_path / "p.toml").write_text(toml)
    (tmp_path / "p.yaml").write_text(yaml)
    routes = seawall.config.load_config(tmp_path / "p.toml")
    assert routes == seawall.config.load_config(tmp_path / "p.yaml")
    assert routes["users"].num_retries == 3
    assert routes["users"].back_off.cap == 0.25
    assert routes["search"].enabled is False

"""The version lives in one place, src/seawall/_version.py, which the build reads too."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

import pytest

import seawall

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_version_is_the_installed_distributions() -> None:
    assert seawall.__version__ == importlib.metadata.version("seawall")


def test_the_build_reads_the_version_from_the_one_file() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "src/seawall/_version.py"


def test_no_other_source_file_spells_the_version_out() -> None:
    # The release part too ("0.1.0" of "0.1.0.dev0"): a copy left behind at the last release.
    release = re.match(r"\d+(\.\d+)*", seawall.__version__)
    assert release is not None
    spelled_out = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "src").rglob("*.py")
        if release.group() in path.read_text(encoding="utf-8")
    ]
    assert spelled_out == ["src/seawall/_version.py"]

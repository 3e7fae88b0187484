"""The documentation site: the docstrings' Sphinx roles become cross-references that
``mkdocs build --strict`` checks (``make docs`` builds the real site; these tests check the
machinery on the real docstrings and on a small package of their own)."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXTENSION = ROOT / "docs" / "_ext" / "sphinx_roles.py"

griffe = pytest.importorskip("griffe")


def load_extension() -> object:
    spec = importlib.util.spec_from_file_location("sphinx_roles", EXTENSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SphinxRoles()


def docstrings(obj: object, seen: set[str] | None = None) -> dict[str, str]:
    seen = set() if seen is None else seen
    out: dict[str, str] = {}
    path = obj.path  # type: ignore[attr-defined]
    if path in seen:
        return out
    seen.add(path)
    if obj.docstring is not None:  # type: ignore[attr-defined]
        out[path] = obj.docstring.value  # type: ignore[attr-defined]
    for member in obj.members.values():  # type: ignore[attr-defined]
        if not member.is_alias:
            out.update(docstrings(member, seen))
    return out


@pytest.fixture(scope="module")
def converted() -> dict[str, str]:
    pkg = griffe.load(
        "seawall",
        search_paths=[str(ROOT / "src")],
        extensions=griffe.load_extensions(load_extension()),
    )
    return docstrings(pkg)


def test_no_sphinx_role_is_left_in_any_docstring(converted: dict[str, str]) -> None:
    left = {
        path: role
        for path, text in converted.items()
        for role in re.findall(r":(?:class|func|meth|attr|mod|data|exc|obj):`[^`]+`", text)
    }
    assert left == {}


def test_roles_link_to_the_public_path_and_outside_names_stay_code(
    converted: dict[str, str],
) -> None:
    text = converted["seawall._strategies.retry.RetryPolicy"]
    # :class:`~seawall.RetryBudget` shows the last name and links to the documented path.
    assert "[`RetryBudget`][seawall.RetryBudget]" in text
    # :class:`random.Random` is the standard library's: plain code, no link to resolve.
    assert "`random.Random`" in text
    assert "][random.Random]" not in text
    # A relative name in a private module links to where the reference documents it.
    storm = converted["seawall.sim._storm.storm"]
    assert "[`RetryPolicy.run`][seawall.RetryPolicy.run]" in storm


def build(tmp_path: pathlib.Path, docstring: str) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of a one-page site documenting a small ``seawall`` package."""
    src = tmp_path / "src" / "seawall"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text(
        textwrap.dedent(
            f'''
            """A package for the test."""

            __all__ = ["Thing", "use"]


            class Thing:
                """A thing."""


            def use() -> None:
                """{docstring}"""
            '''
        )
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Test\n\n::: seawall\n")
    (tmp_path / "mkdocs.yml").write_text(
        textwrap.dedent(
            f"""
            site_name: test
            strict: true
            markdown_extensions: [attr_list, toc]  # as mkdocs.yml: autorefs needs them
            plugins:
              - autorefs
              - mkdocstrings:
                  handlers:
                    python:
                      paths: [src]
                      options:
                        docstring_style: google
                        extensions: ["{EXTENSION}:SphinxRoles"]
            """
        )
    )
    return subprocess.run(
        # Not --quiet: it hides the warnings from the count that --strict fails on.
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.slow
def test_a_resolved_reference_builds(tmp_path: pathlib.Path) -> None:
    result = build(tmp_path, "Use a :class:`Thing`, not a :class:`random.Random`.")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "site" / "index.html").read_text()
    assert 'href="#seawall.Thing"' in page


@pytest.mark.slow
def test_a_broken_reference_fails_the_build(tmp_path: pathlib.Path) -> None:
    result = build(tmp_path, "Use a :class:`Thingy`.")
    assert result.returncode != 0
    assert "Thingy" in result.stderr

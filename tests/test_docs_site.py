"""The documentation site: the docstrings' Sphinx roles become cross-references that
``mkdocs build --strict`` checks (``make docs`` builds the real site; these tests check the
machinery on the real docstrings and on a small package of their own)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXTENSION = ROOT / "docs" / "_ext" / "sphinx_roles.py"
REFERENCE = ROOT / "docs" / "_ext" / "reference.py"
LINKS = ROOT / "docs" / "_ext" / "links.py"

griffe = pytest.importorskip("griffe")


def load_module(path: pathlib.Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_extension() -> object:
    return load_module(EXTENSION).SphinxRoles()


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
    text = converted["seawall._strategies.retry.policy.RetryPolicy"]
    # :class:`~seawall.RetryBudget` shows the last name and links to the documented path.
    assert "[`RetryBudget`][seawall.RetryBudget]" in text
    # :class:`random.Random` is the standard library's: plain code, no link to resolve.
    assert "`random.Random`" in text
    assert "][random.Random]" not in text
    # A relative name in a private module links to where the reference documents it.
    storm = converted["seawall.sim._storm.storm"]
    assert "[`RetryPolicy.run`][seawall.RetryPolicy.run]" in storm


def build(
    tmp_path: pathlib.Path, docstring: str, page: str = ""
) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of a one-page site documenting a small ``seawall`` package
    (*page*: more Markdown on that page), with the site's link check."""
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
    (docs / "index.md").write_text(f"# Test\n\n{page}\n\n::: seawall\n")
    (docs / "figures").mkdir()
    (docs / "figures" / "data.json").write_text("{}")
    (tmp_path / "mkdocs.yml").write_text(
        textwrap.dedent(
            f"""
            site_name: test
            strict: true
            exclude_docs: |
              figures/
            hooks: ["{LINKS}"]
            markdown_extensions: [attr_list, toc]  # as mkdocs.yml: autorefs needs them
            plugins:
              - autorefs
              - mkdocstrings:
                  handlers:
                    python:
                      paths: [src]
                      options:
                        docstring_style: google
                        extensions: ["{EXTENSION}:SphinxRoles", "{REFERENCE}:Reference"]
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


@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path: pathlib.Path) -> None:
    # A link to a file left out of the site: MkDocs itself only says so at INFO level.
    result = build(tmp_path / "excluded", "Use it.", "The [data](figures/data.json).")
    assert result.returncode != 0
    assert "broken link: index.html: figures/data.json" in result.stderr
    # A link in a docstring, which MkDocs does not check at all.
    result = build(tmp_path / "docstring", "See [the guide](guide.md#setup).")
    assert result.returncode != 0
    assert "broken link: index.html: guide.md#setup" in result.stderr


def test_the_link_check_reads_files_and_fragments(tmp_path: pathlib.Path) -> None:
    links = load_module(LINKS)
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text('<h2 id="setup">Setup</h2>')
    (tmp_path / "data.json").write_text("{}")
    (tmp_path / "index.html").write_text(
        '<a href="guide/#setup">ok</a> <a href="guide/#nope">bad fragment</a>'
        '<a href="data.json">ok</a> <img src="missing.png"> <a href="#top">bad</a>'
        '<a href="https://example.org/x">elsewhere</a> <a name="here"></a><a href="#here">ok</a>'
    )
    assert links.broken_links(tmp_path) == [
        "index.html: guide/#nope (no #nope on that page)",
        "index.html: missing.png (no such file in the site)",
        "index.html: #top (no #top on that page)",
    ]


@pytest.fixture(scope="module")
def referenced() -> Any:
    """The package as the reference loads it, with both extensions."""
    return griffe.load(
        "seawall",
        search_paths=[str(ROOT / "src")],
        extensions=griffe.load_extensions(load_extension(), load_module(REFERENCE).Reference()),
    )


def walk(obj: Any, seen: set[str] | None = None) -> list[Any]:
    seen = set() if seen is None else seen
    if obj.path in seen:
        return []
    seen.add(obj.path)
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += walk(member, seen)
    return found


def test_doctest_examples_become_code_blocks(referenced: Any) -> None:
    loose = {}
    with_examples = []
    for obj in walk(referenced):
        if obj.docstring is None:
            continue
        fenced = False
        for line in obj.docstring.value.splitlines():
            if line.strip().startswith("```"):
                fenced = not fenced
            elif line.strip().startswith(">>>"):
                if fenced:
                    with_examples.append(obj.path)
                else:
                    loose[obj.path] = line
    assert loose == {}
    # The pages the examples were seen run together on, each with its example as code.
    for path in (
        "seawall._strategies.latency.LatencyTracker",
        "seawall.saga",
        "seawall.faults",
        "seawall.instrumentation.prometheus",
    ):
        assert path in with_examples


def test_a_pointer_to_a_guide_becomes_a_link(referenced: Any) -> None:
    text = referenced["saga"].docstring.value
    assert "[Sagas: retries owned by a durable orchestrator](saga.md)" in text
    left = [
        obj.path
        for obj in walk(referenced)
        if obj.docstring is not None and re.search(r"``docs/[\w/-]*\.md``", obj.docstring.value)
    ]
    assert left == []


def test_special_members_are_left_out(referenced: Any) -> None:
    dunders = [
        f"{obj.path}.{name}"
        for obj in walk(referenced)
        if obj.is_class
        for name in obj.members
        if name.startswith("__") and name.endswith("__") and name != "__init__"
    ]
    assert dunders == []
    # What a class offers stays.
    assert "run" in referenced["_strategies.retry.policy.RetryPolicy"].members


def test_the_top_level_page_lists_every_name_once_the_main_ones_first() -> None:
    import seawall

    page = (ROOT / "docs" / "api.md").read_text()
    listed = re.findall(r"^::: seawall\.(\w+)$", page, re.M)
    modules = {n for n in seawall.__all__ if importlib.util.find_spec(f"seawall.{n}") is not None}
    assert sorted(listed) == sorted(set(seawall.__all__) - modules)
    assert listed[:3] == ["retry", "RetryPolicy", "Backoff"]


@pytest.mark.slow
def test_the_reference_site_builds_and_reads_well(tmp_path: pathlib.Path) -> None:
    """The real site, built as ``make docs`` builds it: strict, every link checked."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pages = {p.parent.name: p.read_text() for p in tmp_path.glob("api*/index.html")}
    assert len(pages) == 17
    for name, html in pages.items():
        assert "<blockquote>" not in html, name  # doctests are code, not nested quotes
        assert not re.search(r'id="seawall[\w.]*\.__\w+__"', html), name
    assert '<span class="gp">&gt;&gt;&gt; </span>' in pages["api"]  # a highlighted prompt
    first = re.search(r'<h3 id="(seawall\.\w+)"', pages["api"])
    assert first is not None and first.group(1) == "seawall.retry"
    assert 'href="../saga/"' in pages["api-saga"]
    assert (tmp_path / "figures" / "sim_published.json").is_file()

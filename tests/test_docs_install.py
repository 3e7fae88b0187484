"""Every install command the docs show works today: seawall is not published on a package index,
so each ``pip install`` in README.md, docs/*.md and the docstrings installs from a checkout, a
path or a built wheel, never a bare name an index would be asked for; and every ``[extras]`` is
quoted (an unquoted ``.[httpx]`` is a glob to most shells).
"""

from __future__ import annotations

import ast
import pathlib
import re
import shlex

import pytest

import seawall

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

# A command runs to the end of its line, a closing backtick, a shell comment or `&&`.
COMMAND = re.compile(r"pip install\b([^\n`#&]*)")
LOCAL = ("./", "../", ".", "/", "~", "dist/")


def docstrings() -> dict[str, str]:
    """Every module's, class's and function's docstring in src/seawall, by file and line."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "src" / "seawall").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node, clean=False)
                if text:
                    line = getattr(node, "lineno", 1)
                    found[f"{path.relative_to(ROOT)}:{line}"] = text
    return found


def sources() -> dict[str, str]:
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in PAGES}
    texts.update(docstrings())
    return texts


def commands() -> list[tuple[str, str]]:
    return [
        (where, match.group(1).strip())
        for where, text in sources().items()
        for match in COMMAND.finditer(text)
    ]


def test_the_docs_show_install_commands() -> None:
    where = {w.split(":")[0] for w, _ in commands()}
    # The pages a newcomer reads first all say how to install.
    assert {"README.md", "docs/index.md", "docs/tutorial.md"} <= where


@pytest.mark.parametrize(("where", "command"), commands())
def test_every_install_command_installs_from_a_path_with_quoted_extras(
    where: str, command: str
) -> None:
    words = shlex.split(command, posix=False)  # quotes kept: is each word quoted?
    targets = [w for w in words if not w.startswith("-")]
    assert targets, f"{where}: `pip install {command}` installs nothing"
    for word in targets:
        if "[" in word:
            assert word[0] in "'\"" and word[-1] == word[0], (
                f"{where}: `pip install {command}`: quote {word} (most shells expand brackets)"
            )
        target = word.strip("'\"")
        assert target.startswith(LOCAL), (
            f"{where}: `pip install {command}`: seawall is on no package index; install from a "
            "checkout (`pip install -e .`), a path or a built wheel"
        )


def test_a_wheel_named_in_the_docs_is_the_version_built_today() -> None:
    named = {
        (where, version)
        for where, text in sources().items()
        for version in re.findall(r"seawall-([\w.]+?)-py3-none-any\.whl", text)
    }
    assert named, "the docs show no wheel to install"
    assert {version for _, version in named} == {seawall.__version__}, named

"""A griffe extension that makes the reference read like a guide, not a dump of the source.

- Doctest examples (``>>>`` lines, their ``...`` continuations and output) become ``pycon``
  code blocks: Markdown would read the prompts as nested quotes and run the lines together.
- A pointer to a guide (````docs/saga.md````) becomes a link to that page, titled as the page is.
- Special methods and attributes (``__slots__``, ``__repr__``, ``__call__``, ...) are left out:
  what a class does is in its own docstring and its public methods. ``__init__`` stays for the
  signature the class heading shows (``merge_init_into_class``).
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import griffe

PACKAGE = "seawall"
DOCS = pathlib.Path(__file__).resolve().parent.parent

PROMPT = re.compile(r"^(\s*)>>>( |$)")
FENCE = re.compile(r"^\s*(```|~~~)")
GUIDE = re.compile(r"``docs/((?:[\w-]+/)*[\w-]+\.md)``|``docs/``")
DUNDER = re.compile(r"^__\w+__$")
KEPT = {"__init__"}


def fence_doctests(text: str) -> str:
    """*text* with each run of doctest lines (from a ``>>>`` line to the next blank line, at the
    same indentation or deeper) inside a ``pycon`` code fence."""
    lines = text.split("\n")
    out: list[str] = []
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            fenced = not fenced
        prompt = None if fenced else PROMPT.match(line)
        if prompt is None:
            out.append(line)
            i += 1
            continue
        indent = prompt.group(1)
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


def _title(page: str) -> str:
    """The first heading of docs/*page*, as its link's text (the page name if it has none)."""
    path = DOCS / page
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip().replace("`", "")
    return page


def link_guides(text: str) -> str:
    """*text* with every ````docs/NAME.md```` a link to that page of the site (a page that does
    not exist still becomes a link, which the build's link check then reports)."""

    def link(match: re.Match[str]) -> str:
        page = match.group(1)
        if page is None:
            return "[the documentation](index.md)"
        return f"[{_title(page)}]({page})"

    return GUIDE.sub(link, text)


class Reference(griffe.Extension):
    """Apply the rewrites above to every object of the package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name == PACKAGE:
            self._walk(pkg, set())

    def _walk(self, obj: Any, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = link_guides(fence_doctests(obj.docstring.value))
        if obj.is_class:
            for name in [n for n in obj.members if DUNDER.match(n) and n not in KEPT]:
                del obj.members[name]
        for member in list(obj.members.values()):
            if not member.is_alias:
                self._walk(member, seen)

"""A griffe extension for the reference: seawall's docstrings cross-reference names the Sphinx
way (``:class:`~seawall.RetryPolicy```, ``:meth:`run```); this turns each role into a Markdown
cross-reference to the path the reference documents it under, which mkdocs-autorefs resolves:
``[`RetryPolicy`][seawall.RetryPolicy]``.

A name is looked up the way a reader would: in the object itself, then in each enclosing scope up
to its module (imports included), then from the package root. A name that leads outside seawall
(``random.Random``, ``TimeoutError``) becomes plain code. A seawall name that cannot be found
stays a cross-reference, so that ``mkdocs build --strict`` reports it.
"""

from __future__ import annotations

import builtins
import re
import sys
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|exc|obj|const):`([^`]+)`")
PACKAGE = "seawall"


def _lookup(scope: Any, name: str) -> Any:
    try:
        return scope[name]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _final(obj: Any) -> Any:
    """The object an alias leads to, or ``None`` if it leads outside what was loaded."""
    if not obj.is_alias:
        return obj
    try:
        return obj.final_target
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


# The public modules, in the order a name's home is chosen: a class exported by both the top
# level and seawall.testing is linked where the top level documents it.
PUBLIC = (
    "",
    "lowlevel",
    "propagation",
    "config",
    "http",
    "httpx",
    "requests",
    "aiohttp",
    "grpc",
    "server",
    "saga",
    "redis",
    "testing",
    "faults",
    "instrumentation",
    "sim",
    "web",
)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the package once it is loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.homes: dict[str, str] = {}  # a definition's path -> the public path documenting it

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        for name in PUBLIC:
            module = _lookup(pkg, name) if name else pkg
            if module is None:
                continue
            for export in module.exports or ():
                member = module.members.get(export)
                if member is None:
                    continue
                final = _final(member)
                if final is not None and final.path.startswith(PACKAGE):
                    self.homes.setdefault(final.path, f"{module.path}.{export}")
        self._walk(pkg, pkg, set())

    def _public(self, path: str) -> str:
        """*path* (a definition's) as the documented public path of it or of its class."""
        head, _, tail = path, "", ""
        while head:
            home = self.homes.get(head)
            if home is not None:
                return home + tail
            head, _, last = head.rpartition(".")
            tail = f".{last}{tail}"
        return path

    def _walk(self, obj: Any, root: griffe.Module, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(
                lambda m: self._reference(m.group(1), m.group(2), obj, root),
                obj.docstring.value,
            )
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, root, seen)

    def _reference(self, role: str, target: str, obj: Any, root: griffe.Module) -> str:
        shown_short = target.startswith("~")
        name = target.lstrip("~").lstrip(".")
        if name.endswith("()"):
            name = name[:-2]
        shown = name.rsplit(".", 1)[-1] if shown_short else name
        code = f"`{shown}`"
        found = self._resolve(name, obj, root)
        if found is None:
            head = name.split(".", 1)[0]
            if hasattr(builtins, head) or self._external(head, obj):
                return code
            # Unknown: left for autorefs to report, under a dotted name (it passes over an
            # unresolved name without a dot as if it were not a reference at all).
            where = name if head == PACKAGE else f"{obj.module.path}.{name}"
            return f"[{code}][{where}]"
        final = _final(found)
        if final is None or not final.path.startswith(PACKAGE):
            return code  # outside seawall: the standard library, httpx, ...
        return f"[{code}][{self._public(final.path)}]"

    def _external(self, head: str, obj: Any) -> bool:
        """Whether *head* is a name imported from outside seawall in a scope of *obj*
        (``random`` in ``random.Random``), or a module of the standard library."""
        scope = obj
        while scope is not None:
            member = scope.members.get(head)
            if member is not None:
                return bool(member.is_alias and not member.target_path.startswith(PACKAGE))
            scope = scope.parent
        return head in sys.stdlib_module_names

    def _resolve(self, name: str, obj: Any, root: griffe.Module) -> Any:
        if name.split(".", 1)[0] == PACKAGE:
            rest = name.split(".", 1)[1] if "." in name else ""
            return _lookup(root, rest) if rest else root
        scope = obj
        while scope is not None:
            found = _lookup(scope, name)
            if found is not None:
                return found
            scope = scope.parent
        return _lookup(root, name)

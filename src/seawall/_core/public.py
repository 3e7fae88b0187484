"""Where a public name lives for its users: classes and functions defined in private modules show
the public module that exports them (``seawall.RetryPolicy``, ``seawall.lowlevel.RetryState``,
``seawall.saga.Step``) in reprs, tracebacks, pickles and the reference docs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import FunctionType
from typing import TypeVar

__all__ = ["public", "show_public_module"]

T = TypeVar("T")


def public(module: str) -> Callable[[T], T]:
    """A class (or function) decorator: set ``__module__`` to the public *module*.

    The public module must export the name itself (pickle finds classes there).
    """

    def mark(obj: T) -> T:
        obj.__module__ = module
        return obj

    return mark


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def show_public_module(module: str, namespace: Mapping[str, object]) -> None:
    """Mark every class and function in *namespace*'s ``__all__`` as living in *module*.

    Called at the end of a public package's ``__init__`` (``show_public_module(__name__,
    globals())``), so its private modules need no decorator. Only names defined in a private
    seawall module under the same name are moved (pickle looks them up as ``module.name``); a
    name another public module already claimed keeps that home.
    """
    for name in namespace["__all__"]:  # type: ignore[attr-defined]
        obj = namespace[name]
        if not isinstance(obj, (type, FunctionType)):
            continue
        home = obj.__module__
        if home.startswith("seawall.") and _is_private(home) and obj.__qualname__ == name:
            public(module)(obj)

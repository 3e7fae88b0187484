"""Where a public name lives for its users: classes defined in private modules show the public
module that exports them (``seawall.RetryPolicy``, ``seawall.lowlevel.RetryState``) in reprs,
tracebacks, pickles and the reference docs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["public"]

T = TypeVar("T")


def public(module: str) -> Callable[[T], T]:
    """A class (or function) decorator: set ``__module__`` to the public *module*.

    The public module must export the name itself (pickle finds classes there).
    """

    def mark(obj: T) -> T:
        obj.__module__ = module
        return obj

    return mark

"""What every seawall decorator (policy, breaker, pipeline) checks before it wraps a function."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["check_decoratable"]


def check_decoratable(fn: Callable[..., Any], what: str) -> bool:
    """Refuse what cannot be wrapped; return whether *fn* is an ``async def`` function.

    A generator function returns its generator at once, before any of its code runs: a retry,
    a breaker or a timeout around that call would protect nothing, so it is refused.

    Raises:
        TypeError: *fn* is not callable, or is a (sync or async) generator function.
    """
    if not callable(fn):
        raise TypeError(f"can only decorate callables, got {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"cannot {what} a generator function: {fn!r}")
    return inspect.iscoroutinefunction(fn)

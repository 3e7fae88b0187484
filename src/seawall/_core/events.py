"""Event emission, once for every strategy: each hook is called in turn, and a hook that raises
is logged and skipped. A broken metrics or logging hook never changes a call's outcome: not for
a retry, a hedge or a breaker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["check_hooks", "emit", "logger"]

logger = logging.getLogger("seawall")

E = TypeVar("E")


def emit(hooks: tuple[Callable[[E], object], ...], event: E) -> None:
    """Call every hook with *event*; one that raises is logged (with its traceback) and skipped."""
    for hook in hooks:
        try:
            hook(event)
        except Exception:
            logger.exception(
                "seawall hook %r failed on a %s event", hook, getattr(event, "kind", "?")
            )


def check_hooks(hooks: object, name: str = "hooks") -> tuple[Any, ...]:
    """*hooks* as a tuple of callables (so that the objects holding them stay hashable).

    Raises:
        TypeError: not a sequence of callables (the message names the parameter).
    """
    if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence):
        raise TypeError(f"{name} must be a sequence of callables, got {hooks!r}")
    result = tuple(hooks)
    for hook in result:
        if not callable(hook):
            raise TypeError(f"{name} must hold callables, got {hook!r}")
    return result

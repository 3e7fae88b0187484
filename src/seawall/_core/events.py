"""Event emission, once for every strategy: each hook is called in turn, and a hook that raises
is logged and skipped. A broken metrics or logging hook never changes a call's outcome: not for
a retry, a hedge or a breaker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import logging

__all__ = ["DEBUG", "INFO", "WARNING", "check_hooks", "emit", "logger"]

# logging's levels, without importing logging (their values are fixed by its documentation).
DEBUG, INFO, WARNING = 10, 20, 30


class _Logger:
    """The ``"seawall"`` logger, fetched from :mod:`logging` on first use: importing logging
    (and what it imports) is a good share of a first decorated call's start-up, and most
    programs log nothing from seawall until a retry happens."""

    __slots__ = ("_logger",)

    def __init__(self) -> None:
        self._logger: logging.Logger | None = None

    def __getattr__(self, name: str) -> Any:
        real = self._logger
        if real is None:
            import logging

            real = self._logger = logging.getLogger("seawall")
        return getattr(real, name)


#: Every part of seawall logs to this one (``logging.getLogger("seawall")``, on first use).
logger: logging.Logger = _Logger()  # type: ignore[assignment]

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

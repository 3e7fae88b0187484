"""The one decorator helper: every seawall decorator (retry policy, breaker, hedge, pipeline,
registry handles) wraps functions through :func:`decorate`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["check_decoratable", "decorate"]

# A driver: (fn, positional arguments, keyword arguments) -> what the call returns (or awaits).
Runner = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]


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


def decorate(
    fn: Callable[..., Any],
    what: str,
    sync: Runner | None,
    async_: Runner | None,
    *,
    bind: Callable[[Callable[..., Any], bool], Callable[..., Any]] | None = None,
) -> Callable[..., Any]:
    """Wrap *fn* so that each call goes through ``sync(fn, args, kwargs)`` (a ``def``) or
    ``await async_(fn, args, kwargs)`` (an ``async def``); the signature, name and docstring
    are kept (``functools.wraps``), and so is the kind of function, so the wrapper works as a
    method and ``inspect.iscoroutinefunction`` still tells.

    Args:
        fn: the function to wrap.
        what: the verb for error messages ("retry", "hedge", ...).
        sync: the driver for ``def`` functions, or ``None`` when only ``async def`` is
            supported (hedging needs an event loop).
        async_: the driver for ``async def`` functions.
        bind: optionally, ``bind(fn, is_async)`` returns a wrapper with *fn* bound that does
            what the driver does, in one frame (a retry policy's first attempt): used instead
            of a wrapper that calls the driver.

    Raises:
        TypeError: *fn* cannot be wrapped (see :func:`check_decoratable`), or it is a ``def``
            function and *sync* is ``None``.
    """
    if check_decoratable(fn, what):
        if async_ is None:  # pragma: no cover - every strategy has an async driver
            raise TypeError(f"cannot {what} an async def function: {fn!r}")
        if bind is not None:
            return functools.wraps(fn)(bind(fn, True))
        arun = async_

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await arun(fn, args, kwargs)

        return async_wrapper
    if sync is None:
        raise TypeError(f"{what} needs an async def function (an event loop), got {fn!r}")
    if bind is not None:
        return functools.wraps(fn)(bind(fn, False))
    run = sync

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run(fn, args, kwargs)

    return wrapper

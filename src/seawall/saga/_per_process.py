"""Objects a process's threads share by key (a SQLite file's writers, a store's starts): made
at the first ask, dropped when no longer needed, and forgotten in a forked child, whose one
thread must not inherit what the parent's other threads held (a lock, a lead, a descriptor)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerProcess"]

_V = TypeVar("_V")


class PerProcess(Generic[_V]):
    """*make(key)* per key, for this process. :meth:`get` reads without the lock once made
    (each commit asks); compound changes hold :attr:`lock` and use the ``*_locked`` methods.
    In a forked child, *forget* is called on each (the parent's) and all are dropped."""

    def __init__(
        self, make: Callable[[str], _V], forget: Callable[[_V], None] | None = None
    ) -> None:
        self._make = make
        self._forget = forget
        self._items: dict[str, _V] = {}
        self.lock = threading.Lock()
        if hasattr(os, "register_at_fork"):  # pragma: no branch - absent on Windows only
            os.register_at_fork(after_in_child=self._after_fork)

    def get(self, key: str) -> _V:
        item = self._items.get(key)
        if item is not None:
            return item
        with self.lock:
            return self.get_locked(key)

    def get_locked(self, key: str) -> _V:
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = self._make(key)
        return item

    def find_locked(self, key: str) -> _V | None:
        return self._items.get(key)

    def drop_locked(self, key: str, item: _V) -> None:
        """Drop *item*, if it is still the one of *key*."""
        if self._items.get(key) is item:
            del self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def _after_fork(self) -> None:
        self.lock = threading.Lock()  # (held, maybe, by a thread the child does not have)
        if self._forget is not None:
            for item in self._items.values():
                self._forget(item)
        self._items.clear()

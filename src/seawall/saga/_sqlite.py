"""The saga log in a SQLite file (the default store): the workers of one machine share it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from seawall._core.redact import redact_text
from seawall.saga._store import Store

__all__ = ["SQLiteStore"]


class SQLiteStore(Store):
    """SQLite in WAL mode with ``synchronous=FULL``: every commit reaches the disk (fsync of
    the write-ahead log) before it returns, so a step recorded as done stays done across a
    power loss, not only a process crash (``NORMAL`` would lose the last commits then, and a
    finished step could run again). Writers take the lock at ``BEGIN IMMEDIATE`` and wait up to
    ``busy_timeout`` for each other; readers never wait."""

    def __init__(self, url: str, path: str, clock: Callable[[], float] | None = None) -> None:
        super().__init__(url, clock)
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            shown = redact_text(directory)  # a query (?password=a/b) may look like a directory
            raise ValueError(f"url: the directory of the SQLite file does not exist: {shown}")
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=60.0
        )
        self._lock = threading.Lock()
        try:
            self._conn.execute("PRAGMA busy_timeout = 60000")
            self.migrate()
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            self._conn.close()
            raise

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            self.commits += 1

    def has_schema_table(self) -> bool:
        rows = self.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'seawall_saga_schema'"
        ).fetchall()
        return bool(rows)

    def clone(self) -> SQLiteStore:
        return SQLiteStore(self.url, self.path, self._given_clock)

    def close(self) -> None:
        self._conn.close()

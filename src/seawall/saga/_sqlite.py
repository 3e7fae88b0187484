"""The saga log in a SQLite file (the default store): the workers of one machine share it."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from seawall._core.redact import redact_text
from seawall.saga._store import Store

__all__ = ["SQLiteStore"]

# SQLite's answers that say the file cannot take a write (their extended codes too, such as
# SQLITE_READONLY_DIRECTORY), as the error its owner can act on: an errno and what it means.
_REFUSALS: dict[str, tuple[int, str]] = {
    "SQLITE_READONLY": (errno.EACCES, "the file is read-only for this process"),
    "SQLITE_FULL": (errno.ENOSPC, "the disk is full"),
    "SQLITE_CANTOPEN": (
        errno.EACCES,
        "the file cannot be opened or created (is its directory writable?)",
    ),
}
# Before Python 3.11 (no sqlite_errorname): SQLite's messages for those codes.
_MESSAGES = {
    "attempt to write a readonly database": "SQLITE_READONLY",
    "database or disk is full": "SQLITE_FULL",
    "unable to open database file": "SQLITE_CANTOPEN",
}


def refusal(err: sqlite3.Error, path: str) -> OSError | None:
    """*err* as an :class:`OSError` naming *path* and the cause (``PermissionError`` for a
    read-only file or directory, ``errno.ENOSPC`` for a full disk), or ``None`` when SQLite
    refused for another reason."""
    name = getattr(err, "sqlite_errorname", None) or _MESSAGES.get(str(err), "")
    for code, (number, meaning) in _REFUSALS.items():
        if name == code or name.startswith(code + "_"):
            return OSError(number, f"{meaning} (SQLite: {err})", path)
    return None


class _Refusals:
    """Turns SQLite's refusals to write into the :class:`OSError` of :func:`refusal`."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, sqlite3.Error):
            refused = refusal(exc, self.path)
            if refused is not None:
                raise refused from exc


#: One lock per SQLite file (by its real path) for the writers of this process. SQLite lets one
#: writer in at a time, and one that finds the file locked sleeps in steps (1, 2, 5, 10 ms and
#: up, its busy handler) however soon the lock is freed: a process's own writers (a web
#: application's request threads, each with an orchestrator) queue here instead, each let in
#: the moment the one before commits. Writers of other processes still meet SQLite's waits.
#: A writer waits here at most :data:`_BUSY_TIMEOUT`, then goes on to SQLite's own wait, as it
#: would without this lock; reentrant, so that a thread opening a second store's transaction
#: inside one of its own meets SQLite's lock and its timeout, not a hang.
_WRITERS: dict[str, threading.RLock] = {}
_WRITERS_LOCK = threading.Lock()
#: Seconds a writer waits for the file's lock (SQLite's ``busy_timeout``, and the wait above).
_BUSY_TIMEOUT = 60.0


def _writers(key: str) -> threading.RLock:
    """The lock of the writers of the file at the real path *key* in this process."""
    lock = _WRITERS.get(key)  # once made, read without the lock (each commit asks)
    if lock is not None:
        return lock
    with _WRITERS_LOCK:
        lock = _WRITERS.get(key)
        if lock is None:
            lock = _WRITERS[key] = threading.RLock()
        return lock


def _forget_writers() -> None:
    # A forked child has one thread: a lock another thread of the parent held at the fork
    # would stay held in the child, and each of its writers would wait out the timeout.
    global _WRITERS_LOCK
    _WRITERS_LOCK = threading.Lock()
    _WRITERS.clear()


if hasattr(os, "register_at_fork"):  # pragma: no branch - absent on Windows only
    os.register_at_fork(after_in_child=_forget_writers)


class SQLiteStore(Store):
    """SQLite in WAL mode with ``synchronous=FULL``: every commit reaches the disk (fsync of
    the write-ahead log) before it returns, so a step recorded as done stays done across a
    power loss, not only a process crash (``NORMAL`` would lose the last commits then, and a
    finished step could run again). Writers take the lock at ``BEGIN IMMEDIATE`` and wait up to
    ``busy_timeout`` for each other (a process's own writers queue first on a lock of the
    process, see :data:`_WRITERS`); readers never wait."""

    def __init__(
        self,
        url: str,
        path: str,
        clock: Callable[[], float] | None = None,
        *,
        create: bool = True,
    ) -> None:
        super().__init__(url, clock)
        self.path = path
        self.create = create
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            shown = redact_text(directory)  # a query (?password=a/b) may look like a directory
            raise ValueError(f"url: the directory of the SQLite file does not exist: {shown}")
        if not create and not os.path.isfile(path):
            # A mistyped path must not read as an empty store (nor become one).
            why = "it is a directory" if os.path.isdir(path) else "the file does not exist"
            raise ValueError(f"url: no saga store at {redact_text(os.path.abspath(path))}: {why}")
        self._refusals = _Refusals(redact_text(os.path.abspath(path)))
        with self._refusals:
            self._conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT
            )
        self._lock = threading.Lock()  # this store's connection, one thread at a time
        self._real_path = os.path.realpath(path)
        try:
            with self._refusals:
                self._conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT * 1000)}")
                if create:
                    self.migrate()
                    self._conn.execute("PRAGMA journal_mode = WAL")
                else:
                    try:
                        self.check_schema()
                    except sqlite3.DatabaseError as err:
                        raise ValueError(
                            f"url: {redact_text(os.path.abspath(path))} is not a saga store: {err}"
                        ) from None
                self._conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            self._conn.close()
            raise

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._refusals:
            return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._refusals:
            self._conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        conn = self._conn
        with self._lock, self._refusals:
            writers = _writers(self._real_path)  # looked up each time: a fork renews them
            queued = writers.acquire(timeout=_BUSY_TIMEOUT)
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield
                except BaseException:
                    if conn.in_transaction:  # SQLite rolled back already after a full disk
                        conn.execute("ROLLBACK")
                    raise
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if queued:
                    writers.release()
            self.commits += 1

    def unavailable(self, exc: BaseException) -> bool:
        # A full disk or a file made read-only may be put right while the workers wait.
        return super().unavailable(exc) or (
            isinstance(exc, OSError) and isinstance(exc.__cause__, sqlite3.OperationalError)
        )

    def has_schema_table(self) -> bool:
        rows = self.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'seawall_saga_schema'"
        ).fetchall()
        return bool(rows)

    def clone(self) -> SQLiteStore:
        return SQLiteStore(self.url, self.path, self._given_clock, create=self.create)

    def close(self) -> None:
        self._conn.close()

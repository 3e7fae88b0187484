"""A store's connection: its SQL dialect, its transactions, which errors say what, and its
clock. :class:`~seawall.saga._store.Store` builds the log on it; the dialects are in
:mod:`seawall.saga._sqlite` and :mod:`seawall.saga._postgres`."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

from seawall._core.redact import redact_text

__all__ = ["Connection"]


class Connection:
    """One connection to a store's database, with SQLite as the base dialect (``?``
    placeholders). Not thread-safe."""

    scheme: str = "sqlite"
    #: Appended to the claim query: PostgreSQL skips rows other workers hold locked.
    lock_clause: str = ""

    def __init__(self, url: str, clock: Callable[[], float] | None = None) -> None:
        self.url = url
        #: Transactions committed through this store (for benchmarks: commits per run).
        self.commits = 0
        #: Seconds its transactions held the store's write lock, from their first statement to
        #: their commit's return (SQLite, whose file has one writer at a time; 0 elsewhere).
        self.write_seconds = 0.0
        self._given_clock = clock
        self._clock: Callable[[], float] = time.time if clock is None else clock

    def q(self, sql: str) -> str:
        """*sql* in this store's placeholder style."""
        return sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def send_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """:meth:`executemany` for writes whose answers the caller does not read: a dialect may
        send them without waiting (an error then fails the transaction's commit)."""
        self.executemany(sql, rows)

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def unavailable(self, exc: BaseException) -> bool:
        """Whether *exc* says the store cannot be reached now (worth reconnecting), rather than
        a bug or bad data."""
        return isinstance(exc, sqlite3.OperationalError)

    def conflict(self, exc: BaseException) -> bool:
        """Whether *exc* says the transaction lost a conflict with another one (a serialization
        failure, a deadlock, a lock it could not have in time): nothing of it was written, and
        the same transaction tried again at once may well succeed. Never an outage.

        SQLite has none: a transaction takes the file's write lock at its ``BEGIN IMMEDIATE``,
        before it reads or writes anything, waiting up to its ``busy_timeout`` for the writer
        before it (a retry of its own); "database is locked" after that wait says the file was
        held for the whole of it, which a worker treats as an outage (:meth:`unavailable`)."""
        return False

    def now(self) -> float:
        """The store's time, in seconds since the epoch: every lease and due time is judged on
        it, never on a worker's clock (see :func:`open_store`'s *clock*)."""
        return self._clock()

    def redacted(self) -> str:
        """The URL without its secrets (user info, query string: a ``password=`` or
        ``sslpassword=`` there), for messages: :func:`~seawall.instrumentation.redact_text`."""
        return redact_text(self.url)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.redacted()}>"

"""Opening a store by its URL: the one module that knows every kind of store."""

from __future__ import annotations

from collections.abc import Callable

from seawall._core.redact import is_scheme, redact_repr
from seawall.saga._sqlite import SQLiteStore
from seawall.saga._store import Store

__all__ = ["open_store"]


def open_store(url: str, clock: Callable[[], float] | None = None, *, create: bool = True) -> Store:
    """The store for *url*: ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, or
    ``postgresql://user@host:port/dbname`` (extra ``postgres``).

    *clock* is the store's time (seconds since the epoch) on which leases and due times are
    judged. By default: PostgreSQL's ``clock_timestamp()``, one clock for every worker on every
    machine; for SQLite, ``time.time()``: a SQLite file is shared only by the processes of one
    machine, which read one system clock. A virtual clock is given in tests and simulations.

    With *create* false (what reads and operators' tools use), the store must exist at the
    schema version of this seawall: nothing is created or migrated, and a mistyped SQLite path
    is an error naming it, not an empty store.

    Raises:
        TypeError: *url* is not a str.
        ValueError: the scheme is unknown, or the URL is malformed.
        SchemaVersionError: the store was written by a newer seawall (or, with *create*
            false, an older one whose workers have not migrated it yet).
    """
    shown = redact_repr(url)  # as the errors below repeat it: no password
    if not isinstance(url, str):
        raise TypeError(f"url must be a str such as 'sqlite:///saga.db', got {shown}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or not is_scheme(scheme):
        raise ValueError(f"url must start with a scheme (sqlite:/// or postgresql://), got {shown}")
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise ValueError(f"url: a SQLite URL is sqlite:///path/to/file.db, got {shown}")
        path = rest[1:]
        if path == ":memory:" or path.startswith("file:"):
            raise ValueError(
                f"url: the saga store must be a file that every worker opens, got {shown}"
            )
        return SQLiteStore(url, path, clock, create=create)
    if scheme in ("postgresql", "postgres"):
        from seawall.saga._postgres import PostgresStore

        return PostgresStore(url, clock, create=create)
    raise ValueError(
        f"url: unknown store scheme {scheme!r} in {shown}; use sqlite:/// or postgresql://"
    )

"""The saga log on PostgreSQL (psycopg 3, extra ``postgres``), for many workers on many machines.

Workers claim due runs with ``SELECT ... FOR UPDATE SKIP LOCKED``: each takes rows no other
worker is claiming at that moment, without waiting for them; a claim then holds a run through
its lease (see :mod:`seawall.saga._store`). Transactions run at READ COMMITTED: every write of a
run is a conditional ``UPDATE`` on its fencing token, which PostgreSQL re-checks on the latest
row version after waiting for a concurrent writer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

try:
    import psycopg
except ImportError as err:  # pragma: no cover - the extra is installed in the test suite
    raise ImportError(
        "a postgresql:// saga store needs psycopg 3: pip install 'seawall[postgres]'"
    ) from err

from seawall.saga._store import ColumnTypes, Store

__all__ = ["PostgresStore"]

# Any constant identifies the lock; this one spells "seawall saga" in a way nothing else uses.
_MIGRATION_LOCK = 0x5EA_3A11_5A6A


class PostgresStore(Store):
    """The saga log in a PostgreSQL database (tables ``seawall_saga_*`` in the search path)."""

    scheme = "postgresql"
    lock_clause = " FOR UPDATE SKIP LOCKED"

    def __init__(
        self, url: str, clock: Callable[[], float] | None = None, *, create: bool = True
    ) -> None:
        super().__init__(url, clock)
        self.create = create
        try:
            self._conn = psycopg.connect(url, autocommit=True)
        except psycopg.Error as err:
            raise ConnectionError(
                f"cannot connect to the saga store {self.redacted()}: {err}"
            ) from err
        self._cache: dict[str, str] = {}
        try:
            if create:
                self.migrate()
            else:
                self.check_schema()
        except BaseException:
            self._conn.close()
            raise

    def now(self) -> float:
        """PostgreSQL's ``clock_timestamp()``: one clock for every worker on every machine
        (unless a clock was given: tests on virtual time)."""
        if self._given_clock is not None:
            return self._given_clock()
        rows = self.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchall()
        return float(rows[0][0])

    def q(self, sql: str) -> str:
        converted = self._cache.get(sql)
        if converted is None:
            converted = self._cache[sql] = sql.replace("?", "%s")
        return converted

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(self.q(sql), tuple(params), prepare=True)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(self.q(sql), rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._conn.transaction():
            yield
        self.commits += 1

    def renew(self, leases: Sequence[tuple[str, int]], lease: float) -> None:
        """As :meth:`Store.renew`, never waiting for a row lock: a row another transaction
        holds is skipped. Its writer is the holder's own commit (which sets the due time itself)
        or a claim of a lease that lapsed already. Waiting would deadlock with the holder's
        commit, which writes several of the same runs in another order, and PostgreSQL would
        abort one of the two: the worker's, which would then abandon its batch."""
        with self.transaction():
            due_at = self.now() + lease
            self.executemany(
                "UPDATE seawall_saga_runs SET due_at = ? WHERE run_id = ("
                "SELECT run_id FROM seawall_saga_runs WHERE run_id = ? AND lease_token = ? "
                "AND lease_owner IS NOT NULL FOR UPDATE SKIP LOCKED)",
                [(due_at, run_id, token) for run_id, token in leases],
            )

    def unavailable(self, exc: BaseException) -> bool:
        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, ConnectionError))

    def types(self) -> ColumnTypes:
        return ColumnTypes(
            real="DOUBLE PRECISION",
            serial="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            big="BIGINT",
        )

    def has_schema_table(self) -> bool:
        rows = self.execute("SELECT to_regclass('seawall_saga_schema') IS NOT NULL").fetchall()
        return bool(rows[0][0])

    def migration_lock(self) -> None:
        self.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))

    def clone(self) -> PostgresStore:
        return PostgresStore(self.url, self._given_clock, create=self.create)

    def close(self) -> None:
        self._conn.close()

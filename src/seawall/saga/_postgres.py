"""The saga log on PostgreSQL (psycopg 3, extra ``postgres``), for many workers on many machines.

Workers claim due runs with ``SELECT ... FOR UPDATE SKIP LOCKED``: each takes rows no other
worker is claiming at that moment, without waiting for them; a claim then holds a run through
its lease (see :mod:`seawall.saga._store`). Transactions run at READ COMMITTED (whatever the
database's default): every write of a run is a conditional ``UPDATE`` on its fencing token,
which PostgreSQL re-checks on the latest row version after waiting for a concurrent writer.

Round trips: a transaction runs in pipeline mode. A statement whose answer the caller reads
waits for it (with ``BEGIN`` and any writes sent before it); the writes of a run whose row this
transaction locked and read (a claim, :meth:`PostgresStore.lock_runs`) are sent without
waiting, and go with ``COMMIT`` in one round trip. Their fencing is checked by the server: the
run's ``UPDATE`` fails the statement unless it wrote exactly one row, which aborts the
transaction (nothing of it is committed). The claim and the lock read the store's clock in the
same statement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

try:
    import psycopg
except ImportError as err:  # pragma: no cover - the extra is installed in the test suite
    raise ImportError(
        "a postgresql:// saga store needs psycopg 3: pip install 'seawall[postgres]'"
    ) from err

from seawall._core.redact import scrub_secrets
from seawall.saga._reads import ACTIVE_STATUSES
from seawall.saga._rows import Loaded
from seawall.saga._schema import ColumnTypes
from seawall.saga._store import _UPDATE_RUN, Store

__all__ = ["PostgresStore"]

# Any constant identifies the lock; this one spells "seawall saga" in a way nothing else uses.
_MIGRATION_LOCK = 0x5EA_3A11_5A6A
#: The store's clock in SQL (seconds since the epoch), as :meth:`PostgresStore.now` reads it.
_CLOCK = "extract(epoch FROM clock_timestamp())::float8"
#: The run's fenced ``UPDATE``, failing (and so aborting the transaction) unless it wrote one
#: row: for a write sent without waiting for its row count. The message is computed from the
#: count, so that it is not a constant PostgreSQL would evaluate when planning.
_CHECKED_UPDATE_RUN = (
    f"WITH written AS ({_UPDATE_RUN} RETURNING 1) SELECT CASE WHEN count(*) = 1 THEN 1 ELSE "
    "CAST('seawall saga: the fenced write of a run matched ' || count(*) || ' rows' AS INTEGER) "
    "END FROM written"
)

#: The SQLSTATEs of a transaction that lost a conflict, aborted by the server with nothing of
#: it written: a serialization failure (40001: at REPEATABLE READ or SERIALIZABLE, a row
#: changed since the snapshot), a deadlock (40P01), a lock not had within ``lock_timeout`` or
#: with ``NOWAIT`` (55P03). A cancelled statement (57014: ``statement_timeout``, an operator's
#: cancel) is not one: the server is slow or someone stopped it, and trying again at once
#: would not help.
_CONFLICTS: Final = frozenset({"40001", "40P01", "55P03"})


class PostgresStore(Store):
    """The saga log in a PostgreSQL database (tables ``seawall_saga_*`` in the search path)."""

    scheme = "postgresql"
    lock_clause = " FOR UPDATE SKIP LOCKED"

    def __init__(
        self, url: str, clock: Callable[[], float] | None = None, *, create: bool = True
    ) -> None:
        super().__init__(url, clock)
        self.create = create
        refused: ConnectionError | None = None
        try:
            self._conn = psycopg.connect(url, autocommit=True)
        except psycopg.Error as err:
            # The driver's message may repeat a secret of the URL (a password it could not
            # decode): scrubbed, and the driver's error neither chained nor kept as context
            # (it holds the raw text): raised outside this block.
            said = scrub_secrets(str(err).strip(), url)
            refused = ConnectionError(
                f"cannot connect to the saga store {self.redacted()}: {type(err).__name__}: {said}"
            )
        if refused is not None:
            raise refused
        # READ COMMITTED whatever the database's default (default_transaction_isolation): the
        # fencing relies on it (an UPDATE waits for a concurrent writer and re-checks the newer
        # row), where REPEATABLE READ and SERIALIZABLE would fail the transaction instead
        # (SQLSTATE 40001) and abandon the attempts it records.
        self._conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        self._cache: dict[str, str] = {}
        #: The open transaction's pipeline (``None`` outside a transaction).
        self._pipe: psycopg.Pipeline | None = None
        #: The runs the open transaction locked, with the (token, requested) it read then.
        self._known: dict[str, tuple[int, str | None]] = {}
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
        cur = self._conn.execute(self.q(sql), tuple(params), prepare=True)
        if self._pipe is not None:
            self._pipe.sync()  # its answer now (and those of everything sent before it)
        return cur

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.send_many(sql, rows)
        if self._pipe is not None:
            self._pipe.sync()

    def send_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run *sql* for each of *rows*; inside a transaction, without waiting for the answers
        (an error surfaces at the next statement that waits, or at the commit)."""
        self._conn.cursor().executemany(self.q(sql), rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        conn = self._conn
        outer = self._pipe  # a transaction inside another: a savepoint in the same pipeline
        try:
            with conn.pipeline() as pipe:
                self._pipe = pipe
                with conn.transaction():
                    yield
                # COMMIT is sent, after the writes sent without waiting; leaving the pipeline
                # waits for every answer: the commit is durable (or has failed) when it returns.
        except BaseException:
            self._pipe = outer
            if outer is None:
                self._known.clear()
                # An error in a pipeline skips what follows it (the ROLLBACK too): end the
                # transaction the server still holds, if the connection is still there.
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
            raise
        self._pipe = outer
        if outer is None:
            self._known.clear()
        self.commits += 1

    # -- writes sent without waiting ------------------------------------------------------------

    def claim(
        self, now: float, limit: int, sagas: Sequence[str], run_id: str | None = None
    ) -> list[Loaded]:
        claimed = super().claim(now, limit, sagas, run_id)
        self._hold(claimed)
        return claimed

    def claim_due(
        self,
        limit: int,
        sagas: Sequence[str],
        run_id: str | None = None,
        *,
        expire: tuple[str, Mapping[str, int]] | None = None,
    ) -> tuple[float, list[Loaded]]:
        """As :meth:`Store.claim_due`, in one statement: the claim reads the store's clock
        (leases to expire first, rare, take statements of their own)."""
        if self._given_clock is not None or not sagas or expire:
            return super().claim_due(limit, sagas, run_id, expire=expire)
        # The clock is read once (a CTE of a volatile function is evaluated once), and the
        # runs due at that time are claimed; an empty claim still returns the time.
        sql, params = self.claim_query("(SELECT now FROM clock)", limit, sagas, run_id)
        rows = self.execute(
            f"WITH clock AS (SELECT {_CLOCK} AS now), claimed AS ({sql}) "
            "SELECT clock.now, claimed.* FROM clock LEFT JOIN claimed ON true "
            "ORDER BY claimed.due_at, claimed.run_id",
            params,
        ).fetchall()
        now = float(rows[0][0])
        claimed = self._with_steps([r[1:] for r in rows if r[1] is not None])
        self._hold(claimed)
        return now, claimed

    def lock_runs(self, run_ids: Sequence[str]) -> tuple[float, dict[str, str]]:
        """As :meth:`Store.lock_runs`, in one statement that also reads the store's clock."""
        if not run_ids:
            return super().lock_runs(run_ids)
        clock = _CLOCK if self._given_clock is None else "NULL"
        marks = ", ".join("?" * len(run_ids))
        rows = self.execute(
            f"SELECT run_id, requested, lease_token, {clock} FROM seawall_saga_runs "
            f"WHERE run_id IN ({marks}) ORDER BY run_id FOR UPDATE",
            tuple(run_ids),
        ).fetchall()
        for run_id, requested, token, _ in rows:
            self._known[run_id] = (int(token), requested)
        now = float(rows[0][3]) if rows and rows[0][3] is not None else self.now()
        return now, {r[0]: r[1] for r in rows if r[1] is not None}

    def next_due_now(self, sagas: Sequence[str]) -> tuple[float | None, float]:
        """As :meth:`Store.next_due_now`, in one statement."""
        if self._given_clock is not None or not sagas:
            return super().next_due_now(sagas)
        marks = ", ".join("?" * len(sagas))
        rows = self.execute(
            f"SELECT MIN(due_at), {_CLOCK} FROM seawall_saga_runs WHERE due_at IS NOT NULL "
            f"AND status IN ({', '.join(repr(x) for x in ACTIVE_STATUSES)}) "
            f"AND saga IN ({marks})",
            tuple(sagas),
        ).fetchall()
        due, now = rows[0]
        return (None if due is None else float(due)), float(now)

    def _hold(self, claimed: Sequence[Loaded]) -> None:
        for loaded in claimed:
            self._known[loaded.run.run_id] = (loaded.run.token, loaded.run.requested)

    def save(self, loaded: Loaded, token: int) -> str | None:
        """As :meth:`Store.save`; for a run this transaction locked and read, the answer is
        known from that read (no other transaction can change the row meanwhile), and the
        writes are sent without waiting, the run's ``UPDATE`` checked by the server."""
        run = loaded.run
        known = self._known.get(run.run_id)
        if known is None or self._pipe is None:
            return super().save(loaded, token)
        held, requested = known
        if held != token or (not requested and run.requested):
            return "lost"  # as Store.save: the UPDATE would write nothing
        if (requested or "") != (run.requested or ""):
            run.requested = requested
            return requested
        self._conn.execute(self.q(_CHECKED_UPDATE_RUN), self.run_values(run, token), prepare=True)
        self._known[run.run_id] = (run.token, None)
        self.save_rest(loaded, self.send_many)
        return None

    def renew(self, leases: Sequence[tuple[str, int]], lease: float) -> None:
        """As :meth:`Store.renew`, never waiting for a row lock: a row another transaction
        holds is skipped. Its writer is the holder's own commit (which sets the due time itself)
        or a claim of a lease that lapsed already. Waiting would deadlock with the holder's
        commit, which writes several of the same runs in another order, and PostgreSQL would
        abort one of the two: the worker's, which would then abandon its batch."""
        # The new due time is computed by the statement, on the store's clock: the renewal is
        # one round trip (BEGIN, the UPDATEs and COMMIT sent together).
        if self._given_clock is not None:
            due_at, extra = "?", (self.now() + lease,)
        else:
            due_at, extra = f"{_CLOCK} + ?", (lease,)
        with self.transaction():
            self.send_many(
                f"UPDATE seawall_saga_runs SET due_at = {due_at} WHERE run_id = ("
                "SELECT run_id FROM seawall_saga_runs WHERE run_id = ? AND lease_token = ? "
                "AND lease_owner IS NOT NULL FOR UPDATE SKIP LOCKED)",
                [(*extra, run_id, token) for run_id, token in leases],
            )

    def unavailable(self, exc: BaseException) -> bool:
        # psycopg's errors of a lost conflict are OperationalErrors too: not an outage.
        return not self.conflict(exc) and isinstance(
            exc, (psycopg.OperationalError, psycopg.InterfaceError, ConnectionError)
        )

    def conflict(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.Error) and exc.sqlstate in _CONFLICTS

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

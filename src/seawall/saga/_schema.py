"""The tables of a saga store: their creation, their migrations between schema versions,
and the check that read-only tools make before reading."""

from __future__ import annotations

from typing import Final, NamedTuple

from seawall.saga._model import SchemaVersionError
from seawall.saga._sql import Connection

__all__ = ["SCHEMA_VERSION", "ColumnTypes", "Schema"]

#: The version of the tables this seawall writes; a store of a newer version is refused.
#: Version 2 adds the definition a run started under (``saga_version``, ``fingerprint``) and
#: the table of registered definitions; version 3 the run's ``deadline`` and the table of
#: signals (``seawall_saga_signals``).
SCHEMA_VERSION: Final = 3


class ColumnTypes(NamedTuple):
    """A dialect's column types."""

    real: str  # a float
    serial: str  # an auto-increment primary key
    big: str  # a 64-bit int


class Schema(Connection):
    """Creates, migrates and checks the tables (in the dialect's column :meth:`types`)."""

    def ddl(self) -> list[str]:
        """The statements that create the schema of :data:`SCHEMA_VERSION` (types in this
        dialect)."""
        real, serial, big = self.types()
        return [
            "CREATE TABLE IF NOT EXISTS seawall_saga_schema (version INTEGER NOT NULL)",
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_runs (
                run_id TEXT PRIMARY KEY,
                saga TEXT NOT NULL,
                status TEXT NOT NULL,
                input TEXT NOT NULL,
                reason TEXT,
                created_at {real} NOT NULL,
                updated_at {real} NOT NULL,
                due_at {real},
                lease_owner TEXT,
                lease_token {big} NOT NULL DEFAULT 0,
                requested TEXT,
                saga_version INTEGER,
                fingerprint TEXT,
                deadline {real})""",
            "CREATE INDEX IF NOT EXISTS seawall_saga_runs_due ON seawall_saga_runs (due_at) "
            "WHERE due_at IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS seawall_saga_runs_updated ON seawall_saga_runs "
            "(updated_at)",
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_steps (
                run_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                name TEXT NOT NULL,
                status TEXT NOT NULL,
                running INTEGER NOT NULL DEFAULT 0,
                attempt_count INTEGER NOT NULL DEFAULT 0,
                compensation_attempt_count INTEGER NOT NULL DEFAULT 0,
                next_retry_at {real},
                last_error TEXT,
                result TEXT,
                retry_state TEXT,
                idempotency_key TEXT NOT NULL,
                started_at {real},
                finished_at {real},
                updated_at {real} NOT NULL,
                PRIMARY KEY (run_id, position))""",
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_history (
                id {serial},
                run_id TEXT NOT NULL,
                at {real} NOT NULL,
                step TEXT,
                phase TEXT,
                event TEXT NOT NULL,
                attempt INTEGER,
                delay {real},
                error TEXT,
                detail TEXT)""",
            "CREATE INDEX IF NOT EXISTS seawall_saga_history_run ON seawall_saga_history "
            "(run_id, id)",
            *self.ddl_definitions(),
            *self.ddl_signals(),
        ]

    def ddl_definitions(self) -> list[str]:
        """The table of registered definitions (schema version 2)."""
        real = self.types().real
        return [
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_definitions (
                saga TEXT NOT NULL,
                version INTEGER NOT NULL,
                fingerprint TEXT NOT NULL,
                steps TEXT NOT NULL,
                registered_at {real} NOT NULL,
                PRIMARY KEY (saga, version))"""
        ]

    def ddl_signals(self) -> list[str]:
        """The table of signals (schema version 3): one row per run and name, the first one
        sent (a duplicate changes nothing); kept until the run is deleted."""
        real = self.types().real
        return [
            f"""CREATE TABLE IF NOT EXISTS seawall_saga_signals (
                run_id TEXT NOT NULL,
                name TEXT NOT NULL,
                data TEXT NOT NULL,
                received_at {real} NOT NULL,
                PRIMARY KEY (run_id, name))"""
        ]

    def types(self) -> ColumnTypes:
        """The column types of this dialect."""
        return ColumnTypes(real="REAL", serial="INTEGER PRIMARY KEY AUTOINCREMENT", big="INTEGER")

    def has_schema_table(self) -> bool:
        raise NotImplementedError

    def migration_lock(self) -> None:
        """Inside the migration's transaction: keep other processes from migrating at once."""

    def migrate(self) -> None:
        """Create the tables, or bring them to :data:`SCHEMA_VERSION`; refuse a newer one.

        Raises:
            SchemaVersionError: the store's schema is newer than this seawall's (nothing is
                written).
        """
        with self.transaction():
            self.migration_lock()
            version = 0
            if self.has_schema_table():
                rows = self.execute("SELECT MAX(version) FROM seawall_saga_schema").fetchall()
                version = int(rows[0][0] or 0) if rows else 0
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"the saga store {self.redacted()} has schema version {version}, newer than "
                    f"this seawall's ({SCHEMA_VERSION}); upgrade seawall"
                )
            if version == SCHEMA_VERSION:
                return
            if version == 0:
                for statement in self.ddl():
                    self.execute(statement)
            if version == 1:
                # Runs of version 1 have no definition recorded: workers match them by their
                # step names (see the orchestrator), and record it then.
                self.execute("ALTER TABLE seawall_saga_runs ADD COLUMN saga_version INTEGER")
                self.execute("ALTER TABLE seawall_saga_runs ADD COLUMN fingerprint TEXT")
                for statement in self.ddl_definitions():
                    self.execute(statement)
                version = 2
            if version == 2:
                # Runs of version 2 have no deadline; waits and signals are new.
                real = self.types().real
                self.execute(f"ALTER TABLE seawall_saga_runs ADD COLUMN deadline {real}")
                for statement in self.ddl_signals():
                    self.execute(statement)
            self.execute("DELETE FROM seawall_saga_schema")
            self.execute("INSERT INTO seawall_saga_schema (version) VALUES (?)", (SCHEMA_VERSION,))

    def check_schema(self) -> None:
        """Check, without writing, that the store holds saga tables of this seawall's schema
        version (for reads and operators' tools, which never create or migrate a store).

        Raises:
            ValueError: the database holds no saga store.
            SchemaVersionError: the schema is of another version.
        """
        if not self.has_schema_table():
            raise ValueError(f"url: no saga store in {self.redacted()} (no seawall_saga tables)")
        rows = self.execute("SELECT MAX(version) FROM seawall_saga_schema").fetchall()
        version = int(rows[0][0] or 0) if rows else 0
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the saga store {self.redacted()} has schema version {version}, newer than "
                f"this seawall's ({SCHEMA_VERSION}); upgrade seawall"
            )
        if version < SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the saga store {self.redacted()} has schema version {version}, older than "
                f"this seawall's ({SCHEMA_VERSION}); a worker (saga.Orchestrator) of this "
                "version migrates it when it starts"
            )

"""Storage: the only package that speaks SQL or touches blobs.

``open_database`` inspects, migrates where the engine allows it, and returns a
:class:`~postroom.store.db.Database`. Embedded SQLite applies pending migrations on
open; PostgreSQL refuses to open with migrations pending unless asked to apply them
(``postroom migrate``, ``postroom init``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from postroom.errors import DatabaseUnavailable, DataDirError, MigrationsPending
from postroom.store import migrate as migrations
from postroom.store.db import Database, Engine, Row, Tx
from postroom.store.migrate import DatabaseState, Migration
from postroom.store.sqlite import SQLiteDatabase

__all__ = [
    "Database",
    "DatabaseState",
    "DatabaseStatus",
    "Engine",
    "Migration",
    "Row",
    "Tx",
    "apply_migrations",
    "database_status",
    "engine_of",
    "open_database",
]


def engine_of(url: str) -> Engine:
    return Engine.SQLITE if url.startswith("sqlite:") else Engine.POSTGRESQL


def _sqlite_path(url: str) -> Path:
    return Path(url[len("sqlite:///") :])


@dataclass(frozen=True)
class DatabaseStatus:
    """The chain this build ships and what the database has applied."""

    engine: Engine
    location: str
    exists: bool
    state: DatabaseState | None
    chain: list[Migration]

    @property
    def head(self) -> int:
        return len(self.chain)

    @property
    def pending(self) -> list[Migration]:
        current = self.state.version if self.state else 0
        return [m for m in self.chain if m.version > current]


def database_status(url: str) -> DatabaseStatus:
    """Inspect without modifying (raises ForeignDatabase / DatabaseTooNew like open)."""
    chain = migrations.load_chain()
    engine = engine_of(url)
    if engine is Engine.SQLITE:
        path = _sqlite_path(url)
        state = migrations.inspect_sqlite(path)
        migrations.check_compatible(state, chain, str(path))
        return DatabaseStatus(engine, str(path), state.exists, state, chain)
    from postroom.store import postgres as postgres_engine  # psycopg only when used

    conn = postgres_engine.connect(url, autocommit=True)
    try:
        state = migrations.inspect_postgres(conn)
    finally:
        conn.close()
    migrations.check_compatible(state, chain, "the PostgreSQL database")
    from postroom.config import mask_url_password

    return DatabaseStatus(engine, mask_url_password(url), True, state, chain)


def apply_migrations(url: str, now_ms: int, *, target: int | None = None) -> list[int]:
    """Bring the database to ``target`` (default: head); returns the versions applied."""
    chain = migrations.load_chain()
    engine = engine_of(url)
    if engine is Engine.SQLITE:
        path = _sqlite_path(url)
        state = migrations.inspect_sqlite(path)
        migrations.check_compatible(state, chain, str(path))
        if not path.parent.is_dir():
            raise DataDirError(f"folder {path.parent} for the SQLite database does not exist")
        return migrations.migrate_sqlite(path, chain, now_ms, busy_timeout_ms=30_000, target=target)
    from postroom.store import postgres as postgres_engine  # psycopg only when used

    conn = postgres_engine.connect(url, autocommit=True)
    try:
        state = migrations.inspect_postgres(conn)
        migrations.check_compatible(state, chain, "the PostgreSQL database")
        return migrations.migrate_postgres(conn, chain, now_ms, target=target)
    finally:
        conn.close()


def open_database(
    url: str,
    *,
    now_ms: int,
    create: bool = False,
    apply_pending: bool | None = None,
    busy_timeout_ms: int = 30_000,
    pool_size: int = 10,
) -> Database:
    """Open a Postroom database, migrated to this build's head.

    ``create``: a missing SQLite file may be created (``init``, tests).
    ``apply_pending``: apply pending migrations; by default SQLite does and PostgreSQL
    refuses with :class:`MigrationsPending`.
    """
    engine = engine_of(url)
    chain = migrations.load_chain()
    if engine is Engine.SQLITE:
        path = _sqlite_path(url)
        if not path.exists() and not create:
            raise DatabaseUnavailable(f"no database at {path}; run `postroom init` to create one")
        state = migrations.inspect_sqlite(path)
        migrations.check_compatible(state, chain, str(path))
        if state.version < len(chain):
            if apply_pending is False:
                raise MigrationsPending(
                    f"{path} is at schema version {state.version}, this build needs "
                    f"{len(chain)}; run `postroom migrate`"
                )
            apply_migrations(url, now_ms)
        return SQLiteDatabase(path, busy_timeout_ms=busy_timeout_ms)

    if apply_pending:
        apply_migrations(url, now_ms)
    else:
        status = database_status(url)
        if status.pending:
            current = status.state.version if status.state else 0
            raise MigrationsPending(
                f"the PostgreSQL database is at schema version {current}, this build needs "
                f"{status.head}; run `postroom migrate` first"
            )
    from postroom.store.postgres import PostgresDatabase  # psycopg only when used

    return PostgresDatabase(url, pool_size=pool_size)

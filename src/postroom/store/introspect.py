"""What tables, columns and indexes a database has: for the schema pin and upgrade tests.

Indexes are those created by ``CREATE INDEX`` (named in the migrations); the implicit
ones behind PRIMARY KEY and UNIQUE constraints are engine-specific and left out, as are
the shadow tables SQLite keeps behind an FTS5 virtual table (``fts_data``, ``fts_idx``...).
"""

from __future__ import annotations

from postroom.store.db import Engine, Tx

Schema = dict[str, dict[str, list[str]]]

_FTS5_SHADOWS = ("data", "idx", "content", "docsize", "config")


def schema_snapshot(tx: Tx) -> Schema:
    """{table: {"columns": [names in order], "indexes": [sorted names]}}."""
    snapshot: Schema = {}
    if tx.engine is Engine.SQLITE:
        rows = tx.fetchall(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite_%%' ORDER BY name"
        )
        virtual = [r["name"] for r in rows if r["sql"].upper().startswith("CREATE VIRTUAL TABLE")]
        shadows = {f"{v}_{part}" for v in virtual for part in _FTS5_SHADOWS}
        tables = [r["name"] for r in rows if r["name"] not in shadows]
        for table in tables:
            columns = [r["name"] for r in tx.fetchall(f'PRAGMA table_info("{table}")')]
            indexes = sorted(
                r["name"]
                for r in tx.fetchall(
                    "SELECT name FROM sqlite_master WHERE type = 'index'"
                    " AND tbl_name = %s AND sql IS NOT NULL",
                    (table,),
                )
            )
            snapshot[table] = {"columns": columns, "indexes": indexes}
        return snapshot
    tables = [
        r["table_name"]
        for r in tx.fetchall(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            " ORDER BY table_name"
        )
    ]
    for table in tables:
        columns = [
            r["column_name"]
            for r in tx.fetchall(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = %s"
                " ORDER BY ordinal_position",
                (table,),
            )
        ]
        indexes = sorted(
            r["indexname"]
            for r in tx.fetchall(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                " AND tablename = %s AND indexname NOT IN"
                " (SELECT conname FROM pg_constraint WHERE connamespace ="
                "  (SELECT oid FROM pg_namespace WHERE nspname = current_schema()))",
                (table,),
            )
        )
        snapshot[table] = {"columns": columns, "indexes": indexes}
    return snapshot

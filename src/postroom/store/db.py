"""The database seam: one small interface over SQLite and PostgreSQL.

Repositories in ``store/`` write SQL in psycopg's parameter style (``%s`` and
``%(name)s``); :class:`Tx` translates it for SQLite. Where the SQL itself differs by
engine (``FOR UPDATE SKIP LOCKED``, full-text search), the repository keeps both versions
side by side and picks one by ``tx.engine``.

Transactions are explicit and short:

* ``db.write()`` — a read-write transaction. On SQLite it is the single writer: one
  process-wide lock, one cross-process file lock, then ``BEGIN IMMEDIATE``; concurrent
  writers queue instead of failing with "database is locked". On PostgreSQL it is a
  pooled connection in a transaction.
* ``db.read()`` — a consistent read (a WAL snapshot on SQLite).

Both commit on a clean exit and roll back on an exception.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from enum import StrEnum
from functools import lru_cache
from typing import Any, Protocol

Row = dict[str, Any]
Params = Sequence[Any] | Mapping[str, Any]


class Engine(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


_PARAM_RE = re.compile(r"%(?:\((\w+)\)s|s|%)")


@lru_cache(maxsize=4096)
def to_sqlite_paramstyle(sql: str) -> str:
    """``%s`` → ``?``, ``%(name)s`` → ``:name``, ``%%`` → ``%``."""

    def repl(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "%%":
            return "%"
        if token == "%s":
            return "?"
        return ":" + match.group(1)

    return _PARAM_RE.sub(repl, sql)


class Cursorish(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Tx:
    """One open transaction. Hand it to repository functions; never keep it."""

    def __init__(self, conn: Any, engine: Engine) -> None:
        self._conn = conn
        self.engine = engine

    def _run(self, sql: str, params: Params) -> Any:
        if self.engine is Engine.SQLITE:
            return self._conn.execute(to_sqlite_paramstyle(sql), params)
        return self._conn.execute(sql, params if params else None)

    def execute(self, sql: str, params: Params = ()) -> int:
        """Run a statement; returns the number of rows it changed."""
        cur = self._run(sql, params)
        return int(cur.rowcount)

    def executemany(self, sql: str, seq: Sequence[Params]) -> None:
        if not seq:
            return
        if self.engine is Engine.SQLITE:
            self._conn.executemany(to_sqlite_paramstyle(sql), seq)
        else:
            with self._conn.cursor() as cur:
                cur.executemany(sql, seq)

    def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        row = self._run(sql, params).fetchone()
        return None if row is None else dict(row)

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return [dict(row) for row in self._run(sql, params).fetchall()]

    def fetchval(self, sql: str, params: Params = ()) -> Any:
        row = self._run(sql, params).fetchone()
        if row is None:
            return None
        return next(iter(dict(row).values()))

    def iterate(self, sql: str, params: Params = ()) -> Iterator[Row]:
        for row in self._run(sql, params):
            yield dict(row)

    @property
    def raw_connection(self) -> Any:
        """The driver connection, for the migration runner only."""
        return self._conn


class Database(Protocol):
    """What services and repositories may ask of a database."""

    engine: Engine
    url: str

    def write(self) -> AbstractContextManager[Tx]: ...

    def read(self) -> AbstractContextManager[Tx]: ...

    def close(self) -> None: ...


def member_of(tx: Tx, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """``column`` is one of ``values``: the SQL and its parameters.

    PostgreSQL gets ``column = ANY(%s)`` with one array parameter, so the statement text
    is the same whatever the number of values and its plan is prepared once (planning
    an IN list of a new length cost more than executing it); SQLite gets ``IN (...)``.
    """
    if not values:
        raise ValueError("member_of needs at least one value")
    if tx.engine is Engine.POSTGRESQL:
        return f"{column} = ANY(%s)", [list(values)]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)


def where_equal(**filters: Any) -> tuple[str, list[Any]]:
    """``" WHERE a = %s AND b = %s"`` for the filters that are not None (or ``""``)."""
    given = {column: value for column, value in filters.items() if value is not None}
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{c} = %s" for c in given), list(given.values())


def partner_owned(partner_id: str) -> tuple[str, list[Any]]:
    """Rows a partner reaches: its own (``partner_id``) and those of the tenants it
    created. For tables with both a ``partner_id`` and a ``tenant_id`` column."""
    return (
        "(partner_id = %s OR tenant_id IN (SELECT id FROM tenants WHERE partner_id = %s))",
        [partner_id, partner_id],
    )

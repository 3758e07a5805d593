"""PostgreSQL engine: psycopg 3 with a connection pool.

Each ``write()``/``read()`` borrows a pooled connection for one transaction. Rows come
back as dicts, like SQLite's. The job queue's claim uses ``FOR UPDATE SKIP LOCKED``
(see ``store/jobs.py``), so any number of processes share the queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from postroom.errors import DatabaseUnavailable
from postroom.store.db import Engine, Tx

IntegrityError = psycopg.errors.IntegrityError

CONNECT_TIMEOUT_S = 10


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection[dict[str, Any]]:
    """One direct connection (migrations, inspection), with a clear error when unreachable."""
    try:
        return psycopg.connect(
            url, autocommit=autocommit, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S
        )
    except psycopg.OperationalError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {detail}") from None


class PostgresDatabase:
    """An opened PostgreSQL database (build it with ``store.open_database``)."""

    engine = Engine.POSTGRESQL

    def __init__(self, url: str, *, pool_size: int) -> None:
        self.url = url
        self._pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"row_factory": dict_row},
            open=False,
            timeout=30,
            name="postroom",
        )
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:
        try:
            conn_cm = self._pool.connection()
            conn = conn_cm.__enter__()
        except PoolTimeout:
            raise DatabaseUnavailable("no PostgreSQL connection became free in time") from None
        try:
            with conn.transaction():
                yield Tx(conn, Engine.POSTGRESQL)
        except BaseException as exc:
            conn_cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        conn_cm.__exit__(None, None, None)

    @contextmanager
    def write(self) -> Iterator[Tx]:
        with self._transaction() as tx:
            yield tx

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._transaction() as tx:
            yield tx

    def close(self) -> None:
        self._pool.close()

"""SQLite engine: WAL, foreign keys, full fsync, and a single writer.

Durability: ``synchronous=FULL`` in WAL mode fsyncs the log on every commit, so a
transaction that returned has survived a power loss (an SMTP 250 depends on it).

The single-writer discipline: a write transaction first takes a process-wide lock
(threads queue in order), then an exclusive ``flock`` on ``<db>.writer-lock`` (processes
queue; the kernel drops the lock of a process that dies), then ``BEGIN IMMEDIATE``.
``busy_timeout`` remains as a backstop for other programs touching the file. A writer
that cannot get the lock within the timeout gets :class:`DatabaseBusy`, never SQLite's
"database is locked".

Connections are per thread; reads run in deferred transactions, which in WAL mode read
one consistent snapshot and never wait for the writer.

The driver is ``sqlean.py`` (a recent SQLite with FTS5 ``contentless_delete`` and
extension loading; see docs/adr/0001-sqlite-driver.md).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlean

from postroom.errors import DatabaseBusy, DatabaseUnavailable, ForeignDatabase
from postroom.store.db import Engine, Tx

APPLICATION_ID = 0x5053524D  # "PSRM": this file is a Postroom database

IntegrityError = sqlean.IntegrityError
OperationalError = sqlean.OperationalError
DatabaseError = sqlean.DatabaseError


def _dict_factory(cursor: Any, row: tuple[Any, ...]) -> dict[str, Any]:
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}


def connect(path: Path, *, busy_timeout_ms: int, read_only: bool = False) -> Any:
    """A configured connection (autocommit; transactions are explicit)."""
    try:
        if read_only:
            conn = sqlean.connect(
                f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
        else:
            conn = sqlean.connect(str(path), isolation_level=None, check_same_thread=False)
    except sqlean.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot open SQLite database {path}: {exc}") from None
    conn.row_factory = _dict_factory
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = FULL")
    except sqlean.DatabaseError as exc:
        conn.close()
        raise ForeignDatabase(
            f"{path} is not a SQLite database (or it is corrupt): {exc}. It was not modified."
        ) from None
    return conn


def _rollback(conn: Any) -> None:
    # A failed COMMIT (disk full, I/O error) can leave the transaction open.
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class _WriterLock:
    """Process lock + cross-process ``flock``, acquired with a deadline."""

    def __init__(self, lock_path: Path, timeout_s: float) -> None:
        self._thread_lock = threading.Lock()
        self._lock_path = lock_path
        self._timeout_s = timeout_s
        self._fd: int | None = None

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    @contextmanager
    def hold(self) -> Iterator[None]:
        deadline = time.monotonic() + self._timeout_s
        if not self._thread_lock.acquire(timeout=self._timeout_s):
            raise DatabaseBusy("the database writer is busy; try again")
        try:
            fd = self._file()
            delay = 0.0005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        raise DatabaseBusy(
                            "another process has held the database writer lock too long"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.005)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class SQLiteDatabase:
    """An opened, migrated SQLite database (build it with ``store.open_database``)."""

    engine = Engine.SQLITE

    def __init__(self, path: Path, *, busy_timeout_ms: int) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[Any] = []
        self._all_lock = threading.Lock()
        self._writer = _WriterLock(
            path.with_name(path.name + ".writer-lock"), busy_timeout_ms / 1000
        )
        self._closed = False

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise DatabaseUnavailable("the database is closed")
            conn = connect(self.path, busy_timeout_ms=self._busy_timeout_ms)
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Tx]:
        if getattr(self._local, "in_tx", False):
            raise RuntimeError("nested transaction on one thread")
        conn = self._conn()
        self._local.in_tx = True
        try:
            try:
                conn.execute(begin)
            except sqlean.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise DatabaseBusy("the database is locked by another program") from None
                raise
            try:
                yield Tx(conn, Engine.SQLITE)
            except BaseException:
                _rollback(conn)
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        finally:
            self._local.in_tx = False

    @contextmanager
    def write(self) -> Iterator[Tx]:
        with self._writer.hold(), self._transaction("BEGIN IMMEDIATE") as tx:
            yield tx

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._transaction("BEGIN") as tx:
            yield tx

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()
        self._writer.close()

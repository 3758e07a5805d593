"""SQLite's single-writer discipline: concurrent writers queue, they never see "locked"."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from postroom.errors import DatabaseBusy
from postroom.store import open_database

pytestmark = pytest.mark.engines("sqlite")


def _insert_events(url: str, tag: str, count: int) -> None:
    db = open_database(url, now_ms=0)
    try:
        for n in range(count):
            with db.write() as tx:
                tx.execute(
                    "INSERT INTO events (id, type, payload_json, occurred_at)"
                    " VALUES (%s, 'test.write', '{}', %s)",
                    (f"evt_{tag}_{n}", n),
                )
    finally:
        db.close()


def test_threads_and_processes_write_concurrently_without_errors(database_url: str) -> None:
    errors: list[BaseException] = []

    def thread_body(tag: str) -> None:
        try:
            _insert_events(database_url, tag, 100)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_insert_events, args=(database_url, f"p{i}", 100)) for i in range(3)
    ]
    threads = [threading.Thread(target=thread_body, args=(f"t{i}",)) for i in range(6)]
    for proc in procs:
        proc.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for proc in procs:
        proc.join(timeout=120)
    assert errors == []
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    db = open_database(database_url, now_ms=0)
    try:
        with db.read() as tx:
            assert tx.fetchval("SELECT count(*) FROM events") == 900
    finally:
        db.close()


_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("COMMIT")
"""


def _hold_write_lock(path: str) -> subprocess.Popen[str]:
    """Another program (its own process and SQLite library) holding the write lock."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_writer_waits_for_another_programs_transaction(database_url: str) -> None:
    holder = _hold_write_lock(database_url[len("sqlite:///") :])
    db = open_database(database_url, now_ms=0)
    done = threading.Event()

    def write() -> None:
        with db.write() as tx:
            tx.execute(
                "INSERT INTO events (id, type, payload_json, occurred_at)"
                " VALUES ('evt_w', 't', '{}', 0)"
            )
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    time.sleep(0.3)
    assert not done.is_set()  # waiting, not failing
    _release(holder)
    thread.join(timeout=10)
    assert done.is_set()
    db.close()


def test_a_writer_that_cannot_get_the_lock_in_time_gets_database_busy(
    database_url: str,
) -> None:
    holder = _hold_write_lock(database_url[len("sqlite:///") :])
    db = open_database(database_url, now_ms=0, busy_timeout_ms=200)
    try:
        with pytest.raises(DatabaseBusy), db.write() as tx:
            tx.execute("SELECT 1")
    finally:
        _release(holder)
        db.close()


def test_reads_see_a_snapshot_while_a_write_is_open(db: Any) -> None:
    with db.write() as tx:
        tx.execute(
            "INSERT INTO events (id, type, payload_json, occurred_at)"
            " VALUES ('evt_1', 't', '{}', 0)"
        )
    seen: list[int] = []
    release = threading.Event()

    def long_write() -> None:
        with db.write() as tx:
            tx.execute(
                "INSERT INTO events (id, type, payload_json, occurred_at)"
                " VALUES ('evt_2', 't', '{}', 0)"
            )
            release.wait(5)

    thread = threading.Thread(target=long_write)
    thread.start()
    time.sleep(0.1)
    with db.read() as tx:
        seen.append(tx.fetchval("SELECT count(*) FROM events"))
    release.set()
    thread.join()
    assert seen == [1]


def test_nested_transactions_on_one_thread_are_a_bug(db: Any) -> None:
    with pytest.raises(RuntimeError, match="nested"), db.write(), db.read():
        pass


def test_rolled_back_write_leaves_nothing(db: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError), db.write() as tx:
        tx.execute(
            "INSERT INTO events (id, type, payload_json, occurred_at)"
            " VALUES ('evt_x', 't', '{}', 0)"
        )
        raise ValueError("abort")
    with db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM events") == 0

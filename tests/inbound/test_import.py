"""Importing Maildir, mbox and .eml: idempotent, resumable, with a summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from postroom.errors import InvalidInput, NotFound
from postroom.inbound.importer import open_source, run_import
from postroom.store.db import Engine
from postroom.tenancy.service import create_identity


def _message(n: int, extra: bytes = b"") -> bytes:
    return (
        f"From: sender{n}@example.org\r\nTo: archive@localhost\r\n"
        f"Subject: message number {n}\r\nMessage-ID: <m{n}@example.org>\r\n"
        f"Date: Mon, 0{n % 9 + 1} Jun 2026 10:00:00 +0000\r\n\r\nbody of message {n}\r\n"
    ).encode() + extra


@pytest.fixture
def app(ready_app: Any) -> Any:
    create_identity(ready_app, "archive")
    return ready_app


@pytest.fixture
def maildir(tmp_path: Path) -> Path:
    root = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True)
    (root / "cur" / "1561980409.aaa.host:2,S").write_bytes(_message(1))
    (root / "cur" / "1561980410.bbb.host:2,FS").write_bytes(_message(2))
    (root / "cur" / "1561980411.ccc.host:2,R").write_bytes(_message(3))
    (root / "new" / "1561980412.ddd.host").write_bytes(_message(4))
    (root / "cur" / "1561980413.eee.host:2,").write_bytes(b"")  # empty: refused
    return root


def _rows(app: Any) -> list[dict[str, Any]]:
    with app.db.read() as tx:
        return tx.fetchall("SELECT * FROM messages ORDER BY received_at")


def _labels(app: Any, rowid: int) -> list[str]:
    with app.db.read() as tx:
        rows = tx.fetchall(
            "SELECT label FROM labels WHERE message_rowid = %s ORDER BY label", (rowid,)
        )
    return [r["label"] for r in rows]


def test_maildir_import_maps_flags_and_is_idempotent(app: Any, maildir: Path) -> None:
    with ThreadPoolExecutor(2) as pool:
        summary = run_import(app, maildir, "archive@localhost", executor=pool)
        assert summary.kind == "maildir"
        assert (summary.total, summary.imported, summary.duplicates) == (5, 4, 0)
        assert summary.refused == [(str(maildir / "cur" / "1561980413.eee.host:2,"), "empty")]
        rows = _rows(app)
        assert [r["subject"] for r in rows] == [f"message number {n}" for n in (1, 2, 3, 4)]
        assert [r["read"] for r in rows] == [1, 1, 0, 0]
        assert _labels(app, rows[1]["rowid"]) == ["starred"]
        assert _labels(app, rows[2]["rowid"]) == ["answered"]
        assert rows[0]["received_at"] == 1561980409000
        assert {r["source"] for r in rows} == {"import"}
        # The raw bytes are kept exactly as they were in the file.
        assert app.blobs.get(rows[0]["raw_blob_key"]) == _message(1)

        again = run_import(app, maildir, "archive@localhost", executor=pool)
    assert (again.imported, again.duplicates) == (0, 4)
    assert len(_rows(app)) == 4


def test_mbox_and_eml_sources(app: Any, tmp_path: Path) -> None:
    mbox = tmp_path / "mail.mbox"
    mbox.write_bytes(
        b"From sender1@example.org Mon Jun  1 10:00:00 2026\n"
        + _message(1).replace(b"\r\n", b"\n")
        + b"\nFrom sender2@example.org Mon Jun  1 11:00:00 2026\n"
        + _message(2).replace(b"\r\n", b"\n")
    )
    folder = tmp_path / "emls"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.eml").write_bytes(_message(5))
    (folder / "sub" / "b.eml").write_bytes(_message(6))
    single = tmp_path / "one.eml"
    single.write_bytes(_message(7))
    assert open_source(mbox)[0] == "mbox"
    assert open_source(folder)[0] == "eml-folder"
    assert open_source(single)[0] == "eml"
    with ThreadPoolExecutor(2) as pool:
        assert run_import(app, mbox, "archive@localhost", executor=pool).imported == 2
        assert run_import(app, folder, "archive@localhost", executor=pool).imported == 2
        assert run_import(app, single, "archive@localhost", executor=pool).imported == 1
    subjects = sorted(r["subject"] for r in _rows(app))
    assert subjects == [f"message number {n}" for n in (1, 2, 5, 6, 7)]
    stored = [r for r in _rows(app) if r["subject"] == "message number 1"][0]
    raw = app.blobs.get(stored["raw_blob_key"])
    assert not raw.startswith(b"From sender1") and raw.endswith(b"body of message 1\n")


def test_bad_sources_and_targets_are_clear_errors(app: Any, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        run_import(app, tmp_path / "missing", "archive@localhost")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="neither a Maildir"):
        run_import(app, tmp_path / "empty", "archive@localhost")
    (tmp_path / "x.eml").write_bytes(_message(1))
    with pytest.raises(NotFound, match="no inbox"):
        run_import(app, tmp_path / "x.eml", "nobody@localhost")


def test_the_import_command(app: Any, maildir: Path, settings: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir), POSTROOM_DATABASE_URL=settings.database_url
    )
    args = [sys.executable, "-m", "postroom", "import", str(maildir), "--to", "archive@localhost"]
    first = subprocess.run([*args, "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert (summary["imported"], summary["refused"], summary["refused_reasons"]) == (
        4,
        1,
        {"empty": 1},
    )
    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "duplicates" in second.stdout
    missing = subprocess.run(
        [*args[:4], str(maildir / "nope"), "--to", "archive@localhost"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().count("\n") == 0 and "does not exist" in missing.stderr


def test_an_interrupted_import_continues_where_it_stopped(
    app: Any, tmp_path: Path, settings: Any
) -> None:
    root = tmp_path / "Big"
    (root / "cur").mkdir(parents=True)
    for n in range(1500):
        (root / "cur" / f"{1561980409 + n}.m{n}.host:2,S").write_bytes(
            _message(n, b"x" * 2000 + b"\r\n")
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir), POSTROOM_DATABASE_URL=settings.database_url
    )
    args = [sys.executable, "-m", "postroom", "import", str(root), "--to", "archive@localhost"]
    proc = subprocess.Popen([*args, "--json"], env=env, stdout=subprocess.PIPE, text=True)
    # Interrupt once the first batches are committed.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_rows(app)) < 200:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130
    first = json.loads(out)
    assert first["interrupted"] is True
    stored = len(_rows(app))
    assert 200 <= stored < 1500
    assert first["imported"] == stored
    again = subprocess.run([*args, "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["duplicates"] == stored
    assert second["imported"] == 1500 - stored
    assert len(_rows(app)) == 1500


def test_an_import_leaves_planner_statistics(app: Any, maildir: Path) -> None:
    def analyzed() -> dict[str, Any]:
        with app.db.read() as tx:
            if tx.engine is Engine.SQLITE:
                stats = tx.fetchval(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'"
                ) and tx.fetchall("SELECT tbl, count(*) AS n FROM sqlite_stat1 GROUP BY tbl")
                return {r["tbl"]: r["n"] for r in stats or []}
            rows = tx.fetchall(
                "SELECT relname, analyze_count FROM pg_stat_user_tables"
                " WHERE relname IN ('messages', 'message_search')"
            )
        return {r["relname"]: r["analyze_count"] for r in rows}

    before = analyzed()
    with ThreadPoolExecutor(2) as pool:
        assert run_import(app, maildir, "archive@localhost", executor=pool).imported == 4
    after = analyzed()
    tables = ("messages", "message_search") if app.db.engine is Engine.POSTGRESQL else ("messages",)
    assert all(after.get(name, 0) > before.get(name, 0) for name in tables), (before, after)

"""The setup commands as a user runs them: a real `postroom` process each time."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import smtplib
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest


def run(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "postroom", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(extra)
    return env


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


def _one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("postroom: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


# --- init ------------------------------------------------------------------------------


def test_init_creates_everything_once(home: Path) -> None:
    env = _base_env()
    first = run(["init", "--json"], env, home)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["initialized"] is True
    assert out["tenant_id"].startswith("ten_")
    assert out["api_key"].startswith("pr_live_")
    assert out["domain"] == "localhost"
    data = home / "postroom-data"
    for name in ("master.key", "key-pepper", "hash-key"):
        assert (data / name).stat().st_mode & 0o777 == 0o600
    assert (data / "postroom.db").exists()
    master = (data / "master.key").read_bytes()
    with sqlite3.connect(data / "postroom.db") as conn:
        stored = [row[0] for row in conn.execute("SELECT hash FROM api_keys")]
    assert len(stored) == 1 and out["api_key"] not in stored[0]

    second = run(["init", "--json"], env, home)
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["initialized"] is False
    assert again["tenant_id"] == out["tenant_id"]
    assert "api_key" not in again
    assert (data / "master.key").read_bytes() == master
    with sqlite3.connect(data / "postroom.db") as conn:
        assert conn.execute("SELECT count(*) FROM tenants").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM api_keys").fetchone()[0] == 1

    text = run(["init"], env, home)
    assert text.returncode == 0 and "already initialised" in text.stdout


def test_init_text_output_shows_the_key_once(home: Path) -> None:
    result = run(["init"], _base_env(), home)
    assert result.returncode == 0, result.stderr
    assert "Platform API key" in result.stdout
    assert "pr_live_" in result.stdout
    assert str(home / "postroom-data") in result.stdout


def test_init_on_postgres(pg_server: Any, home: Path) -> None:
    url = pg_server.new_database(migrated=False)
    env = _base_env(POSTROOM_DATABASE_URL=url)
    result = run(["init", "--json"], env, home)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["initialized"] is True
    status = run(["db", "status", "--json"], env, home)
    assert json.loads(status.stdout)["version"] == json.loads(status.stdout)["head"]
    pg_server.drop(url)


def test_init_refuses_to_replace_a_lost_key_of_an_initialised_database(home: Path) -> None:
    env = _base_env()
    assert run(["init"], env, home).returncode == 0
    (home / "postroom-data" / "master.key").unlink()
    result = run(["init"], env, home)
    _one_line_error(result, "master.key", "restore")
    assert not (home / "postroom-data" / "master.key").exists()


def test_unwritable_data_folder(home: Path) -> None:
    # /proc refuses new folders to every user, root included.
    result = run(["init"], _base_env(POSTROOM_DATA_DIR="/proc/postroom-data"), home)
    _one_line_error(result, "cannot create data folder /proc/postroom-data")


def test_data_folder_that_is_a_file(home: Path) -> None:
    (home / "postroom-data").write_text("oops")
    result = run(["init"], _base_env(), home)
    _one_line_error(result, "postroom-data")


# --- bad databases, config and keys --------------------------------------------------


def test_foreign_database_file_is_refused_unmodified(home: Path) -> None:
    data = home / "postroom-data"
    data.mkdir()
    db = data / "postroom.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE contacts (name TEXT)")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for args in (["init"], ["db", "status"], ["migrate"], ["jobs", "list"]):
        result = run(args, _base_env(), home)
        _one_line_error(result, "not a Postroom database")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_corrupt_database_file_is_refused_unmodified(home: Path) -> None:
    data = home / "postroom-data"
    data.mkdir()
    db = data / "postroom.db"
    db.write_bytes(os.urandom(8192))
    before = db.read_bytes()
    result = run(["db", "status"], _base_env(), home)
    _one_line_error(result, "not a SQLite database")
    assert db.read_bytes() == before


def test_bad_config_value_is_one_line(home: Path) -> None:
    result = run(["config", "show"], _base_env(POSTROOM_HTTP_LISTEN="nowhere"), home)
    _one_line_error(result, "http.listen", "POSTROOM_HTTP_LISTEN")
    (home / "postroom.toml").write_text("[smtp]\nport = 25\n")
    result = run(["config", "show"], _base_env(), home)
    _one_line_error(result, "unknown setting 'smtp.port'")


def test_config_show_masks_the_database_password(home: Path) -> None:
    env = _base_env(POSTROOM_DATABASE_URL="postgresql://mail:hunter2@db.example:5432/mail")
    result = run(["config", "show", "--json"], env, home)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["database_url"] == "postgresql://mail:***@db.example:5432/mail"
    assert "hunter2" not in result.stdout
    assert shown["smtp.listen"] == "127.0.0.1:2525"


def test_missing_key_file_stops_serve(home: Path) -> None:
    env = _base_env()
    assert run(["init"], env, home).returncode == 0
    (home / "postroom-data" / "key-pepper").unlink()
    result = run(["serve"], env, home)
    _one_line_error(result, "key pepper", "missing")


def test_commands_before_init_say_what_to_do(home: Path) -> None:
    result = run(["jobs", "list"], _base_env(), home)
    _one_line_error(result, "postroom init")


# --- db status, migrate, serve on PostgreSQL ----------------------------------------


def test_db_status_and_migrate_on_postgres(pg_server: Any, home: Path) -> None:
    url = pg_server.new_database(migrated=False)
    env = _base_env(POSTROOM_DATABASE_URL=url)
    status = json.loads(run(["db", "status", "--json"], env, home).stdout)
    assert status["version"] == 0 and status["migrations"][0]["applied_at"] is None
    text = run(["db", "status"], env, home).stdout
    assert "pending" in text and "postroom migrate" in text

    refused = run(["serve"], env, home)
    _one_line_error(refused, "postroom migrate")
    refused = run(["worker"], env, home)
    _one_line_error(refused, "postroom migrate")

    migrated = run(["migrate", "--json"], env, home)
    assert migrated.returncode == 0, migrated.stderr
    from postroom.store.migrate import load_chain

    assert json.loads(migrated.stdout)["applied"] == [m.name for m in load_chain()]
    again = run(["migrate"], env, home)
    assert "up to date" in again.stdout
    status = json.loads(run(["db", "status", "--json"], env, home).stdout)
    assert status["version"] == status["head"] and status["migrations"][0]["applied_at"]
    pg_server.drop(url)


def test_serve_runs_until_sigterm(home: Path) -> None:
    env = _base_env(POSTROOM_SMTP_LISTEN="127.0.0.1:0", POSTROOM_HTTP_LISTEN="127.0.0.1:0")
    init = run(["init", "--json"], env, home)
    assert init.returncode == 0
    platform_key = json.loads(init.stdout)["api_key"]
    assert run(["identity", "create", "bob"], env, home).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "postroom", "serve"],
        env=env,
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = ""
        deadline = time.monotonic() + 30
        while "Press Ctrl-C" not in seen and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        assert "worker" in seen
        api_url = seen.split("api          ")[1].split()[0]
        assert api_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{api_url}/readyz", timeout=10) as ready:
            assert json.loads(ready.read())["status"] == "ready"
        request = urllib.request.Request(
            f"{api_url}/v1/tenants", headers={"Authorization": f"Bearer {platform_key}"}
        )
        with urllib.request.urlopen(request, timeout=10) as listed:
            assert [t["slug"] for t in json.loads(listed.read())["data"]] == ["default"]
        port = int(seen.split("smtp         listening on 127.0.0.1:")[1].split()[0])
        with smtplib.SMTP("127.0.0.1", port) as client:
            refused = client.sendmail(
                "a@example.org", ["bob@localhost"], b"Subject: hi\r\n\r\nhello\r\n"
            )
        assert refused == {}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_serve_with_several_smtp_processes(home: Path) -> None:
    env = _base_env(POSTROOM_SMTP_LISTEN="127.0.0.1:0", POSTROOM_SMTP_PROCESSES="3")
    assert run(["init"], env, home).returncode == 0
    assert run(["identity", "create", "bob"], env, home).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "postroom", "serve", "--only", "smtp"],
        env=env,
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = ""
        while "Press Ctrl-C" not in seen:
            seen += proc.stdout.readline()
        assert "; 3 processes" in seen
        port = int(seen.split("listening on 127.0.0.1:")[1].split(";")[0])
        children = _children(proc.pid)
        assert len(children) == 2
        # Connections spread over the processes; every message is accepted.
        for n in range(12):
            with smtplib.SMTP("127.0.0.1", port) as client:
                assert (
                    client.sendmail(
                        "a@example.org", ["bob@localhost"], b"Subject: %d\r\n\r\nx\r\n" % n
                    )
                    == {}
                )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert all(not Path(f"/proc/{pid}").exists() for pid in children)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    with sqlite3.connect(home / "postroom-data" / "postroom.db") as conn:
        assert conn.execute("SELECT count(*) FROM inbound_queue").fetchone()[0] == 12


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_serve_says_when_the_smtp_port_is_taken(home: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = _base_env(POSTROOM_SMTP_LISTEN=f"127.0.0.1:{port}")
        assert run(["init"], env, home).returncode == 0
        _one_line_error(run(["serve"], env, home), "smtp.listen", f"127.0.0.1:{port}")


def test_serve_says_when_the_http_port_is_taken(home: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = _base_env(POSTROOM_HTTP_LISTEN=f"127.0.0.1:{port}")
        assert run(["init"], env, home).returncode == 0
        _one_line_error(
            run(["serve", "--only", "api"], env, home), "http.listen", f"127.0.0.1:{port}"
        )


def test_jobs_commands(home: Path) -> None:
    env = _base_env()
    assert run(["init"], env, home).returncode == 0
    listing = run(["jobs", "list", "--json"], env, home)
    assert listing.returncode == 0
    assert json.loads(listing.stdout) == {"counts": {}, "jobs": []}
    missing = run(["jobs", "redrive", "job_01ARZ3NDEKTSV4RRFFQ69G5FAV"], env, home)
    _one_line_error(missing, "no job")

    from postroom.app import build_app
    from postroom.config import load_settings

    app = build_app(load_settings(env={}, cwd=home))
    try:
        job = app.queue.enqueue("mail.index", "msg_1")
        claimed = app.queue.claim(["mail.index"], "w")
        assert claimed is not None
        app.queue.fail(claimed, "w", transient=False, reason="PermanentFailure:refused")
    finally:
        app.close()
    dead = json.loads(run(["jobs", "list", "--state", "dead_lettered", "--json"], env, home).stdout)
    assert [j["id"] for j in dead["jobs"]] == [job.id]
    assert dead["jobs"][0]["last_failure"]["reason"] == "PermanentFailure:refused"
    redriven = run(["jobs", "redrive", job.id, "--json"], env, home)
    assert redriven.returncode == 0
    assert json.loads(redriven.stdout) == {"id": job.id, "changed": True, "state": "pending"}
    again = run(["jobs", "redrive", job.id], env, home)
    assert again.returncode == 1 and "not dead-lettered" in again.stdout
    not_dead = run(["jobs", "drop", job.id], env, home)
    assert not_dead.returncode == 1
    shown = json.loads(run(["jobs", "show", job.id], env, home).stdout)
    assert (shown["state"], shown["attempts"]) == ("pending", 0)

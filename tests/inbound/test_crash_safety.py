"""250 means durable: kill -9 the server while clients send, again and again.

Each round starts `postroom serve` (SMTP + worker in one process), lets 8 clients send
real messages, and kills the process with SIGKILL at a random moment. After the last
round a final serve drains the ingest queue. Then every message that got a 250 must be
stored exactly once, its raw bytes identical to what was sent (behind our Received
header), and SQLite's integrity check must pass.
"""

from __future__ import annotations

import os
import random
import re
import signal
import smtplib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

CLIENTS = 8


def _env(settings: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        POSTROOM_SMTP_LISTEN="127.0.0.1:0",
        POSTROOM_WORKER_POLL_INTERVAL_MS="20",
        POSTROOM_JOBS_LEASE_SECONDS="2",
        POSTROOM_SMTP_SENDER_RATE_LIMIT="0",
        POSTROOM_LOG_LEVEL="error",
    )
    return env


def _start(settings: Any, log: Path) -> tuple[subprocess.Popen[str], int]:
    with log.open("a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "postroom", "serve"],
            env=_env(settings),
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
        )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen += line
        match = re.search(r"smtp\s+listening on 127\.0\.0\.1:(\d+)", line)
        if match:
            return proc, int(match.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"serve did not start:\n{seen}\n{log.read_text()}")


def _message(tag: str, body_lines: list[str]) -> bytes:
    body = "\r\n".join(body_lines)
    return (
        f"From: Sender <sender@example.org>\r\nTo: inbox@localhost\r\n"
        f"Subject: crash test {tag}\r\nMessage-ID: <{tag}@crash.test>\r\n\r\n{body}\r\n"
    ).encode()


def _client(
    port: int,
    round_no: int,
    client_no: int,
    stop: threading.Event,
    acked: dict[str, bytes],
    lock: threading.Lock,
    corpus: list[bytes],
) -> None:
    n = 0
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
            while not stop.is_set() and n < 500 // CLIENTS + 1:
                tag = f"r{round_no}c{client_no}n{n}"
                body = corpus[(round_no * 97 + client_no * 13 + n) % len(corpus)]
                raw = _message(tag, [body.decode("ascii", "replace")[:2000], tag])
                smtp.sendmail("sender@example.org", ["inbox@localhost"], raw)
                with lock:
                    acked[tag] = raw
                n += 1
    except (OSError, smtplib.SMTPException):
        return  # the server died under us: what was not acknowledged may be lost


@pytest.mark.parametrize("rounds", [20])
def test_every_acknowledged_message_survives_sigkill(
    ready_app: Any, settings: Any, tmp_path: Path, engine: str, rounds: int
) -> None:
    from postroom.tenancy.service import create_identity

    create_identity(ready_app, "inbox")
    if engine == "postgresql":
        rounds = 6  # the same code path; fewer rounds keep the suite short
    corpus = [
        p.read_bytes().replace(b"\r", b"")[:3000]
        for p in sorted(Path(__file__).parents[1].glob("**/*.py"))[:40]
    ]
    acked: dict[str, bytes] = {}
    lock = threading.Lock()
    rng = random.Random(4242)
    log = tmp_path / "serve.log"
    for round_no in range(rounds):
        proc, port = _start(settings, log)
        stop = threading.Event()
        clients = [
            threading.Thread(
                target=_client, args=(port, round_no, c, stop, acked, lock, corpus), daemon=True
            )
            for c in range(CLIENTS)
        ]
        for client in clients:
            client.start()
        time.sleep(rng.uniform(0.05, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        stop.set()
        for client in clients:
            client.join(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    assert len(acked) > rounds, "too few messages were acknowledged to prove anything"

    # A last, clean run ingests whatever the killed ones left staged.
    proc, _port = _start(settings, log)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with ready_app.db.read() as tx:
                left = tx.fetchval("SELECT count(*) FROM inbound_queue")
            if left == 0:
                break
            time.sleep(0.2)
        assert left == 0, log.read_text()[-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert proc.stdout is not None
        proc.stdout.close()

    with ready_app.db.read() as tx:
        rows = tx.fetchall(
            "SELECT rfc_message_id, raw_blob_key FROM messages WHERE rfc_message_id LIKE %s",
            ("%@crash.test",),
        )
    stored: dict[str, list[str]] = {}
    for row in rows:
        stored.setdefault(row["rfc_message_id"].split("@")[0], []).append(row["raw_blob_key"])
    twice = {tag: keys for tag, keys in stored.items() if len(keys) > 1}
    assert twice == {}, f"stored twice: {sorted(twice)[:5]}"
    missing = sorted(set(acked) - set(stored))
    assert missing == [], f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    for tag, raw in acked.items():
        blob = ready_app.blobs.get(stored[tag][0])
        assert blob.endswith(raw), tag
        assert blob[: len(blob) - len(raw)].startswith(b"Received: ")
    if engine == "sqlite":
        # Through the App's own SQLite library: a second library opening the same file in
        # this process would drop the first one's POSIX locks when it closed.
        with ready_app.db.read() as tx:
            assert tx.fetchval("PRAGMA integrity_check") == "ok"

"""Changes made on the IMAP server (seed 003 mailbox_mutations), against a real Dovecot.

The kill tests put a loopback proxy between a real ``postroom worker`` process and
Dovecot; the proxy holds the conversation at an exact command, the test SIGKILLs the
worker there, and a later attempt must resume (after COPY was answered) or report the
outcome unknown (before it was answered) — never copy twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from postroom.clock import ManualClock
from postroom.errors import Conflict
from postroom.store import imap as rows
from postroom.sync import accounts, mutations
from postroom.sync.engine import sync_account
from postroom.tenancy.service import create_identity
from postroom.testing.dovecot import PASSWORD, USER
from postroom.testing.mail import make_message


class HoldingProxy:
    """Forwards a TCP connection to Dovecot; ``hold_client_on`` stops forwarding what the
    client sends from the first chunk containing that text, ``hold_server_after`` stops
    forwarding the server's answers once the client sent that text."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.hold_client_on: bytes | None = None
        self.hold_server_after: bytes | None = None
        self.held = threading.Event()
        self._server_held = False
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client:
                    upper = data.upper()
                    if self.hold_client_on and self.hold_client_on in upper:
                        self.held.set()
                        time.sleep(3600)
                    if self.hold_server_after and self.hold_server_after in upper:
                        self._server_held = True
                        dst.sendall(data)
                        self.held.set()
                        continue
                elif self._server_held:
                    time.sleep(3600)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


def _setup(app: Any, server: Any, port: int | None = None) -> tuple[rows.Account, list[str]]:
    for n in range(3):
        server.deliver(USER, make_message(subject=f"Item {n}"))
    server.deliver(USER, make_message(subject="Seed archive"), folder="Archive")
    identity = create_identity(app, "mutator")
    account = accounts.create_account(
        app,
        identity.identity.id,
        accounts.NewAccount(
            host="127.0.0.1",
            port=port or server.port,
            tls_mode="none",
            allow_plaintext=True,
            username=USER,
            password=PASSWORD,
        ),
    )
    assert sync_account(app, account.id).status == "ok"
    with app.db.read() as tx:
        ids = [
            r["id"]
            for r in tx.fetchall(
                "SELECT m.id FROM messages m JOIN message_occurrences o"
                " ON o.message_rowid = m.rowid JOIN mail_folders f ON f.id = o.folder_id"
                " WHERE f.path = 'INBOX' AND m.identity_id = %s ORDER BY o.uid",
                (account.identity_id,),
            )
        ]
    return account, ids


def _server_uids(server: Any, folder: str, criteria: str = "ALL") -> list[int]:
    imap = server.client()
    imap.select(folder, readonly=True)
    typ, data = imap.uid("SEARCH", criteria)
    assert typ == "OK"
    return [int(x) for x in data[0].split()]


def _subjects(server: Any, folder: str) -> list[str]:
    imap = server.client()
    imap.select(folder, readonly=True)
    typ, data = imap.uid("FETCH", "1:*", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
    assert typ == "OK"
    return sorted(
        part[1].decode().split(":", 1)[1].strip() for part in data if isinstance(part, tuple)
    )


def test_flag_and_keyword_changes_reach_the_server_once_recorded(
    ready_app: Any, dovecot: Any
) -> None:
    server = dovecot()
    account, ids = _setup(ready_app, server)
    seen = mutations.record(ready_app, ids[0], "seen", requester_identity="req-1")
    again = mutations.record(ready_app, ids[0], "seen", requester_identity="req-1")
    assert again.id == seen.id  # the same request twice is one change
    assert mutations.attempt(ready_app, seen.id, "w") == "completed"
    tagged = mutations.record(ready_app, ids[1], "keywords_add", keywords=["$Todo", "Project"])
    assert mutations.attempt(ready_app, tagged.id, "w") == "completed"
    assert _server_uids(server, "INBOX", "SEEN") == [1]
    assert _server_uids(server, "INBOX", "KEYWORD Project") == [2]
    # Synchronisation observes what the change did (the one writer of the snapshot).
    sync_account(ready_app, account.id)
    with ready_app.db.read() as tx:
        read = tx.fetchval("SELECT read FROM messages WHERE id = %s", (ids[0],))
        audit = tx.fetchall(
            "SELECT mutation, outcome FROM mailbox_mutation_audit_entries ORDER BY completed_at"
        )
    assert read == 1
    assert [(a["mutation"], a["outcome"]) for a in audit] == [
        ("seen", "completed"),
        ("keywords_add", "completed"),
    ]
    assert mutations.attempt(ready_app, seen.id, "w") is None  # completed: nothing to do


def test_a_move_ends_with_the_message_once_in_the_destination_and_not_duplicated_here(
    ready_app: Any, dovecot: Any
) -> None:
    server = dovecot()
    account, ids = _setup(ready_app, server)
    move = mutations.record(ready_app, ids[0], "move", folder="Archive")
    assert mutations.attempt(ready_app, move.id, "w") == "completed"
    assert _subjects(server, "Archive") == ["Item 0", "Seed archive"]
    assert _subjects(server, "INBOX") == ["Item 1", "Item 2"]
    sync_account(ready_app, account.id)
    with ready_app.db.read() as tx:
        copies = tx.fetchall(
            "SELECT f.path, o.remote_expunge_observed_at FROM messages m"
            " JOIN message_occurrences o ON o.message_rowid = m.rowid"
            " JOIN mail_folders f ON f.id = o.folder_id"
            " WHERE m.identity_id = %s AND m.subject = 'Item 0'",
            (account.identity_id,),
        )
    assert copies == [{"path": "Archive", "remote_expunge_observed_at": None}]


def test_delete_expunges_and_an_unsynced_message_is_refused(ready_app: Any, dovecot: Any) -> None:
    server = dovecot()
    account, ids = _setup(ready_app, server)
    delete = mutations.record(ready_app, ids[2], "delete")
    assert mutations.attempt(ready_app, delete.id, "w") == "completed"
    assert _server_uids(server, "INBOX") == [1, 2]
    sync_account(ready_app, account.id)
    with pytest.raises(Conflict):
        mutations.record(ready_app, ids[2], "seen")  # a tombstone is no longer on the server


def _worker(app: Any, log: Path) -> subprocess.Popen[bytes]:
    settings = app.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        POSTROOM_IMAP_USE_MOVE="false",
        POSTROOM_WORKER_POLL_INTERVAL_MS="50",
        POSTROOM_LOG_LEVEL="warning",
    )
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "postroom", "worker", "--type", "imap.mutate"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _kill_when_held(proxy: HoldingProxy, proc: subprocess.Popen[bytes], log: Path) -> None:
    try:
        assert proxy.held.wait(60), log.read_text()
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()


def _later(app: Any) -> None:
    """Move the app's clock past every lease of the killed attempt."""
    app.clock = ManualClock(app.clock.now_ms() + mutations.LEASE_MS + 60_000)


def test_a_worker_killed_between_copy_and_expunge_resumes_without_copying_again(
    ready_app: Any, dovecot: Any, tmp_path: Path
) -> None:
    server = dovecot()
    proxy = HoldingProxy((server.host, server.port))
    try:
        account, ids = _setup(ready_app, server, port=proxy.port)
        ready_app.settings = dataclasses.replace(ready_app.settings, imap_use_move=False)
        proxy.hold_client_on = b"+FLAGS.SILENT (\\DELETED)"  # the STORE after COPY
        move = mutations.record(ready_app, ids[0], "move", folder="Archive")
        proc = _worker(ready_app, tmp_path / "worker.log")
        _kill_when_held(proxy, proc, tmp_path / "worker.log")
        assert mutations.get(ready_app, move.id).stage == "placement_confirmed"
        assert _subjects(server, "Archive") == ["Item 0", "Seed archive"]  # copied once
        proxy.hold_client_on = None
        _later(ready_app)
        assert mutations.attempt(ready_app, move.id, "w2") == "completed"
        assert _subjects(server, "Archive") == ["Item 0", "Seed archive"]  # not again
        assert _subjects(server, "INBOX") == ["Item 1", "Item 2"]
    finally:
        proxy.close()


def test_a_worker_killed_before_the_copy_was_answered_is_reported_unknown_not_retried(
    ready_app: Any, dovecot: Any, tmp_path: Path
) -> None:
    server = dovecot()
    proxy = HoldingProxy((server.host, server.port))
    try:
        account, ids = _setup(ready_app, server, port=proxy.port)
        proxy.hold_server_after = b"UID COPY"
        copy = mutations.record(ready_app, ids[1], "copy", folder="Archive")
        proc = _worker(ready_app, tmp_path / "worker.log")
        _kill_when_held(proxy, proc, tmp_path / "worker.log")
        assert mutations.get(ready_app, copy.id).stage == "placement_issued"
        proxy.hold_server_after = None
        _later(ready_app)
        assert mutations.attempt(ready_app, copy.id, "w2") is None  # nothing claims it
        found = mutations.get(ready_app, copy.id)
        assert (found.stage, found.last_failure_code) == ("placement_issued", "25002")
        # The server did copy it once; the system never copied it a second time.
        assert _subjects(server, "Archive") == ["Item 1", "Seed archive"]
    finally:
        proxy.close()


def test_a_placement_the_server_refused_is_known_not_unknown(ready_app: Any, dovecot: Any) -> None:
    server = dovecot()
    _account_row, ids = _setup(ready_app, server)
    # Dovecot answers NO [TRYCREATE]: the answer was read, nothing was placed.
    moved = mutations.record(ready_app, ids[0], "move", folder="Nowhere")
    copied = mutations.record(ready_app, ids[1], "copy", folder="Nowhere")
    assert mutations.attempt(ready_app, moved.id, "w") == "abandoned"
    assert mutations.attempt(ready_app, copied.id, "w") == "abandoned"
    for change in (moved, copied):
        current = mutations.get(ready_app, change.id)
        assert current.stage == "abandoned" and current.last_failure_code == "folder_missing"
    assert _subjects(server, "INBOX") == ["Item 0", "Item 1", "Item 2"]
    with ready_app.db.read() as tx:
        outcomes = tx.fetchall(
            "SELECT mutation, outcome FROM mailbox_mutation_audit_entries ORDER BY mutation"
        )
    assert [(a["mutation"], a["outcome"]) for a in outcomes] == [
        ("copy", "abandoned"),
        ("move", "abandoned"),
    ]

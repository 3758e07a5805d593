"""IMAP sync against a real Dovecot (Debian dovecot-imapd), on SQLite and PostgreSQL.

Real mail from the shared lore corpus is appended to a private Dovecot; an account of an
inbox mirrors it; the tests read back the messages, occurrences, flags and tombstones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from postroom.errors import InvalidInput
from postroom.store import imap as rows
from postroom.store.db import Engine
from postroom.sync import accounts
from postroom.sync.engine import sync_account
from postroom.tenancy.service import create_identity
from postroom.testing.corpora import corpus_path
from postroom.testing.dovecot import PASSWORD, USER
from postroom.testing.mail import make_message

LORE = corpus_path("lore-bluetooth-10k.maildir.tar.xz")
_CACHE: list[bytes] = []


def lore(count: int) -> list[bytes]:
    """The first ``count`` messages of the corpus (read once per test session)."""
    if len(_CACHE) < count:
        if not LORE.is_file():
            pytest.skip("shared corpora absent")
        _CACHE.clear()
        with tarfile.open(LORE, "r:xz") as archive:
            for member in archive:
                if member.isfile():
                    handle = archive.extractfile(member)
                    if handle is not None:
                        _CACHE.append(handle.read())
                if len(_CACHE) >= 400:
                    break
    return _CACHE[:count]


def _account(app: Any, server: Any, *, username: str = "mirror", **extra: Any) -> rows.Account:
    identity = create_identity(app, username)
    return accounts.create_account(
        app,
        identity.identity.id,
        accounts.NewAccount(
            host=server.host,
            port=server.port,
            tls_mode="none",
            allow_plaintext=True,
            username=USER,
            password=extra.pop("password", PASSWORD),
            **extra,
        ),
    )


def _stored(app: Any, identity_id: str) -> list[dict[str, Any]]:
    with app.db.read() as tx:
        return tx.fetchall(
            "SELECT m.rowid, m.id, m.rfc_message_id, m.read, m.source, o.uid, o.uidvalidity,"
            " o.is_seen, o.is_flagged, o.keywords_json, o.remote_expunge_observed_at,"
            " o.content_availability, f.path"
            " FROM messages m JOIN message_occurrences o ON o.message_rowid = m.rowid"
            " JOIN mail_folders f ON f.id = o.folder_id WHERE m.identity_id = %s ORDER BY o.uid",
            (identity_id,),
        )


def test_initial_sync_stores_each_real_message_once_and_never_sets_seen(
    ready_app: Any, dovecot: Any
) -> None:
    server = dovecot()
    sample = lore(120)
    for raw in sample:
        server.deliver(USER, raw)
    server.deliver(USER, make_message(subject="In trash"), folder="Trash")
    ready_app.settings = dataclasses.replace(ready_app.settings, imap_batch_size=25)
    account = _account(ready_app, server)
    result = sync_account(ready_app, account.id)
    assert result.status == "ok", result
    stored = _stored(ready_app, account.identity_id)
    assert len(stored) == 120 == result.stored
    assert sorted(r["uid"] for r in stored) == list(range(1, 121))
    assert {r["source"] for r in stored} == {"imap"} and {r["path"] for r in stored} == {"INBOX"}
    # Trash is not mirrored unless asked; nothing was marked \Seen on the server.
    imap = server.client()
    imap.select("INBOX", readonly=True)
    typ, data = imap.uid("SEARCH", "SEEN")
    assert typ == "OK" and data[0] == b""
    # A second run stores nothing again.
    again = sync_account(ready_app, account.id)
    assert again.stored == 0 and len(_stored(ready_app, account.identity_id)) == 120
    with ready_app.db.read() as tx:
        current = rows.get_account(tx, account.id)
        events = tx.fetchall(
            "SELECT payload_json FROM events WHERE type = 'message.received' AND identity_id = %s",
            (account.identity_id,),
        )
    assert current is not None and current.status == "ok" and current.last_synced_at
    assert len(events) == 120
    assert {json.loads(e["payload_json"])["data"]["source"] for e in events} == {"imap"}
    if ready_app.db.engine is Engine.POSTGRESQL:
        # A first sync is a bulk load: the planner got statistics on the way (ANALYZE
        # after 100 stored), not only once autovacuum comes round.
        with ready_app.db.read() as tx:
            counted = tx.fetchval("SELECT reltuples FROM pg_class WHERE relname = 'messages'")
        assert counted >= 100


def test_flags_changed_on_the_server_appear_and_expunges_become_tombstones(
    ready_app: Any, dovecot: Any
) -> None:
    server = dovecot()
    for n in range(5):
        server.deliver(USER, make_message(subject=f"Note {n}"))
    account = _account(ready_app, server)
    assert sync_account(ready_app, account.id).stored == 5
    imap = server.client()
    imap.select("INBOX")
    imap.uid("STORE", "2", "+FLAGS", "(\\Seen \\Flagged $Important)")
    imap.uid("STORE", "4", "+FLAGS", "(\\Deleted)")
    imap.uid("STORE", "3", "+FLAGS", "(\\Deleted)")
    imap.uid("EXPUNGE", "3")  # 4 stays: \Deleted is a flag, not a deletion
    result = sync_account(ready_app, account.id)
    assert result.status == "ok"
    by_uid = {r["uid"]: r for r in _stored(ready_app, account.identity_id)}
    assert (by_uid[2]["is_seen"], by_uid[2]["is_flagged"], by_uid[2]["read"]) == (1, 1, 1)
    assert json.loads(by_uid[2]["keywords_json"]) == ["$IMPORTANT"]
    assert by_uid[3]["remote_expunge_observed_at"] is not None
    assert by_uid[4]["remote_expunge_observed_at"] is None
    assert all(by_uid[u]["remote_expunge_observed_at"] is None for u in (1, 2, 5))
    # Unseen again on the server: the local read state follows.
    imap.uid("STORE", "2", "-FLAGS", "(\\Seen)")
    sync_account(ready_app, account.id)
    assert {r["uid"]: r["read"] for r in _stored(ready_app, account.identity_id)}[2] == 0


def test_an_account_set_to_erase_removes_the_local_copy(ready_app: Any, dovecot: Any) -> None:
    server = dovecot()
    for n in range(3):
        server.deliver(USER, make_message(subject=f"Erase {n}"))
    account = _account(ready_app, server, remote_delete="erase")
    sync_account(ready_app, account.id)
    imap = server.client()
    imap.select("INBOX")
    imap.uid("STORE", "1", "+FLAGS", "(\\Deleted)")
    imap.expunge()
    sync_account(ready_app, account.id)
    assert [r["uid"] for r in _stored(ready_app, account.identity_id)] == [2, 3]
    with ready_app.db.read() as tx:
        count = tx.fetchval(
            "SELECT count(*) FROM messages WHERE identity_id = %s", (account.identity_id,)
        )
        threads = tx.fetchval(
            "SELECT sum(message_count) FROM threads WHERE identity_id = %s",
            (account.identity_id,),
        )
    assert count == 2 and threads == 2


def test_a_uidvalidity_reset_resynchronises_without_duplicates(
    ready_app: Any, dovecot: Any
) -> None:
    server = dovecot()
    for n in range(6):
        server.deliver(USER, make_message(subject=f"Keep {n}"))
    account = _account(ready_app, server)
    sync_account(ready_app, account.id)
    before = {r["rfc_message_id"]: r["rowid"] for r in _stored(ready_app, account.identity_id)}
    old_validity = _stored(ready_app, account.identity_id)[0]["uidvalidity"]
    # The server gives the folder a new UIDVALIDITY (as after a restore).
    server.set_uidvalidity(USER, "INBOX", old_validity + 1000)
    result = sync_account(ready_app, account.id)
    inbox = next(f for f in result.folders if f.path == "INBOX")
    assert result.status == "ok" and inbox.reset
    after = _stored(ready_app, account.identity_id)
    assert len(after) == 6
    assert {r["rfc_message_id"]: r["rowid"] for r in after} == before  # re-bound, not copied
    assert {r["uidvalidity"] for r in after} != {old_validity}
    assert result.stored == 0 and inbox.rebound == 6


def test_an_oversized_message_is_stored_from_its_headers(ready_app: Any, dovecot: Any) -> None:
    server = dovecot()
    server.deliver(USER, make_message(subject="Small"))
    server.deliver(USER, make_message(subject="Huge", body="x" * 20_000))
    ready_app.settings = dataclasses.replace(ready_app.settings, imap_max_message_bytes=4096)
    account = _account(ready_app, server)
    sync_account(ready_app, account.id)
    by_uid = {r["uid"]: r for r in _stored(ready_app, account.identity_id)}
    assert by_uid[1]["content_availability"] == "stored"
    assert by_uid[2]["content_availability"] == "exceeded_size_limit"
    with ready_app.db.read() as tx:
        subject = tx.fetchval(
            "SELECT subject FROM messages WHERE rowid = %s", (by_uid[2]["rowid"],)
        )
        size = tx.fetchval("SELECT raw_size FROM messages WHERE rowid = %s", (by_uid[2]["rowid"],))
    assert subject == "Huge" and size < 4096


def test_connection_problems_are_named_and_change_the_status(ready_app: Any, dovecot: Any) -> None:
    server = dovecot()
    with pytest.raises(accounts.ImapConnectionFailed) as refused:
        _account(ready_app, server, password="wrong")
    assert refused.value.code == "imap_auth_failed"
    with pytest.raises(accounts.ImapConnectionFailed) as missing:
        _account(ready_app, server, username="mirror2", folders=("Nope",))
    assert missing.value.code == "imap_folder_missing"
    with pytest.raises(InvalidInput) as plain:
        identity = create_identity(ready_app, "remote")
        accounts.create_account(
            ready_app,
            identity.identity.id,
            accounts.NewAccount(
                host="imap.example.com", tls_mode="none", username=USER, password=PASSWORD
            ),
        )
    assert plain.value.code == "plaintext_refused"
    account = _account(ready_app, server, username="mirror3")
    assert sync_account(ready_app, account.id).status == "ok"
    server.set_password(USER, "rotated")
    assert sync_account(ready_app, account.id).status == "auth_failed"
    with ready_app.db.read() as tx:
        current = rows.get_account(tx, account.id)
        events = [
            json.loads(r["payload_json"])["data"]
            for r in tx.fetchall(
                "SELECT payload_json FROM events WHERE type = 'imap_account.status_changed'"
                " AND identity_id = %s ORDER BY occurred_at, id",
                (account.identity_id,),
            )
        ]
    assert current is not None and current.status == "auth_failed"
    assert current.next_sync_at > current.updated_at - 1
    assert [(e["previous_status"], e["status"]) for e in events] == [
        ("pending", "ok"),
        ("ok", "auth_failed"),
    ]
    # The credential is sealed: the password is nowhere in the row.
    assert PASSWORD not in json.dumps(dataclasses.asdict(current))


def _sync_process(app: Any, account_id: str, log: Path) -> subprocess.Popen[bytes]:
    settings = app.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        POSTROOM_IMAP_BATCH_SIZE="10",
        POSTROOM_LOG_LEVEL="warning",
    )
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "postroom", "imap", "sync", account_id, "--wait"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_for_rows(app: Any, identity_id: str, at_least: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = len(_stored(app, identity_id))
        if count >= at_least:
            return count
        time.sleep(0.02)
    return len(_stored(app, identity_id))


def test_a_sync_killed_mid_folder_resumes_where_it_stopped(
    ready_app: Any, dovecot: Any, tmp_path: Path
) -> None:
    server = dovecot()
    sample = lore(200)
    for raw in sample:
        server.deliver(USER, raw)
    account = _account(ready_app, server)
    proc = _sync_process(ready_app, account.id, tmp_path / "sync.log")
    try:
        seen = _wait_for_rows(ready_app, account.identity_id, 20, timeout=60)
        assert 0 < seen < 200, (seen, (tmp_path / "sync.log").read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    partial = _stored(ready_app, account.identity_id)
    assert len(partial) % 10 == 0  # whole batches only: each committed with its checkpoint
    with ready_app.db.read() as tx:
        folder = next(f for f in rows.folders(tx, account.id) if f.path == "INBOX")
    assert folder.last_uid == max(r["uid"] for r in partial)
    assert sync_account(ready_app, account.id).status == "ok"
    final = _stored(ready_app, account.identity_id)
    assert sorted(r["uid"] for r in final) == list(range(1, 201))
    assert len({r["rfc_message_id"] for r in final}) == len({m for m in _ids(sample)})


def _ids(sample: list[bytes]) -> Iterator[str]:
    from postroom.mail.parse import parse_message

    for raw in sample:
        yield parse_message(raw).rfc_message_id


def test_a_server_at_its_connection_limit_throttles_the_account_until_it_frees_up(
    ready_app: Any, dovecot: Any
) -> None:
    server = dovecot(max_connections=1)  # Dovecot answers more with NO [LIMIT]
    account = _account(ready_app, server, username="limited")
    assert sync_account(ready_app, account.id).status == "ok"
    held = server.client()  # the user's one connection, taken by another mail client
    with pytest.raises(accounts.ImapConnectionFailed) as refused:
        _account(ready_app, server, username="limited2")
    assert refused.value.code == "imap_throttled"  # not imap_auth_failed: the password is fine
    before = ready_app.clock.now_ms()
    assert sync_account(ready_app, account.id).status == "throttled"
    with ready_app.db.read() as tx:
        current = rows.get_account(tx, account.id)
    assert current is not None and current.status == "throttled"
    assert current.status_reason == "throttled" and current.consecutive_failures == 1
    assert current.next_sync_at >= before + current.sync_interval_seconds * 1000  # backs off
    held.logout()
    deadline = time.monotonic() + 10  # Dovecot counts the connection gone once it has exited
    while (status := sync_account(ready_app, account.id).status) != "ok":
        assert status == "throttled" and time.monotonic() < deadline
        time.sleep(0.1)
    with ready_app.db.read() as tx:
        changes = [
            (data["previous_status"], data["status"])
            for data in (
                json.loads(r["payload_json"])["data"]
                for r in tx.fetchall(
                    "SELECT payload_json FROM events WHERE type = 'imap_account.status_changed'"
                    " AND identity_id = %s ORDER BY occurred_at, id",
                    (account.identity_id,),
                )
            )
        ]
    assert changes == [("pending", "ok"), ("ok", "throttled"), ("throttled", "ok")]

"""From SMTP to a stored, threaded, indexed, announced message — on both engines."""

from __future__ import annotations

import json
import smtplib
from collections.abc import Iterator
from typing import Any

import pytest

from postroom.inbound.ingest import ingest_staged
from postroom.inbound.smtp import SMTPServer
from postroom.jobs.builtin import default_registry
from postroom.jobs.worker import Worker
from postroom.store import events as event_rows
from postroom.store import inbound as inbound_rows
from postroom.store import search_index
from postroom.tenancy.service import create_identity

FIRST = (
    b"From: Alice Example <alice@mail.example.co.uk>\r\n"
    b"To: Bob <bob@localhost>\r\n"
    b"Subject: Order #A-12345 confirmed\r\n"
    b"Message-ID: <first@example.co.uk>\r\n"
    b"Date: Tue, 03 Nov 2026 10:00:00 +0000\r\n"
    b"\r\n"
    b"Hi Bob,\r\n\r\nYour verification code is 481516.\r\nThe zeppelin departs at noon.\r\n"
)
REPLY = (
    b"From: Bob <bob@localhost>\r\n"
    b"To: Alice Example <alice@mail.example.co.uk>\r\n"
    b"Subject: Re: Order #A-12345 confirmed\r\n"
    b"Message-ID: <second@localhost>\r\n"
    b"In-Reply-To: <first@example.co.uk>\r\n"
    b"References: <first@example.co.uk>\r\n"
    b"Date: Tue, 03 Nov 2026 11:00:00 +0000\r\n"
    b"\r\n"
    b"Thanks!\r\n\r\nOn Tue, Alice wrote:\r\n> The zeppelin departs at noon.\r\n"
)


@pytest.fixture
def app(ready_app: Any) -> Any:
    create_identity(ready_app, "bob")
    create_identity(ready_app, "carol")
    return ready_app


@pytest.fixture
def server(app: Any) -> Iterator[SMTPServer]:
    running = SMTPServer(app, host="127.0.0.1", port=0)
    running.start()
    yield running
    running.stop()


def _drain(app: Any) -> int:
    worker = Worker(app, default_registry(app.settings), job_types=["inbound.ingest"])
    ran = 0
    while worker.run_once():
        ran += 1
    return ran


def _message(app: Any, message_id: str) -> dict[str, Any]:
    with app.db.read() as tx:
        row = tx.fetchone("SELECT * FROM messages WHERE id = %s", (message_id,))
    assert row is not None
    return row


def _send(server: SMTPServer, raw: bytes, to: list[str]) -> list[str]:
    with smtplib.SMTP("127.0.0.1", server.port) as client:
        client.ehlo("mx.example.co.uk")
        code, reply = client.docmd("MAIL", "FROM:<alice@mail.example.co.uk>")
        assert code == 250
        for rcpt in to:
            assert client.docmd("RCPT", f"TO:<{rcpt}>")[0] == 250
        code, reply = client.data(raw)
        assert code == 250, reply
    return reply.decode().split("queued as ")[1].split()


def test_smtp_message_is_stored_threaded_indexed_and_announced(
    app: Any, server: SMTPServer
) -> None:
    [first_id] = _send(server, FIRST, ["bob+orders@localhost"])
    [reply_id] = _send(server, REPLY, ["bob@localhost"])
    assert _drain(app) == 2
    with app.db.read() as tx:
        assert inbound_rows.count_staged(tx) == 0

    first = _message(app, first_id)
    reply = _message(app, reply_id)
    assert first["rfc_message_id"] == "first@example.co.uk"
    assert first["from_address"] == "alice@mail.example.co.uk"
    assert first["from_name"] == "Alice Example"
    assert first["sender_domain"] == "example.co.uk"
    assert first["subject"] == "Order #A-12345 confirmed"
    assert first["direction"] == "inbound" and first["status"] == "received"
    assert first["source"] == "smtp"
    assert json.loads(first["envelope_json"])["helo"] == "mx.example.co.uk"
    assert first["delivered_to"] == "bob+orders@localhost"
    assert first["is_bcc"] == 0
    assert "zeppelin" in first["text"]
    # Threading: the reply joins the first message's thread, with it as parent.
    assert reply["thread_id"] == first["thread_id"]
    assert reply["parent_rowid"] == first["rowid"]
    assert "zeppelin" not in (reply["extracted_text"] or "")
    with app.db.read() as tx:
        thread = tx.fetchone("SELECT * FROM threads WHERE id = %s", (first["thread_id"],))
        labels = [
            r["label"]
            for r in tx.fetchall(
                "SELECT label FROM labels WHERE message_rowid = %s", (first["rowid"],)
            )
        ]
        codes = tx.fetchall(
            "SELECT kind, value, sender_domain FROM verifications WHERE message_rowid = %s",
            (first["rowid"],),
        )
        contact = tx.fetchone(
            "SELECT * FROM contacts WHERE identity_id = %s AND address = %s",
            (first["identity_id"], "alice@mail.example.co.uk"),
        )
        refs = tx.fetchall(
            "SELECT kind, value FROM refs WHERE message_rowid = %s", (first["rowid"],)
        )
        events = event_rows.list_events(
            tx, identity_id=first["identity_id"], event_type="message.received"
        )
        found = search_index.match_words(tx, first["identity_id"], "zeppelin")
    assert thread is not None and thread["message_count"] == 2
    assert labels == ["orders"]
    assert codes == [{"kind": "code", "value": "481516", "sender_domain": "example.co.uk"}]
    assert contact is not None and contact["inbound_count"] == 1 and contact["name"]
    assert any(r["kind"] == "order" for r in refs)
    assert [e.type for e in events] == ["message.received", "message.received"]
    # Sequence 1 is the identity's own identity.created.
    assert [e.identity_seq for e in events] == [2, 3]
    assert events[0].payload["data"]["message_id"] == first_id
    assert "zeppelin" not in json.dumps(events[0].payload)  # events carry no bodies
    # Findable by a word of its body, on both engines.
    assert set(found) == {first_id, reply_id}


def test_ingest_is_exactly_once_even_if_the_job_runs_twice(app: Any, server: SMTPServer) -> None:
    [message_id] = _send(server, FIRST, ["bob@localhost"])
    assert ingest_staged(app, message_id) is not None
    assert ingest_staged(app, message_id) is None
    with app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM messages") == 1
        assert tx.fetchval("SELECT count(*) FROM events WHERE type = 'message.received'") == 1


def test_a_bcc_copy_is_flagged(app: Any, server: SMTPServer) -> None:
    [bob_copy, carol_copy] = _send(server, FIRST, ["bob@localhost", "carol@localhost"])
    _drain(app)
    assert _message(app, bob_copy)["is_bcc"] == 0
    carol = _message(app, carol_copy)
    assert carol["is_bcc"] == 1
    assert "bcc" in json.loads(carol["flags_json"])
    # One primary copy per tenant.
    assert _message(app, bob_copy)["is_primary_recipient"] + carol["is_primary_recipient"] == 1


def test_search_is_confined_to_the_identity(app: Any, server: SMTPServer) -> None:
    [bob_copy, carol_copy] = _send(server, FIRST, ["bob@localhost", "carol@localhost"])
    _drain(app)
    bob = _message(app, bob_copy)["identity_id"]
    with app.db.read() as tx:
        assert search_index.match_words(tx, bob, "zeppelin") == [bob_copy]
        assert search_index.match_words(tx, bob, "nonexistentword") == []

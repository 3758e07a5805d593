"""Delivery reports that come back are matched to the send and applied (both engines).

The report travels the real inbound path (testing.mail.deliver: routing, staging,
ingest); the ingest step enqueues ``outbound.bounce`` and the test runs that job.
"""

from __future__ import annotations

import json
from typing import Any

from postroom.outbound import compose, engine, policy
from postroom.outbound import service as outbox
from postroom.outbound.bounces import BOUNCE_JOB, apply_report
from postroom.store import outbox as rows
from postroom.tenancy.service import create_identity, create_tenant
from postroom.testing.mail import deliver


def _dsn(to: str, recipient: str, message_id: str, status: str = "5.1.1") -> bytes:
    code = "550" if status.startswith("5") else "450"
    action = "failed" if status.startswith("5") else "delayed"
    return (
        "From: MAILER-DAEMON@mx.example.org\r\n"
        f"To: {to}\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\n"
        "Message-ID: <dsn-1@mx.example.org>\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\r\n\r\n'
        "--B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"
        "--B\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.example.org\r\n\r\n"
        f"Final-Recipient: rfc822; {recipient}\r\nAction: {action}\r\nStatus: {status}\r\n"
        f"Diagnostic-Code: smtp; {code} {status} User unknown\r\n"
        "--B\r\nContent-Type: text/rfc822-headers\r\n\r\n"
        f"Message-ID: <{message_id}>\r\nTo: {recipient}\r\n"
        "--B--\r\n"
    ).encode()


def _sent(app: Any, identity_id: str, *to: str) -> Any:
    made = outbox.record_send(
        app,
        identity_id,
        outbox.SendInput(to=tuple(compose.Address(a) for a in to), subject="Hi", text="Hi"),
        outbox.Requester("api", None),
    )
    assert engine.attempt(app, made.id, "w") == "sent"  # the sink accepts everything
    with app.db.read() as tx:
        record = rows.get(tx, made.id)
    assert record is not None
    return record


def _delivery(app: Any, message_id: str, address: str) -> dict[str, Any]:
    with app.db.read() as tx:
        rowid = tx.fetchval("SELECT rowid FROM messages WHERE id = %s", (message_id,))
        found = {d["address"]: d for d in rows.deliveries(tx, rowid)}
    return found[address]


def test_a_dsn_to_the_verp_address_bounces_the_recipient_and_suppresses_it(
    ready_app: Any,
) -> None:
    me = create_identity(ready_app, "shop")
    record = _sent(ready_app, me.identity.id, "gone@example.org", "fine@example.org")
    assert "+bnc-" in record.mail_from
    (report,) = deliver(
        ready_app,
        _dsn(record.mail_from, "gone@example.org", record.rfc_message_id),
        record.mail_from,
    )
    with ready_app.db.read() as tx:
        job = tx.fetchone("SELECT payload_json FROM jobs WHERE job_type = %s", (BOUNCE_JOB,))
    assert job is not None and json.loads(job["payload_json"]) == {"message_id": report}
    assert apply_report(ready_app, report) == 1
    gone = _delivery(ready_app, record.message_id, "gone@example.org")
    assert (gone["status"], gone["bounce_type"], gone["enhanced_code"]) == (
        "bounced",
        "hard",
        "5.1.1",
    )
    assert _delivery(ready_app, record.message_id, "fine@example.org")["status"] == "delivered"
    found = policy.check_suppression(ready_app, record.tenant_id, "gone@example.org")
    assert found is not None and found.reason == "hard_bounce"
    with ready_app.db.read() as tx:
        events = [
            json.loads(r["payload_json"])["data"]
            for r in tx.fetchall("SELECT payload_json FROM events WHERE type = 'message.bounced'")
        ]
    assert [(e["recipient"], e["suppressed"]) for e in events] == [("gone@example.org", True)]
    assert apply_report(ready_app, report) == 0  # applied once


def test_a_report_matched_by_message_id_alone_is_applied(ready_app: Any) -> None:
    me = create_identity(ready_app, "news")
    record = _sent(ready_app, me.identity.id, "gone@example.org")
    (report,) = deliver(
        ready_app,
        _dsn(me.address.address, "gone@example.org", record.rfc_message_id),
        me.address.address,
    )
    assert apply_report(ready_app, report) == 1
    assert _delivery(ready_app, record.message_id, "gone@example.org")["status"] == "bounced"


def test_a_report_never_touches_another_tenants_send(ready_app: Any) -> None:
    victim = create_identity(ready_app, "victim")
    record = _sent(ready_app, victim.identity.id, "customer@example.org")
    other_tenant = create_tenant(ready_app, "mallory").id
    mallory = create_identity(ready_app, "mallory", tenant=other_tenant)
    forged = _dsn(mallory.address.address, "customer@example.org", record.rfc_message_id)
    (report,) = deliver(ready_app, forged, mallory.address.address)
    assert apply_report(ready_app, report) == 0
    assert _delivery(ready_app, record.message_id, "customer@example.org")["status"] == "delivered"
    assert policy.check_suppression(ready_app, record.tenant_id, "customer@example.org") is None


def test_a_delay_report_changes_no_status(ready_app: Any) -> None:
    me = create_identity(ready_app, "slowpoke")
    record = _sent(ready_app, me.identity.id, "slow@example.org")
    (report,) = deliver(
        ready_app,
        _dsn(record.mail_from, "slow@example.org", record.rfc_message_id, status="4.4.1"),
        record.mail_from,
    )
    apply_report(ready_app, report)
    delivery = _delivery(ready_app, record.message_id, "slow@example.org")
    assert (delivery["status"], delivery["enhanced_code"]) == ("delivered", "4.4.1")

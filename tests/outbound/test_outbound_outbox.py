"""The outbox end to end against a real SMTP peer on loopback, on both engines.

Each test records sends through the service, runs attempts through the engine (the job
handler's body) and reads back the record, the recipients, the sent copy's deliveries
and the events — and what the peer actually received.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from postroom.clock import ManualClock
from postroom.errors import Conflict, InvalidInput, LimitExceeded
from postroom.outbound import compose as c
from postroom.outbound import engine, policy, service
from postroom.store import outbox as rows
from postroom.tenancy.service import create_identity
from postroom.testing.mail import deliver, make_message


def _relay(app: Any, peer: Any, **extra: Any) -> None:
    app.settings = dataclasses.replace(
        app.settings,
        outbound_transport="smtp_relay",
        outbound_relay_host="127.0.0.1",
        outbound_relay_port=peer.port,
        outbound_relay_tls="none",
        outbound_timeout_seconds=5.0,
        **extra,
    )


def _send(app: Any, identity_id: str, *to: str, key: str | None = None, **fields: Any) -> Any:
    inp = service.SendInput(
        to=tuple(c.Address(a) for a in to),
        subject=fields.pop("subject", "Hello"),
        text=fields.pop("text", "Hi there"),
        **fields,
    )
    return service.record_send(app, identity_id, inp, service.Requester("api", key, "key_test"))


def _events(app: Any, event_type: str) -> list[dict[str, Any]]:
    with app.db.read() as tx:
        found = tx.fetchall("SELECT payload_json FROM events WHERE type = %s", (event_type,))
    return [json.loads(r["payload_json"])["data"] for r in found]


def _deliveries(app: Any, message_id: str) -> dict[str, dict[str, Any]]:
    with app.db.read() as tx:
        rowid = tx.fetchval("SELECT rowid FROM messages WHERE id = %s", (message_id,))
        return {d["address"]: d for d in rows.deliveries(tx, rowid)}


@pytest.fixture
def sender(ready_app: Any) -> str:
    return create_identity(ready_app, "sender").identity.id


def test_a_send_reaches_the_peer_once_and_every_recipient_is_settled(
    ready_app: Any, sender: str, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    _relay(ready_app, peer)
    made = _send(ready_app, sender, "ann@example.com", "bob@example.org")
    assert made.state == "queued"
    assert engine.attempt(ready_app, made.id, "w1") == "sent"
    got = peer.received()
    assert len(got) == 1
    assert sorted(got[0].rcpt_to) == ["ann@example.com", "bob@example.org"]
    with ready_app.db.read() as tx:
        record = rows.get(tx, made.id)
        stored = rows.mime(tx, made.id)
        message = tx.fetchone(
            "SELECT direction, status, thread_id, rfc_message_id FROM messages WHERE id = %s",
            (made.message_id,),
        )
    assert record is not None and record.stage == "sent" and record.lease_owner is None
    # The bytes stored once are the bytes transmitted, Message-ID and all.
    assert got[0].data is not None and got[0].data.replace(b"\r\n", b"\n") == stored.replace(
        b"\r\n", b"\n"
    )
    assert f"<{record.rfc_message_id}>".encode() in stored
    assert message["direction"] == "outbound" and message["status"] == "delivered"
    assert {d["status"] for d in _deliveries(ready_app, made.message_id).values()} == {"delivered"}
    assert [e["recipient_count"] for e in _events(ready_app, "message.sent")] == [2]
    assert len(_events(ready_app, "message.delivered")) == 2
    # A record that is sent is claimed by nothing again.
    assert engine.attempt(ready_app, made.id, "w2") is None
    assert len(peer.received()) == 1


def test_per_recipient_answers_accept_defer_and_refuse(
    ready_app: Any, sender: str, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    peer.on("later@example.com", rcpt="452 4.2.2 Mailbox full")
    peer.on("nobody@example.com", rcpt="550 5.1.1 No such user")
    _relay(ready_app, peer, outbound_retry_schedule=(0.0, 0.0))
    made = _send(ready_app, sender, "ok@example.com", "later@example.com", "nobody@example.com")
    assert engine.attempt(ready_app, made.id, "w1") == "recorded"
    entry = service.get_entry(ready_app, made.id)
    status = {r.address: (r.status, r.reply_code) for r in entry.recipients}
    assert status == {
        "ok@example.com": ("accepted", 250),
        "later@example.com": ("pending", 452),
        "nobody@example.com": ("refused", 550),
    }
    assert entry.state == "deferred"
    # The hard bounce suppressed the address (keyed hash, masked hint).
    found = policy.check_suppression(ready_app, entry.tenant_id, "nobody@example.com")
    assert (
        found is not None
        and found.reason == "hard_bounce"
        and found.address_hint == "n***@example.com"
    )
    bounced = _events(ready_app, "message.bounced")
    assert [(b["recipient"], b["bounce"], b["suppressed"]) for b in bounced] == [
        ("nobody@example.com", "hard", True)
    ]
    assert [d["recipient"] for d in _events(ready_app, "message.deferred")] == ["later@example.com"]
    # The retry offers only the pending recipient: the accepted one never again.
    peer.on("later@example.com")
    assert engine.attempt(ready_app, made.id, "w2") == "sent"
    offered = [t.rcpt_to for t in peer.received()]
    assert offered == [["ok@example.com"], ["later@example.com"]]
    assert _deliveries(ready_app, made.message_id)["later@example.com"]["status"] == "delivered"


def test_retries_spent_bounce_soft(ready_app: Any, sender: str, smtp_peer: Any) -> None:
    peer = smtp_peer()
    peer.on("*", rcpt="451 4.3.0 Try later")
    _relay(ready_app, peer, outbound_retry_schedule=(0.0,))
    made = _send(ready_app, sender, "slow@example.com")
    assert engine.attempt(ready_app, made.id, "w1") == "recorded"
    assert engine.attempt(ready_app, made.id, "w1") == "refused"
    entry = service.get_entry(ready_app, made.id)
    assert entry.recipients[0].status == "refused"
    delivery = _deliveries(ready_app, made.message_id)["slow@example.com"]
    assert (delivery["status"], delivery["bounce_type"]) == ("bounced", "soft")
    assert policy.check_suppression(ready_app, entry.tenant_id, "slow@example.com") is None
    assert peer.received() == []


def test_a_connection_lost_after_data_is_uncertain_and_never_retried(
    ready_app: Any, sender: str, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    peer.on("*", drop="data")
    _relay(ready_app, peer)
    made = _send(ready_app, sender, "ann@example.com")
    assert engine.attempt(ready_app, made.id, "w1") == "transmission_begun"
    entry = service.get_entry(ready_app, made.id)
    assert (entry.stage, entry.state, entry.last_failure_code) == (
        "transmission_begun",
        "uncertain",
        "28011",
    )
    assert len(_events(ready_app, "message.send_uncertain")) == 1
    assert _deliveries(ready_app, made.message_id)["ann@example.com"]["status"] == "uncertain"
    # Nothing automatic moves it: no claim, and the sweep leaves it alone.
    assert engine.attempt(ready_app, made.id, "w2") is None
    engine.sweep(ready_app)
    assert service.get_entry(ready_app, made.id).state == "uncertain"
    assert len(peer.received()) == 1
    with pytest.raises(Conflict):
        service.cancel(ready_app, made.id)
    resolved = service.resolve(ready_app, made.id, "delivered")
    assert (resolved.stage, resolved.resolution) == ("sent", "delivered")
    with pytest.raises(Conflict):
        service.resolve(ready_app, made.id, "not_delivered")


def test_a_connection_lost_before_data_rewinds_and_sends_later(
    ready_app: Any, sender: str, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    peer.on("*", drop="after_rcpt")
    _relay(ready_app, peer, outbound_retry_schedule=(0.0,))
    made = _send(ready_app, sender, "ann@example.com")
    assert engine.attempt(ready_app, made.id, "w1") == "recorded"
    entry = service.get_entry(ready_app, made.id)
    assert (entry.stage, entry.last_failure_code) == ("recorded", "deferred")
    assert peer.received() == []
    peer.on("*")
    assert engine.attempt(ready_app, made.id, "w1") == "sent"
    assert len(peer.received()) == 1


def test_a_stranded_transmission_is_stamped_uncertain_by_the_sweep(
    ready_app: Any, sender: str
) -> None:
    clock = ManualClock(ready_app.clock.now_ms())
    ready_app.clock = clock
    made = _send(ready_app, sender, "ann@example.com")
    lease_ms = ready_app.settings.outbound_lease_seconds * 1000
    with ready_app.db.write() as tx:  # an attempt that died right after writing the stage
        assert rows.claim(tx, made.id, "dead-worker", clock.now_ms(), lease_ms) is not None
        assert rows.begin_transmission(tx, made.id, "dead-worker", clock.now_ms())
    assert engine.sweep(ready_app).uncertain == 0  # its lease is still live
    clock.advance(lease_ms + 1)
    assert engine.sweep(ready_app).uncertain == 1
    entry = service.get_entry(ready_app, made.id)
    assert (entry.state, entry.last_failure_code) == ("uncertain", "28011")
    assert engine.sweep(ready_app).uncertain == 0  # stamped once
    assert len(_events(ready_app, "message.send_uncertain")) == 1


def test_the_same_authored_request_twice_is_one_send(ready_app: Any, sender: str) -> None:
    first = _send(ready_app, sender, "ann@example.com", key="key_1:abc", subject="One")
    second = _send(ready_app, sender, "ann@example.com", key="key_1:abc", subject="Two")
    assert second.id == first.id and second.message_id == first.message_id
    with ready_app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM outgoing_emails") == 1
        assert tx.fetchval("SELECT count(*) FROM messages WHERE direction = 'outbound'") == 1
        assert b"Subject: One" in rows.mime(tx, first.id)
    other = _send(ready_app, sender, "ann@example.com", key="key_1:def")
    assert other.id != first.id


def test_a_scheduled_send_can_be_cancelled_until_it_goes(ready_app: Any, sender: str) -> None:
    now = ready_app.clock.now_ms()
    made = _send(ready_app, sender, "ann@example.com", send_at=now + 3_600_000)
    assert made.state == "scheduled" and made.due_at == now + 3_600_000
    assert engine.attempt(ready_app, made.id, "w1") is None  # not due
    cancelled = service.cancel(ready_app, made.id)
    assert cancelled.stage == "cancelled"
    with pytest.raises(Conflict):
        service.cancel(ready_app, made.id)
    with ready_app.db.read() as tx:
        status = tx.fetchval("SELECT status FROM messages WHERE id = %s", (made.message_id,))
    assert status == "canceled"


def test_a_scheduled_send_across_a_dst_change_goes_at_the_local_time(
    ready_app: Any, sender: str, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    _relay(ready_app, peer)
    # London moves to BST at 01:00 UTC on 2027-03-28; 09:00 local on the 29th is 08:00 UTC.
    clock = ManualClock(1_806_000_000_000)  # 2027-03-26, GMT
    ready_app.clock = clock
    due = service.resolve_send_at("2027-03-29T09:00:00", "Europe/London")
    assert due == 1_806_307_200_000  # 2027-03-29T08:00:00Z
    made = _send(ready_app, sender, "ann@example.com", send_at=due, send_at_zone="Europe/London")
    assert (made.due_at, made.due_zone_id) == (due, "Europe/London")
    clock.set(due - 1)
    assert engine.attempt(ready_app, made.id, "w1") is None
    assert peer.received() == []
    clock.set(due)
    assert engine.attempt(ready_app, made.id, "w1") == "sent"
    assert len(peer.received()) == 1


def test_suppressed_recipients_are_never_offered(
    ready_app: Any, sender: str, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    _relay(ready_app, peer)
    tenant_id = service.get_entry(
        ready_app, _send(ready_app, sender, "warmup@example.com").id
    ).tenant_id
    policy.add_suppression(ready_app, tenant_id, "Blocked@Example.com", reason="unsubscribe")
    made = _send(ready_app, sender, "blocked@example.com", "fine@example.com")
    assert {r.address: r.status for r in made.recipients} == {
        "blocked@example.com": "suppressed",
        "fine@example.com": "pending",
    }
    assert engine.attempt(ready_app, made.id, "w1") == "sent"
    assert [t.rcpt_to for t in peer.received()] == [["fine@example.com"]]
    only_blocked = _send(ready_app, sender, "blocked@example.com")
    assert only_blocked.stage == "refused" and only_blocked.last_failure_code == "all_suppressed"


def test_daily_caps_refuse_the_send_over_the_cap(ready_app: Any, sender: str) -> None:
    ready_app.settings = dataclasses.replace(ready_app.settings, outbound_daily_cap_identity=2)
    _send(ready_app, sender, "a@example.com")
    _send(ready_app, sender, "b@example.com")
    with pytest.raises(LimitExceeded) as refused:
        _send(ready_app, sender, "c@example.com")
    assert refused.value.code == "send_limit_exceeded"
    with ready_app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM outgoing_emails") == 2
        tenant_timezone = tx.fetchval(
            "SELECT t.timezone FROM tenants t JOIN identities i ON i.tenant_id = t.id"
            " WHERE i.id = %s",
            (sender,),
        )
        tenant_id = tx.fetchval("SELECT tenant_id FROM identities WHERE id = %s", (sender,))
    used = policy.usage(ready_app, tenant_id, tenant_timezone, sender)
    assert (used.identity_sent, used.identity_cap) == (2, 2)


def test_a_local_recipient_is_delivered_into_its_inbox(ready_app: Any, sender: str) -> None:
    bob = create_identity(ready_app, "bob")
    made = _send(ready_app, sender, bob.address.address, subject="Local hello")
    assert engine.attempt(ready_app, made.id, "w1") == "sent"
    from postroom.inbound.ingest import ingest_staged

    with ready_app.db.read() as tx:
        staged = tx.fetchall(
            "SELECT id FROM inbound_queue WHERE identity_id = %s", (bob.identity.id,)
        )
    for row in staged:
        ingest_staged(ready_app, row["id"])
    with ready_app.db.read() as tx:
        got = tx.fetchall(
            "SELECT subject, direction FROM messages WHERE identity_id = %s", (bob.identity.id,)
        )
    assert got == [{"subject": "Local hello", "direction": "inbound"}]


def test_a_reply_joins_the_thread_with_in_reply_to(ready_app: Any, sender: str) -> None:
    with ready_app.db.read() as tx:
        address = tx.fetchval(
            "SELECT address FROM addresses WHERE identity_id = %s AND role = 'primary'", (sender,)
        )
    raw = make_message(
        subject="Question", sender="Ann <ann@example.com>", to=address, message_id="q1@example.com"
    )
    [inbound] = deliver(ready_app, raw, address)
    made = service.record_send(
        ready_app,
        sender,
        service.SendInput(text="Answer"),
        service.Requester("api", None),
        operation="reply",
        source_message_id=inbound,
    )
    assert [r.address for r in made.recipients] == ["ann@example.com"]
    with ready_app.db.read() as tx:
        rows_ = tx.fetchall(
            "SELECT id, thread_id, in_reply_to, subject FROM messages WHERE identity_id = %s",
            (sender,),
        )
    by_id = {r["id"]: r for r in rows_}
    assert by_id[made.message_id]["thread_id"] == by_id[inbound]["thread_id"]
    assert by_id[made.message_id]["in_reply_to"] == "q1@example.com"
    assert by_id[made.message_id]["subject"] == "Re: Question"


def test_header_injection_is_refused_naming_the_field(ready_app: Any, sender: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        _send(ready_app, sender, "ann@example.com", subject="Hi\r\nBcc: evil@example.com")
    assert refused.value.field == "subject"
    with ready_app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM outgoing_emails") == 0

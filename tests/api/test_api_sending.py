"""Sending over HTTP: send, idempotency, bad input, caps, cancel, drafts (both engines)."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from postroom.outbound import engine


def test_send_answers_202_and_the_same_idempotency_key_is_one_send(api: Any) -> None:
    inbox, _address = api.identity("apisender")
    headers = {**api.headers(), "Idempotency-Key": "order-1"}
    body = {
        "to": [{"address": "ann@example.com", "name": "Ann"}],
        "bcc": [{"address": "audit@example.com"}],
        "subject": "Your order",
        "text": "Ships today",
        "attachments": [{"filename": "note.txt", "content": base64.b64encode(b"hello").decode()}],
    }
    first = api.client.post(f"/v1/identities/{inbox}/messages", json=body, headers=headers)
    assert first.status_code == 202, first.text
    entry = first.json()
    assert entry["state"] == "queued" and entry["id"].startswith("out_")
    assert [(r["address"], r["role"]) for r in entry["recipients"]] == [
        ("ann@example.com", "to"),
        ("audit@example.com", "bcc"),
    ]
    again = api.client.post(f"/v1/identities/{inbox}/messages", json=body, headers=headers)
    assert again.status_code == 202 and again.json()["id"] == entry["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    assert engine.attempt(api.app, entry["id"], "w") == "sent"
    shown = api.client.get(f"/v1/outbox/{entry['id']}", headers=api.headers()).json()
    assert shown["state"] == "sent" and {r["status"] for r in shown["recipients"]} == {"accepted"}
    message = api.client.get(f"/v1/messages/{entry['message_id']}", headers=api.headers())
    assert message.status_code == 200
    listed = api.client.get(f"/v1/outbox?identity_id={inbox}", headers=api.headers()).json()
    assert [e["id"] for e in listed["data"]] == [entry["id"]]


def test_bad_input_is_a_problem_naming_the_field(api: Any) -> None:
    inbox, _address = api.identity("apibad")
    cases = [
        (
            {"to": [{"address": "a@example.com"}], "text": "x", "subject": "x\r\nBcc: e@x.example"},
            "subject",
        ),
        ({"to": [{"address": "not an address"}], "text": "x"}, "to.0.address"),
        ({"text": "nobody to send to"}, "to"),
        (
            {
                "to": [{"address": "a@example.com"}],
                "text": "x",
                "attachments": [{"filename": "a.bin", "content": "***"}],
            },
            "attachments.0.content",
        ),
        (
            {"to": [{"address": "a@example.com"}], "text": "x", "send_at": "2027-01-01T09:00"},
            "send_at",
        ),
    ]
    for body, field in cases:
        answer = api.client.post(
            f"/v1/identities/{inbox}/messages", json=body, headers=api.headers()
        )
        assert answer.status_code == 422, (body, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        fields = [e["field"] for e in answer.json().get("errors", [])]
        assert any(f == field or f.startswith(field) for f in fields), (body, answer.text)
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM outgoing_emails") == 0


def test_the_daily_cap_answers_429(api: Any) -> None:
    api.app.settings = dataclasses.replace(api.app.settings, outbound_daily_cap_identity=1)
    inbox, _address = api.identity("apicapped")
    body = {"to": [{"address": "a@example.com"}], "text": "x"}
    url = f"/v1/identities/{inbox}/messages"
    assert api.client.post(url, json=body, headers=api.headers()).status_code == 202
    refused = api.client.post(url, json=body, headers=api.headers())
    assert refused.status_code == 429 and refused.json()["code"] == "send_limit_exceeded"
    usage = api.client.get(f"/v1/identities/{inbox}/sending", headers=api.headers()).json()
    assert (usage["identity_sent"], usage["identity_cap"]) == (1, 1)


def test_the_tenant_policy_cap_overrides_the_setting(api: Any) -> None:
    inbox, _address = api.identity("apipolicy")
    with api.app.db.read() as tx:
        tenant = tx.fetchval("SELECT tenant_id FROM identities WHERE id = %s", (inbox,))
    changed = api.client.patch(
        f"/v1/tenants/{tenant}/policy",
        json={"daily_send_cap_per_identity": 1},
        headers=api.headers(),
    )
    assert changed.status_code == 200 and changed.json()["daily_send_cap_per_identity"] == 1
    body = {"to": [{"address": "a@example.com"}], "text": "x"}
    url = f"/v1/identities/{inbox}/messages"
    assert api.client.post(url, json=body, headers=api.headers()).status_code == 202
    refused = api.client.post(url, json=body, headers=api.headers())
    assert refused.status_code == 429 and refused.json()["code"] == "send_limit_exceeded"


def test_a_scheduled_send_is_cancelled_once(api: Any) -> None:
    inbox, _address = api.identity("apilater")
    body = {
        "to": [{"address": "a@example.com"}],
        "text": "x",
        "send_at": "2027-06-01T09:00:00",
        "send_at_zone": "Europe/Paris",
    }
    made = api.client.post(f"/v1/identities/{inbox}/messages", json=body, headers=api.headers())
    assert made.status_code == 202, made.text
    entry = made.json()
    assert entry["state"] == "scheduled" and entry["due_at"] == "2027-06-01T07:00:00.000Z"
    cancelled = api.client.delete(f"/v1/outbox/{entry['id']}", headers=api.headers())
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    twice = api.client.delete(f"/v1/outbox/{entry['id']}", headers=api.headers())
    assert twice.status_code == 409 and twice.json()["code"] == "not_cancellable"


def test_a_draft_is_edited_then_sent_once(api: Any) -> None:
    inbox, _address = api.identity("apidraft")
    made = api.client.post(
        f"/v1/identities/{inbox}/drafts", json={"subject": "Plan"}, headers=api.headers()
    )
    assert made.status_code == 201, made.text
    draft = made.json()
    changed = api.client.patch(
        f"/v1/drafts/{draft['id']}",
        json={"to": [{"address": "team@example.com"}], "text": "The plan"},
        headers=api.headers(),
    ).json()
    assert changed["revision"] == 2 and changed["content"]["subject"] == "Plan"
    sent = api.client.post(f"/v1/drafts/{draft['id']}/send", headers=api.headers())
    assert sent.status_code == 202, sent.text
    again = api.client.post(f"/v1/drafts/{draft['id']}/send", headers=api.headers())
    assert again.json()["id"] == sent.json()["id"]
    late = api.client.patch(
        f"/v1/drafts/{draft['id']}", json={"text": "too late"}, headers=api.headers()
    )
    assert late.status_code == 409 and late.json()["code"] == "draft_sent"
    listed = api.client.get(f"/v1/identities/{inbox}/drafts", headers=api.headers()).json()
    assert listed["data"] == []

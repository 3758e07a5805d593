"""The webhooks routes: endpoints, secrets shown once and sealed at rest, scopes and
reach, the test action, the delivery log and replay (both engines)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "webhooks"))
from webhook_receiver import Receiver  # noqa: E402

from postroom.jobs.handlers import HandlerRegistry  # noqa: E402
from postroom.jobs.worker import Worker  # noqa: E402
from postroom.webhooks.delivery import deliver_handler  # noqa: E402
from postroom.webhooks.dispatch import dispatch_pending  # noqa: E402
from postroom.webhooks.endpoints import DELIVER_JOB  # noqa: E402

HOOK = "https://hooks.example.com/postroom"


@pytest.fixture
def settings(settings: Any) -> Any:
    # Loopback for the receiver of the test and replay cases; http stays refused.
    return dataclasses.replace(
        settings, webhooks_allow_loopback=True, webhooks_retry_schedule=(0.01,)
    )


def _run_deliveries(app: Any) -> None:
    registry = HandlerRegistry()
    registry.register(DELIVER_JOB, deliver_handler())
    worker = Worker(app, registry)
    dispatch_pending(app)
    while worker.run_once():
        pass


def _tls_receiver() -> tuple[Receiver, Any]:
    import ssl

    import trustme

    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    return Receiver(tls=server), ca


def test_create_shows_the_secret_once_and_seals_it(api: Any) -> None:
    tenant = api.tenant()
    headers = {**api.headers("tenant", tenant_id=tenant), "Idempotency-Key": "hook-1"}
    body = {"url": HOOK, "event_types": ["message.*", "identity.created"], "description": "x"}
    created = api.client.post("/v1/webhooks", json=body, headers=headers)
    assert created.status_code == 201, created.text
    out = created.json()
    assert out["secret"].startswith("whsec_") and len(out["secret"]) == 6 + 44
    assert out["scope"] == "tenant" and out["tenant_id"] == tenant
    assert out["event_types"] == ["message.*", "identity.created"] and out["enabled"]
    replayed = api.client.post("/v1/webhooks", json=body, headers=headers)
    assert replayed.status_code == 201
    assert "secret" not in replayed.json() and replayed.json()["secret_replayed"] is False
    assert replayed.json()["id"] == out["id"]
    with api.app.db.read() as tx:
        row = tx.fetchone("SELECT * FROM webhook_endpoints WHERE id = %s", (out["id"],))
        audit = tx.fetchall(
            "SELECT action, details_json FROM audit_log WHERE target_id = %s", (out["id"],)
        )
    assert row is not None and out["secret"] not in str(row)
    opened = api.app.keys().open(row["secret_enc"], "webhook_endpoints", "secret_enc", out["id"])
    assert opened.decode() == out["secret"]
    assert [a["action"] for a in audit] == ["webhook.create"]
    assert HOOK not in str(audit)
    fetched = api.client.get(f"/v1/webhooks/{out['id']}", headers=api.headers()).json()
    assert "secret" not in fetched and fetched["url"] == HOOK


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"url": "http://hooks.example.com/x"}, "invalid_webhook_url"),
        ({"url": "https://10.0.0.1/x"}, "invalid_webhook_url"),
        ({"url": "https://2130706433/x"}, "invalid_webhook_url"),
        ({"url": "https://u:p@hooks.example.com/"}, "invalid_webhook_url"),
        ({"url": HOOK, "event_types": []}, "validation_failed"),
        ({"url": HOOK, "event_types": ["Message Received"]}, "validation_failed"),
        ({"url": HOOK, "identity_ids": ["idn_01JD3M0Q8W5T2N6B4K7R9X1Y3Z"]}, "identity_not_found"),
        ({"url": HOOK, "unknown": 1}, "validation_failed"),
        ({"url": HOOK, "scope": "partner"}, "permission_denied"),
        ({"url": HOOK, "scope": "platform"}, "permission_denied"),
        ({"url": HOOK, "tenant_id": "ten_01JD3M0Q8W5T2N6B4K7R9X1Y3Z"}, "tenant_not_found"),
    ],
)
def test_create_refusals(api: Any, body: dict[str, Any], code: str) -> None:
    tenant = api.tenant()
    answer = api.client.post(
        "/v1/webhooks", json=body, headers=api.headers("tenant", tenant_id=tenant)
    )
    assert answer.status_code in (403, 404, 422), answer.text
    assert answer.json()["code"] == code
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT COUNT(*) FROM webhook_endpoints") == 0


def test_scopes_and_reach(api: Any) -> None:
    partner = api.partner()
    ours = api.tenant(partner_id=partner)
    theirs = api.tenant()
    partner_key = api.headers("partner", partner_id=partner)
    own = api.client.post("/v1/webhooks", json={"url": HOOK}, headers=partner_key).json()
    assert own["scope"] == "partner" and own["partner_id"] == partner
    for_tenant = api.client.post(
        "/v1/webhooks", json={"url": HOOK, "tenant_id": ours}, headers=partner_key
    ).json()
    assert for_tenant["scope"] == "tenant"
    outside = api.client.post(
        "/v1/webhooks", json={"url": HOOK, "tenant_id": theirs}, headers=partner_key
    )
    assert outside.status_code == 404 and outside.json()["code"] == "tenant_not_found"
    platform = api.client.post("/v1/webhooks", json={"url": HOOK}, headers=api.headers()).json()
    assert platform["scope"] == "platform"
    tenant_key = api.headers("tenant", tenant_id=ours)
    listed = api.client.get("/v1/webhooks", headers=tenant_key).json()["data"]
    assert [e["id"] for e in listed] == [for_tenant["id"]]
    listed = api.client.get("/v1/webhooks", headers=partner_key).json()["data"]
    assert {e["id"] for e in listed} == {own["id"], for_tenant["id"]}
    page = api.client.get("/v1/webhooks?limit=1", headers=api.headers()).json()
    rest = api.client.get(
        f"/v1/webhooks?limit=5&cursor={page['next_cursor']}", headers=api.headers()
    ).json()
    assert len(page["data"]) == 1 and len(rest["data"]) == 2 and rest["next_cursor"] is None
    stranger = api.headers("tenant", tenant_id=theirs)
    for endpoint_id in (own["id"], for_tenant["id"], platform["id"]):
        answer = api.client.get(f"/v1/webhooks/{endpoint_id}", headers=stranger)
        assert answer.status_code == 404 and answer.json()["code"] == "webhook_not_found"
    assert api.client.get(f"/v1/webhooks/{platform['id']}", headers=partner_key).status_code == 404


def test_update_rotate_and_delete(api: Any) -> None:
    tenant = api.tenant()
    inbox, _address = api.identity("filtered", tenant_id=tenant)
    headers = api.headers("tenant", tenant_id=tenant)
    created = api.client.post("/v1/webhooks", json={"url": HOOK}, headers=headers).json()
    path = f"/v1/webhooks/{created['id']}"
    changed = api.client.patch(
        path,
        json={"enabled": False, "identity_ids": [inbox], "event_types": ["identity.*"]},
        headers=headers,
    ).json()
    assert not changed["enabled"] and changed["disabled_reason"] == "manual"
    assert changed["identity_ids"] == [inbox] and changed["event_types"] == ["identity.*"]
    cleared = api.client.patch(
        path, json={"enabled": True, "identity_ids": None, "description": None}, headers=headers
    ).json()
    assert cleared["enabled"] and cleared["identity_ids"] is None
    assert cleared["disabled_reason"] is None
    bad = api.client.patch(path, json={"url": "https://127.0.0.1/"}, headers=headers)
    # Loopback is allowed in this module's settings; a private address never is.
    assert bad.status_code == 200
    bad = api.client.patch(path, json={"url": "https://192.168.0.1/"}, headers=headers)
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_webhook_url"
    rotated = api.client.post(
        f"{path}/rotate-secret", json={"overlap_seconds": 600}, headers=headers
    ).json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != created["secret"]
    assert rotated["previous_secret_until"] is not None
    too_long = api.client.post(
        f"{path}/rotate-secret", json={"overlap_seconds": 8 * 86_400}, headers=headers
    )
    assert too_long.status_code == 422
    assert api.client.delete(path, headers=headers).status_code == 204
    assert api.client.get(path, headers=headers).status_code == 404
    with api.app.db.read() as tx:
        actions = [
            r["action"]
            for r in tx.fetchall(
                "SELECT action FROM audit_log WHERE target_id = %s ORDER BY created_at, id",
                (created["id"],),
            )
        ]
    assert actions == [
        "webhook.create",
        "webhook.update",
        "webhook.update",
        "webhook.update",
        "webhook.rotate",
        "webhook.delete",
    ]


def test_test_action_deliveries_log_and_replay(api: Any) -> None:
    tenant = api.tenant()
    other = api.tenant()
    headers = api.headers("tenant", tenant_id=tenant)
    receiver, ca = _tls_receiver()
    ca.configure_trust(ssl_context := __import__("ssl").create_default_context())
    with receiver:
        from postroom.webhooks.client import DeliveryClient

        client = DeliveryClient(
            allow_insecure=False, allow_loopback=True, timeout_s=2, ssl_context=ssl_context
        )
        created = api.client.post(
            "/v1/webhooks", json={"url": receiver.url()}, headers=headers
        ).json()
        path = f"/v1/webhooks/{created['id']}"
        tested = api.client.post(f"{path}/test", headers=headers)
        assert tested.status_code == 202, tested.text
        test_event = tested.json()["event_id"]
        inbox, _ = api.identity("replayme", tenant_id=tenant)
        api.identity("notmine", tenant_id=other)
        registry = HandlerRegistry()
        registry.register(DELIVER_JOB, deliver_handler(client))
        worker = Worker(api.app, registry)
        dispatch_pending(api.app)
        while worker.run_once():
            pass
        ids = receiver.ids()
        assert ids[0] == test_event and len(ids) == 2
        log = api.client.get(f"{path}/deliveries", headers=headers).json()
        assert [d["status"] for d in log["data"]] == ["succeeded", "succeeded"]
        assert {d["event_id"] for d in log["data"]} == set(ids)
        first = api.client.get(f"{path}/deliveries?limit=1", headers=headers).json()
        second = api.client.get(
            f"{path}/deliveries?limit=1&cursor={first['next_cursor']}", headers=headers
        ).json()
        assert first["data"][0]["id"] != second["data"][0]["id"]
        assert second["next_cursor"] is None
        only = api.client.get(
            f"{path}/deliveries?event_id={test_event}&status=succeeded", headers=headers
        ).json()["data"]
        assert [d["event_id"] for d in only] == [test_event]
        # Replay the inbox's event, and a range.
        with api.app.db.read() as tx:
            event = tx.fetchval(
                "SELECT id FROM events WHERE identity_id = %s AND type = 'identity.created'",
                (inbox,),
            )
            foreign = tx.fetchval(
                "SELECT id FROM events WHERE tenant_id = %s AND type = 'identity.created'",
                (other,),
            )
        one = api.client.post(f"{path}/replay", json={"event_id": event}, headers=headers)
        assert one.status_code == 202 and one.json()["queued"] == 1
        while worker.run_once():
            pass
        ranged = api.client.post(
            f"{path}/replay", json={"since": "2000-01-01T00:00:00Z"}, headers=headers
        )
        assert ranged.status_code == 202 and ranged.json()["queued"] >= 1
        while worker.run_once():
            pass
        assert receiver.ids().count(event) == 3
        refused = {
            "foreign event": ({"event_id": foreign}, 404, "event_not_found"),
            "both": ({"event_id": event, "since": "2000-01-01T00:00:00Z"}, 422, "invalid_replay"),
            "neither": ({}, 422, "invalid_replay"),
            "backwards": (
                {"since": "2030-01-01T00:00:00Z", "until": "2020-01-01T00:00:00Z"},
                422,
                "invalid_replay",
            ),
        }
        for what, (body, status, code) in refused.items():
            answer = api.client.post(f"{path}/replay", json=body, headers=headers)
            assert (answer.status_code, answer.json()["code"]) == (status, code), what
        api.client.patch(path, json={"enabled": False}, headers=headers)
        disabled = api.client.post(f"{path}/replay", json={"event_id": event}, headers=headers)
        assert disabled.status_code == 409 and disabled.json()["code"] == "webhook_disabled"

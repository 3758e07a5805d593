"""Events over the API: the stored envelopes, oldest first, within each key's reach."""

from __future__ import annotations

import uuid
from typing import Any

from postroom.store.events import insert_event
from postroom.store.tenancy import get_default_tenant
from postroom.testing.api import ApiWorld
from postroom.testing.mail import deliver, make_message

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def add_event(
    api: ApiWorld,
    event_type: str,
    *,
    tenant_id: str | None,
    identity_id: str | None = None,
    at: int = T0,
    data: dict[str, Any] | None = None,
) -> str:
    with api.app.db.write() as tx:
        event = insert_event(
            tx,
            event_type=event_type,
            tenant_id=tenant_id,
            identity_id=identity_id,
            data=data or {},
            now=at,
        )
    return event.id


def default_tenant(api: ApiWorld) -> str:
    with api.app.db.read() as tx:
        tenant = get_default_tenant(tx)
    assert tenant is not None
    return tenant.id


def ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [e["id"] for e in response.json()["data"]]


def test_delivered_mail_is_an_event_with_its_envelope_and_sequence(api: ApiWorld) -> None:
    identity, address = api.identity("events")
    stored = []
    for n in range(2):
        raw = make_message(
            subject=f"Hello {n}", to=address, message_id=f"{uuid.uuid4().hex}@sender.example"
        )
        stored += deliver(api.app, raw, address)
    listed = api.client.get(
        "/v1/events", params={"type": "message.received"}, headers=api.headers()
    )
    events = listed.json()["data"]
    assert [e["data"]["message_id"] for e in events] == stored
    first, second = events
    assert first["type"] == "message.received" and first["identity_id"] == identity
    assert first["tenant_id"] == default_tenant(api) and first["occurred_at"].endswith("Z")
    assert second["sequence"] == first["sequence"] + 1
    assert set(first) == {
        "id",
        "type",
        "occurred_at",
        "tenant_id",
        "identity_id",
        "sequence",
        "data",
    }
    got = api.client.get(f"/v1/events/{first['id']}", headers=api.headers())
    assert got.status_code == 200 and got.json() == first


def test_each_key_level_sees_only_the_events_in_its_reach(api: ApiWorld) -> None:
    partner = api.partner()
    partner_tenant = api.tenant("p-tenant", partner_id=partner)
    other_tenant = api.tenant("o-tenant")
    mine, _ = api.identity("mine", tenant_id=other_tenant)
    sibling, _ = api.identity("sibling", tenant_id=other_tenant)
    in_partner = add_event(api, "domain.verified", tenant_id=partner_tenant)
    in_tenant = add_event(api, "domain.verified", tenant_id=other_tenant, at=T0 + 1)
    of_mine = add_event(api, "message.sent", tenant_id=other_tenant, identity_id=mine, at=T0 + 2)
    of_sibling = add_event(
        api, "message.sent", tenant_id=other_tenant, identity_id=sibling, at=T0 + 3
    )
    everything = [in_partner, in_tenant, of_mine, of_sibling]
    keys = {
        "platform": api.headers(),
        "partner": api.headers("partner", partner_id=partner),
        "tenant": api.headers("tenant", tenant_id=other_tenant),
        "identity": api.headers("identity", tenant_id=other_tenant, identity_id=mine),
    }
    sees = {
        "platform": everything,
        "partner": [in_partner],
        "tenant": [in_tenant, of_mine, of_sibling],
        "identity": [of_mine],
    }
    # The hand-made events sit at T0; the identities' own identity.created events are now.
    window = {"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:01:00Z"}
    for level, headers in keys.items():
        listed = api.client.get("/v1/events", params=window, headers=headers)
        assert ids(listed) == sees[level], level
        for event_id in everything:
            got = api.client.get(f"/v1/events/{event_id}", headers=headers)
            if event_id in sees[level]:
                assert got.status_code == 200 and got.json()["id"] == event_id
            else:
                assert got.status_code == 404 and got.json()["code"] == "event_not_found"
    narrowed = api.client.get(
        "/v1/events", params={**window, "identity_id": sibling}, headers=keys["tenant"]
    )
    assert ids(narrowed) == [of_sibling]
    foreign = api.client.get(
        "/v1/events", params={**window, "identity_id": sibling}, headers=keys["identity"]
    )
    assert ids(foreign) == []


def test_type_filter_is_exact_or_a_prefix(api: ApiWorld) -> None:
    tenant = default_tenant(api)
    made = {
        name: add_event(api, name, tenant_id=tenant, at=T0 + n)
        for n, name in enumerate(
            [
                "message.received",
                "message.sent",
                "messages.other",
                "domain_verified",
                "domainXverified",
            ]
        )
    }

    def types(value: str) -> list[str]:
        response = api.client.get("/v1/events", params={"type": value}, headers=api.headers())
        return [e["type"] for e in response.json()["data"]]

    assert types("message.sent") == ["message.sent"]
    assert types("message.*") == ["message.received", "message.sent"]
    assert types("message*") == ["message.received", "message.sent", "messages.other"]
    assert types("domain_*") == ["domain_verified"]  # "_" is no wildcard
    assert types("*") == list(made)
    for bad in ("mes*age", "**", "message.%", "a" * 101):
        response = api.client.get("/v1/events", params={"type": bad}, headers=api.headers())
        assert response.status_code == 422, bad
        assert response.json()["errors"][0]["field"] == "query.type"


def test_since_until_and_pages_follow_in_order(api: ApiWorld) -> None:
    tenant = default_tenant(api)
    made = [add_event(api, "test.tick", tenant_id=tenant, at=T0 + n * 60_000) for n in range(7)]
    window = api.client.get(
        "/v1/events",
        params={
            "type": "test.tick",
            "since": "2026-01-01T01:01:00+01:00",  # T0 + 1 min
            "until": "2026-01-01T00:04:00Z",  # T0 + 4 min, exclusive
        },
        headers=api.headers(),
    )
    assert ids(window) == made[1:4]
    fraction = api.client.get(
        "/v1/events",
        params={"type": "test.tick", "since": "2026-01-01T00:05:59.999999Z"},
        headers=api.headers(),
    )
    assert ids(fraction) == made[6:]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"type": "test.tick", "limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get("/v1/events", params=params, headers=api.headers())
        seen += ids(page)
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == made
    for field, bad in (
        ("since", "yesterday"),
        ("since", "2026-02-30T00:00:00Z"),
        ("until", "2026-01-01"),
        ("until", "2026-01-01T00:00:00"),
        ("since", "1767225600000"),
        ("until", "2026-01-01T25:00:00Z"),
    ):
        response = api.client.get("/v1/events", params={field: bad}, headers=api.headers())
        assert response.status_code == 422, (field, bad)
        problem = response.json()
        assert problem["code"] == "validation_failed"
        assert [e["field"] for e in problem["errors"]] == [f"query.{field}"]


def test_unknown_events_and_bad_ids_are_not_found(api: ApiWorld) -> None:
    for event_id in ("evt_01HZZZZZZZZZZZZZZZZZZZZZZZ", "not%20an%20id", "x" * 300):
        response = api.client.get(f"/v1/events/{event_id}", headers=api.headers())
        assert response.status_code == 404 and response.json()["code"] == "event_not_found"
    bad_identity = api.client.get(
        "/v1/events", params={"identity_id": "a b"}, headers=api.headers()
    )
    assert bad_identity.status_code == 422
    no_permission = api.headers(
        "tenant", tenant_id=default_tenant(api), permissions=["tenants:read"]
    )
    refused = api.client.get("/v1/events", headers=no_permission)
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"

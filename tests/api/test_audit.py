"""The audit log over the API: newest first, filters, pages and each key's reach."""

from __future__ import annotations

from typing import Any

from postroom.ids import new_id
from postroom.store import audit as audit_rows
from postroom.testing.api import ApiWorld

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def add_entry(api: ApiWorld, action: str, *, at: int, **fields: Any) -> str:
    entry_id = new_id("aud")
    with api.app.db.write() as tx:
        audit_rows.insert(tx, entry_id=entry_id, action=action, now=at, **fields)
    return entry_id


def entries(api: ApiWorld, headers: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    response = api.client.get("/v1/audit", params=params, headers=headers)
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def test_a_partner_sees_its_tenants_and_its_keys_a_tenant_only_its_own(api: ApiWorld) -> None:
    partner = api.partner()
    partner_key = api.headers("partner", partner_id=partner)
    created = api.client.post(
        "/v1/tenants", json={"slug": "audited-p"}, headers={**partner_key, "X-Request-Id": "r-1"}
    )
    assert created.status_code == 201, created.text
    tenant = created.json()["id"]
    elsewhere = api.tenant("audited-o")
    with api.app.db.read() as tx:
        partner_key_id = tx.fetchval(
            "SELECT id FROM api_keys WHERE partner_id = %s ORDER BY created_at", (partner,)
        )
    by_partner_key = add_entry(
        api, "webhook.create", at=T0, actor_key_id=partner_key_id, target_type="webhook",
        target_id="whk_1", details={"events": ["*"]},
    )  # fmt: skip
    other = add_entry(api, "domain.create", at=T0 + 1, tenant_id=elsewhere)
    seen_by_partner = entries(api, partner_key, limit=200)
    ids = {e["id"] for e in seen_by_partner}
    assert by_partner_key in ids and other not in ids
    assert all(e["tenant_id"] in (tenant, None) for e in seen_by_partner)
    [create] = [e for e in seen_by_partner if e["action"] == "tenant.create"]
    assert create["tenant_id"] == tenant and create["request_id"] == "r-1"
    assert create["actor_key_id"] == partner_key_id and create["target_id"] == tenant
    assert create["created_at"].endswith("Z") and isinstance(create["details"], dict)
    tenant_view = entries(api, api.headers("tenant", tenant_id=elsewhere), limit=200)
    assert other in {e["id"] for e in tenant_view}
    assert {e["tenant_id"] for e in tenant_view} == {elsewhere}
    platform_view = {e["id"] for e in entries(api, api.headers(), limit=200)}
    assert {by_partner_key, other, create["id"]} <= platform_view
    identity, _ = api.identity("no-audit", tenant_id=elsewhere)
    identity_key = api.headers("identity", tenant_id=elsewhere, identity_id=identity)
    refused = api.client.get("/v1/audit", headers=identity_key)
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"


def test_filters_newest_first_and_pages(api: ApiWorld) -> None:
    tenant = api.tenant("filters")
    made = [
        add_entry(
            api,
            "thing.update" if n % 2 else "thing.create",
            at=T0 + n * 60_000,
            tenant_id=tenant,
            actor_key_id=f"key_{n % 3}",
            target_type="thing",
            target_id=f"thg_{n % 2}",
            details=None if n == 0 else {"n": n},
        )  # fmt: skip
        for n in range(6)
    ]
    key = api.headers("tenant", tenant_id=tenant)
    got = entries(api, key, target_type="thing")
    assert [e["id"] for e in got] == made[::-1]
    assert got[-1]["details"] == {} and got[0]["details"] == {"n": 5}
    updates = entries(api, key, action="thing.update")
    assert [e["id"] for e in updates] == [made[5], made[3], made[1]]
    by_target = entries(api, key, target_type="thing", target_id="thg_0")
    assert [e["id"] for e in by_target] == [made[4], made[2], made[0]]
    assert [e["id"] for e in entries(api, key, actor_key_id="key_1")] == [made[4], made[1]]
    window = entries(
        api, key, target_type="thing", since="2026-01-01T00:01:00Z", until="2026-01-01T00:03:00Z"
    )
    assert [e["id"] for e in window] == [made[2], made[1]]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"target_type": "thing", "limit": 4}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get("/v1/audit", params=params, headers=key).json()
        seen += [e["id"] for e in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made[::-1]


def test_bad_times_and_filters_are_refused_naming_the_field(api: ApiWorld) -> None:
    for field, bad in (("since", "last week"), ("until", "2026-13-01T00:00:00Z")):
        response = api.client.get("/v1/audit", params={field: bad}, headers=api.headers())
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == f"query.{field}"
    odd = api.client.get("/v1/audit", params={"action": "a\tb"}, headers=api.headers())
    assert odd.status_code == 422 and odd.json()["errors"][0]["field"] == "query.action"

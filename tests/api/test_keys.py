"""API keys over the REST API: who may create what, reach, escalation, the one-time
secret, rotation overlap, revocation and last-use bookkeeping."""

from __future__ import annotations

import typing
from typing import Any

from postroom.testing.api import ApiWorld

FIELDS = {
    "id",
    "name",
    "level",
    "prefix",
    "tenant_id",
    "identity_id",
    "partner_id",
    "mode",
    "permissions",
    "expires_at",
    "revoked_at",
    "last_used_at",
    "created_at",
}


def _row(api: ApiWorld, key_id: str) -> dict[str, Any]:
    with api.app.db.read() as tx:
        row = tx.fetchone("SELECT * FROM api_keys WHERE id = %s", (key_id,))
    assert row is not None
    return dict(row)


def _audit(api: ApiWorld, action: str, **where: str) -> list[dict[str, Any]]:
    clauses = " ".join(f"AND {column} = %s" for column in where)
    with api.app.db.read() as tx:
        rows = tx.fetchall(
            f"SELECT * FROM audit_log WHERE action = %s {clauses} ORDER BY id",
            (action, *where.values()),
        )
    return [dict(r) for r in rows]


def _create(api: ApiWorld, headers: dict[str, str], **body: Any) -> Any:
    return api.client.post("/v1/keys", json=body, headers=headers)


def test_platform_key_creates_a_key_whose_secret_shows_once(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    headers = {**api.headers(), "Idempotency-Key": "make-ci-key"}
    body = {"level": "tenant", "tenant_id": tenant, "name": "ci"}
    created = api.client.post("/v1/keys", json=body, headers=headers)
    assert created.status_code == 201, created.text
    key = created.json()
    assert set(key) == FIELDS | {"secret"}
    assert key["level"] == "tenant" and key["tenant_id"] == tenant and key["name"] == "ci"
    assert key["identity_id"] is None and key["partner_id"] is None and key["mode"] == "live"
    assert key["secret"].startswith(key["prefix"] + "_") and key["prefix"].startswith("pr_live_")
    assert "keys:manage" in key["permissions"] and "platform:ops" not in key["permissions"]
    assert key["revoked_at"] is None and key["expires_at"] is None
    # The secret works, and acts as the new key.
    own = api.client.get(f"/v1/keys/{key['id']}", headers=api.auth(key["secret"]))
    assert own.status_code == 200 and own.json()["id"] == key["id"]
    # A replay returns the body without the secret.
    replay = api.client.post("/v1/keys", json=body, headers=headers)
    assert replay.status_code == 201 and replay.headers["idempotent-replayed"] == "true"
    replayed = replay.json()
    assert "secret" not in replayed and replayed["secret_replayed"] is False
    assert {k: v for k, v in replayed.items() if k != "secret_replayed"} == {
        k: v for k, v in key.items() if k != "secret"
    }
    with api.app.db.read() as tx:
        count = tx.fetchone("SELECT COUNT(*) AS n FROM api_keys WHERE name = 'ci'")
        stored = tx.fetchone("SELECT response_body FROM idempotency_records")
    assert count is not None and count["n"] == 1
    assert stored is not None and key["secret"] not in stored["response_body"]
    audits = _audit(api, "key.create", target_id=key["id"])
    assert len(audits) == 1 and audits[0]["actor_key_id"] is not None
    assert key["secret"] not in str(audits[0])


def test_permissions_and_expiry_are_kept(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    identity, _address = api.identity("bot", tenant_id=tenant)
    created = _create(
        api,
        api.headers(),
        level="identity",
        identity_id=identity,
        permissions=["messages:read", "messages:read", "events:read"],
        expires_at="2999-01-02T03:04:05.678+01:00",
    )
    assert created.status_code == 201, created.text
    key = created.json()
    assert key["tenant_id"] == tenant and key["identity_id"] == identity
    assert key["permissions"] == ["messages:read", "events:read"]
    assert key["expires_at"] == "2999-01-02T02:04:05.678Z"
    assert _row(api, key["id"])["created_by_key_id"] is not None
    defaults = _create(api, api.headers(), level="identity", identity_id=identity).json()
    assert defaults["permissions"] == [
        "identities:read",
        "messages:read",
        "messages:write",
        "messages:send",
        "events:read",
    ]


def test_bad_requests_are_refused_with_codes(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    identity, _ = api.identity("bot", tenant_id=tenant)
    platform = api.headers()
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"level": "root"}, 422, "validation_failed"),
        (
            {"level": "tenant", "tenant_id": tenant, "permissions": ["x:y"]},
            422,
            "validation_failed",
        ),
        ({"level": "tenant", "tenant_id": tenant, "permissions": []}, 422, "validation_failed"),
        (
            {"level": "identity", "identity_id": identity, "permissions": ["tenants:write"]},
            422,
            "permission_not_allowed",
        ),
        (
            {"level": "tenant", "tenant_id": tenant, "expires_at": "2001-01-01T00:00:00Z"},
            422,
            "invalid_expiry",
        ),
        (
            {"level": "tenant", "tenant_id": tenant, "expires_at": "2999-01-01T00:00:00"},
            422,
            "validation_failed",
        ),
        ({"level": "platform", "tenant_id": tenant}, 422, "invalid_key_scope"),
        ({"level": "tenant"}, 422, "invalid_key_scope"),
        ({"level": "partner"}, 422, "invalid_key_scope"),
        ({"level": "tenant", "tenant_id": "ten_nope"}, 404, "tenant_not_found"),
        ({"level": "tenant", "tenant_id": "ten_\x00"}, 400, "invalid_character"),
        ({"level": "identity", "identity_id": "idn_nope"}, 404, "identity_not_found"),
        ({"level": "partner", "partner_id": "ptn_nope"}, 404, "partner_not_found"),
        ({"level": "tenant", "tenant_id": tenant, "name": "a\x07b"}, 422, "invalid_key_name"),
        ({"level": "tenant", "tenant_id": tenant, "colour": "red"}, 422, "validation_failed"),
    ]
    for body, status, code in cases:
        answer = _create(api, platform, **body)
        assert (answer.status_code, answer.json()["code"]) == (status, code), body
    with api.app.db.read() as tx:
        count = tx.fetchone("SELECT COUNT(*) AS n FROM api_keys")
    assert count is not None and count["n"] == 2  # bootstrap and fixture platform keys


def test_partner_key_creates_keys_only_in_its_own_tenants(api: ApiWorld) -> None:
    partner, other = api.partner(), api.partner("Other")
    mine = api.tenant("mine", partner_id=partner)
    theirs = api.tenant("theirs", partner_id=other)
    my_identity, _ = api.identity("a", tenant_id=mine)
    their_identity, _ = api.identity("b", tenant_id=theirs)
    headers = api.headers("partner", partner_id=partner)
    made = _create(api, headers, level="tenant", tenant_id=mine)
    assert made.status_code == 201 and made.json()["tenant_id"] == mine
    made = _create(api, headers, level="identity", identity_id=my_identity)
    assert made.status_code == 201 and made.json()["tenant_id"] == mine
    outside = _create(api, headers, level="tenant", tenant_id=theirs)
    assert outside.status_code == 404 and outside.json()["code"] == "tenant_not_found"
    outside = _create(api, headers, level="identity", identity_id=their_identity)
    assert outside.status_code == 404 and outside.json()["code"] == "identity_not_found"
    mismatched = _create(api, headers, level="identity", identity_id=my_identity, tenant_id=theirs)
    assert mismatched.status_code == 404
    default_tenant = _create(api, headers, level="tenant", tenant_id=api.tenant("plain"))
    assert default_tenant.status_code == 404
    for level, extra in (("partner", {"partner_id": partner}), ("platform", {})):
        refused = _create(api, headers, level=level, **extra)
        assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    denied = _audit(api, "auth.denied", target_id="keys.create")
    assert [a["details_json"].count("permission_denied") for a in denied] == [1, 1]


def test_tenant_key_creates_keys_in_its_own_tenant(api: ApiWorld) -> None:
    tenant, other = api.tenant("own"), api.tenant("other")
    identity, _ = api.identity("inbox", tenant_id=tenant)
    foreign, _ = api.identity("inbox2", tenant_id=other)
    headers = api.headers("tenant", tenant_id=tenant)
    implicit = _create(api, headers, level="tenant", name="implicit")
    assert implicit.status_code == 201 and implicit.json()["tenant_id"] == tenant
    assert _create(api, headers, level="identity", identity_id=identity).status_code == 201
    assert _create(api, headers, level="tenant", tenant_id=other).status_code == 404
    assert _create(api, headers, level="identity", identity_id=foreign).status_code == 404
    refused = _create(api, headers, level="platform")
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"


def test_a_key_never_grants_what_it_does_not_hold(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    limited = api.headers("tenant", tenant_id=tenant, permissions=["keys:manage", "messages:read"])
    escalate = _create(
        api, limited, level="tenant", permissions=["messages:read", "messages:write"]
    )
    assert escalate.status_code == 403
    assert escalate.json()["code"] == "permission_escalation"
    assert "messages:write" in escalate.json()["detail"]
    # Omitting permissions asks for the level's defaults, which it does not all hold.
    defaults = _create(api, limited, level="tenant")
    assert defaults.status_code == 403 and defaults.json()["code"] == "permission_escalation"
    subset = _create(api, limited, level="tenant", permissions=["messages:read"])
    assert subset.status_code == 201, subset.text
    # Rotating a stronger key would hand out its secret: refused the same way.
    strong = _create(api, api.headers(), level="tenant", tenant_id=tenant).json()
    rotate = api.client.post(f"/v1/keys/{strong['id']}/rotate", json={}, headers=limited)
    assert rotate.status_code == 403 and rotate.json()["code"] == "permission_escalation"
    assert api.client.get(f"/v1/keys/{strong['id']}", headers=api.auth(strong["secret"])).is_success
    denials = _audit(api, "auth.denied")
    assert sorted(a["target_id"] for a in denials) == ["keys.create", "keys.create", "keys.rotate"]
    assert all("permission_escalation" in a["details_json"] for a in denials)
    with api.app.db.read() as tx:
        count = tx.fetchone("SELECT COUNT(*) AS n FROM api_keys WHERE tenant_id = %s", (tenant,))
    assert count is not None and count["n"] == 3  # limited, subset, strong


def test_list_and_get_show_only_keys_in_reach(api: ApiWorld) -> None:
    partner = api.partner()
    owned, alone = api.tenant("owned", partner_id=partner), api.tenant("alone")
    platform = api.headers()
    ids: dict[str, str] = {}
    for name, body in {
        "owned": {"level": "tenant", "tenant_id": owned},
        "alone": {"level": "tenant", "tenant_id": alone},
        "partner": {"level": "partner", "partner_id": partner},
        "platform": {"level": "platform"},
    }.items():
        ids[name] = _create(api, platform, name=name, **body).json()["id"]
    partner_key = api.headers("partner", partner_id=partner)
    tenant_key = api.headers("tenant", tenant_id=owned)

    def listed(headers: dict[str, str], **params: Any) -> set[str]:
        seen: list[str] = []
        cursor = None
        while True:
            query = {"limit": 2, **params, **({"cursor": cursor} if cursor else {})}
            answer = api.client.get("/v1/keys", params=query, headers=headers)
            assert answer.status_code == 200, answer.text
            page = answer.json()
            assert len(page["data"]) <= 2
            for key in page["data"]:
                assert set(key) == FIELDS
            seen += [k["id"] for k in page["data"]]
            cursor = page["next_cursor"]
            if cursor is None:
                assert len(seen) == len(set(seen))
                return set(seen)

    everything = listed(platform)
    assert set(ids.values()) <= everything and len(everything) == 8  # + bootstrap, fixture keys
    by_partner = listed(partner_key)
    assert {ids["owned"], ids["partner"]} <= by_partner
    assert not {ids["alone"], ids["platform"]} & by_partner
    assert len(by_partner) == 4  # + the two keys the fixture minted for this partner, owned
    by_tenant = listed(tenant_key)
    assert ids["owned"] in by_tenant and not {ids["alone"], ids["partner"]} & by_tenant
    assert listed(platform, tenant_id=alone) == {ids["alone"]}
    hidden = api.client.get("/v1/keys", params={"tenant_id": alone}, headers=partner_key)
    assert hidden.status_code == 404 and hidden.json()["code"] == "tenant_not_found"
    for headers, key_id, status in (
        (partner_key, ids["owned"], 200),
        (partner_key, ids["partner"], 200),
        (partner_key, ids["alone"], 404),
        (partner_key, ids["platform"], 404),
        (tenant_key, ids["partner"], 404),
        (tenant_key, "key_nope", 404),
        (platform, ids["platform"], 200),
    ):
        answer = api.client.get(f"/v1/keys/{key_id}", headers=headers)
        assert answer.status_code == status, (key_id, answer.text)
        if status == 404:
            assert answer.json()["code"] == "key_not_found"
        else:
            assert set(answer.json()) == FIELDS


def test_rotation_keeps_the_old_secret_working_for_the_overlap(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    platform = api.headers()
    key = _create(api, platform, level="tenant", tenant_id=tenant).json()
    url = f"/v1/keys/{key['id']}"
    old = key["secret"]
    rotated = api.client.post(f"{url}/rotate", json={"overlap_seconds": 3600}, headers=platform)
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["secret"]
    assert new != old and new.startswith(key["prefix"] + "_")
    assert rotated.json()["id"] == key["id"] and rotated.json()["prefix"] == key["prefix"]
    assert api.client.get(url, headers=api.auth(old)).status_code == 200
    assert api.client.get(url, headers=api.auth(new)).status_code == 200
    # Once the overlap ends the old secret is refused.
    with api.app.db.write() as tx:
        tx.execute(
            "UPDATE api_keys SET prev_expires_at = %s WHERE id = %s",
            (api.app.clock.now_ms() - 1, key["id"]),
        )
    assert api.client.get(url, headers=api.auth(old)).status_code == 401
    assert api.client.get(url, headers=api.auth(new)).status_code == 200
    # A key may rotate itself; no body means the default overlap of a day.
    again = api.client.post(f"{url}/rotate", headers=api.auth(new))
    assert again.status_code == 200, again.text
    newest = again.json()["secret"]
    row = _row(api, key["id"])
    assert row["prev_expires_at"] - api.app.clock.now_ms() > 86_400_000 - 60_000
    assert api.client.get(url, headers=api.auth(new)).status_code == 200
    # Overlap 0 stops the current secret at once.
    api.client.post(f"{url}/rotate", json={"overlap_seconds": 0}, headers=platform)
    assert api.client.get(url, headers=api.auth(newest)).status_code == 401
    for overlap in (-1, 2_592_001, "soon"):
        bad = api.client.post(f"{url}/rotate", json={"overlap_seconds": overlap}, headers=platform)
        assert bad.status_code == 422 and bad.json()["code"] == "validation_failed"
    assert api.client.post(f"{url}/rotate", json={"overlap_seconds": 2_592_000}, headers=platform)
    # An Idempotency-Key replay does not show the secret again.
    idem = {**platform, "Idempotency-Key": "rotate-1"}
    first = api.client.post(f"{url}/rotate", json={"overlap_seconds": 60}, headers=idem)
    replay = api.client.post(f"{url}/rotate", json={"overlap_seconds": 60}, headers=idem)
    assert "secret" in first.json() and "secret" not in replay.json()
    assert replay.json()["secret_replayed"] is False
    assert api.client.get(url, headers=api.auth(first.json()["secret"])).status_code == 200
    assert len(_audit(api, "key.rotate", target_id=key["id"])) == 5
    missing = api.client.post("/v1/keys/key_01JD3M0Q8W5T2N6B4K7R9X1Y3Z/rotate", headers=platform)
    assert missing.status_code == 404 and missing.json()["code"] == "key_not_found"


def test_revoked_key_is_refused_at_once(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    platform = api.headers()
    key = _create(api, platform, level="tenant", tenant_id=tenant).json()
    url = f"/v1/keys/{key['id']}"
    api.client.post(f"{url}/rotate", json={"overlap_seconds": 3600}, headers=platform)
    revoked = api.client.delete(url, headers=platform)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert set(revoked.json()) == FIELDS
    refused = api.client.get(url, headers=api.auth(key["secret"]))  # the overlapping secret
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_api_key"
    again = api.client.delete(url, headers=platform)
    assert again.status_code == 200 and again.json()["revoked_at"] == revoked.json()["revoked_at"]
    assert len(_audit(api, "key.revoke", target_id=key["id"])) == 1
    rotate = api.client.post(f"{url}/rotate", headers=platform)
    assert rotate.status_code == 409 and rotate.json()["code"] == "key_revoked"
    outsider = api.headers("tenant", tenant_id=api.tenant("other"))
    assert api.client.delete(url, headers=outsider).status_code == 404


def test_last_used_is_written_at_most_once_a_minute(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    key = _create(api, api.headers(), level="tenant", tenant_id=tenant).json()
    assert _row(api, key["id"])["last_used_at"] is None
    headers = api.auth(key["secret"])
    first = api.client.get(f"/v1/keys/{key['id']}", headers=headers)
    written = _row(api, key["id"])["last_used_at"]
    assert written is not None and first.json()["last_used_at"] is not None
    api.client.get("/v1/keys", headers=headers)
    assert _row(api, key["id"])["last_used_at"] == written
    with api.app.db.write() as tx:
        tx.execute(
            "UPDATE api_keys SET last_used_at = %s WHERE id = %s", (written - 61_000, key["id"])
        )
    api.client.get("/v1/keys", headers=headers)
    assert _row(api, key["id"])["last_used_at"] >= written


def test_the_permission_enum_is_the_permission_table() -> None:
    from postroom.api.routers.keys import PermissionName
    from postroom.tenancy.permissions import PERMISSIONS

    assert list(typing.get_args(PermissionName)) == [p.name for p in PERMISSIONS]

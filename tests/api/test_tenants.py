"""Tenants over the API, and the conventions every route shares (problems, paging,
idempotency, request ids, rate limits)."""

from __future__ import annotations

from typing import Any

import pytest

from postroom.testing.api import ApiWorld


def test_platform_key_creates_lists_and_gets_tenants(api: ApiWorld) -> None:
    created = api.client.post(
        "/v1/tenants", json={"slug": "acme", "name": "Acme Inc"}, headers=api.headers()
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["slug"] == "acme" and body["name"] == "Acme Inc" and body["status"] == "active"
    assert body["id"].startswith("ten_") and body["created_at"].endswith("Z")
    got = api.client.get(f"/v1/tenants/{body['id']}", headers=api.headers())
    assert got.status_code == 200 and got.json() == body
    listed = api.client.get("/v1/tenants", headers=api.headers()).json()
    assert body["id"] in [t["id"] for t in listed["data"]]


def test_taken_slug_is_a_conflict_problem(api: ApiWorld) -> None:
    api.tenant("acme")
    response = api.client.post("/v1/tenants", json={"slug": "acme"}, headers=api.headers())
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "slug_taken" and problem["status"] == 409
    assert problem["type"].endswith("/slug_taken") and problem["request_id"]


def test_unknown_fields_and_bad_values_name_the_fields(api: ApiWorld) -> None:
    response = api.client.post(
        "/v1/tenants", json={"slug": "Not A Slug", "colour": "red"}, headers=api.headers()
    )
    assert response.status_code == 422
    problem = response.json()
    assert problem["code"] == "validation_failed"
    fields = {e["field"] for e in problem["errors"]}
    assert fields == {"body.slug", "body.colour"}
    bad_json = api.client.post(
        "/v1/tenants",
        content=b"{not json",
        headers={**api.headers(), "Content-Type": "application/json"},
    )
    assert bad_json.status_code == 400 and bad_json.json()["code"] == "invalid_json"


def test_partner_key_sees_only_its_own_tenants(api: ApiWorld) -> None:
    partner = api.partner()
    other = api.partner("Other")
    mine = api.headers("partner", partner_id=partner)
    theirs = api.headers("partner", partner_id=other)
    created = api.client.post("/v1/tenants", json={"slug": "p-one"}, headers=mine).json()
    assert created["partner_id"] == partner
    api.client.post("/v1/tenants", json={"slug": "p-two"}, headers=theirs)
    listed = api.client.get("/v1/tenants", headers=mine).json()["data"]
    assert [t["slug"] for t in listed] == ["p-one"]
    hidden = api.client.get(f"/v1/tenants/{created['id']}", headers=theirs)
    assert hidden.status_code == 404 and hidden.json()["code"] == "tenant_not_found"


def test_pages_walk_every_tenant_once(api: ApiWorld) -> None:
    made = {api.tenant(f"page-{n}") for n in range(7)}
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get("/v1/tenants", params=params, headers=api.headers()).json()
        seen += [t["id"] for t in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert made <= set(seen) and len(seen) == len(set(seen)) == len(made) + 1  # + default
    forged = api.client.get(
        "/v1/tenants", params={"cursor": "eyJyIjoxfQ.AAAA"}, headers=api.headers()
    )
    assert forged.status_code == 400 and forged.json()["code"] == "invalid_cursor"


def test_suspend_and_resume_and_who_may_lift_it(api: ApiWorld) -> None:
    partner = api.partner()
    partner_headers = api.headers("partner", partner_id=partner)
    tenant = api.client.post("/v1/tenants", json={"slug": "sus"}, headers=partner_headers).json()
    tenant_key = api.headers("tenant", tenant_id=tenant["id"])
    assert api.client.get(f"/v1/tenants/{tenant['id']}", headers=tenant_key).status_code == 200
    done = api.client.patch(
        f"/v1/tenants/{tenant['id']}", json={"status": "suspended"}, headers=api.headers()
    ).json()
    assert done["status"] == "suspended" and done["suspended_by"] == "platform"
    refused = api.client.get(f"/v1/tenants/{tenant['id']}", headers=tenant_key)
    assert refused.status_code == 403 and refused.json()["code"] == "tenant_suspended"
    lift = api.client.patch(
        f"/v1/tenants/{tenant['id']}", json={"status": "active"}, headers=partner_headers
    )
    assert lift.status_code == 409 and lift.json()["code"] == "suspended_by_platform"
    lifted = api.client.patch(
        f"/v1/tenants/{tenant['id']}", json={"status": "active"}, headers=api.headers()
    )
    assert lifted.json()["status"] == "active"
    assert api.client.get(f"/v1/tenants/{tenant['id']}", headers=tenant_key).status_code == 200


def test_policy_merges_and_refuses_out_of_bounds(api: ApiWorld) -> None:
    tenant = api.tenant("pol")
    url = f"/v1/tenants/{tenant}/policy"
    defaults = {
        "max_identities": None,
        "events_retention_days": 30,
        "daily_send_cap": None,
        "daily_send_cap_per_identity": None,
    }
    assert api.client.get(url, headers=api.headers()).json() == defaults
    changed = api.client.patch(url, json={"max_identities": 5}, headers=api.headers())
    assert changed.json() == {**defaults, "max_identities": 5}
    bad = api.client.patch(url, json={"events_retention_days": 0}, headers=api.headers())
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"].endswith("days")
    reset = api.client.patch(url, json={"max_identities": None}, headers=api.headers())
    assert reset.json()["max_identities"] is None


def test_idempotent_create_replays_and_refuses_a_different_body(api: ApiWorld) -> None:
    headers = {**api.headers(), "Idempotency-Key": "create-acme-1"}
    first = api.client.post("/v1/tenants", json={"slug": "idem"}, headers=headers)
    again = api.client.post("/v1/tenants", json={"slug": "idem"}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    other = api.client.post("/v1/tenants", json={"slug": "idem-2"}, headers=headers)
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"
    # A failed request frees its key: the same key may be used again.
    failing = {**api.headers(), "Idempotency-Key": "k2"}
    assert api.client.post("/v1/tenants", json={"slug": "idem"}, headers=failing).status_code == 409
    retry = api.client.post("/v1/tenants", json={"slug": "idem-3"}, headers=failing)
    assert retry.status_code == 201
    too_long = {**api.headers(), "Idempotency-Key": "x" * 256}
    refused = api.client.post("/v1/tenants", json={"slug": "idem-4"}, headers=too_long)
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_idempotency_key"


def test_request_id_is_echoed_and_recorded_in_audit(api: ApiWorld) -> None:
    response = api.client.post(
        "/v1/tenants",
        json={"slug": "audited"},
        headers={**api.headers(), "X-Request-Id": "trace-abc-123"},
    )
    assert response.headers["x-request-id"] == "trace-abc-123"
    with api.app.db.read() as tx:
        row = tx.fetchone(
            "SELECT request_id, actor_key_id FROM audit_log WHERE action = 'tenant.create'"
            " AND target_id = %s",
            (response.json()["id"],),
        )
    assert row is not None and row["request_id"] == "trace-abc-123"
    assert row["actor_key_id"] is not None
    generated = api.client.get("/v1/tenants", headers=api.headers())
    assert generated.headers["x-request-id"].startswith("req_")


@pytest.mark.engines("sqlite")
def test_rate_limit_answers_429_with_retry_after(ready_app: Any) -> None:
    from dataclasses import replace

    from fastapi.testclient import TestClient

    from postroom.api.app import create_api
    from postroom.tenancy.api_keys import create_key

    ready_app.settings = replace(
        ready_app.settings, http_rate_limit_per_minute=60, http_rate_limit_burst=3
    )
    _key, secret = create_key(ready_app, "platform")
    client = TestClient(create_api(ready_app))
    headers = {"Authorization": f"Bearer {secret}"}
    answers = [client.get("/v1/tenants", headers=headers) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].headers["ratelimit-limit"] == "3"
    assert answers[2].headers["ratelimit-remaining"] == "0"
    assert answers[3].json()["code"] == "rate_limited"
    assert int(answers[3].headers["retry-after"]) >= 1


def test_unknown_route_and_method_are_problems(api: ApiWorld) -> None:
    missing = api.client.get("/v1/nothing-here", headers=api.headers())
    assert missing.status_code == 404 and missing.json()["code"] == "route_not_found"
    wrong = api.client.put("/v1/tenants", headers=api.headers())
    assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed"


def test_nul_and_control_characters_are_refused_before_any_storage(api: ApiWorld) -> None:
    in_path = api.client.get("/v1/tenants/ten_%00x", headers=api.headers())
    assert in_path.status_code == 400 and in_path.json()["code"] == "invalid_character"
    in_query = api.client.get("/v1/tenants?cursor=%00", headers=api.headers())
    assert in_query.status_code == 400
    in_body = api.client.post(
        "/v1/tenants", json={"slug": "nul", "name": "a\x00b"}, headers=api.headers()
    )
    assert in_body.status_code == 400 and in_body.json()["code"] == "invalid_character"
    # The body stays readable for the route after the check.
    fine = api.client.post("/v1/tenants", json={"slug": "nul"}, headers=api.headers())
    assert fine.status_code == 201 and fine.json()["slug"] == "nul"

"""Identities (inboxes) and their addresses over the API: create (client_id,
Idempotency-Key, metadata, policy limit), list, get, update, delete with tombstones,
aliases and their retirement, and reach across tenants and key levels."""

from __future__ import annotations

from typing import Any

from postroom.inbound.directory import UNKNOWN, Route, route_recipient
from postroom.testing.api import ApiWorld
from postroom.testing.mail import deliver, make_message


def _create(api: ApiWorld, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = api.client.post("/v1/identities", json=body, headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _route(api: ApiWorld, address: str) -> Route | Any:
    with api.app.db.read() as tx:
        return route_recipient(tx, api.app.keys(), address)


def _problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code, response.text


# --- create ---------------------------------------------------------------------------


def test_create_get_and_list_an_identity(api: ApiWorld) -> None:
    body = _create(
        api,
        api.headers(),
        username="alice",
        display_name="Alice Example",
        metadata={"team": "support", "crm": "42"},
    )
    assert body["id"].startswith("idn_") and body["address"] == "alice@localhost"
    assert (body["username"], body["display_name"], body["status"]) == (
        "alice",
        "Alice Example",
        "active",
    )
    assert body["metadata"] == {"team": "support", "crm": "42"}
    assert body["client_id"] is None and body["signature_text"] is None
    assert body["pause_reason"] is None and body["created_at"].endswith("Z")
    got = api.client.get(f"/v1/identities/{body['id']}", headers=api.headers())
    assert got.status_code == 200 and got.json() == body
    listed = api.client.get("/v1/identities", headers=api.headers()).json()
    assert [i["id"] for i in listed["data"]] == [body["id"]]
    with api.app.db.read() as tx:
        row = tx.fetchone(
            "SELECT actor_key_id, details_json FROM audit_log"
            " WHERE action = 'identity.create' AND target_id = %s",
            (body["id"],),
        )
    assert row is not None and row["actor_key_id"] is not None
    assert "@" not in row["details_json"]


def test_tenant_key_creates_in_its_tenant_with_the_suffix(api: ApiWorld) -> None:
    acme = api.tenant("acme")
    other = api.tenant("other")
    headers = api.headers("tenant", tenant_id=acme)
    body = _create(api, headers, username="bob")
    assert body["tenant_id"] == acme and body["address"] == "bob.acme@localhost"
    same = _create(api, headers, username="carol", tenant_id=acme)
    assert same["tenant_id"] == acme
    elsewhere = api.client.post(
        "/v1/identities", json={"username": "eve", "tenant_id": other}, headers=headers
    )
    _problem(elsewhere, 404, "tenant_not_found")


def test_partner_key_names_one_of_its_tenants(api: ApiWorld) -> None:
    partner = api.partner()
    mine = api.tenant("p-mine", partner_id=partner)
    theirs = api.tenant("p-theirs")
    headers = api.headers("partner", partner_id=partner)
    unnamed = api.client.post("/v1/identities", json={"username": "x"}, headers=headers)
    _problem(unnamed, 422, "tenant_required")
    created = _create(api, headers, username="x", tenant_id=mine)
    assert created["address"] == "x.p-mine@localhost"
    refused = api.client.post(
        "/v1/identities", json={"username": "x", "tenant_id": theirs}, headers=headers
    )
    _problem(refused, 404, "tenant_not_found")


def test_client_id_makes_create_idempotent(api: ApiWorld) -> None:
    body = {"username": "agent-7", "client_id": "crm:7", "metadata": {"k": "v"}}
    first = api.client.post("/v1/identities", json=body, headers=api.headers())
    again = api.client.post("/v1/identities", json=body, headers=api.headers())
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json() and first.json()["client_id"] == "crm:7"
    changed = api.client.post(
        "/v1/identities", json={**body, "display_name": "Other"}, headers=api.headers()
    )
    _problem(changed, 409, "client_id_conflict")
    # Another username under the same client_id is another body too.
    other = api.client.post(
        "/v1/identities", json={**body, "username": "agent-8"}, headers=api.headers()
    )
    _problem(other, 409, "client_id_conflict")
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM identities WHERE client_id = 'crm:7'") == 1
    for bad in ("x" * 129, "caf\u00e9", "tab\there", ""):
        refused = api.client.post(
            "/v1/identities",
            json={"username": "agent-9", "client_id": bad},
            headers=api.headers(),
        )
        _problem(refused, 422, "validation_failed")


def test_client_id_of_a_deleted_identity_is_a_conflict(api: ApiWorld) -> None:
    body = {"username": "gone", "client_id": "c-1"}
    created = _create(api, api.headers(), **body)
    api.client.delete(f"/v1/identities/{created['id']}", headers=api.headers())
    again = api.client.post("/v1/identities", json=body, headers=api.headers())
    _problem(again, 409, "client_id_conflict")


def test_idempotency_key_replays_the_create(api: ApiWorld) -> None:
    headers = {**api.headers(), "Idempotency-Key": "make-dave"}
    first = api.client.post("/v1/identities", json={"username": "dave"}, headers=headers)
    again = api.client.post("/v1/identities", json={"username": "dave"}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    other = api.client.post("/v1/identities", json={"username": "dave2"}, headers=headers)
    _problem(other, 409, "idempotency_conflict")


def test_metadata_is_bounded(api: ApiWorld) -> None:
    sixteen = {f"k{n}": "v" for n in range(16)}
    assert _create(api, api.headers(), username="m16", metadata=sixteen)["metadata"] == sixteen
    cases: list[tuple[dict[str, Any], str]] = [
        ({**sixteen, "k16": "v"}, "validation_failed"),  # 17 keys
        ({"k": "x" * 513}, "validation_failed"),  # 513 characters
        ({"k": "\u00e9" * 257}, "invalid_metadata"),  # 257 characters, 514 bytes
        ({"k" * 65: "v"}, "validation_failed"),  # key too long
        ({"": "v"}, "validation_failed"),  # empty key
        ({"k": 5}, "validation_failed"),  # not a string
        ({"k": ["a"]}, "validation_failed"),
        ({"bad\nkey": "v"}, "invalid_metadata"),
    ]
    for metadata, code in cases:
        response = api.client.post(
            "/v1/identities", json={"username": "m17", "metadata": metadata}, headers=api.headers()
        )
        _problem(response, 422, code)
    listed = api.client.get("/v1/identities", params={"username": "m17"}, headers=api.headers())
    assert listed.json()["data"] == []


def test_bad_bodies_are_refused_with_the_field_named(api: ApiWorld) -> None:
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"username": "ok", "colour": "red"}, 422, "validation_failed"),
        ({"username": "Not Valid"}, 422, "validation_failed"),
        ({"username": "x" * 25}, 422, "validation_failed"),
        ({}, 422, "validation_failed"),
        ({"username": "ok", "display_name": "two\nlines"}, 422, "invalid_display_name"),
        ({"username": "ok", "display_name": "nul\u0000"}, 400, "invalid_character"),
        ({"username": "ok", "domain": "bad domain!"}, 422, "invalid_domain"),
        ({"username": "ok", "domain": "unknown.example"}, 404, "domain_not_found"),
        ({"username": "ok", "tenant_id": "ten_nope"}, 404, "tenant_not_found"),
    ]
    for body, status, code in cases:
        response = api.client.post("/v1/identities", json=body, headers=api.headers())
        _problem(response, status, code)
    # A lone surrogate is valid JSON but not storable text.
    surrogate = api.client.post(
        "/v1/identities",
        content=b'{"username": "ok", "display_name": "\\ud800"}',
        headers={**api.headers(), "Content-Type": "application/json"},
    )
    _problem(surrogate, 422, "validation_failed")
    fields = api.client.post(
        "/v1/identities", json={"username": "ok", "colour": "red"}, headers=api.headers()
    ).json()["errors"]
    assert [e["field"] for e in fields] == ["body.colour"]
    assert api.client.get("/v1/identities", headers=api.headers()).json()["data"] == []


def test_taken_username_is_a_conflict(api: ApiWorld) -> None:
    _create(api, api.headers(), username="taken")
    again = api.client.post("/v1/identities", json={"username": "taken"}, headers=api.headers())
    _problem(again, 409, "username_taken")


def test_policy_max_identities_is_enforced(api: ApiWorld) -> None:
    tenant = api.tenant("limited")
    policy = api.client.patch(
        f"/v1/tenants/{tenant}/policy", json={"max_identities": 1}, headers=api.headers()
    )
    assert policy.status_code == 200
    headers = api.headers("tenant", tenant_id=tenant)
    first = _create(api, headers, username="one", client_id="one")
    refused = api.client.post("/v1/identities", json={"username": "two"}, headers=headers)
    _problem(refused, 409, "identity_limit")
    # A client_id replay is still answered at the limit: it creates nothing.
    replay = api.client.post(
        "/v1/identities", json={"username": "one", "client_id": "one"}, headers=headers
    )
    assert replay.status_code == 200 and replay.json()["id"] == first["id"]
    assert api.client.delete(f"/v1/identities/{first['id']}", headers=headers).status_code == 204
    assert _create(api, headers, username="two")["username"] == "two"


# --- list and get ---------------------------------------------------------------------


def test_list_filters_and_pages(api: ApiWorld) -> None:
    acme = api.tenant("acme")
    made = [_create(api, api.headers(), username=f"u{n}")["id"] for n in range(5)]
    acme_one = _create(api, api.headers(), username="u0", tenant_id=acme)["id"]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get("/v1/identities", params=params, headers=api.headers()).json()
        assert len(page["data"]) <= 2
        seen += [i["id"] for i in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted([*made, acme_one])
    by_name = api.client.get("/v1/identities", params={"username": "u0"}, headers=api.headers())
    assert sorted(i["id"] for i in by_name.json()["data"]) == sorted([made[0], acme_one])
    by_tenant = api.client.get("/v1/identities", params={"tenant_id": acme}, headers=api.headers())
    assert [i["id"] for i in by_tenant.json()["data"]] == [acme_one]
    api.client.patch(f"/v1/identities/{made[1]}", json={"status": "paused"}, headers=api.headers())
    paused = api.client.get("/v1/identities", params={"status": "paused"}, headers=api.headers())
    assert [i["id"] for i in paused.json()["data"]] == [made[1]]
    bad = api.client.get("/v1/identities", params={"status": "gone"}, headers=api.headers())
    _problem(bad, 422, "validation_failed")
    wrong_route = api.client.get(
        "/v1/tenants", params={"cursor": page_cursor(api)}, headers=api.headers()
    )
    _problem(wrong_route, 400, "invalid_cursor")


def page_cursor(api: ApiWorld) -> str:
    page = api.client.get("/v1/identities", params={"limit": 1}, headers=api.headers()).json()
    cursor: str = page["next_cursor"]
    return cursor


def test_deleted_and_system_identities_are_not_listed(api: ApiWorld) -> None:
    keep = _create(api, api.headers(), username="keep")["id"]
    gone = _create(api, api.headers(), username="gone")["id"]
    api.client.delete(f"/v1/identities/{gone}", headers=api.headers())
    now = api.app.clock.now_ms()
    with api.app.db.write() as tx:
        tenant_id = tx.fetchval("SELECT tenant_id FROM identities WHERE id = %s", (keep,))
        tx.execute(
            "INSERT INTO identities (id, tenant_id, username, display_name, is_system,"
            " created_at, updated_at) VALUES ('idn_system', %s, 'system', 'System', 1, %s, %s)",
            (tenant_id, now, now),
        )
    listed = api.client.get("/v1/identities", headers=api.headers()).json()["data"]
    assert [i["id"] for i in listed] == [keep]
    deleted = api.client.get("/v1/identities", params={"status": "deleted"}, headers=api.headers())
    rows = deleted.json()["data"]
    assert [(i["id"], i["status"], i["address"]) for i in rows] == [(gone, "deleted", None)]
    hidden = api.client.get("/v1/identities/idn_system", headers=api.headers())
    _problem(hidden, 404, "identity_not_found")


def test_reach_other_tenants_identities_answer_404(api: ApiWorld) -> None:
    acme, beta = api.tenant("acme"), api.tenant("beta")
    acme_key = api.headers("tenant", tenant_id=acme)
    beta_key = api.headers("tenant", tenant_id=beta)
    theirs = _create(api, beta_key, username="b")
    mine = _create(api, acme_key, username="a")
    alias = api.client.post(
        f"/v1/identities/{theirs['id']}/addresses", json={"local_part": "bx"}, headers=beta_key
    ).json()
    base = f"/v1/identities/{theirs['id']}"
    attempts = [
        api.client.get(base, headers=acme_key),
        api.client.patch(base, json={"display_name": "Hijack"}, headers=acme_key),
        api.client.delete(base, headers=acme_key),
        api.client.get(f"{base}/addresses", headers=acme_key),
        api.client.post(f"{base}/addresses", json={"local_part": "zz"}, headers=acme_key),
        api.client.delete(f"{base}/addresses/{alias['id']}", headers=acme_key),
        api.client.get("/v1/identities/idn_00000000000000000000000000", headers=acme_key),
    ]
    for response in attempts:
        _problem(response, 404, "identity_not_found")
    # An address of another identity is not found through one's own identity.
    via_mine = api.client.delete(
        f"/v1/identities/{mine['id']}/addresses/{alias['id']}", headers=acme_key
    )
    _problem(via_mine, 404, "address_not_found")
    listed = api.client.get("/v1/identities", headers=acme_key).json()["data"]
    assert [i["id"] for i in listed] == [mine["id"]]
    hidden_filter = api.client.get("/v1/identities", params={"tenant_id": beta}, headers=acme_key)
    _problem(hidden_filter, 404, "tenant_not_found")
    still = api.client.get(base, headers=beta_key).json()
    assert still["display_name"] == "b" and still["status"] == "active"


def test_identity_key_sees_only_its_own_identity(api: ApiWorld) -> None:
    me = _create(api, api.headers(), username="me")
    other = _create(api, api.headers(), username="other")
    headers = api.headers("identity", tenant_id=me["tenant_id"], identity_id=me["id"])
    listed = api.client.get("/v1/identities", headers=headers).json()["data"]
    assert [i["id"] for i in listed] == [me["id"]]
    assert api.client.get(f"/v1/identities/{me['id']}", headers=headers).status_code == 200
    addresses = api.client.get(f"/v1/identities/{me['id']}/addresses", headers=headers)
    assert [a["address"] for a in addresses.json()["data"]] == ["me@localhost"]
    hidden = api.client.get(f"/v1/identities/{other['id']}", headers=headers)
    _problem(hidden, 404, "identity_not_found")
    # Identity keys hold no identities:write.
    change = api.client.patch(f"/v1/identities/{me['id']}", json={}, headers=headers)
    _problem(change, 403, "permission_denied")


# --- update ---------------------------------------------------------------------------


def test_update_changes_fields_and_pauses(api: ApiWorld) -> None:
    created = _create(api, api.headers(), username="upd", metadata={"a": "1"})
    url = f"/v1/identities/{created['id']}"
    changed = api.client.patch(
        url,
        json={
            "display_name": "Updated Name",
            "signature_text": "--\nUpd\tTeam",
            "signature_html": "<p>Upd</p>",
            "metadata": {"b": "2"},
        },
        headers=api.headers(),
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["display_name"] == "Updated Name" and body["metadata"] == {"b": "2"}
    assert body["signature_text"] == "--\nUpd\tTeam" and body["signature_html"] == "<p>Upd</p>"
    assert api.client.get(url, headers=api.headers()).json() == body
    paused = api.client.patch(url, json={"status": "paused"}, headers=api.headers()).json()
    assert (paused["status"], paused["pause_reason"]) == ("paused", "manual")
    # A paused inbox still receives mail.
    assert isinstance(_route(api, "upd@localhost"), Route)
    cleared = api.client.patch(
        url,
        json={"status": "active", "signature_html": None, "metadata": None},
        headers=api.headers(),
    ).json()
    assert (cleared["status"], cleared["pause_reason"]) == ("active", None)
    assert cleared["signature_html"] is None and cleared["metadata"] == {}
    assert cleared["signature_text"] == "--\nUpd\tTeam"
    with api.app.db.read() as tx:
        count = tx.fetchval(
            "SELECT count(*) FROM audit_log WHERE action = 'identity.update' AND target_id = %s",
            (created["id"],),
        )
    assert count == 3


def test_update_refuses_bad_values(api: ApiWorld) -> None:
    created = _create(api, api.headers(), username="strict")
    url = f"/v1/identities/{created['id']}"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"colour": "red"}, "validation_failed"),
        ({"status": "deleted"}, "validation_failed"),
        ({"display_name": None}, "invalid_display_name"),
        ({"display_name": "a\nb"}, "invalid_display_name"),
        ({"signature_text": "esc\u001b[0m"}, "invalid_signature"),
        ({"signature_html": "bell\u0007"}, "invalid_signature"),
        ({"metadata": {f"k{n}": "v" for n in range(17)}}, "validation_failed"),
        ({"username": "renamed"}, "validation_failed"),
    ]
    for body, code in cases:
        _problem(api.client.patch(url, json=body, headers=api.headers()), 422, code)
    for raw in (b'{"signature_text": "\\udc80"}', b'{"metadata": {"k": "\\ud800"}}'):
        surrogate = api.client.patch(
            url, content=raw, headers={**api.headers(), "Content-Type": "application/json"}
        )
        assert surrogate.status_code == 422, surrogate.text
    assert api.client.get(url, headers=api.headers()).json() == created


def test_a_pause_the_platform_imposed_is_lifted_by_platform_keys_only(api: ApiWorld) -> None:
    tenant = api.tenant("abuse")
    headers = api.headers("tenant", tenant_id=tenant)
    created = _create(api, headers, username="spammy")
    with api.app.db.write() as tx:
        tx.execute(
            "UPDATE identities SET status = 'paused', pause_reason = 'abuse_threshold'"
            " WHERE id = %s",
            (created["id"],),
        )
    url = f"/v1/identities/{created['id']}"
    refused = api.client.patch(url, json={"status": "active"}, headers=headers)
    _problem(refused, 409, "pause_not_manual")
    lifted = api.client.patch(url, json={"status": "active"}, headers=api.headers())
    assert lifted.status_code == 200 and lifted.json()["status"] == "active"


# --- delete ---------------------------------------------------------------------------


def test_delete_tombstones_every_address_for_good(api: ApiWorld) -> None:
    acme = api.tenant("acme")
    headers = api.headers("tenant", tenant_id=acme)
    created = _create(api, headers, username="leaver")
    alias = api.client.post(
        f"/v1/identities/{created['id']}/addresses", json={"local_part": "old"}, headers=headers
    ).json()
    identity_key = api.headers("identity", tenant_id=acme, identity_id=created["id"])
    assert deliver(
        api.app,
        make_message(to="leaver.acme@localhost", message_id="m1@sender.example"),
        "leaver.acme@localhost",
    )
    deleted = api.client.delete(f"/v1/identities/{created['id']}", headers=headers)
    assert deleted.status_code == 204 and deleted.content == b""
    _problem(
        api.client.get(f"/v1/identities/{created['id']}", headers=headers),
        404,
        "identity_not_found",
    )
    _problem(
        api.client.delete(f"/v1/identities/{created['id']}", headers=headers),
        404,
        "identity_not_found",
    )
    keys = api.app.keys()
    with api.app.db.read() as tx:
        assert (
            tx.fetchval("SELECT count(*) FROM addresses WHERE identity_id = %s", (created["id"],))
            == 0
        )
        rows = tx.fetchall(
            "SELECT address_hash, identity_id, reason FROM address_tombstones ORDER BY 1"
        )
        status = tx.fetchval("SELECT status FROM identities WHERE id = %s", (created["id"],))
        audit = tx.fetchval(
            "SELECT details_json FROM audit_log WHERE action = 'identity.delete'"
            " AND target_id = %s",
            (created["id"],),
        )
    expected = sorted(keys.address_hash(a) for a in ("leaver.acme@localhost", "old.acme@localhost"))
    assert [r["address_hash"] for r in rows] == expected
    assert {(r["identity_id"], r["reason"]) for r in rows} == {(created["id"], "deleted")}
    assert status == "deleted" and "@" not in audit
    # Inbound mail is refused exactly like mail to an unknown address.
    for address in ("leaver.acme@localhost", "old.acme@localhost", "Leaver.Acme+tag@localhost"):
        assert _route(api, address) == UNKNOWN
    # The username is free, its address is not: never reassigned.
    again = api.client.post("/v1/identities", json={"username": "leaver"}, headers=headers)
    _problem(again, 409, "address_unavailable")
    other = _create(api, headers, username="stayer")
    reuse = api.client.post(
        f"/v1/identities/{other['id']}/addresses", json={"local_part": "old"}, headers=headers
    )
    _problem(reuse, 409, "address_unavailable")
    assert alias["address"] == "old.acme@localhost"
    # Its identity keys stop working.
    _problem(api.client.get("/v1/identities", headers=identity_key), 401, "invalid_api_key")


# --- addresses ------------------------------------------------------------------------


def test_aliases_are_added_listed_and_retired(api: ApiWorld) -> None:
    acme = api.tenant("acme")
    headers = api.headers("tenant", tenant_id=acme)
    created = _create(api, headers, username="desk")
    url = f"/v1/identities/{created['id']}/addresses"
    alias = api.client.post(url, json={"local_part": "Sales"}, headers=headers)
    assert alias.status_code == 201, alias.text
    body = alias.json()
    assert (body["address"], body["local_part"], body["role"], body["status"]) == (
        "sales.acme@localhost",
        "sales.acme",
        "alias",
        "active",
    )
    assert body["retired_at"] is None and body["id"].startswith("adr_")
    routed = _route(api, "sales.acme@localhost")
    assert isinstance(routed, Route) and routed.identity_id == created["id"]
    listed = api.client.get(url, headers=headers).json()["data"]
    assert [(a["role"], a["address"]) for a in listed] == [
        ("primary", "desk.acme@localhost"),
        ("alias", "sales.acme@localhost"),
    ]
    primary_id = listed[0]["id"]
    _problem(api.client.delete(f"{url}/{primary_id}", headers=headers), 409, "primary_address")
    retired = api.client.delete(f"{url}/{body['id']}", headers=headers)
    assert retired.status_code == 204
    # Retiring again changes nothing and says so the same way.
    assert api.client.delete(f"{url}/{body['id']}", headers=headers).status_code == 204
    after = {a["id"]: a for a in api.client.get(url, headers=headers).json()["data"]}
    assert after[body["id"]]["status"] == "retired"
    assert after[body["id"]]["retired_at"].endswith("Z")
    assert after[primary_id]["status"] == "active"
    assert _route(api, "sales.acme@localhost") == UNKNOWN
    # A retired address is never reassigned, not even to its own identity.
    again = api.client.post(url, json={"local_part": "sales"}, headers=headers)
    _problem(again, 409, "address_unavailable")
    _problem(api.client.delete(f"{url}/adr_nope", headers=headers), 404, "address_not_found")
    with api.app.db.read() as tx:
        actions = [
            r["action"]
            for r in tx.fetchall(
                "SELECT action FROM audit_log WHERE target_id = %s ORDER BY created_at, id",
                (body["id"],),
            )
        ]
    assert actions == ["address.create", "address.retire"]


def test_alias_pages(api: ApiWorld) -> None:
    created = _create(api, api.headers(), username="many")
    url = f"/v1/identities/{created['id']}/addresses"
    for n in range(4):
        api.client.post(url, json={"local_part": f"many{n}"}, headers=api.headers())
    first = api.client.get(url, params={"limit": 3}, headers=api.headers()).json()
    second = api.client.get(
        url, params={"limit": 3, "cursor": first["next_cursor"]}, headers=api.headers()
    ).json()
    assert len(first["data"]) == 3 and len(second["data"]) == 2
    assert second["next_cursor"] is None
    assert len({a["id"] for a in first["data"] + second["data"]}) == 5


def test_alias_local_parts_and_domains(api: ApiWorld) -> None:
    acme, beta = api.tenant("acme"), api.tenant("beta")
    headers = api.headers("tenant", tenant_id=acme)
    domain = api.client.post(
        "/v1/domains", json={"name": "acme.example", "method": "dns_records"}, headers=headers
    )
    assert domain.status_code == 201
    api.client.post(
        "/v1/domains",
        json={"name": "beta.example", "method": "dns_records"},
        headers=api.headers("tenant", tenant_id=beta),
    )
    created = _create(api, headers, username="info")
    url = f"/v1/identities/{created['id']}/addresses"
    own = api.client.post(
        url, json={"local_part": "hello.world", "domain": "ACME.example"}, headers=headers
    )
    assert own.status_code == 201, own.text
    # On the tenant's own domain the local part is used as given: no suffix.
    assert own.json()["address"] == "hello.world@acme.example"
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"local_part": "a..b", "domain": "acme.example"}, 422, "invalid_local_part"),
        ({"local_part": "a+b", "domain": "acme.example"}, 422, "invalid_local_part"),
        ({"local_part": "trailing.", "domain": "acme.example"}, 422, "invalid_local_part"),
        ({"local_part": "x" * 25}, 422, "invalid_local_part"),  # platform: username rules
        ({"local_part": "x" * 65}, 422, "validation_failed"),
        ({"local_part": "ok", "domain": "beta.example"}, 404, "domain_not_found"),
        ({"local_part": "ok", "domain": "nowhere.example"}, 404, "domain_not_found"),
        ({"local_part": "ok", "domain": "bad domain"}, 422, "invalid_domain"),
        ({"local_part": "ok", "extra": 1}, 422, "validation_failed"),
        ({"local_part": "hello.world", "domain": "acme.example"}, 409, "address_unavailable"),
        ({"local_part": "info"}, 409, "address_unavailable"),  # the primary itself
    ]
    for body, status, code in cases:
        _problem(api.client.post(url, json=body, headers=headers), status, code)
    listed = api.client.get(url, headers=headers).json()["data"]
    assert len(listed) == 2

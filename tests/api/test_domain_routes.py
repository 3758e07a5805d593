"""Domains over the API: adding one (DKIM key, ownership token), the DNS records to
publish, names that are refused, and reach across tenants and key levels."""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.hashes import SHA256

from postroom.tenancy.domains import dkim_private_key
from postroom.testing.api import ApiWorld


def _problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code, response.text


def _add(api: ApiWorld, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = api.client.post("/v1/domains", json=body, headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_a_new_domain_is_pending_with_its_records(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    headers = api.headers("tenant", tenant_id=tenant)
    body = _add(api, headers, name="Example.COM.", method="dns_records")
    assert body["id"].startswith("dom_") and body["name"] == "example.com"
    assert (body["tenant_id"], body["kind"], body["method"], body["state"]) == (
        tenant,
        "external",
        "dns_records",
        "pending",
    )
    assert body["receiving"] is True and body["sending"] is True
    assert body["dkim_selector"] == "pr1" and body["ownership_verified_at"] is None
    got = api.client.get(f"/v1/domains/{body['id']}", headers=headers)
    assert got.status_code == 200 and got.json() == body
    records = {r["purpose"]: r for r in body["records"]}
    assert list(records) == ["inbound", "spf", "dkim", "dmarc", "ownership"]
    assert {r["status"] for r in body["records"]} == {"unverified"}
    host = api.app.settings.smtp_hostname
    assert (records["inbound"]["type"], records["inbound"]["name"]) == ("MX", "example.com")
    assert (records["inbound"]["value"], records["inbound"]["priority"]) == (host, 10)
    assert records["spf"] == {
        "type": "TXT",
        "name": "example.com",
        "value": "v=spf1 mx ~all",
        "priority": None,
        "purpose": "spf",
        "status": "unverified",
    }
    assert records["dkim"]["name"] == "pr1._domainkey.example.com"
    assert records["dmarc"]["name"] == "_dmarc.example.com"
    assert records["dmarc"]["value"].startswith("v=DMARC1; p=none; rua=mailto:")
    assert records["ownership"]["name"] == "_postroom.example.com"
    with api.app.db.read() as tx:
        row = tx.fetchone(
            "SELECT ownership_token, dkim_private_sealed, dkim_public FROM domains WHERE id = %s",
            (body["id"],),
        )
        audit = tx.fetchone(
            "SELECT actor_key_id, tenant_id FROM audit_log WHERE action = 'domain.create'"
            " AND target_id = %s",
            (body["id"],),
        )
    assert row is not None and audit is not None and audit["tenant_id"] == tenant
    assert records["ownership"]["value"] == row["ownership_token"]
    assert len(row["ownership_token"]) >= 32
    # The private key is sealed at rest, and is the pair of the published public key.
    assert row["dkim_private_sealed"].startswith("pr1.")
    assert "PRIVATE" not in row["dkim_private_sealed"]
    prefix = "v=DKIM1; k=rsa; p="
    assert records["dkim"]["value"] == prefix + row["dkim_public"]
    public = serialization.load_der_public_key(base64.b64decode(row["dkim_public"]))
    assert isinstance(public, rsa.RSAPublicKey) and public.key_size == 2048
    opened = dkim_private_key(api.app, body["id"])
    assert opened is not None and opened[0] == "pr1"
    private = serialization.load_pem_private_key(opened[1], password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    signature = private.sign(b"probe", padding.PKCS1v15(), SHA256())
    public.verify(signature, b"probe", padding.PKCS1v15(), SHA256())


def test_records_follow_the_method(api: ApiWorld) -> None:
    headers = api.headers("tenant", tenant_id=api.tenant("acme"))
    send_only = _add(api, headers, name="send.example", method="send_only")
    relay = _add(api, headers, name="relay.example", method="smtp_relay")
    host = api.app.settings.smtp_hostname
    send_records = {r["purpose"]: r["value"] for r in send_only["records"]}
    assert send_only["receiving"] is False and send_only["sending"] is True
    assert "inbound" not in send_records
    assert send_records["spf"] == f"v=spf1 a:{host} ~all"
    relay_records = {r["purpose"] for r in relay["records"]}
    assert relay_records == {"dkim", "dmarc", "ownership"}


def test_names_are_global_and_the_owner_is_not_revealed(api: ApiWorld) -> None:
    acme, beta = api.tenant("acme"), api.tenant("beta")
    _add(api, api.headers("tenant", tenant_id=acme), name="shared.example", method="send_only")
    beta_key = api.headers("tenant", tenant_id=beta)
    for name in ("shared.example", "SHARED.example."):
        taken = api.client.post(
            "/v1/domains", json={"name": name, "method": "dns_records"}, headers=beta_key
        )
        _problem(taken, 409, "domain_taken")
        assert acme not in taken.text and "acme" not in taken.text
    platform = api.app.settings.platform_domain
    for name in (platform, platform.upper()):
        refused = api.client.post(
            "/v1/domains", json={"name": name, "method": "dns_records"}, headers=beta_key
        )
        _problem(refused, 409, "domain_taken")
    # The owner's own second attempt gets the same answer.
    again = api.client.post(
        "/v1/domains",
        json={"name": "shared.example", "method": "send_only"},
        headers=api.headers("tenant", tenant_id=acme),
    )
    _problem(again, 409, "domain_taken")


def test_bad_bodies_are_refused(api: ApiWorld) -> None:
    headers = api.headers("tenant", tenant_id=api.tenant("acme"))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "bad domain", "method": "dns_records"}, "invalid_domain"),
        ({"name": "-lead.example", "method": "dns_records"}, "invalid_domain"),
        ({"name": "a..b.example", "method": "dns_records"}, "invalid_domain"),
        ({"name": "1.2.3.4", "method": "dns_records"}, "invalid_domain"),
        ({"name": "single", "method": "dns_records"}, "invalid_domain"),
        ({"name": "x" * 64 + ".example", "method": "dns_records"}, "invalid_domain"),
        ({"name": "under_score.example", "method": "dns_records"}, "invalid_domain"),
        ({"name": "ok.example", "method": "cloudflare_zone"}, "validation_failed"),
        ({"name": "ok.example"}, "validation_failed"),
        ({"name": "ok.example", "method": "send_only", "extra": True}, "validation_failed"),
        ({"name": "", "method": "send_only"}, "validation_failed"),
        ({"name": "x" * 254, "method": "send_only"}, "validation_failed"),
    ]
    for body, code in cases:
        _problem(api.client.post("/v1/domains", json=body, headers=headers), 422, code)
    listed = api.client.get("/v1/domains", headers=headers).json()["data"]
    assert [d["kind"] for d in listed] == ["platform"]


def test_international_names_are_stored_as_a_labels(api: ApiWorld) -> None:
    headers = api.headers("tenant", tenant_id=api.tenant("acme"))
    body = _add(api, headers, name="Bücher.example", method="send_only")
    assert body["name"] == "xn--bcher-kva.example"
    assert {r["name"] for r in body["records"]} >= {"_dmarc.xn--bcher-kva.example"}


def test_reach_and_the_platform_domain(api: ApiWorld) -> None:
    partner = api.partner()
    acme = api.tenant("acme", partner_id=partner)
    beta = api.tenant("beta")
    acme_key = api.headers("tenant", tenant_id=acme)
    beta_key = api.headers("tenant", tenant_id=beta)
    partner_key = api.headers("partner", partner_id=partner)
    mine = _add(api, acme_key, name="acme.example", method="dns_records")
    theirs = _add(api, api.headers(), name="beta.example", method="send_only", tenant_id=beta)
    assert theirs["tenant_id"] == beta
    by_partner = _add(api, partner_key, name="acme2.example", method="send_only", tenant_id=acme)
    refused = api.client.post(
        "/v1/domains",
        json={"name": "x.example", "method": "send_only", "tenant_id": beta},
        headers=partner_key,
    )
    _problem(refused, 404, "tenant_not_found")
    unnamed = api.client.post(
        "/v1/domains", json={"name": "y.example", "method": "send_only"}, headers=partner_key
    )
    _problem(unnamed, 422, "tenant_required")

    def names(headers: dict[str, str]) -> list[str]:
        page = api.client.get("/v1/domains", headers=headers).json()
        return sorted(d["name"] for d in page["data"])

    platform = api.app.settings.platform_domain
    assert names(acme_key) == sorted(["acme.example", "acme2.example", platform])
    assert names(partner_key) == sorted(["acme.example", "acme2.example", platform])
    assert names(beta_key) == sorted(["beta.example", platform])
    assert names(api.headers()) == sorted(
        ["acme.example", "acme2.example", "beta.example", platform]
    )
    for domain_id in (theirs["id"], "dom_00000000000000000000000000", "nothing"):
        _problem(
            api.client.get(f"/v1/domains/{domain_id}", headers=acme_key), 404, "domain_not_found"
        )
    _problem(api.client.get(f"/v1/domains/{mine['id']}", headers=beta_key), 404, "domain_not_found")
    assert api.client.get(f"/v1/domains/{by_partner['id']}", headers=partner_key).status_code == 200
    platform_entry = next(
        d
        for d in api.client.get("/v1/domains", headers=beta_key).json()["data"]
        if d["kind"] == "platform"
    )
    assert platform_entry["tenant_id"] is None
    got = api.client.get(f"/v1/domains/{platform_entry['id']}", headers=beta_key).json()
    assert got["name"] == platform and got["records"] == [] and got["method"] == "platform"
    # Identity keys cannot hold domains:read.
    identity_id, _address = api.identity("solo", tenant_id=acme)
    identity_key = api.headers("identity", tenant_id=acme, identity_id=identity_id)
    _problem(api.client.get("/v1/domains", headers=identity_key), 403, "permission_denied")


def test_domains_page_and_create_is_idempotent(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    headers = {**api.headers("tenant", tenant_id=tenant), "Idempotency-Key": "add-d0"}
    first = api.client.post(
        "/v1/domains", json={"name": "d0.example", "method": "send_only"}, headers=headers
    )
    again = api.client.post(
        "/v1/domains", json={"name": "d0.example", "method": "send_only"}, headers=headers
    )
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    plain = api.headers("tenant", tenant_id=tenant)
    for n in range(1, 4):
        _add(api, plain, name=f"d{n}.example", method="send_only")
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get("/v1/domains", params=params, headers=plain).json()
        seen += [d["name"] for d in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5  # four domains and the platform domain


def test_identities_use_the_tenants_domain(api: ApiWorld) -> None:
    tenant = api.tenant("acme")
    headers = api.headers("tenant", tenant_id=tenant)
    _add(api, headers, name="acme.example", method="dns_records")
    made = api.client.post(
        "/v1/identities", json={"username": "sales", "domain": "acme.example"}, headers=headers
    )
    assert made.status_code == 201 and made.json()["address"] == "sales.acme@acme.example"
    other = api.headers("tenant", tenant_id=api.tenant("beta"))
    refused = api.client.post(
        "/v1/identities", json={"username": "sales", "domain": "acme.example"}, headers=other
    )
    _problem(refused, 404, "domain_not_found")

"""The service routes: liveness, readiness, metrics, OpenAPI; and the API over real HTTP."""

from __future__ import annotations

import smtplib
from typing import Any

import httpx

from postroom.testing.api import ApiWorld


def test_health_and_readiness(api: ApiWorld) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200
    assert {c["name"]: c["ok"] for c in ready.json()["checks"]} == {
        "database": True,
        "migrations": True,
        "blobs": True,
    }


def test_readiness_fails_when_migrations_are_behind(api: ApiWorld) -> None:
    with api.app.db.write() as tx:
        top = tx.fetchval("SELECT MAX(version) FROM schema_migrations")
        tx.execute("DELETE FROM schema_migrations WHERE version = %s", (top,))
    ready = api.client.get("/readyz")
    assert ready.status_code == 503
    body = ready.json()
    assert body["status"] == "not_ready"
    migrations = next(c for c in body["checks"] if c["name"] == "migrations")
    assert migrations["ok"] is False and f"build at {top}" in migrations["detail"]


def test_readiness_fails_when_the_blob_store_cannot_be_written(api: ApiWorld) -> None:
    root = api.app.settings.blobs_path
    aside = root.with_name("blobs-aside")
    root.mkdir(parents=True, exist_ok=True)
    root.rename(aside)
    root.write_bytes(b"not a folder")  # what root cannot write into either
    try:
        ready = api.client.get("/readyz")
    finally:
        root.unlink()
        aside.rename(root)
    checks = {c["name"]: c["ok"] for c in ready.json()["checks"]}
    assert ready.status_code == 503 and checks == {
        "database": True,
        "migrations": True,
        "blobs": False,
    }
    assert api.client.get("/readyz").status_code == 200


def test_metrics_count_requests_by_route_and_status(api: ApiWorld) -> None:
    api.client.get("/v1/tenants", headers=api.headers())
    api.client.get("/v1/tenants")  # 401
    text = api.client.get("/metrics").text
    assert 'postroom_http_requests_total{method="GET",route="/v1/tenants",status="200"} 1.0' in text
    assert 'postroom_http_requests_total{method="GET",route="/v1/tenants",status="401"} 1.0' in text
    assert "postroom_http_request_duration_seconds_bucket" in text
    assert "postroom_jobs" in text


def test_openapi_lists_every_route_of_the_table(api: ApiWorld) -> None:
    from postroom.api.routes import ROUTES

    schema = api.client.get("/openapi.json").json()
    assert schema["openapi"].startswith("3.1")
    documented = {
        (method.upper(), path) for path, item in schema["paths"].items() for method in item
    }
    for spec in ROUTES.values():
        assert (spec.method, spec.path) in documented, spec.name
    assert api.client.get("/docs").status_code == 200
    # Every error answer is documented as a problem, and key-protected routes say so.
    create = schema["paths"]["/v1/tenants"]["post"]
    assert set(create["responses"]["422"]["content"]) == {"application/problem+json"}
    assert create["security"] == [{"bearer": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def test_no_key_and_a_malformed_key_are_401_problems(api: ApiWorld) -> None:
    none = api.client.get("/v1/tenants")
    assert none.status_code == 401 and none.json()["code"] == "invalid_api_key"
    assert none.headers["www-authenticate"].startswith("Bearer")
    bad = api.client.get("/v1/tenants", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.json()["code"] == "invalid_api_key"
    basic = api.client.get("/v1/tenants", headers={"Authorization": "Basic Zm9vOmJhcg=="})
    assert basic.status_code == 401


def test_a_key_lacking_the_permission_is_403_and_audited(api: ApiWorld) -> None:
    tenant = api.tenant("perm")
    reader = api.headers("tenant", tenant_id=tenant, permissions=["identities:read"])
    denied = api.client.get(f"/v1/tenants/{tenant}", headers=reader)
    assert denied.status_code == 403 and denied.json()["code"] == "permission_denied"
    with api.app.db.read() as tx:
        row = tx.fetchone(
            "SELECT target_id, details_json FROM audit_log WHERE action = 'auth.denied'"
        )
    assert row is not None and row["target_id"] == "tenants.get"


def test_over_real_http_smtp_mail_is_counted(ready_app: Any, api_server: Any) -> None:
    from postroom.inbound.smtp import SMTPServer
    from postroom.tenancy.service import create_identity

    create_identity(ready_app, "metered")
    smtp = SMTPServer(ready_app, host="127.0.0.1", port=0)
    smtp.start()
    try:
        with smtplib.SMTP("127.0.0.1", smtp.port) as client:
            client.sendmail("a@example.org", ["metered@localhost"], b"Subject: x\r\n\r\nx\r\n")
            refused = client.sendmail(
                "a@example.org", ["metered@localhost", "nobody@localhost"], b"S: y\r\n\r\ny\r\n"
            )
            assert list(refused) == ["nobody@localhost"]
    finally:
        smtp.stop()
    text = httpx.get(f"{api_server.url}/metrics", timeout=10).text
    assert 'postroom_smtp_messages_total{outcome="accepted"} 2.0' in text
    assert 'postroom_smtp_recipients_total{outcome="refused"} 1.0' in text
    assert httpx.get(f"{api_server.url}/healthz", timeout=10).json() == {"status": "ok"}

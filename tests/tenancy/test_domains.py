"""A tenant's own domains, on both engines: names, the DKIM key pair sealed at rest, the
DNS records each method needs."""

from __future__ import annotations

import pytest

from postroom.app import App
from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.keyring import SealError
from postroom.store import tenancy as directory
from postroom.tenancy import domains, service


def test_create_domain_seals_the_dkim_key_for_its_row(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    detail = domains.create_domain(ready_app, "Mail.Acme.Example", "dns_records", tenant="acme")
    assert detail.domain.name == "mail.acme.example" and detail.domain.tenant_id == acme.id
    assert detail.domain.state == "pending" and detail.domain.kind == "external"
    assert detail.dkim_selector == domains.DKIM_SELECTOR
    opened = domains.dkim_private_key(ready_app, detail.domain.id)
    assert opened is not None and opened[1].startswith(b"-----BEGIN PRIVATE KEY-----")
    with ready_app.db.read() as tx:
        stored = directory.get_domain_dkim(tx, detail.domain.id)
    assert stored is not None
    # Associated data names the row: the sealed key does not open for another domain.
    with pytest.raises(SealError):
        ready_app.keys().open(stored[1], "domains", "dkim_private_sealed", "dom_other")
    platform = directory.get_platform_domain
    with ready_app.db.read() as tx:
        found = platform(tx)
    assert found is not None and domains.dkim_private_key(ready_app, found.id) is None


def test_records_per_method(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    host = ready_app.settings.smtp_hostname
    expected = {
        "dns_records": ["inbound", "spf", "dkim", "dmarc", "ownership"],
        "send_only": ["spf", "dkim", "dmarc", "ownership"],
        "smtp_relay": ["dkim", "dmarc", "ownership"],
    }
    for method, purposes in expected.items():
        detail = domains.create_domain(
            ready_app, f"{method.replace('_', '-')}.example", method, tenant="acme"
        )
        records = domains.dns_records(ready_app.settings, detail)
        assert [r.purpose for r in records] == purposes
        by_purpose = {r.purpose: r for r in records}
        if "inbound" in by_purpose:
            assert (by_purpose["inbound"].value, by_purpose["inbound"].priority) == (host, 10)
        assert all(r.status == "unverified" for r in records)
        assert by_purpose["ownership"].value == detail.ownership_token


def test_observed_status_comes_from_records_json(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    detail = domains.create_domain(ready_app, "seen.example", "send_only", tenant="acme")
    with ready_app.db.write() as tx:
        tx.execute(
            "UPDATE domains SET records_json = %s WHERE id = %s",
            ('[{"purpose": "dkim", "status": "verified"}]', detail.domain.id),
        )
        reread = directory.get_domain_detail(tx, detail.domain.id)
    assert reread is not None
    statuses = {r.purpose: r.status for r in domains.dns_records(ready_app.settings, reread)}
    assert statuses["dkim"] == "verified" and statuses["spf"] == "unverified"


def test_names_and_methods_are_checked(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    for name in ("localhost", "LOCALHOST."):
        with pytest.raises(Conflict) as taken:
            domains.create_domain(ready_app, name, "dns_records", tenant="acme")
        assert taken.value.code == "domain_taken"
    for name in ("single", "1.2.3.4", "bad name.example", "", "a" * 250 + ".example"):
        with pytest.raises(InvalidInput) as bad:
            domains.create_domain(ready_app, name, "dns_records", tenant="acme")
        assert bad.value.code == "invalid_domain"
    with pytest.raises(InvalidInput) as method:
        domains.create_domain(ready_app, "ok.example", "platform", tenant="acme")
    assert method.value.code == "invalid_method"
    with pytest.raises(NotFound):
        domains.create_domain(ready_app, "ok.example", "send_only", tenant="nobody")
    with ready_app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM domains") == 1


def test_a_suspended_tenant_adds_no_domain(ready_app: App) -> None:
    from postroom.tenancy.tenants import TenantChange, update_tenant

    acme = service.create_tenant(ready_app, "acme")
    update_tenant(
        ready_app,
        acme.id,
        TenantChange(status="suspended"),
        actor_level="platform",
        actor_key_id=None,
    )
    with pytest.raises(Conflict) as caught:
        domains.create_domain(ready_app, "acme.example", "send_only", tenant="acme")
    assert caught.value.code == "tenant_not_active"

"""Tenants and identities on both engines: creation rules, addresses, tombstones, audit."""

from __future__ import annotations

import pytest

from postroom.app import App
from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.ids import is_id, new_id
from postroom.store import audit as audit_rows
from postroom.store import tenancy as directory
from postroom.tenancy import service


def _count(app: App, sql: str) -> int:
    with app.db.read() as tx:
        return int(tx.fetchval(sql))


def _add_domain(app: App, name: str, tenant_id: str, state: str = "healthy") -> None:
    with app.db.write() as tx:
        directory.insert_domain(
            tx,
            domain_id=new_id("dom"),
            tenant_id=tenant_id,
            name=name,
            kind="external",
            method="dns_records",
            routing_mode="literal",
            receiving=True,
            sending=True,
            state=state,
            now=app.clock.now_ms(),
        )


# --- tenants --------------------------------------------------------------------------


def test_create_tenant(ready_app: App) -> None:
    tenant = service.create_tenant(ready_app, "acme", "Acme Inc", mode="test")
    assert is_id(tenant.id, "ten")
    assert (tenant.slug, tenant.name, tenant.mode, tenant.status) == (
        "acme",
        "Acme Inc",
        "test",
        "active",
    )
    assert tenant.address_suffix == ".acme"
    assert not tenant.is_default
    assert service.get_tenant(ready_app, "acme") == tenant
    assert service.get_tenant(ready_app, tenant.id) == tenant
    assert [t.slug for t in service.list_tenants(ready_app)] == ["default", "acme"]
    with ready_app.db.read() as tx:
        entries = audit_rows.list_entries(tx, tenant_id=tenant.id, action="tenant.create")
    assert [(e.target_id, e.actor) for e in entries] == [(tenant.id, "cli")]


@pytest.mark.parametrize("slug", ["a", "Acme", "-acme", "acme_inc", "a" * 33, "acmé", ""])
def test_bad_slugs_are_refused(ready_app: App, slug: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        service.create_tenant(ready_app, slug)
    assert caught.value.code == "invalid_slug"


def test_taken_slug_is_a_conflict(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    with pytest.raises(Conflict) as caught:
        service.create_tenant(ready_app, "acme")
    assert caught.value.code == "slug_taken"
    # The default tenant holds the slug "default".
    with pytest.raises(Conflict):
        service.create_tenant(ready_app, "default")
    assert _count(ready_app, "SELECT count(*) FROM tenants") == 2


def test_bad_tenant_name_and_mode(ready_app: App) -> None:
    with pytest.raises(InvalidInput):
        service.create_tenant(ready_app, "acme", "two\nlines")
    with pytest.raises(InvalidInput):
        service.create_tenant(ready_app, "acme", mode="prod")


def test_unknown_tenant(ready_app: App) -> None:
    for ref in ("nope", new_id("ten")):
        with pytest.raises(NotFound) as caught:
            service.get_tenant(ready_app, ref)
        assert caught.value.code == "tenant_not_found"


def test_partner_tenants_are_bounded(ready_app: App) -> None:
    with ready_app.db.write() as tx:
        partner = directory.insert_partner(
            tx, partner_id=new_id("ptn"), name="P", now=0, max_tenants=1
        )
    first = service.create_tenant(ready_app, "first", partner_id=partner.id)
    assert first.partner_id == partner.id
    with pytest.raises(Conflict) as caught:
        service.create_tenant(ready_app, "second", partner_id=partner.id)
    assert caught.value.code == "partner_tenant_limit"
    with pytest.raises(NotFound):
        service.create_tenant(ready_app, "third", partner_id=new_id("ptn"))


# --- identities -----------------------------------------------------------------------


def test_create_identity_in_the_default_tenant(ready_app: App) -> None:
    created = service.create_identity(ready_app, "alice", display_name="Alice Example")
    identity, address = created.identity, created.address
    assert is_id(identity.id, "idn") and is_id(address.id, "adr")
    assert identity.display_name == "Alice Example"
    assert address.address == "alice@localhost"
    assert (address.local_part, address.role, address.status) == ("alice", "primary", "active")
    with ready_app.db.read() as tx:
        default = directory.get_default_tenant(tx)
        route = directory.lookup_address(tx, "alice@localhost")
    assert default is not None and identity.tenant_id == default.id
    assert route is not None
    assert (route.identity_id, route.tenant_id, route.address_id) == (
        identity.id,
        default.id,
        address.id,
    )
    assert (route.address_status, route.identity_status, route.tenant_status) == (
        "active",
        "active",
        "active",
    )
    assert route.tenant_mode == "live"


def test_display_name_defaults_to_the_username(ready_app: App) -> None:
    assert service.create_identity(ready_app, "bob").identity.display_name == "bob"


def test_identity_of_another_tenant_gets_the_tenant_suffix(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme", mode="test")
    created = service.create_identity(ready_app, "alice", tenant="acme")
    assert created.address.address == "alice.acme@localhost"
    assert created.identity.tenant_id == acme.id
    with ready_app.db.read() as tx:
        route = directory.lookup_address(tx, "alice.acme@localhost")
    assert route is not None and route.tenant_mode == "test"
    # The same username is free in each tenant: the suffix keeps the addresses apart.
    assert service.create_identity(ready_app, "alice").address.address == "alice@localhost"


def test_lookup_of_an_unknown_address_is_none(ready_app: App) -> None:
    service.create_identity(ready_app, "alice")
    with ready_app.db.read() as tx:
        assert directory.lookup_address(tx, "nobody@localhost") is None
        assert directory.lookup_address(tx, "alice@elsewhere.example") is None


def test_taken_username_is_a_conflict(ready_app: App) -> None:
    service.create_identity(ready_app, "alice")
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "alice")
    assert caught.value.code == "username_taken"
    assert _count(ready_app, "SELECT count(*) FROM identities") == 1


@pytest.mark.parametrize(
    "username",
    ["Bad Name!", "Alice", "", "-alice", ".alice", "a" * 25, "al ice", "al@ice", "ålice"],
)
def test_bad_usernames_are_refused(ready_app: App, username: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        service.create_identity(ready_app, username)
    assert caught.value.code == "invalid_username"


@pytest.mark.parametrize("username", ["a", "a" * 24, "j.doe", "agent_7", "ops-bot", "0day"])
def test_good_usernames_are_accepted(ready_app: App, username: str) -> None:
    assert service.create_identity(ready_app, username).identity.username == username


def test_tombstoned_address_is_never_handed_out_again(ready_app: App) -> None:
    with ready_app.db.write() as tx:
        directory.insert_tombstone(
            tx, address_hash=ready_app.keys().address_hash("ghost@localhost"), reason="erased"
        )
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "ghost")
    assert caught.value.code == "address_unavailable"
    assert _count(ready_app, "SELECT count(*) FROM identities") == 0


def test_an_address_in_use_refuses_the_identity_and_leaves_nothing(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    # "bob.acme" in the default tenant spells the address "bob" of tenant acme would get.
    service.create_identity(ready_app, "bob.acme")
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "bob", tenant="acme")
    assert caught.value.code == "address_unavailable"
    assert _count(ready_app, "SELECT count(*) FROM identities") == 1
    assert _count(ready_app, "SELECT count(*) FROM addresses") == 1


def test_a_retired_address_is_not_reassigned(ready_app: App) -> None:
    created = service.create_identity(ready_app, "carol")
    with ready_app.db.write() as tx:
        tx.execute("UPDATE identities SET status = 'deleted' WHERE id = %s", (created.identity.id,))
        tx.execute("UPDATE addresses SET status = 'retired' WHERE id = %s", (created.address.id,))
    # The username is free again, but its address is not.
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "carol")
    assert caught.value.code == "address_unavailable"


def test_domain_of_another_tenant_is_refused(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    service.create_tenant(ready_app, "beta")
    _add_domain(ready_app, "acme.example", acme.id)
    with pytest.raises(NotFound) as caught:
        service.create_identity(ready_app, "mallory", tenant="beta", domain="acme.example")
    assert caught.value.code == "domain_not_found"
    with pytest.raises(NotFound):
        service.create_identity(ready_app, "mallory", domain="acme.example")
    created = service.create_identity(ready_app, "sales", tenant="acme", domain="ACME.example.")
    assert created.address.address == "sales.acme@acme.example"


def test_unknown_or_malformed_domain_is_refused(ready_app: App) -> None:
    with pytest.raises(NotFound) as caught:
        service.create_identity(ready_app, "alice", domain="unknown.example")
    assert caught.value.code == "domain_not_found"
    with pytest.raises(InvalidInput) as bad:
        service.create_identity(ready_app, "alice", domain="bad domain!")
    assert bad.value.code == "invalid_domain"


def test_platform_domain_is_usable_by_every_tenant(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    created = service.create_identity(ready_app, "alice", tenant="acme", domain="LocalHost")
    assert created.address.address == "alice.acme@localhost"


def test_removed_domain_takes_no_new_addresses(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    _add_domain(ready_app, "old.example", acme.id, state="removing")
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "x", tenant="acme", domain="old.example")
    assert caught.value.code == "domain_not_usable"


def test_international_domain_is_stored_as_a_label(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    _add_domain(ready_app, "xn--bcher-kva.example", acme.id)
    created = service.create_identity(ready_app, "info", tenant="acme", domain="Bücher.example")
    assert created.address.address == "info.acme@xn--bcher-kva.example"


def test_bad_display_names(ready_app: App) -> None:
    for name in ("two\nlines", "x" * 79, "  "):
        with pytest.raises(InvalidInput) as caught:
            service.create_identity(ready_app, "alice", display_name=name)
        assert caught.value.code == "invalid_display_name"


def test_suspended_tenant_gets_no_identities(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    with ready_app.db.write() as tx:
        tx.execute("UPDATE tenants SET status = 'suspended' WHERE id = %s", (acme.id,))
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "alice", tenant="acme")
    assert caught.value.code == "tenant_not_active"


def test_without_init_there_is_no_default_tenant(app: App) -> None:
    with pytest.raises(NotFound) as caught:
        service.create_identity(app, "alice")
    assert caught.value.code == "tenant_not_found"
    assert "postroom init" in caught.value.message


def test_identity_creation_is_audited_without_the_address(ready_app: App) -> None:
    created = service.create_identity(ready_app, "alice")
    with ready_app.db.read() as tx:
        entries = audit_rows.list_entries(tx, action="identity.create")
    assert len(entries) == 1
    entry = entries[0]
    assert (entry.target_type, entry.target_id, entry.tenant_id, entry.actor) == (
        "identity",
        created.identity.id,
        created.identity.tenant_id,
        "cli",
    )
    assert entry.details == {
        "address_id": created.address.id,
        "domain_id": created.address.domain_id,
    }
    with ready_app.db.read() as tx:
        raw = tx.fetchval("SELECT details_json FROM audit_log WHERE id = %s", (entry.id,))
    assert "@" not in raw and "alice" not in raw


def test_list_and_get_identities(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    alice = service.create_identity(ready_app, "alice")
    bob = service.create_identity(ready_app, "bob", tenant="acme")
    everyone = service.list_identities(ready_app)
    assert [(e.identity.id, e.address) for e in everyone] == [
        (alice.identity.id, "alice@localhost"),
        (bob.identity.id, "bob.acme@localhost"),
    ]
    assert [e.identity.id for e in service.list_identities(ready_app, "acme")] == [bob.identity.id]
    for ref, tenant in (
        (bob.identity.id, None),
        ("Bob.Acme@LOCALHOST", None),
        ("bob", "acme"),
        (bob.identity.id, "acme"),
    ):
        found = service.get_identity(ready_app, ref, tenant=tenant)
        assert found.identity.id == bob.identity.id
        assert found.address == "bob.acme@localhost"
    # Usernames resolve in the default tenant unless a tenant is named.
    assert service.get_identity(ready_app, "alice").identity.id == alice.identity.id
    with pytest.raises(NotFound):
        service.get_identity(ready_app, "bob")
    with pytest.raises(NotFound):
        service.get_identity(ready_app, alice.identity.id, tenant="acme")

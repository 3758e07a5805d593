"""The directory and audit statements on both engines (store/tenancy.py, store/audit.py)."""

from __future__ import annotations

from typing import Any

from postroom.ids import new_id
from postroom.store import audit as audit_rows
from postroom.store import tenancy as directory
from postroom.store.db import Tx


def _tenant(tx: Tx, slug: str, *, mode: str = "live", default: bool = False) -> str:
    tenant = directory.insert_tenant(
        tx,
        tenant_id=new_id("ten"),
        slug=slug,
        name=slug,
        mode=mode,
        address_suffix="" if default else "." + slug,
        now=1,
        is_default=default,
    )
    assert tenant is not None
    return tenant.id


def test_unique_collisions_return_none(db: Any) -> None:
    with db.write() as tx:
        _tenant(tx, "default", default=True)
        # A second default tenant, a taken slug: refused by the unique indexes, no error.
        assert (
            directory.insert_tenant(
                tx,
                tenant_id=new_id("ten"),
                slug="other",
                name="x",
                mode="live",
                address_suffix="",
                now=1,
                is_default=True,
            )
            is None
        )
        assert (
            directory.insert_tenant(
                tx,
                tenant_id=new_id("ten"),
                slug="default",
                name="x",
                mode="live",
                address_suffix=".x",
                now=1,
            )
            is None
        )
        # The transaction is still usable afterwards (PostgreSQL would abort on an error).
        assert len(directory.list_tenants(tx)) == 1


def test_lookup_address_joins_identity_and_tenant(db: Any) -> None:
    with db.write() as tx:
        tenant_id = _tenant(tx, "sandbox", mode="test")
        domain = directory.insert_domain(
            tx,
            domain_id=new_id("dom"),
            tenant_id=None,
            name="localhost",
            kind="platform",
            method="platform",
            routing_mode="literal",
            receiving=True,
            sending=True,
            state="healthy",
            now=1,
        )
        assert domain is not None
        identity = directory.insert_identity(
            tx,
            identity_id=new_id("idn"),
            tenant_id=tenant_id,
            username="agent",
            display_name="Agent",
            now=1,
        )
        assert identity is not None
        address = directory.insert_address(
            tx,
            address_id=new_id("adr"),
            address="agent.sandbox@localhost",
            local_part="agent.sandbox",
            domain_id=domain.id,
            tenant_id=tenant_id,
            identity_id=identity.id,
            role="primary",
            now=1,
        )
        assert address is not None
        tx.execute("UPDATE identities SET status = 'paused' WHERE id = %s", (identity.id,))
        tx.execute("UPDATE tenants SET status = 'suspended' WHERE id = %s", (tenant_id,))
    with db.read() as tx:
        route = directory.lookup_address(tx, "agent.sandbox@localhost")
        assert directory.lookup_address(tx, "Agent.Sandbox@localhost") is None
        assert directory.lookup_address(tx, "other@localhost") is None
    assert route is not None
    assert route.address_id == address.id
    assert route.identity_id == identity.id and route.tenant_id == tenant_id
    assert (route.address_status, route.identity_status, route.tenant_status) == (
        "active",
        "paused",
        "suspended",
    )
    assert route.tenant_mode == "test"


def test_tombstones(db: Any) -> None:
    with db.write() as tx:
        assert not directory.is_tombstoned(tx, "ab" * 32)
        assert directory.insert_tombstone(tx, address_hash="ab" * 32, reason="deleted")
        assert not directory.insert_tombstone(tx, address_hash="ab" * 32, reason="erased")
    with db.read() as tx:
        assert directory.is_tombstoned(tx, "ab" * 32)
        assert not directory.is_tombstoned(tx, "cd" * 32)


def test_audit_entries_filter_and_order(db: Any) -> None:
    with db.write() as tx:
        for at, action, tenant in (
            (1, "a.one", "ten_a"),
            (2, "a.two", "ten_b"),
            (3, "a.one", None),
        ):
            audit_rows.insert(
                tx,
                entry_id=new_id("aud"),
                action=action,
                now=at,
                tenant_id=tenant,
                actor="cli",
                details={"n": at},
            )
    with db.read() as tx:
        everything = audit_rows.list_entries(tx)
        ones = audit_rows.list_entries(tx, action="a.one")
        tenant_b = audit_rows.list_entries(tx, tenant_id="ten_b")
        newest = audit_rows.list_entries(tx, limit=1)
    assert [e.created_at for e in everything] == [3, 2, 1]
    assert [e.details for e in ones] == [{"n": 3}, {"n": 1}]
    assert [e.action for e in tenant_b] == ["a.two"]
    assert [e.created_at for e in newest] == [3]

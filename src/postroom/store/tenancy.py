"""The directory's statements: partners, tenants, domains, identities, addresses, tombstones.

Rows come back as frozen dataclasses. Inserts that can collide with a unique index use
``ON CONFLICT DO NOTHING`` and return None, so a lost race never aborts the caller's
transaction (PostgreSQL) and the service decides which error to give.

Addresses handed to these functions are already normalised (lower case, domain as an
IDNA A-label); normalising is the service's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from postroom.store.db import Row, Tx


@dataclass(frozen=True)
class Partner:
    id: str
    name: str
    status: str
    max_tenants: int
    deleted_at: int | None
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Partner:
        return cls(
            id=row["id"],
            name=row["name"],
            status=row["status"],
            max_tenants=row["max_tenants"],
            deleted_at=row["deleted_at"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True)
class Tenant:
    id: str
    slug: str
    name: str
    partner_id: str | None
    mode: str
    status: str
    is_default: bool
    address_suffix: str
    timezone: str
    suspended_at: int | None
    suspended_by: str | None
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Tenant:
        return cls(
            id=row["id"],
            slug=row["slug"],
            name=row["name"],
            partner_id=row["partner_id"],
            mode=row["mode"],
            status=row["status"],
            is_default=bool(row["is_default"]),
            address_suffix=row["address_suffix"],
            timezone=row["timezone"],
            suspended_at=row["suspended_at"],
            suspended_by=row["suspended_by"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True)
class Domain:
    id: str
    tenant_id: str | None
    name: str
    kind: str
    method: str
    routing_mode: str
    receiving: bool
    sending: bool
    state: str
    state_reason: str | None
    state_changed_at: int
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Domain:
        return cls(
            id=row["id"],
            tenant_id=row["tenant_id"],
            name=row["name"],
            kind=row["kind"],
            method=row["method"],
            routing_mode=row["routing_mode"],
            receiving=bool(row["receiving"]),
            sending=bool(row["sending"]),
            state=row["state"],
            state_reason=row["state_reason"],
            state_changed_at=row["state_changed_at"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True)
class Identity:
    id: str
    tenant_id: str
    username: str
    display_name: str
    status: str
    is_system: bool
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Identity:
        return cls(
            id=row["id"],
            tenant_id=row["tenant_id"],
            username=row["username"],
            display_name=row["display_name"],
            status=row["status"],
            is_system=bool(row["is_system"]),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True)
class Address:
    id: str
    address: str
    local_part: str
    domain_id: str
    tenant_id: str
    identity_id: str
    role: str
    status: str
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Address:
        return cls(
            id=row["id"],
            address=row["address"],
            local_part=row["local_part"],
            domain_id=row["domain_id"],
            tenant_id=row["tenant_id"],
            identity_id=row["identity_id"],
            role=row["role"],
            status=row["status"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True)
class IdentityWithAddress:
    """An identity and its primary address (None only for a system identity)."""

    identity: Identity
    address: str | None


@dataclass(frozen=True)
class AddressRoute:
    """What inbound routing needs to know about one recipient address (seed 000)."""

    address_id: str
    address_status: str
    identity_id: str
    tenant_id: str
    identity_status: str
    tenant_status: str
    tenant_mode: str


_PARTNER_COLUMNS = "id, name, status, max_tenants, deleted_at, created_at, updated_at"
_TENANT_COLUMNS = (
    "id, slug, name, partner_id, mode, status, is_default, address_suffix, timezone,"
    " suspended_at, suspended_by, created_at, updated_at"
)
_DOMAIN_COLUMNS = (
    "id, tenant_id, name, kind, method, routing_mode, receiving, sending, state,"
    " state_reason, state_changed_at, created_at, updated_at"
)
_IDENTITY_COLUMNS = (
    "id, tenant_id, username, display_name, status, is_system, created_at, updated_at"
)
_ADDRESS_COLUMNS = (
    "id, address, local_part, domain_id, tenant_id, identity_id, role, status,"
    " created_at, updated_at"
)


def _prefixed(columns: str, alias: str) -> str:
    return ", ".join(f"{alias}.{name.strip()}" for name in columns.split(","))


# --- partners -------------------------------------------------------------------------


def insert_partner(
    tx: Tx, *, partner_id: str, name: str, now: int, max_tenants: int = 25
) -> Partner:
    row = tx.fetchone(
        "INSERT INTO partners (id, name, status, max_tenants, created_at, updated_at)"
        f" VALUES (%s, %s, 'active', %s, %s, %s) RETURNING {_PARTNER_COLUMNS}",
        (partner_id, name, max_tenants, now, now),
    )
    assert row is not None
    return Partner.from_row(row)


def get_partner(tx: Tx, partner_id: str) -> Partner | None:
    row = tx.fetchone(f"SELECT {_PARTNER_COLUMNS} FROM partners WHERE id = %s", (partner_id,))
    return None if row is None else Partner.from_row(row)


def count_partner_tenants(tx: Tx, partner_id: str) -> int:
    """Tenants a partner created that are not erased (what ``max_tenants`` bounds)."""
    count = tx.fetchval(
        "SELECT count(*) AS n FROM tenants WHERE partner_id = %s AND status <> 'erased'",
        (partner_id,),
    )
    return int(count)


# --- tenants --------------------------------------------------------------------------


def insert_tenant(
    tx: Tx,
    *,
    tenant_id: str,
    slug: str,
    name: str,
    mode: str,
    address_suffix: str,
    now: int,
    partner_id: str | None = None,
    is_default: bool = False,
) -> Tenant | None:
    """Insert a tenant; None when the slug, suffix or the one default is taken."""
    row = tx.fetchone(
        "INSERT INTO tenants (id, slug, name, partner_id, mode, status, is_default,"
        " address_suffix, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, 'active', %s, %s, %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {_TENANT_COLUMNS}",
        (tenant_id, slug, name, partner_id, mode, int(is_default), address_suffix, now, now),
    )
    return None if row is None else Tenant.from_row(row)


def get_tenant(tx: Tx, tenant_id: str) -> Tenant | None:
    row = tx.fetchone(f"SELECT {_TENANT_COLUMNS} FROM tenants WHERE id = %s", (tenant_id,))
    return None if row is None else Tenant.from_row(row)


def get_tenant_by_slug(tx: Tx, slug: str) -> Tenant | None:
    row = tx.fetchone(f"SELECT {_TENANT_COLUMNS} FROM tenants WHERE slug = %s", (slug,))
    return None if row is None else Tenant.from_row(row)


def get_default_tenant(tx: Tx) -> Tenant | None:
    row = tx.fetchone(f"SELECT {_TENANT_COLUMNS} FROM tenants WHERE is_default = 1")
    return None if row is None else Tenant.from_row(row)


def list_tenants(tx: Tx) -> list[Tenant]:
    rows = tx.fetchall(f"SELECT {_TENANT_COLUMNS} FROM tenants ORDER BY created_at, id")
    return [Tenant.from_row(row) for row in rows]


# --- domains --------------------------------------------------------------------------


def insert_domain(
    tx: Tx,
    *,
    domain_id: str,
    tenant_id: str | None,
    name: str,
    kind: str,
    method: str,
    routing_mode: str,
    receiving: bool,
    sending: bool,
    state: str,
    now: int,
) -> Domain | None:
    """Insert a domain; None when a domain of that name exists (names are global)."""
    row = tx.fetchone(
        "INSERT INTO domains (id, tenant_id, name, kind, method, routing_mode, receiving,"
        " sending, state, state_changed_at, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {_DOMAIN_COLUMNS}",
        (
            domain_id,
            tenant_id,
            name,
            kind,
            method,
            routing_mode,
            int(receiving),
            int(sending),
            state,
            now,
            now,
            now,
        ),
    )
    return None if row is None else Domain.from_row(row)


def get_domain_by_name(tx: Tx, name: str) -> Domain | None:
    row = tx.fetchone(f"SELECT {_DOMAIN_COLUMNS} FROM domains WHERE name = %s", (name,))
    return None if row is None else Domain.from_row(row)


def get_platform_domain(tx: Tx) -> Domain | None:
    """The platform domain ``postroom init`` wrote (the oldest, should there be several)."""
    row = tx.fetchone(
        f"SELECT {_DOMAIN_COLUMNS} FROM domains WHERE kind = 'platform'"
        " ORDER BY created_at, id LIMIT 1"
    )
    return None if row is None else Domain.from_row(row)


# --- identities -----------------------------------------------------------------------


def insert_identity(
    tx: Tx,
    *,
    identity_id: str,
    tenant_id: str,
    username: str,
    display_name: str,
    now: int,
) -> Identity | None:
    """Insert an active identity; None when the tenant has a live one of that username."""
    row = tx.fetchone(
        "INSERT INTO identities (id, tenant_id, username, display_name, status,"
        " created_at, updated_at) VALUES (%s, %s, %s, %s, 'active', %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {_IDENTITY_COLUMNS}",
        (identity_id, tenant_id, username, display_name, now, now),
    )
    return None if row is None else Identity.from_row(row)


def get_identity(tx: Tx, identity_id: str) -> Identity | None:
    row = tx.fetchone(f"SELECT {_IDENTITY_COLUMNS} FROM identities WHERE id = %s", (identity_id,))
    return None if row is None else Identity.from_row(row)


def find_identity_by_username(tx: Tx, tenant_id: str, username: str) -> Identity | None:
    """The tenant's identity holding ``username``; deleted identities no longer hold one."""
    row = tx.fetchone(
        f"SELECT {_IDENTITY_COLUMNS} FROM identities"
        " WHERE tenant_id = %s AND username = %s AND status <> 'deleted'",
        (tenant_id, username),
    )
    return None if row is None else Identity.from_row(row)


def list_identities(tx: Tx, tenant_id: str | None = None) -> list[IdentityWithAddress]:
    """Identities not deleted, with their primary address; the system identity is never
    listed (seed 000)."""
    sql = (
        f"SELECT {_prefixed(_IDENTITY_COLUMNS, 'i')}, a.address AS primary_address"
        " FROM identities i"
        " LEFT JOIN addresses a ON a.identity_id = i.id AND a.role = 'primary'"
        " WHERE i.status <> 'deleted' AND i.is_system = 0"
    )
    params: tuple[str, ...] = ()
    if tenant_id is not None:
        sql += " AND i.tenant_id = %s"
        params = (tenant_id,)
    rows = tx.fetchall(sql + " ORDER BY i.created_at, i.id", params)
    return [IdentityWithAddress(Identity.from_row(row), row["primary_address"]) for row in rows]


# --- addresses ------------------------------------------------------------------------


def insert_address(
    tx: Tx,
    *,
    address_id: str,
    address: str,
    local_part: str,
    domain_id: str,
    tenant_id: str,
    identity_id: str,
    role: str,
    now: int,
    status: str = "active",
) -> Address | None:
    """Insert an address; None when it is already in the directory (in any status)."""
    row = tx.fetchone(
        "INSERT INTO addresses (id, address, local_part, domain_id, tenant_id, identity_id,"
        " role, status, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {_ADDRESS_COLUMNS}",
        (
            address_id,
            address,
            local_part,
            domain_id,
            tenant_id,
            identity_id,
            role,
            status,
            now,
            now,
        ),
    )
    return None if row is None else Address.from_row(row)


def get_address(tx: Tx, address: str) -> Address | None:
    row = tx.fetchone(f"SELECT {_ADDRESS_COLUMNS} FROM addresses WHERE address = %s", (address,))
    return None if row is None else Address.from_row(row)


def get_primary_address(tx: Tx, identity_id: str) -> Address | None:
    row = tx.fetchone(
        f"SELECT {_ADDRESS_COLUMNS} FROM addresses WHERE identity_id = %s AND role = 'primary'",
        (identity_id,),
    )
    return None if row is None else Address.from_row(row)


def lookup_address(tx: Tx, address: str) -> AddressRoute | None:
    """Route one recipient with one query (seed 000 "Directory lookups").

    Retired and retiring addresses are returned too: their rows stay so the address is
    never reassigned, and the caller decides what their status means. None means the
    address is not in the directory; callers then ask :func:`is_tombstoned` so erased
    and deleted addresses are answered exactly like unknown ones.
    """
    row = tx.fetchone(
        "SELECT a.id AS address_id, a.status AS address_status, a.identity_id, a.tenant_id,"
        " i.status AS identity_status, t.status AS tenant_status, t.mode AS tenant_mode"
        " FROM addresses a"
        " JOIN identities i ON i.id = a.identity_id"
        " JOIN tenants t ON t.id = a.tenant_id"
        " WHERE a.address = %s",
        (address,),
    )
    if row is None:
        return None
    return AddressRoute(
        address_id=row["address_id"],
        address_status=row["address_status"],
        identity_id=row["identity_id"],
        tenant_id=row["tenant_id"],
        identity_status=row["identity_status"],
        tenant_status=row["tenant_status"],
        tenant_mode=row["tenant_mode"],
    )


@dataclass(frozen=True)
class CatchAllRoute:
    """Where a catch-all domain delivers local parts it has no address for."""

    domain_id: str
    identity_id: str
    tenant_id: str
    identity_status: str
    tenant_status: str


def catch_all_route(tx: Tx, domain_name: str) -> CatchAllRoute | None:
    """The catch-all inbox of a receiving domain, if it has one."""
    row = tx.fetchone(
        "SELECT d.id AS domain_id, i.id AS identity_id, i.tenant_id,"
        " i.status AS identity_status, t.status AS tenant_status"
        " FROM domains d JOIN identities i ON i.id = d.catch_all_identity_id"
        " JOIN tenants t ON t.id = i.tenant_id"
        " WHERE d.name = %s AND d.routing_mode = 'catch_all' AND d.receiving = 1",
        (domain_name,),
    )
    if row is None:
        return None
    return CatchAllRoute(
        row["domain_id"],
        row["identity_id"],
        row["tenant_id"],
        row["identity_status"],
        row["tenant_status"],
    )


def set_catch_all(tx: Tx, domain_id: str, identity_id: str | None, now: int) -> None:
    """Make a domain catch-all into ``identity_id``, or literal again with None."""
    tx.execute(
        "UPDATE domains SET routing_mode = %s, catch_all_identity_id = %s, updated_at = %s"
        " WHERE id = %s",
        ("catch_all" if identity_id else "literal", identity_id, now, domain_id),
    )


# --- tombstones -----------------------------------------------------------------------


def insert_tombstone(
    tx: Tx, *, address_hash: str, reason: str, identity_id: str | None = None
) -> bool:
    """Record that an address may never be handed out again; False if it already was."""
    return (
        tx.execute(
            "INSERT INTO address_tombstones (address_hash, identity_id, reason)"
            " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (address_hash, identity_id, reason),
        )
        == 1
    )


def is_tombstoned(tx: Tx, address_hash: str) -> bool:
    """Whether the address with this keyed hash was deleted or erased (never reassigned)."""
    found = tx.fetchval(
        "SELECT 1 AS hit FROM address_tombstones WHERE address_hash = %s", (address_hash,)
    )
    return found is not None

"""The directory's statements: partners, tenants, domains, identities, addresses, tombstones.

Rows come back as frozen dataclasses. Inserts that can collide with a unique index use
``ON CONFLICT DO NOTHING`` and return None, so a lost race never aborts the caller's
transaction (PostgreSQL) and the service decides which error to give.

Addresses handed to these functions are already normalised (lower case, domain as an
IDNA A-label); normalising is the service's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Engine, Row, Tx, member_of


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
    ownership_token: str | None = None,
    dkim_selector: str | None = None,
    dkim_private_sealed: str | None = None,
    dkim_public: str | None = None,
) -> Domain | None:
    """Insert a domain; None when a domain of that name exists (names are global).

    ``dkim_private_sealed`` must already be sealed for this ``domain_id`` (the envelope's
    associated data names the row)."""
    row = tx.fetchone(
        "INSERT INTO domains (id, tenant_id, name, kind, method, routing_mode, receiving,"
        " sending, state, state_changed_at, ownership_token, dkim_selector,"
        " dkim_private_sealed, dkim_public, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
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
            ownership_token,
            dkim_selector,
            dkim_private_sealed,
            dkim_public,
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
    client_id: str | None = None,
    client_fingerprint: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Identity | None:
    """Insert an active identity; None when the tenant has a live one of that username,
    or an identity (in any status) with that ``client_id``."""
    row = tx.fetchone(
        "INSERT INTO identities (id, tenant_id, username, display_name, status, client_id,"
        " client_fingerprint, metadata_json, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, 'active', %s, %s, %s, %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {_IDENTITY_COLUMNS}",
        (
            identity_id,
            tenant_id,
            username,
            display_name,
            client_id,
            client_fingerprint,
            _metadata_json(metadata),
            now,
            now,
        ),
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


# --- what the REST API reads and changes ----------------------------------------------


def _metadata_json(metadata: Mapping[str, str] | None) -> str:
    """Metadata as stored: canonical JSON, non-ASCII escaped (so any string is storable)."""
    return json.dumps(dict(metadata or {}), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class IdentityDetail:
    """An identity with the columns the API shows, and its primary address (None once
    deleted: its addresses moved to the tombstones)."""

    identity: Identity
    address: str | None
    client_id: str | None
    client_fingerprint: str | None
    signature_text: str | None
    signature_html: str | None
    pause_reason: str | None
    metadata: dict[str, str]

    @classmethod
    def from_row(cls, row: Row) -> IdentityDetail:
        metadata = json.loads(row["metadata_json"] or "{}")
        return cls(
            identity=Identity.from_row(row),
            address=row["primary_address"],
            client_id=row["client_id"],
            client_fingerprint=row["client_fingerprint"],
            signature_text=row["signature_text"],
            signature_html=row["signature_html"],
            pause_reason=row["pause_reason"],
            metadata={str(k): str(v) for k, v in metadata.items()},
        )


_IDENTITY_DETAIL_SELECT = (
    f"SELECT {_prefixed(_IDENTITY_COLUMNS, 'i')}, i.client_id, i.client_fingerprint,"
    " i.signature_text, i.signature_html, i.pause_reason, i.metadata_json,"
    " a.address AS primary_address"
    " FROM identities i"
    " LEFT JOIN addresses a ON a.identity_id = i.id AND a.role = 'primary'"
)

# The identity columns update_identity may set.
_IDENTITY_CHANGEABLE = frozenset(
    {"display_name", "signature_text", "signature_html", "metadata", "status", "pause_reason"}
)


def get_identity_detail(tx: Tx, identity_id: str) -> IdentityDetail | None:
    row = tx.fetchone(f"{_IDENTITY_DETAIL_SELECT} WHERE i.id = %s", (identity_id,))
    return None if row is None else IdentityDetail.from_row(row)


def find_identity_by_client_id(tx: Tx, tenant_id: str, client_id: str) -> IdentityDetail | None:
    """The tenant's identity created with ``client_id``, in any status."""
    row = tx.fetchone(
        f"{_IDENTITY_DETAIL_SELECT} WHERE i.tenant_id = %s AND i.client_id = %s",
        (tenant_id, client_id),
    )
    return None if row is None else IdentityDetail.from_row(row)


def list_identity_page(
    tx: Tx,
    *,
    tenant_ids: Sequence[str] | None,
    after: str | None,
    limit: int,
    identity_id: str | None = None,
    status: str | None = None,
    username: str | None = None,
) -> list[IdentityDetail]:
    """Identities in ID order after ``after``: only ``tenant_ids`` unless None, never the
    system identity, and deleted ones only when ``status`` is 'deleted'."""
    clauses = ["i.is_system = 0"]
    params: list[Any] = []
    if tenant_ids is not None:
        if not tenant_ids:
            return []
        clause, values = member_of(tx, "i.tenant_id", tenant_ids)
        clauses.append(clause)
        params.extend(values)
    if status is None:
        clauses.append("i.status <> 'deleted'")
    else:
        clauses.append("i.status = %s")
        params.append(status)
    for column, value in (("i.id", identity_id), ("i.username", username)):
        if value is not None:
            clauses.append(f"{column} = %s")
            params.append(value)
    if after is not None:
        clauses.append("i.id > %s")
        params.append(after)
    rows = tx.fetchall(
        f"{_IDENTITY_DETAIL_SELECT} WHERE {' AND '.join(clauses)} ORDER BY i.id LIMIT %s",
        [*params, limit],
    )
    return [IdentityDetail.from_row(row) for row in rows]


def count_live_identities(tx: Tx, tenant_id: str) -> int:
    """The tenant's identities that count against ``max_identities``: not deleted, not
    the system identity."""
    count = tx.fetchval(
        "SELECT count(*) AS n FROM identities"
        " WHERE tenant_id = %s AND status <> 'deleted' AND is_system = 0",
        (tenant_id,),
    )
    return int(count)


def lock_tenant(tx: Tx, tenant_id: str) -> None:
    """Serialise writers counting the tenant's rows until this transaction ends.

    SQLite has a single writer already; PostgreSQL locks the tenant row."""
    if tx.engine is Engine.POSTGRESQL:
        tx.fetchone("SELECT id FROM tenants WHERE id = %s FOR UPDATE", (tenant_id,))


def update_identity(tx: Tx, identity_id: str, changes: Mapping[str, Any], now: int) -> bool:
    """Set the given columns (``metadata`` is a mapping, stored as JSON) of an identity
    that is not deleted; False when there is none."""
    unknown = set(changes) - _IDENTITY_CHANGEABLE
    if unknown:
        raise ValueError(f"not changeable: {sorted(unknown)}")
    sets: list[str] = []
    params: list[Any] = []
    for column, value in changes.items():
        if column == "metadata":
            sets.append("metadata_json = %s")
            params.append(_metadata_json(value))
        else:
            sets.append(f"{column} = %s")
            params.append(value)
    sets.append("updated_at = %s")
    params.append(now)
    changed = tx.execute(
        f"UPDATE identities SET {', '.join(sets)} WHERE id = %s AND status <> 'deleted'",
        [*params, identity_id],
    )
    return changed == 1


def mark_identity_deleted(tx: Tx, identity_id: str, now: int) -> bool:
    """Set an identity's status to 'deleted'; False when it already was (or is missing)."""
    changed = tx.execute(
        "UPDATE identities SET status = 'deleted', pause_reason = NULL, updated_at = %s"
        " WHERE id = %s AND status <> 'deleted'",
        (now, identity_id),
    )
    return changed == 1


def get_address_by_id(tx: Tx, address_id: str) -> Address | None:
    row = tx.fetchone(f"SELECT {_ADDRESS_COLUMNS} FROM addresses WHERE id = %s", (address_id,))
    return None if row is None else Address.from_row(row)


@dataclass(frozen=True)
class AddressDetail:
    """An address row with its retirement time."""

    address: Address
    retired_at: int | None


def get_address_detail(tx: Tx, address_id: str) -> AddressDetail | None:
    row = tx.fetchone(
        f"SELECT {_ADDRESS_COLUMNS}, retired_at FROM addresses WHERE id = %s", (address_id,)
    )
    return None if row is None else AddressDetail(Address.from_row(row), row["retired_at"])


def list_identity_addresses(
    tx: Tx, identity_id: str, after: str | None = None, limit: int | None = None
) -> list[AddressDetail]:
    """An identity's addresses in every status, in ID order after ``after``."""
    sql = f"SELECT {_ADDRESS_COLUMNS}, retired_at FROM addresses WHERE identity_id = %s"
    params: list[Any] = [identity_id]
    if after is not None:
        sql += " AND id > %s"
        params.append(after)
    sql += " ORDER BY id"
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    rows = tx.fetchall(sql, params)
    return [AddressDetail(Address.from_row(row), row["retired_at"]) for row in rows]


def retire_address(tx: Tx, address_id: str, now: int) -> bool:
    """Retire an address now; the row stays, so it is never reassigned. False when it
    was retired already."""
    changed = tx.execute(
        "UPDATE addresses SET status = 'retired', retired_at = %s, retire_at = NULL,"
        " updated_at = %s WHERE id = %s AND status <> 'retired'",
        (now, now, address_id),
    )
    return changed == 1


def delete_address(tx: Tx, address_id: str) -> None:
    """Remove an address row (only after its tombstone is written)."""
    tx.execute("DELETE FROM addresses WHERE id = %s", (address_id,))


@dataclass(frozen=True)
class DomainDetail:
    """A domain with the columns the API shows (never the sealed private key)."""

    domain: Domain
    ownership_token: str | None
    ownership_verified_at: int | None
    records: list[dict[str, Any]]
    dkim_selector: str | None
    dkim_public: str | None

    @classmethod
    def from_row(cls, row: Row) -> DomainDetail:
        records = json.loads(row["records_json"] or "[]")
        return cls(
            domain=Domain.from_row(row),
            ownership_token=row["ownership_token"],
            ownership_verified_at=row["ownership_verified_at"],
            records=[r for r in records if isinstance(r, dict)],
            dkim_selector=row["dkim_selector"],
            dkim_public=row["dkim_public"],
        )


_DOMAIN_DETAIL_SELECT = (
    f"SELECT {_DOMAIN_COLUMNS}, ownership_token, ownership_verified_at, records_json,"
    " dkim_selector, dkim_public FROM domains"
)


def get_domain(tx: Tx, domain_id: str) -> Domain | None:
    row = tx.fetchone(f"SELECT {_DOMAIN_COLUMNS} FROM domains WHERE id = %s", (domain_id,))
    return None if row is None else Domain.from_row(row)


def get_domain_detail(tx: Tx, domain_id: str) -> DomainDetail | None:
    row = tx.fetchone(f"{_DOMAIN_DETAIL_SELECT} WHERE id = %s", (domain_id,))
    return None if row is None else DomainDetail.from_row(row)


def list_domain_page(
    tx: Tx, tenant_ids: Sequence[str] | None, after: str | None, limit: int
) -> list[DomainDetail]:
    """Domains in ID order after ``after``: the platform domain(s) and the domains of
    ``tenant_ids`` (every tenant's when None)."""
    clauses: list[str] = []
    params: list[Any] = []
    if tenant_ids is not None:
        if tenant_ids:
            clause, values = member_of(tx, "tenant_id", tenant_ids)
            clauses.append(f"(tenant_id IS NULL OR {clause})")
            params.extend(values)
        else:
            clauses.append("tenant_id IS NULL")
    if after is not None:
        clauses.append("id > %s")
        params.append(after)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = tx.fetchall(f"{_DOMAIN_DETAIL_SELECT}{where} ORDER BY id LIMIT %s", [*params, limit])
    return [DomainDetail.from_row(row) for row in rows]


def get_domain_dkim(tx: Tx, domain_id: str) -> tuple[str, str] | None:
    """A domain's DKIM selector and sealed private key, or None when it has none."""
    row = tx.fetchone(
        "SELECT dkim_selector, dkim_private_sealed FROM domains WHERE id = %s", (domain_id,)
    )
    if row is None or row["dkim_selector"] is None or row["dkim_private_sealed"] is None:
        return None
    return str(row["dkim_selector"]), str(row["dkim_private_sealed"])


def clear_catch_all_into(tx: Tx, identity_id: str, now: int) -> int:
    """Make every domain delivering catch-all mail to ``identity_id`` literal again."""
    return tx.execute(
        "UPDATE domains SET routing_mode = 'literal', catch_all_identity_id = NULL,"
        " updated_at = %s WHERE catch_all_identity_id = %s",
        (now, identity_id),
    )


def set_domain_dkim(
    tx: Tx, domain_id: str, selector: str, sealed_private: str, public: str, now: int
) -> bool:
    """Replace a domain's DKIM selector and key pair; False when the domain is gone."""
    return (
        tx.execute(
            "UPDATE domains SET dkim_selector = %s, dkim_private_sealed = %s, dkim_public = %s,"
            " updated_at = %s WHERE id = %s",
            (selector, sealed_private, public, now, domain_id),
        )
        == 1
    )

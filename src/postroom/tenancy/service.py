"""Tenants and identities: creating and finding them, one transaction per use case.

A tenant is one customer's workspace; an identity is one inbox in a tenant, created with
its primary address ``{username}{tenant.address_suffix}@{domain}``. The default tenant's
suffix is empty (``alice@example.com``); any other tenant's is ``.{slug}``
(``alice.acme@example.com``), so tenants sharing the platform domain never collide on a
username.

Addresses are global and never reassigned (seed 000 "Address uniqueness is global"): an
address in the directory in any status, or one whose keyed hash is in
``address_tombstones``, is refused with ``address_unavailable``.

Every change writes an audit row in its own transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postroom.config import normalize_domain
from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.ids import is_id, new_id
from postroom.store import tenancy as directory
from postroom.store.db import Tx
from postroom.store.tenancy import Address, Identity, IdentityWithAddress, Tenant
from postroom.tenancy import audit

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "NewIdentity",
    "create_identity",
    "create_tenant",
    "get_identity",
    "get_tenant",
    "list_identities",
    "list_tenants",
    "resolve_tenant",
]

SLUG_RE = re.compile(r"[a-z0-9][a-z0-9-]{1,31}")
USERNAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,23}")
TENANT_MODES = ("live", "test")
MAX_TENANT_NAME = 200
MAX_DISPLAY_NAME = 78
# Domains in these states take no new addresses.
_CLOSED_DOMAIN_STATES = ("suspended", "removing", "removed")


@dataclass(frozen=True)
class NewIdentity:
    """What :func:`create_identity` made: the identity and its primary address."""

    identity: Identity
    address: Address


def _printable(text: str) -> bool:
    return not any(ord(c) < 32 or ord(c) == 127 for c in text)


# --- tenants --------------------------------------------------------------------------


def resolve_tenant(tx: Tx, ref: str) -> Tenant:
    """A tenant by ID (``ten_...``) or slug, or NotFound ``tenant_not_found``."""
    tenant = (
        directory.get_tenant(tx, ref)
        if is_id(ref, "ten")
        else directory.get_tenant_by_slug(tx, ref)
    )
    if tenant is None:
        raise NotFound(f"no tenant {ref!r}", code="tenant_not_found")
    return tenant


def _default_tenant(tx: Tx) -> Tenant:
    tenant = directory.get_default_tenant(tx)
    if tenant is None:
        raise NotFound(
            "there is no default tenant; run `postroom init` first", code="tenant_not_found"
        )
    return tenant


def create_tenant(
    app: App,
    slug: str,
    name: str | None = None,
    *,
    mode: str = "live",
    partner_id: str | None = None,
    actor_key_id: str | None = None,
) -> Tenant:
    """Create an active tenant; ``name`` defaults to the slug.

    ``partner_id`` (a partner key's partner) must name an active partner below its
    ``max_tenants``.
    """
    if not SLUG_RE.fullmatch(slug):
        raise InvalidInput(
            f"tenant slug {slug!r} must be 2-32 lower-case letters, digits or '-', "
            "starting with a letter or digit",
            code="invalid_slug",
        )
    name = slug if name is None else name.strip()
    if not name or len(name) > MAX_TENANT_NAME or not _printable(name):
        raise InvalidInput(
            f"a tenant name is 1-{MAX_TENANT_NAME} characters without control characters",
            code="invalid_tenant_name",
        )
    if mode not in TENANT_MODES:
        raise InvalidInput(f"tenant mode must be live or test, not {mode!r}", code="invalid_mode")
    now = app.clock.now_ms()
    with app.db.write() as tx:
        if partner_id is not None:
            partner = directory.get_partner(tx, partner_id)
            if partner is None:
                raise NotFound(f"no partner {partner_id}", code="partner_not_found")
            if partner.status != "active":
                raise Conflict(
                    f"partner {partner_id} is {partner.status}", code="partner_not_active"
                )
            if directory.count_partner_tenants(tx, partner_id) >= partner.max_tenants:
                raise Conflict(
                    f"partner {partner_id} has its {partner.max_tenants} tenants already",
                    code="partner_tenant_limit",
                )
        tenant = directory.insert_tenant(
            tx,
            tenant_id=new_id("ten"),
            slug=slug,
            name=name,
            mode=mode,
            address_suffix="." + slug,
            now=now,
            partner_id=partner_id,
        )
        if tenant is None:
            # The slug is unique, and so is the suffix derived from it.
            raise Conflict(f"the tenant slug {slug!r} is taken", code="slug_taken")
        audit.record(
            app,
            tx,
            action="tenant.create",
            tenant_id=tenant.id,
            target_type="tenant",
            target_id=tenant.id,
            actor_key_id=actor_key_id,
            details={"slug": slug, "mode": mode, "partner_id": partner_id},
        )
    return tenant


def get_tenant(app: App, ref: str) -> Tenant:
    """A tenant by ID or slug."""
    with app.db.read() as tx:
        return resolve_tenant(tx, ref)


def list_tenants(app: App) -> list[Tenant]:
    with app.db.read() as tx:
        return directory.list_tenants(tx)


# --- identities -----------------------------------------------------------------------


def _check_username(username: str) -> str:
    if not USERNAME_RE.fullmatch(username):
        raise InvalidInput(
            f"username {username!r} must be 1-24 lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            code="invalid_username",
        )
    return username


def _check_display_name(display_name: str) -> str:
    display_name = display_name.strip()
    if not display_name or len(display_name) > MAX_DISPLAY_NAME or not _printable(display_name):
        raise InvalidInput(
            f"a display name is 1-{MAX_DISPLAY_NAME} characters on one line",
            code="invalid_display_name",
        )
    return display_name


def create_identity(
    app: App,
    username: str,
    *,
    domain: str | None = None,
    tenant: str | None = None,
    display_name: str | None = None,
    actor_key_id: str | None = None,
) -> NewIdentity:
    """Create an identity and its primary address in one transaction.

    ``domain`` defaults to the platform domain (usable by every tenant); any other must be
    the tenant's own. ``tenant`` (ID or slug) defaults to the default tenant.
    """
    _check_username(username)
    display_name = _check_display_name(username if display_name is None else display_name)
    try:
        domain_name = normalize_domain(app.settings.platform_domain if domain is None else domain)
    except ValueError as exc:
        raise InvalidInput(str(exc), code="invalid_domain") from None
    keys = app.keys()
    now = app.clock.now_ms()
    with app.db.write() as tx:
        owner = _default_tenant(tx) if tenant is None else resolve_tenant(tx, tenant)
        if owner.status != "active":
            raise Conflict(f"tenant {owner.slug} is {owner.status}", code="tenant_not_active")
        found = directory.get_domain_by_name(tx, domain_name)
        # Another tenant's domain is answered like an unknown one: nothing about it leaks.
        if found is None or (found.tenant_id is not None and found.tenant_id != owner.id):
            raise NotFound(f"no domain {domain_name} in this tenant", code="domain_not_found")
        if found.state in _CLOSED_DOMAIN_STATES:
            raise Conflict(
                f"domain {domain_name} is {found.state} and takes no new addresses",
                code="domain_not_usable",
            )
        local_part = username + owner.address_suffix
        address = f"{local_part}@{domain_name}"
        if directory.find_identity_by_username(tx, owner.id, username) is not None:
            raise Conflict(
                f"the username {username!r} is taken in tenant {owner.slug}",
                code="username_taken",
            )
        unavailable = Conflict(
            f"the address {address} is not available", code="address_unavailable"
        )
        if directory.is_tombstoned(tx, keys.address_hash(address)):
            raise unavailable
        if directory.get_address(tx, address) is not None:
            raise unavailable
        identity = directory.insert_identity(
            tx,
            identity_id=new_id("idn"),
            tenant_id=owner.id,
            username=username,
            display_name=display_name,
            now=now,
        )
        if identity is None:
            # A concurrent create took the username between the check and the insert.
            raise Conflict(
                f"the username {username!r} is taken in tenant {owner.slug}",
                code="username_taken",
            )
        row = directory.insert_address(
            tx,
            address_id=new_id("adr"),
            address=address,
            local_part=local_part,
            domain_id=found.id,
            tenant_id=owner.id,
            identity_id=identity.id,
            role="primary",
            now=now,
        )
        if row is None:
            # Raising rolls back the identity inserted above.
            raise unavailable
        audit.record(
            app,
            tx,
            action="identity.create",
            tenant_id=owner.id,
            target_type="identity",
            target_id=identity.id,
            actor_key_id=actor_key_id,
            # IDs only: the username and domain together would spell the clear address.
            details={"address_id": row.id, "domain_id": found.id},
        )
    return NewIdentity(identity, row)


def get_identity(app: App, ref: str, *, tenant: str | None = None) -> IdentityWithAddress:
    """An identity by ID (``idn_...``), by address, or by username in ``tenant`` (ID or
    slug; default: the default tenant). With ``tenant``, only that tenant's identities."""
    with app.db.read() as tx:
        owner = None if tenant is None else resolve_tenant(tx, tenant)
        identity: Identity | None
        if is_id(ref, "idn"):
            identity = directory.get_identity(tx, ref)
        elif "@" in ref:
            local, _, domain_part = ref.rpartition("@")
            try:
                normalized = f"{local.lower()}@{normalize_domain(domain_part)}"
            except ValueError:
                normalized = ref
            route = directory.lookup_address(tx, normalized)
            identity = None if route is None else directory.get_identity(tx, route.identity_id)
        else:
            scope = owner if owner is not None else _default_tenant(tx)
            identity = directory.find_identity_by_username(tx, scope.id, ref)
        if (
            identity is None
            or identity.is_system
            or identity.status == "deleted"
            or (owner is not None and identity.tenant_id != owner.id)
        ):
            raise NotFound(f"no identity {ref!r}", code="identity_not_found")
        primary = directory.get_primary_address(tx, identity.id)
    return IdentityWithAddress(identity, None if primary is None else primary.address)


def list_identities(app: App, tenant: str | None = None) -> list[IdentityWithAddress]:
    """Identities with their primary address; every tenant's unless ``tenant`` is given."""
    with app.db.read() as tx:
        tenant_id = None if tenant is None else resolve_tenant(tx, tenant).id
        return directory.list_identities(tx, tenant_id)

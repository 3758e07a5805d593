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

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.config import normalize_domain
from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.events import emit
from postroom.events.catalogue import IdentityCreated, IdentityDeleted, IdentityUpdated
from postroom.ids import is_id, new_id
from postroom.store import api_keys as key_rows
from postroom.store import tenancy as directory
from postroom.store.db import Tx
from postroom.store.tenancy import (
    Address,
    AddressDetail,
    Domain,
    Identity,
    IdentityDetail,
    IdentityWithAddress,
    Tenant,
)
from postroom.tenancy import audit

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "NewIdentity",
    "add_alias",
    "create_identity",
    "create_tenant",
    "delete_identity",
    "get_identity",
    "get_tenant",
    "identity_fingerprint",
    "list_identities",
    "list_tenants",
    "resolve_tenant",
    "retire_alias",
    "update_identity",
]

SLUG_RE = re.compile(r"[a-z0-9][a-z0-9-]{1,31}")
USERNAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,23}")
TENANT_MODES = ("live", "test")
MAX_TENANT_NAME = 200
MAX_DISPLAY_NAME = 78
# seed 000 identities.client_id / metadata_json.
MAX_CLIENT_ID = 128
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE_BYTES = 512
MAX_SIGNATURE_TEXT = 10_000
MAX_SIGNATURE_HTML = 100_000
# The local part of an alias on a tenant's own domain: lower case, dots only between
# other characters, at most 64 (RFC 5321). '+' is reserved for plus-address tags.
LOCAL_PART_RE = re.compile(r"[a-z0-9](?:[a-z0-9_-]|\.(?=[a-z0-9_-])){0,63}")
# Domains in these states take no new addresses.
_CLOSED_DOMAIN_STATES = ("suspended", "removing", "removed")
# What PATCH may set an identity's status to; pausing records pause_reason 'manual'.
SETTABLE_IDENTITY_STATUSES = ("active", "paused")


@dataclass(frozen=True)
class NewIdentity:
    """What :func:`create_identity` made: the identity and its primary address.

    ``existing`` is True when a create repeating a ``client_id`` with the same body
    found the identity made before (nothing was written)."""

    identity: Identity
    address: Address
    existing: bool = False


def _printable(text: str) -> bool:
    return not any(ord(c) < 32 or ord(c) == 127 for c in text)


def _encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (JSON allows lone surrogates, UTF-8 does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    if (
        not display_name
        or len(display_name) > MAX_DISPLAY_NAME
        or not _printable(display_name)
        or not _encodable(display_name)
    ):
        raise InvalidInput(
            f"a display name is 1-{MAX_DISPLAY_NAME} characters on one line",
            code="invalid_display_name",
        )
    return display_name


def _check_client_id(client_id: str) -> str:
    if (
        not client_id
        or len(client_id) > MAX_CLIENT_ID
        or any(not 32 <= ord(c) < 127 for c in client_id)
    ):
        raise InvalidInput(
            f"client_id must be 1-{MAX_CLIENT_ID} printable ASCII characters",
            code="invalid_client_id",
        )
    return client_id


def _check_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """seed 000 identities.metadata_json: at most 16 string keys, values at most 512 bytes."""
    invalid = InvalidInput(
        f"metadata holds at most {MAX_METADATA_KEYS} keys of 1-{MAX_METADATA_KEY} printable"
        f" characters, each with a string value of at most {MAX_METADATA_VALUE_BYTES} bytes",
        code="invalid_metadata",
    )
    if len(metadata) > MAX_METADATA_KEYS:
        raise invalid
    checked: dict[str, str] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise invalid
        if not key or len(key) > MAX_METADATA_KEY or not _printable(key) or not _encodable(key):
            raise invalid
        if not _encodable(value) or len(value.encode("utf-8")) > MAX_METADATA_VALUE_BYTES:
            raise invalid
        checked[key] = value
    return checked


def _check_signature(text: str, limit: int, field: str) -> str:
    """A signature may hold line breaks and tabs, but no other control character."""
    if (
        len(text) > limit
        or not _encodable(text)
        or any((ord(c) < 32 and c not in "\r\n\t") or ord(c) == 127 for c in text)
    ):
        raise InvalidInput(
            f"{field} is at most {limit} characters without control characters"
            " other than line breaks and tabs",
            code="invalid_signature",
        )
    return text


def identity_fingerprint(
    username: str, domain: str, display_name: str, metadata: Mapping[str, str]
) -> str:
    """seed 000 identities.client_fingerprint: SHA-256 of the canonical create body (the
    values as created: normalised domain, display name after its default)."""
    canonical = json.dumps(
        {
            "username": username,
            "domain": domain,
            "display_name": display_name,
            "metadata": dict(metadata),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _domain_name(app: App, domain: str | None) -> str:
    try:
        return normalize_domain(app.settings.platform_domain if domain is None else domain)
    except ValueError as exc:
        raise InvalidInput(str(exc), code="invalid_domain") from None


def _usable_domain(tx: Tx, owner: Tenant, domain_name: str) -> Domain:
    """The domain a new address of ``owner`` may use: the platform domain or its own."""
    found = directory.get_domain_by_name(tx, domain_name)
    # Another tenant's domain is answered like an unknown one: nothing about it leaks.
    if found is None or (found.tenant_id is not None and found.tenant_id != owner.id):
        raise NotFound(f"no domain {domain_name} in this tenant", code="domain_not_found")
    if found.state in _CLOSED_DOMAIN_STATES:
        raise Conflict(
            f"domain {domain_name} is {found.state} and takes no new addresses",
            code="domain_not_usable",
        )
    return found


def _check_active(owner: Tenant) -> None:
    if owner.status != "active":
        raise Conflict(f"tenant {owner.slug} is {owner.status}", code="tenant_not_active")


def _replay_client_id(tx: Tx, owner: Tenant, client_id: str, fingerprint: str) -> NewIdentity:
    """The identity an earlier create with ``client_id`` made, if the body was the same."""
    existing = directory.find_identity_by_client_id(tx, owner.id, client_id)
    if existing is None:
        raise Conflict(f"client_id {client_id!r} is in use", code="client_id_conflict")
    primary = directory.get_primary_address(tx, existing.identity.id)
    if (
        existing.client_fingerprint != fingerprint
        or existing.identity.status == "deleted"
        or primary is None
    ):
        raise Conflict(
            f"client_id {client_id!r} was used to create a different identity"
            " (or one since deleted)",
            code="client_id_conflict",
        )
    return NewIdentity(existing.identity, primary, existing=True)


def create_identity(
    app: App,
    username: str,
    *,
    domain: str | None = None,
    tenant: str | None = None,
    display_name: str | None = None,
    client_id: str | None = None,
    metadata: Mapping[str, str] | None = None,
    actor_key_id: str | None = None,
) -> NewIdentity:
    """Create an identity and its primary address in one transaction.

    ``domain`` defaults to the platform domain (usable by every tenant); any other must be
    the tenant's own. ``tenant`` (ID or slug) defaults to the default tenant.

    ``client_id`` makes the create idempotent (seed 000 identities.client_id): repeating
    it with the same body returns the identity made before (``existing``); with another
    body it is a Conflict ``client_id_conflict``. The tenant policy ``max_identities``
    bounds the identities that are not deleted (``identity_limit``).
    """
    _check_username(username)
    display_name = _check_display_name(username if display_name is None else display_name)
    if client_id is not None:
        _check_client_id(client_id)
    checked_metadata = _check_metadata(metadata or {})
    domain_name = _domain_name(app, domain)
    fingerprint = identity_fingerprint(username, domain_name, display_name, checked_metadata)
    keys = app.keys()
    now = app.clock.now_ms()
    with app.db.write() as tx:
        owner = _default_tenant(tx) if tenant is None else resolve_tenant(tx, tenant)
        _check_active(owner)
        if (
            client_id is not None
            and directory.find_identity_by_client_id(tx, owner.id, client_id) is not None
        ):
            return _replay_client_id(tx, owner, client_id, fingerprint)
        _check_identity_limit(tx, owner)
        found = _usable_domain(tx, owner, domain_name)
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
            client_id=client_id,
            client_fingerprint=None if client_id is None else fingerprint,
            metadata=checked_metadata,
        )
        if identity is None:
            # A concurrent create took the username (or the client_id) between the
            # check and the insert.
            if client_id is not None:
                taken = directory.find_identity_by_client_id(tx, owner.id, client_id)
                if taken is not None:
                    return _replay_client_id(tx, owner, client_id, fingerprint)
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
        emit(
            tx,
            IdentityCreated(address_id=row.id, domain_id=found.id, client_id=client_id),
            tenant_id=owner.id,
            identity_id=identity.id,
            now=now,
        )
    return NewIdentity(identity, row)


def _check_identity_limit(tx: Tx, owner: Tenant) -> None:
    """The tenant policy's ``max_identities`` (None: no limit)."""
    from postroom.tenancy.tenants import get_policy  # tenants imports this module

    limit = get_policy(tx, owner.id).get("max_identities")
    if limit is None:
        return
    # Two creates racing must not both pass the count.
    directory.lock_tenant(tx, owner.id)
    if directory.count_live_identities(tx, owner.id) >= int(limit):
        raise Conflict(
            f"tenant {owner.slug} has its {limit} identities already", code="identity_limit"
        )


def _live_identity(tx: Tx, identity_id: str) -> Identity:
    identity = directory.get_identity(tx, identity_id)
    if identity is None or identity.is_system or identity.status == "deleted":
        raise NotFound(f"no identity {identity_id!r}", code="identity_not_found")
    return identity


def update_identity(
    app: App,
    identity_id: str,
    changes: Mapping[str, Any],
    *,
    actor_level: str = "platform",
    actor_key_id: str | None = None,
) -> IdentityDetail:
    """Change an identity: ``display_name``, ``signature_text``, ``signature_html`` (None
    clears), ``metadata`` (replaced whole; None empties it) and ``status``.

    ``status`` 'paused' pauses it (``pause_reason`` 'manual'; mail is still received);
    'active' resumes it. A pause the platform imposed (abuse, tenant suspension) is lifted
    only by ``actor_level`` 'platform' (Conflict ``pause_not_manual``).
    """
    unknown = set(changes) - {
        "display_name",
        "signature_text",
        "signature_html",
        "metadata",
        "status",
    }
    if unknown:
        raise InvalidInput(f"cannot change {sorted(unknown)}", code="invalid_identity_change")
    columns: dict[str, Any] = {}
    if "display_name" in changes:
        value = changes["display_name"]
        if not isinstance(value, str):
            raise InvalidInput("a display name is a string", code="invalid_display_name")
        columns["display_name"] = _check_display_name(value)
    for field, limit in (
        ("signature_text", MAX_SIGNATURE_TEXT),
        ("signature_html", MAX_SIGNATURE_HTML),
    ):
        if field in changes:
            value = changes[field]
            columns[field] = None if value is None else _check_signature(value, limit, field)
    if "metadata" in changes:
        columns["metadata"] = _check_metadata(changes["metadata"] or {})
    status = changes.get("status")
    if status is not None and status not in SETTABLE_IDENTITY_STATUSES:
        raise InvalidInput("status must be active or paused", code="invalid_identity_status")
    now = app.clock.now_ms()
    with app.db.write() as tx:
        identity = _live_identity(tx, identity_id)
        current = directory.get_identity_detail(tx, identity.id)
        assert current is not None
        if status is not None and status != identity.status:
            if identity.status not in SETTABLE_IDENTITY_STATUSES:
                raise Conflict(
                    f"identity {identity.id} is {identity.status}", code="identity_not_active"
                )
            if status == "paused":
                columns.update(status="paused", pause_reason="manual")
            else:
                if current.pause_reason not in (None, "manual") and actor_level != "platform":
                    raise Conflict(
                        f"identity {identity.id} was paused by the platform"
                        f" ({current.pause_reason}); only a platform key resumes it",
                        code="pause_not_manual",
                    )
                columns.update(status="active", pause_reason=None)
        if columns:
            directory.update_identity(tx, identity.id, columns, now)
            details: dict[str, Any] = {
                "fields": sorted(k for k in columns if k not in ("status", "pause_reason"))
            }
            if "status" in columns:
                details["status"] = columns["status"]
            audit.record(
                app,
                tx,
                action="identity.update",
                tenant_id=identity.tenant_id,
                target_type="identity",
                target_id=identity.id,
                actor_key_id=actor_key_id,
                details=details,
            )
            emit(
                tx,
                IdentityUpdated.model_validate(
                    {
                        "fields": details["fields"],
                        "status": columns.get("status", identity.status),
                        "status_changed": "status" in columns,
                    }
                ),
                tenant_id=identity.tenant_id,
                identity_id=identity.id,
                now=now,
            )
        updated = directory.get_identity_detail(tx, identity.id)
    assert updated is not None
    return updated


def delete_identity(app: App, identity_id: str, *, actor_key_id: str | None = None) -> None:
    """Delete an identity in one transaction: its status becomes 'deleted', every
    address of it moves to ``address_tombstones`` (keyed hash, reason 'deleted') and
    leaves ``addresses``, so none is ever handed out again and inbound mail to them is
    refused like mail to an unknown address. Its identity keys are revoked and a domain
    delivering catch-all mail to it becomes literal. Its stored mail is kept (erasure is
    a separate request)."""
    keys = app.keys()
    now = app.clock.now_ms()
    with app.db.write() as tx:
        identity = _live_identity(tx, identity_id)
        addresses = directory.list_identity_addresses(tx, identity.id)
        for entry in addresses:
            directory.insert_tombstone(
                tx,
                address_hash=keys.address_hash(entry.address.address),
                reason="deleted",
                identity_id=identity.id,
            )
            directory.delete_address(tx, entry.address.id)
        directory.mark_identity_deleted(tx, identity.id, now)
        revoked = 0
        for key in key_rows.list_keys(tx, tenant_id=identity.tenant_id, include_revoked=False):
            if key.identity_id == identity.id and key_rows.revoke(tx, key.id, now):
                revoked += 1
        directory.clear_catch_all_into(tx, identity.id, now)
        audit.record(
            app,
            tx,
            action="identity.delete",
            tenant_id=identity.tenant_id,
            target_type="identity",
            target_id=identity.id,
            actor_key_id=actor_key_id,
            details={
                "address_ids": [entry.address.id for entry in addresses],
                "keys_revoked": revoked,
            },
        )
        emit(
            tx,
            IdentityDeleted(
                address_ids=[entry.address.id for entry in addresses], keys_revoked=revoked
            ),
            tenant_id=identity.tenant_id,
            identity_id=identity.id,
            now=now,
        )


# --- aliases --------------------------------------------------------------------------


def add_alias(
    app: App,
    identity_id: str,
    local_part: str,
    *,
    domain: str | None = None,
    actor_key_id: str | None = None,
) -> AddressDetail:
    """Give an identity an alias address.

    On the platform domain the local part follows the username rules and carries the
    tenant's suffix (``sales`` of tenant acme is ``sales.acme@<platform>``), as a primary
    address does; on the tenant's own domain the local part is used as given (lower
    case, ``LOCAL_PART_RE``). Taken or tombstoned: Conflict ``address_unavailable``.
    """
    local_part = local_part.lower()
    domain_name = _domain_name(app, domain)
    keys = app.keys()
    now = app.clock.now_ms()
    with app.db.write() as tx:
        identity = _live_identity(tx, identity_id)
        owner = directory.get_tenant(tx, identity.tenant_id)
        assert owner is not None
        _check_active(owner)
        found = _usable_domain(tx, owner, domain_name)
        if found.kind == "platform":
            if not USERNAME_RE.fullmatch(local_part):
                raise InvalidInput(
                    "on the platform domain an alias's local part is 1-24 lower-case"
                    " letters, digits, '.', '_' or '-', starting with a letter or digit",
                    code="invalid_local_part",
                )
            full_local = local_part + owner.address_suffix
        else:
            if not LOCAL_PART_RE.fullmatch(local_part):
                raise InvalidInput(
                    "a local part is 1-64 lower-case letters, digits, '_', '-' or '.'"
                    " (not first, last or twice in a row)",
                    code="invalid_local_part",
                )
            full_local = local_part
        address = f"{full_local}@{domain_name}"
        unavailable = Conflict(
            f"the address {address} is not available", code="address_unavailable"
        )
        if directory.is_tombstoned(tx, keys.address_hash(address)):
            raise unavailable
        row = directory.insert_address(
            tx,
            address_id=new_id("adr"),
            address=address,
            local_part=full_local,
            domain_id=found.id,
            tenant_id=owner.id,
            identity_id=identity.id,
            role="alias",
            now=now,
        )
        if row is None:
            raise unavailable
        audit.record(
            app,
            tx,
            action="address.create",
            tenant_id=owner.id,
            target_type="address",
            target_id=row.id,
            actor_key_id=actor_key_id,
            details={"identity_id": identity.id, "domain_id": found.id, "role": "alias"},
        )
    return AddressDetail(row, None)


def retire_alias(
    app: App, identity_id: str, address_id: str, *, actor_key_id: str | None = None
) -> bool:
    """Retire an alias now: its row stays (status 'retired', ``retired_at``), so it is
    never reassigned, and inbound mail to it is refused like mail to an unknown address.
    A primary address is not retired (Conflict ``primary_address``). False when it was
    retired already (nothing written)."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        identity = _live_identity(tx, identity_id)
        address = directory.get_address_by_id(tx, address_id)
        if address is None or address.identity_id != identity.id:
            raise NotFound(f"no address {address_id!r}", code="address_not_found")
        if address.role == "primary":
            raise Conflict(
                "the primary address is not retired; delete the identity instead",
                code="primary_address",
            )
        if not directory.retire_address(tx, address.id, now):
            return False
        audit.record(
            app,
            tx,
            action="address.retire",
            tenant_id=identity.tenant_id,
            target_type="address",
            target_id=address.id,
            actor_key_id=actor_key_id,
            details={"identity_id": identity.id},
        )
    return True


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

"""API keys: minting, verifying, rotating and revoking the secrets callers present.

A secret looks like ``pr_live_0a1b2c3d4e5f_<32 characters>``::

    pr _ {mode} _ {lookup: 12 chars} _ {secret: 32 chars = 160 random bits}

Both random parts use lower-case Crockford base32 (no i, l, o, u). The database keeps
only the lookup (to find the row) and HMAC-SHA256 of the whole secret under the key
pepper, a file outside the database, so a copy of the database alone cannot test
guesses. The secret is shown once, when the key is created or rotated.

Verification takes the same path whether the lookup exists or not: the presented secret
is always hashed and compared (``hmac.compare_digest``) against the row's hashes or, with
no row, against a dummy, so response time does not reveal which lookups exist.

Rotation keeps one previous hash, accepted until ``prev_expires_at``, so a deployment
can move to the new secret without a window where neither works.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postroom.errors import Conflict, InvalidInput, NotFound, PostroomError, Refused
from postroom.ids import is_id, new_id
from postroom.store import api_keys as key_rows
from postroom.store import tenancy as directory
from postroom.store.api_keys import ApiKey
from postroom.store.db import Tx
from postroom.store.tenancy import Tenant
from postroom.tenancy import audit
from postroom.tenancy.permissions import check_level, resolve_permissions

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "ALPHABET",
    "ApiKey",
    "MAX_ROTATION_OVERLAP_MS",
    "ParsedSecret",
    "Refused",
    "Unauthenticated",
    "check_grant",
    "check_rotate",
    "create_key",
    "create_key_in",
    "creation_scope",
    "format_secret",
    "get_key",
    "key_in_reach",
    "list_in_reach",
    "list_keys",
    "parse_secret",
    "reaches",
    "revoke",
    "rotate",
    "touch_last_used",
    "verify",
]

# Lower-case Crockford base32: digits and letters without i, l, o, u.
ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
LOOKUP_LENGTH = 12
SECRET_LENGTH = 32  # 160 bits
MODES = ("live", "test")
MAX_NAME_LENGTH = 100
LAST_USED_INTERVAL_MS = 60_000
MAX_ROTATION_OVERLAP_MS = 30 * 86_400_000

_CHARS = "[0-9a-hjkmnp-tv-z]"
_SECRET_RE = re.compile(
    rf"pr_(live|test)_({_CHARS}{{{LOOKUP_LENGTH}}})_({_CHARS}{{{SECRET_LENGTH}}})"
)
# Compared against when there is no row (or no previous hash), so that path costs the
# same as a real comparison. Random per process: it can never match a real hash.
_DUMMY_HASH = secrets.token_hex(32)


class Unauthenticated(PostroomError):
    """The presented API key is malformed, unknown, wrong, revoked or expired.

    The message says revoked or expired only once the secret itself was proven right;
    an unknown lookup and a wrong secret get the same answer.
    """

    code = "invalid_api_key"


@dataclass(frozen=True)
class ParsedSecret:
    mode: str
    lookup: str
    secret: str


def _random_text(length: int) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def format_secret(mode: str, lookup: str, secret: str) -> str:
    return f"pr_{mode}_{lookup}_{secret}"


def parse_secret(presented: str) -> ParsedSecret | None:
    """The parts of a well-formed secret, or None."""
    match = _SECRET_RE.fullmatch(presented)
    if match is None:
        return None
    return ParsedSecret(match.group(1), match.group(2), match.group(3))


# --- creating -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scope:
    mode: str
    tenant_id: str | None
    identity_id: str | None
    partner_id: str | None


def _resolve_scope(
    tx: Tx,
    level: str,
    tenant_id: str | None,
    identity_id: str | None,
    partner_id: str | None,
) -> _Scope:
    """Check what the key's level must and must not name; the mode follows the tenant."""
    if level == "platform":
        if tenant_id or identity_id or partner_id:
            raise InvalidInput(
                "a platform key names no tenant, identity or partner", code="invalid_key_scope"
            )
        return _Scope("live", None, None, None)
    if level == "partner":
        if tenant_id or identity_id:
            raise InvalidInput(
                "a partner key names a partner only, no tenant or identity",
                code="invalid_key_scope",
            )
        if not partner_id:
            raise InvalidInput("a partner key needs a partner", code="invalid_key_scope")
        partner = directory.get_partner(tx, partner_id) if is_id(partner_id, "ptn") else None
        if partner is None:
            raise NotFound(f"no partner {partner_id}", code="partner_not_found")
        if partner.status != "active":
            raise Conflict(f"partner {partner_id} is {partner.status}", code="partner_not_active")
        return _Scope("live", None, None, partner_id)
    if partner_id:
        raise InvalidInput(
            f"a {level} key names no partner (its tenant's partner applies)",
            code="invalid_key_scope",
        )
    if level == "identity":
        if not identity_id:
            raise InvalidInput("an identity key needs an identity", code="invalid_key_scope")
        identity = directory.get_identity(tx, identity_id) if is_id(identity_id, "idn") else None
        # Another tenant's identity is answered like a missing one: a caller learns
        # nothing about identities outside its reach.
        if (
            identity is None
            or identity.is_system
            or (tenant_id is not None and identity.tenant_id != tenant_id)
        ):
            where = f" in tenant {tenant_id}" if tenant_id else ""
            raise NotFound(f"no identity {identity_id}{where}", code="identity_not_found")
        if identity.status not in ("active", "paused"):
            raise Conflict(
                f"identity {identity_id} is {identity.status}", code="identity_not_active"
            )
        tenant_id = identity.tenant_id
    elif identity_id:
        raise InvalidInput("a tenant key names no identity", code="invalid_key_scope")
    if not tenant_id:
        raise InvalidInput(f"a {level} key needs a tenant", code="invalid_key_scope")
    tenant = directory.get_tenant(tx, tenant_id) if is_id(tenant_id, "ten") else None
    if tenant is None:
        raise NotFound(f"no tenant {tenant_id}", code="tenant_not_found")
    if tenant.status != "active":
        raise Conflict(f"tenant {tenant.slug} is {tenant.status}", code="tenant_not_active")
    return _Scope(tenant.mode, tenant.id, identity_id if level == "identity" else None, None)


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME_LENGTH or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidInput(
            f"a key name is 1-{MAX_NAME_LENGTH} characters without control characters",
            code="invalid_key_name",
        )
    return name


def create_key_in(
    app: App,
    tx: Tx,
    level: str,
    *,
    tenant_id: str | None = None,
    identity_id: str | None = None,
    partner_id: str | None = None,
    name: str | None = None,
    permissions: Iterable[str] | None = None,
    expires_at: int | None = None,
    created_by_key_id: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key inside the caller's transaction; returns it and its secret (once)."""
    check_level(level)
    name = _check_name(f"{level} key" if name is None else name)
    granted = resolve_permissions(level, None if permissions is None else list(permissions))
    now = app.clock.now_ms()
    if expires_at is not None and expires_at <= now:
        raise InvalidInput("a key's expiry must be in the future", code="invalid_expiry")
    scope = _resolve_scope(tx, level, tenant_id, identity_id, partner_id)
    keys = app.keys()
    # 60 bits of lookup make a collision vanishingly rare; a few redraws cover it anyway.
    for _ in range(5):
        lookup = _random_text(LOOKUP_LENGTH)
        secret = format_secret(scope.mode, lookup, _random_text(SECRET_LENGTH))
        key = key_rows.insert(
            tx,
            key_id=new_id("key"),
            lookup=lookup,
            secret_hash=keys.api_key_hash(secret),
            name=name,
            level=level,
            mode=scope.mode,
            permissions=granted,
            now=now,
            partner_id=scope.partner_id,
            tenant_id=scope.tenant_id,
            identity_id=scope.identity_id,
            created_by_key_id=created_by_key_id,
            expires_at=expires_at,
        )
        if key is not None:
            break
    else:  # pragma: no cover - needs five 60-bit collisions in a row
        raise Conflict("could not draw a free key lookup; try again", code="lookup_exhausted")
    audit.record(
        app,
        tx,
        action="key.create",
        tenant_id=key.tenant_id,
        target_type="api_key",
        target_id=key.id,
        actor_key_id=created_by_key_id,
        details={
            "level": key.level,
            "mode": key.mode,
            "permissions": list(key.permissions),
            "identity_id": key.identity_id,
            "partner_id": key.partner_id,
            "expires_at": key.expires_at,
        },
    )
    return key, secret


def create_key(
    app: App,
    level: str,
    *,
    tenant_id: str | None = None,
    identity_id: str | None = None,
    partner_id: str | None = None,
    name: str | None = None,
    permissions: Iterable[str] | None = None,
    expires_at: int | None = None,
    created_by_key_id: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key of ``level``; returns the record and the secret, which is shown once.

    ``permissions=None`` gives the level's defaults. Tenant keys need an active tenant;
    identity keys an identity of ``tenant_id`` (when given); the mode is the tenant's
    (platform and partner keys: live).
    """
    with app.db.write() as tx:
        return create_key_in(
            app,
            tx,
            level,
            tenant_id=tenant_id,
            identity_id=identity_id,
            partner_id=partner_id,
            name=name,
            permissions=permissions,
            expires_at=expires_at,
            created_by_key_id=created_by_key_id,
        )


# --- verifying ------------------------------------------------------------------------


def verify(app: App, presented: str) -> ApiKey:
    """The key a presented secret belongs to, or :class:`Unauthenticated`.

    Accepts the current secret, and the previous one until its rotation overlap ends.
    Does not record use: call :func:`touch_last_used` after the request is authorised.
    """
    keys = app.keys()
    parsed = parse_secret(presented)
    # Hash even a malformed value, so every refusal does the same work.
    computed = keys.api_key_hash(presented if parsed is not None else "")
    credentials = None
    if parsed is not None:
        with app.db.read() as tx:
            credentials = key_rows.find_credentials(tx, parsed.lookup)
    now = app.clock.now_ms()
    current = credentials.hash if credentials is not None else _DUMMY_HASH
    previous = (
        credentials.prev_hash
        if credentials is not None and credentials.prev_hash is not None
        else _DUMMY_HASH
    )
    # Both comparisons always run; neither short-circuits on the other.
    matches_current = hmac.compare_digest(computed, current)
    matches_previous = hmac.compare_digest(computed, previous)
    if credentials is None:
        raise Unauthenticated("invalid API key")
    key = credentials.key
    previous_open = key.prev_expires_at is not None and key.prev_expires_at > now
    if not (matches_current or (matches_previous and previous_open)):
        raise Unauthenticated("invalid API key")
    if key.revoked_at is not None:
        raise Unauthenticated(f"API key {key.id} was revoked")
    if key.expires_at is not None and key.expires_at <= now:
        raise Unauthenticated(f"API key {key.id} has expired")
    return key


def touch_last_used(app: App, key: ApiKey) -> bool:
    """Record that ``key`` was used, at most once a minute; True when a write happened.

    The check on the key as read by :func:`verify` spares most requests the write
    transaction; the conditional UPDATE keeps concurrent requests to one write.
    """
    now = app.clock.now_ms()
    if key.last_used_at is not None and key.last_used_at >= now - LAST_USED_INTERVAL_MS:
        return False
    with app.db.write() as tx:
        return key_rows.touch_last_used(tx, key.id, now, LAST_USED_INTERVAL_MS)


# --- managing -------------------------------------------------------------------------


def _get_in_scope(tx: Tx, key_id: str, tenant_id: str | None) -> ApiKey:
    key = key_rows.get(tx, key_id) if is_id(key_id, "key") else None
    # A key outside the asked tenant is answered like a missing one.
    if key is None or (tenant_id is not None and key.tenant_id != tenant_id):
        raise NotFound(f"no API key {key_id}", code="key_not_found")
    return key


def get_key(app: App, key_id: str, *, tenant_id: str | None = None) -> ApiKey:
    with app.db.read() as tx:
        return _get_in_scope(tx, key_id, tenant_id)


def list_keys(
    app: App, *, tenant_id: str | None = None, include_revoked: bool = True
) -> list[ApiKey]:
    """Keys (never their hashes or secrets); with ``tenant_id``, that tenant's keys."""
    with app.db.read() as tx:
        return key_rows.list_keys(tx, tenant_id=tenant_id, include_revoked=include_revoked)


def revoke(
    app: App, key_id: str, *, tenant_id: str | None = None, actor_key_id: str | None = None
) -> ApiKey:
    """Revoke a key at once (idempotent: revoking a revoked key changes nothing)."""
    with app.db.write() as tx:
        key = _get_in_scope(tx, key_id, tenant_id)
        if key_rows.revoke(tx, key.id, app.clock.now_ms()):
            audit.record(
                app,
                tx,
                action="key.revoke",
                tenant_id=key.tenant_id,
                target_type="api_key",
                target_id=key.id,
                actor_key_id=actor_key_id,
            )
        revoked = key_rows.get(tx, key.id)
    assert revoked is not None
    return revoked


def rotate(
    app: App,
    key_id: str,
    overlap_ms: int,
    *,
    tenant_id: str | None = None,
    actor_key_id: str | None = None,
) -> tuple[ApiKey, str]:
    """Give a key a new secret; the old one keeps working for ``overlap_ms`` (0: stops now).

    Only one previous secret is kept: rotating again within an overlap ends the older
    secret at once. Returns the key and the new secret, which is shown once.
    """
    if not 0 <= overlap_ms <= MAX_ROTATION_OVERLAP_MS:
        raise InvalidInput(
            f"the rotation overlap must be between 0 and {MAX_ROTATION_OVERLAP_MS // 86_400_000}"
            " days",
            code="invalid_overlap",
        )
    keys = app.keys()
    now = app.clock.now_ms()
    with app.db.write() as tx:
        key = _get_in_scope(tx, key_id, tenant_id)
        if key.revoked_at is not None:
            raise Conflict(f"API key {key.id} is revoked", code="key_revoked")
        if key.expires_at is not None and key.expires_at <= now:
            raise Conflict(f"API key {key.id} has expired", code="key_expired")
        secret = format_secret(key.mode, key.lookup, _random_text(SECRET_LENGTH))
        until = now + overlap_ms if overlap_ms > 0 else None
        key_rows.rotate(tx, key.id, new_hash=keys.api_key_hash(secret), keep_previous_until=until)
        audit.record(
            app,
            tx,
            action="key.rotate",
            tenant_id=key.tenant_id,
            target_type="api_key",
            target_id=key.id,
            actor_key_id=actor_key_id,
            details={"overlap_ms": overlap_ms},
        )
        rotated = key_rows.get(tx, key.id)
    assert rotated is not None
    return rotated, secret


# --- what a calling key may do with keys (the REST API) --------------------------------
#
# A key reaches keys as it reaches tenants: platform keys every key; partner keys their
# partner's own keys and the keys of the tenants the partner owns; tenant keys the
# tenant's tenant and identity keys. Identity keys never hold keys:manage. A key outside
# reach is answered like a missing one (404 key_not_found). Within reach, a key can never
# hand out a permission it does not hold itself: not by creating a key, and not by
# rotating one (which would reveal a secret for the rotated key's permissions).


def _sees_tenant(caller: ApiKey, tenant: Tenant) -> bool:
    if caller.level == "platform":
        return True
    if caller.level == "partner":
        return tenant.partner_id is not None and tenant.partner_id == caller.partner_id
    return caller.level == "tenant" and tenant.id == caller.tenant_id


def _tenant_seen(tx: Tx, caller: ApiKey, tenant_id: str) -> Tenant:
    tenant = directory.get_tenant(tx, tenant_id) if is_id(tenant_id, "ten") else None
    if tenant is None or not _sees_tenant(caller, tenant):
        raise NotFound(f"no tenant {tenant_id}", code="tenant_not_found")
    return tenant


def reaches(tx: Tx, caller: ApiKey, key: ApiKey) -> bool:
    """Whether ``caller`` may see and manage ``key``."""
    if caller.level == "platform":
        return True
    if caller.level == "partner":
        if key.partner_id is not None:
            return key.partner_id == caller.partner_id
        if key.tenant_id is None:
            return False
        tenant = directory.get_tenant(tx, key.tenant_id)
        return tenant is not None and _sees_tenant(caller, tenant)
    if caller.level == "tenant":
        return key.tenant_id is not None and key.tenant_id == caller.tenant_id
    return False


def key_in_reach(tx: Tx, caller: ApiKey, key_id: str) -> ApiKey:
    """The key, or NotFound ``key_not_found`` when it is missing or out of reach."""
    key = key_rows.get(tx, key_id) if is_id(key_id, "key") else None
    if key is None or not reaches(tx, caller, key):
        raise NotFound(f"no API key {key_id}", code="key_not_found")
    return key


def list_in_reach(
    tx: Tx,
    caller: ApiKey,
    *,
    tenant_id: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> list[ApiKey]:
    """Keys in reach in ID order after ``after``; with ``tenant_id`` (which must be in
    reach, else NotFound ``tenant_not_found``) only that tenant's keys."""
    if tenant_id is not None:
        _tenant_seen(tx, caller, tenant_id)
    if caller.level == "platform":
        return key_rows.list_page(tx, tenant_id=tenant_id, after=after, limit=limit)
    if caller.level == "partner":
        return key_rows.list_page(
            tx, partner_id=caller.partner_id, tenant_id=tenant_id, after=after, limit=limit
        )
    if caller.level == "tenant":
        return key_rows.list_page(tx, tenant_id=caller.tenant_id, after=after, limit=limit)
    return []


def check_grant(caller: ApiKey, permissions: Iterable[str]) -> None:
    """Refused ``permission_escalation`` unless ``caller`` holds every one of
    ``permissions``."""
    missing = [p for p in permissions if p not in caller.permissions]
    if missing:
        raise Refused(
            "an API key cannot grant permissions it does not hold: " + ", ".join(missing),
            code="permission_escalation",
        )


def creation_scope(
    tx: Tx,
    caller: ApiKey,
    level: str,
    *,
    tenant_id: str | None,
    identity_id: str | None,
) -> str | None:
    """Check that ``caller`` may create a ``level`` key there; returns the tenant the new
    key belongs in (a tenant key's own tenant when it names none).

    Platform keys create any key. Partner and tenant keys create tenant and identity keys
    in the tenants they reach (a tenant or identity outside: NotFound), never platform or
    partner keys (Refused ``permission_denied``). The scope's own rules (what each level
    must name) are checked when the key is created.
    """
    check_level(level)
    if caller.level == "platform":
        return tenant_id
    if level in ("platform", "partner") or caller.level == "identity":
        raise Refused(f"a {caller.level} key cannot create {level} keys", code="permission_denied")
    if level == "identity" and identity_id:
        identity = directory.get_identity(tx, identity_id) if is_id(identity_id, "idn") else None
        tenant = None
        if identity is not None and not identity.is_system:
            tenant = directory.get_tenant(tx, identity.tenant_id)
        if identity is None or tenant is None or not _sees_tenant(caller, tenant):
            raise NotFound(f"no identity {identity_id}", code="identity_not_found")
        if tenant_id is not None and tenant_id != identity.tenant_id:
            raise NotFound(
                f"no identity {identity_id} in tenant {tenant_id}", code="identity_not_found"
            )
        return identity.tenant_id
    if tenant_id is None:
        return caller.tenant_id
    return _tenant_seen(tx, caller, tenant_id).id


def check_rotate(caller: ApiKey, key: ApiKey) -> None:
    """Rotating reveals a secret with ``key``'s permissions: Refused
    ``permission_escalation`` unless ``caller`` holds them all."""
    check_grant(caller, key.permissions)

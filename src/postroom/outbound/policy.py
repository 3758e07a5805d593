"""Sending policy: suppressions (seed 000: keyed hash + masked hint) and daily caps.

A suppressed recipient is never offered: the send records it with status
``suppressed``. A suppression outlives erasure of the person, because it records an
objection to contact; it holds only a keyed hash of the address and a masked hint.

Daily caps count sends per inbox and per tenant in the tenant's time zone (seed 000
``counters``: ``sends`` and ``sends:idn_...``); a send over either cap is refused with
``send_limit_exceeded`` (API 429) before anything is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from postroom.errors import InvalidInput, LimitExceeded, NotFound
from postroom.inbound.directory import normalize_address
from postroom.store import outbox as rows
from postroom.store.db import Tx

if TYPE_CHECKING:
    from postroom.app import App

REASONS = ("hard_bounce", "complaint", "unsubscribe", "manual", "provider")


def canonical(address: str, field: str = "address") -> str:
    """The comparison form of an address (lower case, A-label domain)."""
    normal = normalize_address(address)
    if normal is None or any(c.isspace() for c in normal):
        raise InvalidInput(f"{address[:80]!r} is not an email address", field=field)
    return normal


def hint(address: str) -> str:
    """``j***@example.com``: enough to recognise an entry, not to recover it."""
    local, _, domain = address.rpartition("@")
    return f"{local[:1]}***@{domain}"


@dataclass(frozen=True)
class SuppressionView:
    address_hash: str
    address_hint: str
    reason: str
    source_message_id: str | None
    note: str | None
    created_at: int
    expires_at: int | None


def _view(s: rows.Suppression) -> SuppressionView:
    return SuppressionView(
        s.address_hash,
        s.address_hint,
        s.reason,
        s.source_message_id,
        s.note,
        s.created_at,
        s.expires_at,
    )


def suppress_in(
    tx: Tx,
    app: App,
    tenant_id: str,
    address: str,
    reason: str,
    *,
    now: int,
    source_message_id: str | None = None,
    note: str | None = None,
    expires_at: int | None = None,
) -> bool:
    """Add a suppression inside the caller's transaction; True when it is new."""
    normal = canonical(address)
    return rows.upsert_suppression(
        tx,
        rows.Suppression(
            tenant_id=tenant_id,
            address_hash=app.keys().address_hash(normal),
            address_hint=hint(normal),
            reason=reason,
            source_message_id=source_message_id,
            note=note,
            created_at=now,
            expires_at=expires_at,
        ),
    )


def add_suppression(
    app: App,
    tenant_id: str,
    address: str,
    *,
    reason: str = "manual",
    note: str | None = None,
    expires_at: int | None = None,
) -> SuppressionView:
    if reason not in REASONS:
        raise InvalidInput(f"reason must be one of {', '.join(REASONS)}", field="reason")
    if note is not None and len(note) > 500:
        raise InvalidInput("note is longer than 500 characters", field="note")
    now = app.clock.now_ms()
    if expires_at is not None and expires_at <= now:
        raise InvalidInput("expires_at is in the past", field="expires_at")
    normal = canonical(address)
    with app.db.write() as tx:
        suppress_in(tx, app, tenant_id, normal, reason, now=now, note=note, expires_at=expires_at)
        found = rows.get_suppression(tx, tenant_id, app.keys().address_hash(normal))
    assert found is not None
    return _view(found)


def check_suppression(app: App, tenant_id: str, address: str) -> SuppressionView | None:
    normal = canonical(address)
    now = app.clock.now_ms()
    with app.db.read() as tx:
        found = rows.get_suppression(tx, tenant_id, app.keys().address_hash(normal))
    if found is None or (found.expires_at is not None and found.expires_at <= now):
        return None
    return _view(found)


def remove_suppression(app: App, tenant_id: str, address: str) -> None:
    normal = canonical(address)
    with app.db.write() as tx:
        if not rows.delete_suppression(tx, tenant_id, app.keys().address_hash(normal)):
            raise NotFound("that address is not suppressed", code="suppression_not_found")


def remove_suppression_by_id(app: App, tenant_id: str, address_hash: str) -> None:
    """Remove by the suppression's id (the keyed hash the list shows)."""
    with app.db.write() as tx:
        if not rows.delete_suppression(tx, tenant_id, address_hash[:128]):
            raise NotFound("no such suppression", code="suppression_not_found")


def list_suppressions(
    app: App,
    tenant_id: str,
    after: tuple[int, str] | None,
    limit: int,
    reason: str | None = None,
) -> list[SuppressionView]:
    with app.db.read() as tx:
        return [_view(s) for s in rows.list_suppressions(tx, tenant_id, after, limit, reason)]


def suppressed(tx: Tx, app: App, tenant_id: str, addresses: Sequence[str], now: int) -> set[str]:
    """Which of these (canonical) addresses the tenant has suppressed."""
    keys = app.keys()
    by_hash = {keys.address_hash(a): a for a in addresses}
    return {by_hash[h] for h in rows.suppressed_hashes(tx, tenant_id, list(by_hash), now)}


# --- daily caps ----------------------------------------------------------------------


def tenant_day(timezone: str, now_ms: int) -> str:
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    return datetime.fromtimestamp(now_ms / 1000, UTC).astimezone(zone).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class Caps:
    identity: int  # 0 = no cap
    tenant: int


def caps_for(tx: Tx, app: App, tenant_id: str) -> Caps:
    """The settings' caps, lowered or raised by the tenant's policy (``daily_send_cap``,
    ``daily_send_cap_per_identity``)."""
    raw = tx.fetchval("SELECT policy_json FROM tenants WHERE id = %s", (tenant_id,))
    policy = json.loads(raw or "{}")
    identity = policy.get("daily_send_cap_per_identity")
    tenant = policy.get("daily_send_cap")
    return Caps(
        identity=int(identity)
        if isinstance(identity, int)
        else app.settings.outbound_daily_cap_identity,
        tenant=int(tenant) if isinstance(tenant, int) else app.settings.outbound_daily_cap_tenant,
    )


@dataclass(frozen=True)
class Usage:
    day: str
    identity_sent: int
    identity_cap: int
    tenant_sent: int
    tenant_cap: int


def take_send(tx: Tx, app: App, tenant_id: str, timezone: str, identity_id: str, now: int) -> None:
    """Count one send against both caps, or refuse (the transaction is rolled back by
    the caller's error, so a refused send counts nothing)."""
    caps = caps_for(tx, app, tenant_id)
    day = tenant_day(timezone, now)
    tenant_sent = rows.bump_counter(tx, tenant_id, "sends", day)
    identity_sent = rows.bump_counter(tx, tenant_id, f"sends:{identity_id}", day)
    if caps.tenant and tenant_sent > caps.tenant:
        raise LimitExceeded(
            f"the tenant's daily send cap ({caps.tenant}) is used up for {day}",
            code="send_limit_exceeded",
        )
    if caps.identity and identity_sent > caps.identity:
        raise LimitExceeded(
            f"this inbox's daily send cap ({caps.identity}) is used up for {day}",
            code="send_limit_exceeded",
        )


def usage(app: App, tenant_id: str, timezone: str, identity_id: str) -> Usage:
    now = app.clock.now_ms()
    day = tenant_day(timezone, now)
    with app.db.read() as tx:
        caps = caps_for(tx, app, tenant_id)
        return Usage(
            day=day,
            identity_sent=rows.counter(tx, tenant_id, f"sends:{identity_id}", day),
            identity_cap=caps.identity,
            tenant_sent=rows.counter(tx, tenant_id, "sends", day),
            tenant_cap=caps.tenant,
        )

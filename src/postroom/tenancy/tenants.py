"""Changing tenants: rename, suspend and resume, policy; listing them page by page.

Suspension is the platform's or a partner's decision (seed 000 tenants.suspended_by): a
partner cannot lift a suspension the platform imposed. A suspended tenant's keys stop
working (403 ``tenant_suspended``) and its mail is still received.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.store import tenancy as directory
from postroom.store.db import Tx, member_of
from postroom.store.tenancy import Tenant
from postroom.tenancy import audit
from postroom.tenancy.service import MAX_TENANT_NAME, _printable

if TYPE_CHECKING:
    from postroom.app import App

# The policy fields, their defaults and bounds. A field set to None returns to default.
POLICY_DEFAULTS: Mapping[str, int | None] = {
    "max_identities": None,  # None: no limit; enforced when an identity is created
    "events_retention_days": 30,  # how long event history is kept
    # Daily send caps (0: no cap); None: the outbound.daily_cap_* settings apply.
    "daily_send_cap": None,
    "daily_send_cap_per_identity": None,
}
POLICY_BOUNDS: Mapping[str, tuple[int, int]] = {
    "max_identities": (0, 1_000_000),
    "events_retention_days": (1, 3650),
    "daily_send_cap": (0, 1 << 31),
    "daily_send_cap_per_identity": (0, 1 << 31),
}


@dataclass(frozen=True)
class TenantChange:
    name: str | None = None
    status: str | None = None  # 'active' or 'suspended'


def list_page(tx: Tx, tenant_ids: list[str] | None, after: str | None, limit: int) -> list[Tenant]:
    """Tenants in ID order after ``after``; only ``tenant_ids`` unless it is None."""
    clauses: list[str] = []
    params: list[Any] = []
    if tenant_ids is not None:
        if not tenant_ids:
            return []
        clause, values = member_of(tx, "id", tenant_ids)
        clauses.append(clause)
        params.extend(values)
    if after is not None:
        clauses.append("id > %s")
        params.append(after)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = tx.fetchall(f"SELECT id FROM tenants{where} ORDER BY id LIMIT %s", [*params, limit])
    tenants = [directory.get_tenant(tx, row["id"]) for row in rows]
    return [t for t in tenants if t is not None]


def update_tenant(
    app: App,
    tenant_id: str,
    change: TenantChange,
    *,
    actor_level: str,
    actor_key_id: str | None,
) -> Tenant:
    """Apply ``change``; ``actor_level`` is the changing key's level (or 'platform' for
    the command line)."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        tenant = directory.get_tenant(tx, tenant_id)
        if tenant is None:
            raise NotFound(f"no tenant {tenant_id!r}", code="tenant_not_found")
        sets: list[str] = []
        params: list[Any] = []
        details: dict[str, Any] = {}
        if change.name is not None:
            name = change.name.strip()
            if not name or len(name) > MAX_TENANT_NAME or not _printable(name):
                raise InvalidInput(
                    f"a tenant name is 1-{MAX_TENANT_NAME} characters without control characters",
                    code="invalid_tenant_name",
                )
            sets.append("name = %s")
            params.append(name)
            details["name_changed"] = True
        if change.status is not None and change.status != tenant.status:
            if tenant.status not in ("active", "suspended"):
                raise Conflict(f"tenant {tenant.slug} is {tenant.status}", code="tenant_not_active")
            if change.status == "suspended":
                sets += ["status = 'suspended'", "suspended_at = %s", "suspended_by = %s"]
                params += [now, "platform" if actor_level == "platform" else "partner"]
            elif change.status == "active":
                if tenant.suspended_by == "platform" and actor_level != "platform":
                    raise Conflict(
                        "the platform suspended this tenant; only a platform key can resume it",
                        code="suspended_by_platform",
                    )
                sets += ["status = 'active'", "suspended_at = NULL", "suspended_by = NULL"]
            else:
                raise InvalidInput(
                    "status must be active or suspended", code="invalid_tenant_status"
                )
            details["status"] = change.status
        if sets:
            tx.execute(
                f"UPDATE tenants SET {', '.join(sets)}, updated_at = %s WHERE id = %s",
                [*params, now, tenant.id],
            )
            audit.record(
                app,
                tx,
                action="tenant.update",
                tenant_id=tenant.id,
                target_type="tenant",
                target_id=tenant.id,
                actor_key_id=actor_key_id,
                details=details,
            )
        updated = directory.get_tenant(tx, tenant.id)
    assert updated is not None
    return updated


def effective_policy(stored: Mapping[str, Any]) -> dict[str, Any]:
    return {name: stored.get(name, default) for name, default in POLICY_DEFAULTS.items()}


def get_policy(tx: Tx, tenant_id: str) -> dict[str, Any]:
    raw = tx.fetchval("SELECT policy_json FROM tenants WHERE id = %s", (tenant_id,))
    if raw is None:
        raise NotFound(f"no tenant {tenant_id!r}", code="tenant_not_found")
    stored: dict[str, Any] = json.loads(raw)
    return effective_policy(stored)


def update_policy(
    app: App, tenant_id: str, changes: Mapping[str, int | None], *, actor_key_id: str | None
) -> dict[str, Any]:
    """Merge ``changes`` into the tenant's policy; a field set to None returns to its
    default. Unknown fields and values out of bounds are refused."""
    for name, value in changes.items():
        if name not in POLICY_DEFAULTS:
            raise InvalidInput(f"unknown policy field {name!r}", code="unknown_policy_field")
        low, high = POLICY_BOUNDS[name]
        if value is not None and not low <= value <= high:
            raise InvalidInput(
                f"policy field {name} must be between {low} and {high}",
                code="invalid_policy_value",
            )
    with app.db.write() as tx:
        raw = tx.fetchval("SELECT policy_json FROM tenants WHERE id = %s", (tenant_id,))
        if raw is None:
            raise NotFound(f"no tenant {tenant_id!r}", code="tenant_not_found")
        stored: dict[str, Any] = json.loads(raw)
        for name, value in changes.items():
            if value is None:
                stored.pop(name, None)
            else:
                stored[name] = value
        tx.execute(
            "UPDATE tenants SET policy_json = %s, updated_at = %s WHERE id = %s",
            (json.dumps(stored, sort_keys=True), app.clock.now_ms(), tenant_id),
        )
        audit.record(
            app,
            tx,
            action="tenant.policy.update",
            tenant_id=tenant_id,
            target_type="tenant",
            target_id=tenant_id,
            actor_key_id=actor_key_id,
            details={"fields": sorted(changes)},
        )
    return effective_policy(stored)

"""The audit log's statements: who changed what, written in the changing transaction.

``details`` is for machine facts (IDs, levels, permission names). It never holds message
content or clear addresses (seed 000 audit_log); services keep to that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Row, Tx


@dataclass(frozen=True)
class AuditEntry:
    id: str
    tenant_id: str | None
    actor_key_id: str | None
    actor: str | None
    action: str
    target_type: str | None
    target_id: str | None
    details: dict[str, Any] | None
    request_id: str | None
    created_at: int

    @classmethod
    def from_row(cls, row: Row) -> AuditEntry:
        details = row["details_json"]
        return cls(
            id=row["id"],
            tenant_id=row["tenant_id"],
            actor_key_id=row["actor_key_id"],
            actor=row["actor"],
            action=row["action"],
            target_type=row["target_type"],
            target_id=row["target_id"],
            details=None if details is None else json.loads(details),
            request_id=row["request_id"],
            created_at=row["created_at"],
        )


_COLUMNS = (
    "id, tenant_id, actor_key_id, actor, action, target_type, target_id, details_json,"
    " request_id, created_at"
)


def insert(
    tx: Tx,
    *,
    entry_id: str,
    action: str,
    now: int,
    tenant_id: str | None = None,
    actor_key_id: str | None = None,
    actor: str | None = None,
    target_type: str | None = None,
    target_id: str | None = None,
    details: Mapping[str, Any] | None = None,
    request_id: str | None = None,
) -> AuditEntry:
    details_json = (
        None
        if details is None
        else json.dumps(dict(details), sort_keys=True, separators=(",", ":"))
    )
    row = tx.fetchone(
        "INSERT INTO audit_log (id, tenant_id, actor_key_id, actor, action, target_type,"
        " target_id, details_json, request_id, created_at)"
        f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
        (
            entry_id,
            tenant_id,
            actor_key_id,
            actor,
            action,
            target_type,
            target_id,
            details_json,
            request_id,
            now,
        ),
    )
    assert row is not None
    return AuditEntry.from_row(row)


def list_entries(
    tx: Tx,
    *,
    tenant_id: str | None = None,
    actor_key_id: str | None = None,
    action: str | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """Entries, newest first, filtered by whichever of the arguments are given."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("tenant_id", tenant_id),
        ("actor_key_id", actor_key_id),
        ("action", action),
    ):
        if value is not None:
            clauses.append(f"{column} = %s")
            params.append(value)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = tx.fetchall(
        f"SELECT {_COLUMNS} FROM audit_log{where} ORDER BY created_at DESC, id DESC LIMIT %s",
        [*params, limit],
    )
    return [AuditEntry.from_row(row) for row in rows]


@dataclass(frozen=True)
class AuditReach:
    """The entries a reader may see: all (both None), one tenant's, or a partner's (its
    tenants' entries and those its own keys wrote)."""

    partner_id: str | None = None
    tenant_id: str | None = None

    def clause(self) -> tuple[str, list[Any]]:
        if self.tenant_id is not None:
            return "tenant_id = %s", [self.tenant_id]
        if self.partner_id is not None:
            return (
                "(tenant_id IN (SELECT id FROM tenants WHERE partner_id = %s)"
                " OR actor_key_id IN (SELECT id FROM api_keys WHERE partner_id = %s))",
                [self.partner_id, self.partner_id],
            )
        return "1 = 1", []


@dataclass(frozen=True)
class AuditQuery:
    """Filters of an audit listing; each given one must equal the column."""

    actor_key_id: str | None = None
    action: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    since: int | None = None  # created_at >= since
    until: int | None = None  # created_at < until


def list_page(
    tx: Tx,
    reach: AuditReach,
    query: AuditQuery,
    *,
    before: Sequence[Any] | None,
    limit: int,
) -> list[AuditEntry]:
    """Entries in reach matching ``query``, newest first by (created_at, id), starting
    after the position ``before`` (a (created_at, id) pair of the previous page)."""
    scope, params = reach.clause()
    clauses = [scope]
    for column, value in (
        ("actor_key_id", query.actor_key_id),
        ("action", query.action),
        ("target_type", query.target_type),
        ("target_id", query.target_id),
    ):
        if value is not None:
            clauses.append(f"{column} = %s")
            params.append(value)
    if query.since is not None:
        clauses.append("created_at >= %s")
        params.append(query.since)
    if query.until is not None:
        clauses.append("created_at < %s")
        params.append(query.until)
    if before is not None:
        clauses.append("(created_at, id) < (%s, %s)")
        params.extend(before)
    rows = tx.fetchall(
        f"SELECT {_COLUMNS} FROM audit_log WHERE {' AND '.join(clauses)}"
        " ORDER BY created_at DESC, id DESC LIMIT %s",
        (*params, limit),
    )
    return [AuditEntry.from_row(row) for row in rows]

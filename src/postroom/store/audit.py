"""The audit log's statements: who changed what, written in the changing transaction.

``details`` is for machine facts (IDs, levels, permission names). It never holds message
content or clear addresses (seed 000 audit_log); services keep to that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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

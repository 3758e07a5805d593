"""Shapes of audit log entries (``audit.list``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from postroom.api.models.common import Out, time_req
from postroom.store.audit import AuditEntry


class AuditEntryOut(Out):
    """Who changed what. ``details`` holds machine facts, never message content or
    clear addresses."""

    id: str
    tenant_id: str | None
    actor_key_id: str | None = Field(description="The API key that acted, if any.")
    actor: str | None = Field(description="Who acted when no key did: `cli`, `system`.")
    action: str = Field(examples=["tenant.create"])
    target_type: str | None
    target_id: str | None
    details: dict[str, Any]
    request_id: str | None
    created_at: str

    @classmethod
    def of(cls, entry: AuditEntry) -> AuditEntryOut:
        return cls(
            id=entry.id,
            tenant_id=entry.tenant_id,
            actor_key_id=entry.actor_key_id,
            actor=entry.actor,
            action=entry.action,
            target_type=entry.target_type,
            target_id=entry.target_id,
            details=entry.details if isinstance(entry.details, dict) else {},
            request_id=entry.request_id,
            created_at=time_req(entry.created_at),
        )

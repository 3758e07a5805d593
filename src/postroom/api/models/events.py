"""Shapes of events (``events.list``, ``events.get``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from postroom.api.models.common import Out, time_req
from postroom.store.events import Event


class EventOut(Out):
    """The stored envelope of an event, with the identity's sequence number."""

    id: str
    type: str = Field(examples=["message.received"])
    occurred_at: str
    tenant_id: str | None
    identity_id: str | None
    sequence: int | None = Field(
        description="Position among the identity's events (1, 2, ...); null for events "
        "of no identity. A gap means an event the key cannot see or one already purged."
    )
    data: dict[str, Any]

    @classmethod
    def of(cls, event: Event) -> EventOut:
        payload = event.payload
        data = payload.get("data")
        occurred = payload.get("occurred_at")
        return cls(
            id=event.id,
            type=event.type,
            occurred_at=occurred if isinstance(occurred, str) else time_req(event.occurred_at),
            tenant_id=event.tenant_id,
            identity_id=event.identity_id,
            sequence=event.identity_seq,
            data=data if isinstance(data, dict) else {},
        )

"""Emitting an event: a catalogue data model written to the outbox in the caller's
transaction, so the event exists exactly when the change it announces does."""

from __future__ import annotations

from postroom.events.catalogue import EventData, spec_of
from postroom.store.db import Tx
from postroom.store.events import Event, insert_event

__all__ = ["emit"]


def emit(
    tx: Tx,
    data: EventData,
    *,
    tenant_id: str | None,
    identity_id: str | None,
    now: int,
) -> Event:
    """Write the event ``data`` announces (its type comes from the catalogue) inside
    ``tx``; the data was validated when the model was built."""
    spec = spec_of(data)
    return insert_event(
        tx,
        event_type=spec.type,
        tenant_id=tenant_id,
        identity_id=identity_id,
        data=data.model_dump(mode="json"),
        now=now,
    )

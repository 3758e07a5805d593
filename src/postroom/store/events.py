"""The transactional event outbox (seed 000 outbox + event_index, in one table).

An event is written in the transaction that makes the change it announces, so it exists
exactly when the change does. It carries ids and metadata, never message bodies. The
envelope is ``{id, type, occurred_at, tenant_id, identity_id, data}``; events of an
identity carry a per-identity sequence handed out from ``identities.event_seq`` (the row
lock serialises concurrent writers on PostgreSQL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from postroom.clock import to_rfc3339
from postroom.ids import new_id
from postroom.store.db import Tx, where_equal


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    tenant_id: str | None
    identity_id: str | None
    identity_seq: int | None
    occurred_at: int
    payload: dict[str, Any]


def insert_event(
    tx: Tx,
    *,
    event_type: str,
    tenant_id: str | None,
    identity_id: str | None,
    data: dict[str, Any],
    now: int,
) -> Event:
    seq: int | None = None
    if identity_id is not None:
        seq = int(
            tx.fetchval(
                "UPDATE identities SET event_seq = event_seq + 1 WHERE id = %s RETURNING event_seq",
                (identity_id,),
            )
        )
    partner_id = (
        tx.fetchval("SELECT partner_id FROM tenants WHERE id = %s", (tenant_id,))
        if tenant_id is not None
        else None
    )
    event_id = new_id("evt")
    payload = {
        "id": event_id,
        "type": event_type,
        "occurred_at": to_rfc3339(now),
        "tenant_id": tenant_id,
        "identity_id": identity_id,
        "data": data,
    }
    tx.execute(
        "INSERT INTO events (id, tenant_id, identity_id, partner_id, identity_seq, type,"
        " payload_json, occurred_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            event_id,
            tenant_id,
            identity_id,
            partner_id,
            seq,
            event_type,
            json.dumps(payload, separators=(",", ":"), ensure_ascii=False),
            now,
        ),
    )
    return Event(event_id, event_type, tenant_id, identity_id, seq, now, payload)


def list_events(
    tx: Tx, *, identity_id: str | None = None, event_type: str | None = None, limit: int = 100
) -> list[Event]:
    clause, params = where_equal(identity_id=identity_id, type=event_type)
    rows = tx.fetchall(
        f"SELECT * FROM events{clause} ORDER BY occurred_at, id LIMIT %s", (*params, limit)
    )
    return [
        Event(
            r["id"],
            r["type"],
            r["tenant_id"],
            r["identity_id"],
            r["identity_seq"],
            r["occurred_at"],
            json.loads(r["payload_json"]),
        )
        for r in rows
    ]

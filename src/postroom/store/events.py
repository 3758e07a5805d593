"""The transactional event outbox (seed 000 outbox + event_index, in one table).

An event is written in the transaction that makes the change it announces, so it exists
exactly when the change does. It carries ids and metadata, never message bodies. The
envelope is ``{id, type, occurred_at, tenant_id, identity_id, data}``; events of an
identity carry a per-identity sequence handed out from ``identities.event_seq`` (the row
lock serialises concurrent writers on PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from postroom.clock import to_rfc3339
from postroom.ids import new_id
from postroom.store.db import Row, Tx, partner_owned, where_equal


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
    return [_event(r) for r in rows]


def _event(r: Row) -> Event:
    return Event(
        r["id"],
        r["type"],
        r["tenant_id"],
        r["identity_id"],
        None if r["identity_seq"] is None else int(r["identity_seq"]),
        int(r["occurred_at"]),
        json.loads(r["payload_json"]),
    )


@dataclass(frozen=True)
class EventReach:
    """The events a reader may see: all (every field None), those of one identity, of
    one tenant, or of a partner (stamped with the partner, or of its tenants)."""

    partner_id: str | None = None
    tenant_id: str | None = None
    identity_id: str | None = None

    def clause(self) -> tuple[str, list[Any]]:
        if self.identity_id is not None:
            return "identity_id = %s", [self.identity_id]
        if self.tenant_id is not None:
            return "tenant_id = %s", [self.tenant_id]
        if self.partner_id is not None:
            return partner_owned(self.partner_id)
        return "1 = 1", []


@dataclass(frozen=True)
class EventQuery:
    """Filters of an event listing; ``type_prefix`` matches types starting with it.

    ``any_type`` (the live stream's ``types``) keeps events matching any of its
    patterns: a type, or a prefix ending in ``*``; empty keeps every type.
    """

    event_type: str | None = None
    type_prefix: str | None = None
    identity_id: str | None = None
    since: int | None = None  # occurred_at >= since
    until: int | None = None  # occurred_at < until
    any_type: tuple[str, ...] = ()


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def get_event(tx: Tx, event_id: str, reach: EventReach) -> Event | None:
    """The event, or None when it is missing or outside ``reach``."""
    scope, params = reach.clause()
    row = tx.fetchone(f"SELECT * FROM events WHERE id = %s AND {scope}", (event_id, *params))
    return None if row is None else _event(row)


def _conditions(reach: EventReach, query: EventQuery) -> tuple[list[str], list[Any]]:
    scope, params = reach.clause()
    clauses = [scope]
    if query.event_type is not None:
        clauses.append("type = %s")
        params.append(query.event_type)
    if query.type_prefix:
        clauses.append("type LIKE %s ESCAPE '\\'")
        params.append(_escape_like(query.type_prefix) + "%")
    if query.any_type and "*" not in query.any_type:
        alternatives = []
        for pattern in query.any_type:
            if pattern.endswith("*"):
                alternatives.append("type LIKE %s ESCAPE '\\'")
                params.append(_escape_like(pattern[:-1]) + "%")
            else:
                alternatives.append("type = %s")
                params.append(pattern)
        clauses.append("(" + " OR ".join(alternatives) + ")")
    if query.identity_id is not None:
        clauses.append("identity_id = %s")
        params.append(query.identity_id)
    if query.since is not None:
        clauses.append("occurred_at >= %s")
        params.append(query.since)
    if query.until is not None:
        clauses.append("occurred_at < %s")
        params.append(query.until)
    return clauses, params


def list_page(
    tx: Tx,
    reach: EventReach,
    query: EventQuery,
    *,
    after: Sequence[Any] | None,
    limit: int,
) -> list[Event]:
    """Events in reach matching ``query``, oldest first by (occurred_at, id), starting
    after the position ``after`` (an (occurred_at, id) pair)."""
    clauses, params = _conditions(reach, query)
    if after is not None:
        clauses.append("(occurred_at, id) > (%s, %s)")
        params.extend(after)
    rows = tx.fetchall(
        f"SELECT * FROM events WHERE {' AND '.join(clauses)} ORDER BY occurred_at, id LIMIT %s",
        (*params, limit),
    )
    return [_event(r) for r in rows]


def positions_between(
    tx: Tx, reach: EventReach, query: EventQuery, *, since: int, through: Sequence[Any]
) -> list[tuple[int, str]]:
    """The (occurred_at, id) of the events in reach matching ``query`` with
    ``since <= occurred_at`` and a position at most ``through``: what a follower has
    passed, read to notice an event that committed after the follower passed its
    position (a straggler)."""
    clauses, params = _conditions(reach, query)
    clauses.append("occurred_at >= %s")
    clauses.append("(occurred_at, id) <= (%s, %s)")
    params.extend([since, *through])
    rows = tx.fetchall(
        f"SELECT occurred_at, id FROM events WHERE {' AND '.join(clauses)}", tuple(params)
    )
    return [(int(r["occurred_at"]), r["id"]) for r in rows]


def get_events(tx: Tx, event_ids: Sequence[str]) -> list[Event]:
    """The events with these ids (those that exist), oldest first."""
    if not event_ids:
        return []
    marks = ", ".join(["%s"] * len(event_ids))
    rows = tx.fetchall(
        f"SELECT * FROM events WHERE id IN ({marks}) ORDER BY occurred_at, id", tuple(event_ids)
    )
    return [_event(r) for r in rows]

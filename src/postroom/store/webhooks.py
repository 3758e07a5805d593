"""Webhook endpoints, their delivery log, and the event outbox's fan-out side (seed 000
webhook_endpoints, webhook_deliveries, events.dispatched_at).

Secrets are stored sealed (``secret_enc``, ``prev_secret_enc``); this module never sees
them in the clear. A delivery row is one attempt: its ``attempt`` number is handed out in
the insert itself (one more than the pair's last), so attempts of the same (endpoint,
event) never collide whichever chain of jobs made them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Engine, Row, Tx, member_of, partner_owned

DELIVERY_STATUSES = ("succeeded", "failed", "dead")


@dataclass(frozen=True)
class Endpoint:
    id: str
    tenant_id: str | None
    partner_id: str | None
    url: str
    description: str | None
    event_types: tuple[str, ...]
    identity_ids: tuple[str, ...] | None
    enabled: bool
    disabled_reason: str | None
    secret_enc: str
    prev_secret_enc: str | None
    prev_secret_expires_at: int | None
    consecutive_failures: int
    failing_since: int | None
    created_at: int
    updated_at: int

    @property
    def scope(self) -> str:
        if self.tenant_id is not None:
            return "tenant"
        return "partner" if self.partner_id is not None else "platform"


def _endpoint(row: Row) -> Endpoint:
    identities = row["identity_ids_json"]
    return Endpoint(
        id=row["id"],
        tenant_id=row["tenant_id"],
        partner_id=row["partner_id"],
        url=row["url"],
        description=row["description"],
        event_types=tuple(json.loads(row["event_types_json"])),
        identity_ids=None if identities is None else tuple(json.loads(identities)),
        enabled=bool(row["enabled"]),
        disabled_reason=row["disabled_reason"],
        secret_enc=row["secret_enc"],
        prev_secret_enc=row["prev_secret_enc"],
        prev_secret_expires_at=row["prev_secret_expires_at"],
        consecutive_failures=int(row["consecutive_failures"]),
        failing_since=row["failing_since"],
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
    )


def _json_list(values: Sequence[str] | None) -> str | None:
    return None if values is None else json.dumps(list(values), separators=(",", ":"))


# --- endpoints -----------------------------------------------------------------------


def insert_endpoint(
    tx: Tx,
    *,
    endpoint_id: str,
    tenant_id: str | None,
    partner_id: str | None,
    url: str,
    description: str | None,
    event_types: Sequence[str],
    identity_ids: Sequence[str] | None,
    enabled: bool,
    secret_enc: str,
    now: int,
) -> Endpoint:
    row = tx.fetchone(
        "INSERT INTO webhook_endpoints (id, tenant_id, partner_id, url, description,"
        " event_types_json, identity_ids_json, enabled, disabled_reason, secret_enc,"
        " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " RETURNING *",
        (
            endpoint_id,
            tenant_id,
            partner_id,
            url,
            description,
            _json_list(event_types),
            _json_list(identity_ids),
            1 if enabled else 0,
            None if enabled else "manual",
            secret_enc,
            now,
            now,
        ),
    )
    assert row is not None
    return _endpoint(row)


def get_endpoint(tx: Tx, endpoint_id: str) -> Endpoint | None:
    row = tx.fetchone("SELECT * FROM webhook_endpoints WHERE id = %s", (endpoint_id,))
    return None if row is None else _endpoint(row)


@dataclass(frozen=True)
class EndpointReach:
    """The endpoints a caller may see: all (every field None), a partner's own and those
    of its tenants, or one tenant's."""

    partner_id: str | None = None
    tenant_id: str | None = None

    def clause(self) -> tuple[str, list[Any]]:
        if self.tenant_id is not None:
            return "tenant_id = %s", [self.tenant_id]
        if self.partner_id is not None:
            return partner_owned(self.partner_id)
        return "1 = 1", []


def list_endpoints(
    tx: Tx,
    reach: EndpointReach,
    *,
    tenant_id: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> list[Endpoint]:
    """Endpoints in reach in ID order (oldest first), after the ID ``after``."""
    scope, params = reach.clause()
    clauses = [scope]
    if tenant_id is not None:
        clauses.append("tenant_id = %s")
        params.append(tenant_id)
    if after is not None:
        clauses.append("id > %s")
        params.append(after)
    rows = tx.fetchall(
        f"SELECT * FROM webhook_endpoints WHERE {' AND '.join(clauses)} ORDER BY id LIMIT %s",
        (*params, limit),
    )
    return [_endpoint(r) for r in rows]


_CHANGEABLE = {
    "url",
    "description",
    "event_types_json",
    "identity_ids_json",
    "enabled",
    "disabled_reason",
    "secret_enc",
    "prev_secret_enc",
    "prev_secret_expires_at",
    "consecutive_failures",
    "failing_since",
}


def update_endpoint(tx: Tx, endpoint_id: str, changes: Mapping[str, Any], now: int) -> Endpoint:
    """Set the given columns (names from the table above) and ``updated_at``."""
    unknown = set(changes) - _CHANGEABLE
    if unknown:
        raise ValueError(f"not changeable: {sorted(unknown)}")
    columns = [f"{name} = %s" for name in changes]
    row = tx.fetchone(
        f"UPDATE webhook_endpoints SET {', '.join([*columns, 'updated_at = %s'])}"
        " WHERE id = %s RETURNING *",
        (*changes.values(), now, endpoint_id),
    )
    assert row is not None
    return _endpoint(row)


def delete_endpoint(tx: Tx, endpoint_id: str) -> bool:
    return tx.execute("DELETE FROM webhook_endpoints WHERE id = %s", (endpoint_id,)) == 1


def endpoints_for(tx: Tx, tenant_ids: Sequence[str], partner_ids: Sequence[str]) -> list[Endpoint]:
    """Enabled endpoints that may hear events of these tenants and partners: their tenant
    endpoints, their partner endpoints and every platform endpoint."""
    clauses = ["(tenant_id IS NULL AND partner_id IS NULL)"]
    params: list[Any] = []
    if tenant_ids:
        among, values = member_of(tx, "tenant_id", list(tenant_ids))
        clauses.append(among)
        params.extend(values)
    if partner_ids:
        among, values = member_of(tx, "partner_id", list(partner_ids))
        clauses.append(among)
        params.extend(values)
    rows = tx.fetchall(
        f"SELECT * FROM webhook_endpoints WHERE enabled = 1 AND ({' OR '.join(clauses)})"
        " ORDER BY id",
        params,
    )
    return [_endpoint(r) for r in rows]


def note_success(tx: Tx, endpoint_id: str, now: int) -> None:
    """A delivery succeeded: the failure streak ends."""
    tx.execute(
        "UPDATE webhook_endpoints SET consecutive_failures = 0, failing_since = NULL,"
        " updated_at = %s WHERE id = %s"
        " AND (consecutive_failures <> 0 OR failing_since IS NOT NULL)",
        (now, endpoint_id),
    )


def note_failure(tx: Tx, endpoint_id: str, now: int) -> Endpoint | None:
    """A delivery failed: count it; the streak started at the first failure."""
    row = tx.fetchone(
        "UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1,"
        " failing_since = COALESCE(failing_since, %s), updated_at = %s WHERE id = %s"
        " RETURNING *",
        (now, now, endpoint_id),
    )
    return None if row is None else _endpoint(row)


def disable_failing(tx: Tx, endpoint_id: str, now: int) -> bool:
    """Disable an enabled endpoint for failing; False when it was not enabled."""
    return (
        tx.execute(
            "UPDATE webhook_endpoints SET enabled = 0, disabled_reason = 'failing',"
            " updated_at = %s WHERE id = %s AND enabled = 1",
            (now, endpoint_id),
        )
        == 1
    )


# --- deliveries ----------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    id: str
    endpoint_id: str
    tenant_id: str | None
    event_id: str
    event_type: str
    attempt: int
    status: str
    http_status: int | None
    error: str | None
    duration_ms: int | None
    next_attempt_at: int | None
    created_at: int


def _delivery(row: Row) -> Delivery:
    return Delivery(
        id=row["id"],
        endpoint_id=row["endpoint_id"],
        tenant_id=row["tenant_id"],
        event_id=row["event_id"],
        event_type=row["event_type"],
        attempt=int(row["attempt"]),
        status=row["status"],
        http_status=row["http_status"],
        error=row["error"],
        duration_ms=row["duration_ms"],
        next_attempt_at=row["next_attempt_at"],
        created_at=int(row["created_at"]),
    )


def insert_delivery(
    tx: Tx,
    *,
    delivery_id: str,
    endpoint_id: str,
    tenant_id: str | None,
    event_id: str,
    event_type: str,
    status: str,
    http_status: int | None,
    error: str | None,
    duration_ms: int | None,
    next_attempt_at: int | None,
    now: int,
) -> Delivery:
    """Record one attempt, numbered one past the pair's last attempt."""
    row = tx.fetchone(
        "INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, event_type,"
        " attempt, status, http_status, error, duration_ms, next_attempt_at, created_at)"
        " SELECT %s, %s, %s, %s, %s, COALESCE(MAX(attempt), 0) + 1, %s,"
        " CAST(%s AS INTEGER), %s, CAST(%s AS INTEGER), CAST(%s AS BIGINT), CAST(%s AS BIGINT)"
        " FROM webhook_deliveries WHERE endpoint_id = %s AND event_id = %s"
        " RETURNING *",
        (
            delivery_id,
            endpoint_id,
            tenant_id,
            event_id,
            event_type,
            status,
            http_status,
            error,
            duration_ms,
            next_attempt_at,
            now,
            endpoint_id,
            event_id,
        ),
    )
    assert row is not None
    return _delivery(row)


def delivered_since(tx: Tx, endpoint_id: str, event_id: str, since: int) -> bool:
    """Whether the pair has a successful attempt recorded at or after ``since``."""
    found = tx.fetchval(
        "SELECT 1 FROM webhook_deliveries WHERE endpoint_id = %s AND event_id = %s"
        " AND status = 'succeeded' AND created_at >= %s LIMIT 1",
        (endpoint_id, event_id, since),
    )
    return found is not None


def list_deliveries(
    tx: Tx,
    endpoint_id: str,
    *,
    status: str | None = None,
    event_id: str | None = None,
    before: Sequence[Any] | None = None,
    limit: int = 50,
) -> list[Delivery]:
    """An endpoint's attempts, newest first by (created_at, id), before ``before``."""
    clauses = ["endpoint_id = %s"]
    params: list[Any] = [endpoint_id]
    if status is not None:
        clauses.append("status = %s")
        params.append(status)
    if event_id is not None:
        clauses.append("event_id = %s")
        params.append(event_id)
    if before is not None:
        clauses.append("(created_at, id) < (%s, %s)")
        params.extend(before)
    rows = tx.fetchall(
        f"SELECT * FROM webhook_deliveries WHERE {' AND '.join(clauses)}"
        " ORDER BY created_at DESC, id DESC LIMIT %s",
        (*params, limit),
    )
    return [_delivery(r) for r in rows]


# --- the outbox's fan-out side --------------------------------------------------------


@dataclass(frozen=True)
class PendingEvent:
    id: str
    type: str
    tenant_id: str | None
    identity_id: str | None
    partner_id: str | None
    occurred_at: int


def _pending(row: Row) -> PendingEvent:
    return PendingEvent(
        row["id"],
        row["type"],
        row["tenant_id"],
        row["identity_id"],
        row["partner_id"],
        int(row["occurred_at"]),
    )


def has_pending_events(tx: Tx) -> bool:
    return tx.fetchval("SELECT 1 FROM events WHERE dispatched_at IS NULL LIMIT 1") is not None


def pending_events(tx: Tx, limit: int) -> list[PendingEvent]:
    """The oldest events not yet fanned out; on PostgreSQL locked, skipping rows another
    dispatcher holds (SQLite: the single writer serialises dispatchers)."""
    lock = " FOR UPDATE SKIP LOCKED" if tx.engine is Engine.POSTGRESQL else ""
    rows = tx.fetchall(
        "SELECT id, type, tenant_id, identity_id, partner_id, occurred_at FROM events"
        f" WHERE dispatched_at IS NULL ORDER BY occurred_at, id LIMIT %s{lock}",
        (limit,),
    )
    return [_pending(r) for r in rows]


def mark_dispatched(tx: Tx, event_ids: Sequence[str], now: int) -> None:
    if not event_ids:
        return
    among, values = member_of(tx, "id", list(event_ids))
    tx.execute(f"UPDATE events SET dispatched_at = %s WHERE {among}", (now, *values))


def stamp_event_partner(tx: Tx, event_id: str, partner_id: str) -> None:
    """A partner endpoint's ``webhook.disabled`` carries the partner (seed 000)."""
    tx.execute("UPDATE events SET partner_id = %s WHERE id = %s", (partner_id, event_id))


@dataclass(frozen=True)
class StoredEvent:
    id: str
    type: str
    tenant_id: str | None
    partner_id: str | None
    payload_json: str
    occurred_at: int


def get_stored_event(tx: Tx, event_id: str) -> StoredEvent | None:
    """An event's envelope exactly as stored (the bytes a delivery signs and sends)."""
    row = tx.fetchone(
        "SELECT id, type, tenant_id, partner_id, payload_json, occurred_at FROM events"
        " WHERE id = %s",
        (event_id,),
    )
    if row is None:
        return None
    return StoredEvent(
        row["id"],
        row["type"],
        row["tenant_id"],
        row["partner_id"],
        row["payload_json"],
        int(row["occurred_at"]),
    )


def oldest_due_delivery(tx: Tx, job_type: str, now: int) -> int | None:
    """When the longest-waiting due delivery job became due (None: none waits).

    Read by the dispatcher to notice that no worker thread is free for deliveries."""
    value = tx.fetchval(
        "SELECT MIN(available_at) FROM jobs WHERE job_type = %s AND state = 'pending'"
        " AND available_at <= %s",
        (job_type, now),
    )
    return None if value is None else int(value)


def events_between(
    tx: Tx,
    *,
    tenant_id: str | None,
    partner_id: str | None,
    since: int,
    until: int,
    limit: int,
) -> list[PendingEvent]:
    """Events of [since, until) a tenant (or partner, or with neither: any) endpoint
    hears, oldest first — the candidates of a replay."""
    clauses = ["occurred_at >= %s", "occurred_at < %s"]
    params: list[Any] = [since, until]
    if tenant_id is not None:
        clauses.append("tenant_id = %s")
        params.append(tenant_id)
    elif partner_id is not None:
        clauses.append("partner_id = %s")
        params.append(partner_id)
    rows = tx.fetchall(
        "SELECT id, type, tenant_id, identity_id, partner_id, occurred_at FROM events"
        f" WHERE {' AND '.join(clauses)} ORDER BY occurred_at, id LIMIT %s",
        (*params, limit),
    )
    return [_pending(r) for r in rows]

"""The outbox (seed 003 outgoing_emails / _recipients / _contents), deliveries and counters.

Every write about a record after its claim carries the lease it was claimed under and is
refused (returns False) when the row no longer names that owner: an attempt whose lease
ran out cannot record an outcome over the attempt that took the send from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from postroom.store.db import Engine, Row, Tx, member_of

STAGES = ("recorded", "transmission_begun", "sent", "refused", "cancelled")
TERMINAL = ("sent", "refused", "cancelled")
UNKNOWN_OUTCOME = "28011"


@dataclass(frozen=True)
class Record:
    id: str
    tenant_id: str
    identity_id: str
    message_id: str
    requester_origin: str
    requester_identity: str
    principal_fingerprint: str | None
    operation: str
    kind: str
    stage: str
    transport: str
    mail_from: str
    rfc_message_id: str
    mime_byte_length: int
    attempt_count: int
    available_at: int
    due_at: int | None
    due_zone_id: str | None
    lease_owner: str | None
    lease_expires_at: int | None
    recorded_at: int
    stage_changed_at: int
    last_failure_code: str | None
    last_reply_code: int | None
    resolution: str | None
    resolved_at: int | None

    @classmethod
    def from_row(cls, row: Row) -> Record:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    @property
    def uncertain(self) -> bool:
        return self.stage == "transmission_begun" and self.last_failure_code == UNKNOWN_OUTCOME


@dataclass(frozen=True)
class Recipient:
    ordinal: int
    address: str
    role: str
    status: str  # pending | accepted | refused | suppressed
    last_reply_code: int | None
    last_enhanced_code: str | None
    answered_at: int | None

    @classmethod
    def from_row(cls, row: Row) -> Recipient:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class NewRecipient:
    address: str
    role: str
    status: str = "pending"


def insert_record(
    tx: Tx,
    record: Record,
    recipients: Sequence[NewRecipient],
    mime: bytes,
) -> None:
    """Write the intent, its recipients and its message. A second record for the same
    (identity, requester) is refused by ``outgoing_emails_requester``."""
    names = list(Record.__dataclass_fields__)
    tx.execute(
        f"INSERT INTO outgoing_emails ({', '.join(names)})"
        f" VALUES ({', '.join(['%s'] * len(names))})",
        tuple(getattr(record, name) for name in names),
    )
    tx.executemany(
        "INSERT INTO outgoing_email_recipients (outgoing_email_id, ordinal, address, role, status)"
        " VALUES (%s, %s, %s, %s, %s)",
        [(record.id, i, r.address, r.role, r.status) for i, r in enumerate(recipients)],
    )
    tx.execute(
        "INSERT INTO outgoing_email_contents"
        " (outgoing_email_id, mime, mime_byte_length, sha256, stored_at)"
        " VALUES (%s, %s, %s, %s, %s)",
        (record.id, mime, len(mime), hashlib.sha256(mime).hexdigest(), record.recorded_at),
    )


def find_by_requester(
    tx: Tx, identity_id: str, origin: str, requester_identity: str
) -> Record | None:
    row = tx.fetchone(
        "SELECT * FROM outgoing_emails WHERE identity_id = %s AND requester_origin = %s"
        " AND requester_identity = %s",
        (identity_id, origin, requester_identity),
    )
    return None if row is None else Record.from_row(row)


def get(tx: Tx, record_id: str) -> Record | None:
    row = tx.fetchone("SELECT * FROM outgoing_emails WHERE id = %s", (record_id,))
    return None if row is None else Record.from_row(row)


def get_by_message(tx: Tx, message_id: str) -> Record | None:
    row = tx.fetchone("SELECT * FROM outgoing_emails WHERE message_id = %s", (message_id,))
    return None if row is None else Record.from_row(row)


def find_by_rfc_message_id(tx: Tx, rfc_message_id: str) -> Record | None:
    row = tx.fetchone(
        "SELECT o.* FROM outgoing_emails o JOIN messages m ON m.id = o.message_id"
        " WHERE m.rfc_message_id = %s AND m.direction = 'outbound' LIMIT 1",
        (rfc_message_id,),
    )
    return None if row is None else Record.from_row(row)


def recipients(tx: Tx, record_id: str) -> list[Recipient]:
    rows = tx.fetchall(
        "SELECT ordinal, address, role, status, last_reply_code, last_enhanced_code, answered_at"
        " FROM outgoing_email_recipients WHERE outgoing_email_id = %s ORDER BY ordinal",
        (record_id,),
    )
    return [Recipient.from_row(r) for r in rows]


def recipients_of(tx: Tx, record_ids: Sequence[str]) -> dict[str, list[Recipient]]:
    out: dict[str, list[Recipient]] = {i: [] for i in record_ids}
    if not record_ids:
        return out
    among, params = member_of(tx, "outgoing_email_id", record_ids)
    for row in tx.fetchall(
        "SELECT outgoing_email_id, ordinal, address, role, status, last_reply_code,"
        f" last_enhanced_code, answered_at FROM outgoing_email_recipients WHERE {among}"
        " ORDER BY outgoing_email_id, ordinal",
        params,
    ):
        out[row.pop("outgoing_email_id")].append(Recipient.from_row(row))
    return out


def mime(tx: Tx, record_id: str) -> bytes:
    value = tx.fetchval(
        "SELECT mime FROM outgoing_email_contents WHERE outgoing_email_id = %s", (record_id,)
    )
    return bytes(value)


# --- the claim and the stages -------------------------------------------------------


def claim(tx: Tx, record_id: str, owner: str, now: int, lease_ms: int) -> Record | None:
    """Take one record for an attempt: at ``recorded``, due, and not held by a live lease.
    The same statement stamps the lease and counts the attempt."""
    lock = " FOR UPDATE SKIP LOCKED" if tx.engine is Engine.POSTGRESQL else ""
    row = tx.fetchone(
        "UPDATE outgoing_emails SET lease_owner = %s, lease_expires_at = %s,"
        " attempt_count = attempt_count + 1"
        " WHERE id = (SELECT id FROM outgoing_emails WHERE id = %s AND stage = 'recorded'"
        "   AND available_at <= %s AND (lease_owner IS NULL OR lease_expires_at <= %s)"
        f"  {lock})"
        " RETURNING *",
        (owner, now + lease_ms, record_id, now, now),
    )
    return None if row is None else Record.from_row(row)


def claim_due(tx: Tx, owner: str, now: int, lease_ms: int, limit: int) -> list[Record]:
    """A batch of due records, oldest first (the seed's claim), in one statement."""
    lock = " FOR UPDATE SKIP LOCKED" if tx.engine is Engine.POSTGRESQL else ""
    rows = tx.fetchall(
        "UPDATE outgoing_emails SET lease_owner = %s, lease_expires_at = %s,"
        " attempt_count = attempt_count + 1"
        " WHERE id IN (SELECT id FROM outgoing_emails WHERE stage = 'recorded'"
        "   AND available_at <= %s AND (lease_owner IS NULL OR lease_expires_at <= %s)"
        f"  ORDER BY available_at, id LIMIT %s{lock})"
        " RETURNING *",
        (owner, now + lease_ms, now, now, limit),
    )
    return sorted((Record.from_row(r) for r in rows), key=lambda r: (r.available_at, r.id))


def begin_transmission(tx: Tx, record_id: str, owner: str, now: int) -> bool:
    """Written before DATA: from here a crash leaves the outcome unknown."""
    return (
        tx.execute(
            "UPDATE outgoing_emails SET stage = 'transmission_begun', stage_changed_at = %s"
            " WHERE id = %s AND lease_owner = %s AND stage IN ('recorded', 'transmission_begun')",
            (now, record_id, owner),
        )
        == 1
    )


def settle_recipient(
    tx: Tx,
    record_id: str,
    ordinal: int,
    status: str,
    code: int | None,
    enhanced: str | None,
    now: int,
) -> bool:
    """Record an answer about one recipient. A settled recipient keeps its answer, so a
    late transient reply cannot undo a delivery."""
    return (
        tx.execute(
            "UPDATE outgoing_email_recipients SET status = %s, last_reply_code = %s,"
            " last_enhanced_code = %s, answered_at = %s"
            " WHERE outgoing_email_id = %s AND ordinal = %s AND status = 'pending'",
            (status, code, enhanced, now, record_id, ordinal),
        )
        == 1
    )


def finish(
    tx: Tx,
    record_id: str,
    owner: str,
    *,
    stage: str,
    now: int,
    last_reply_code: int | None = None,
    failure_code: str | None = None,
    available_at: int | None = None,
) -> bool:
    """End an attempt: to a terminal stage, or back to ``recorded`` (rewind) with a new
    ``available_at``; the lease is released either way."""
    return (
        tx.execute(
            "UPDATE outgoing_emails SET stage = %s, stage_changed_at = %s,"
            " lease_owner = NULL, lease_expires_at = NULL,"
            " last_reply_code = COALESCE(%s, last_reply_code), last_failure_code = %s,"
            " available_at = COALESCE(%s, available_at)"
            " WHERE id = %s AND lease_owner = %s",
            (stage, now, last_reply_code, failure_code, available_at, record_id, owner),
        )
        == 1
    )


def release(tx: Tx, record_id: str, owner: str) -> bool:
    """Give a record back untouched (the host stopped before transmitting), with the
    attempt it had counted."""
    return (
        tx.execute(
            "UPDATE outgoing_emails SET lease_owner = NULL, lease_expires_at = NULL,"
            " attempt_count = attempt_count - 1"
            " WHERE id = %s AND lease_owner = %s AND stage = 'recorded'",
            (record_id, owner),
        )
        == 1
    )


def mark_uncertain(tx: Tx, record_id: str, now: int, owner: str | None = None) -> bool:
    """Stamp a send stopped mid-transmission with the unknown-outcome code. It stays at
    ``transmission_begun``; nothing automatic moves it again."""
    owner_clause = " AND lease_owner = %s" if owner is not None else " AND lease_expires_at <= %s"
    return (
        tx.execute(
            "UPDATE outgoing_emails SET last_failure_code = %s, stage_changed_at = %s"
            " WHERE id = %s AND stage = 'transmission_begun' AND last_failure_code IS NULL"
            + owner_clause,
            (UNKNOWN_OUTCOME, now, record_id, owner if owner is not None else now),
        )
        == 1
    )


def stranded(tx: Tx, now: int, limit: int) -> list[Record]:
    """Records found at ``transmission_begun`` whose attempt's lease ran out."""
    rows = tx.fetchall(
        "SELECT * FROM outgoing_emails WHERE stage = 'transmission_begun'"
        " AND last_failure_code IS NULL AND lease_expires_at <= %s"
        " ORDER BY lease_expires_at LIMIT %s",
        (now, limit),
    )
    return [Record.from_row(r) for r in rows]


def due_without_lease(tx: Tx, now: int, limit: int) -> list[Record]:
    rows = tx.fetchall(
        "SELECT * FROM outgoing_emails WHERE stage = 'recorded' AND available_at <= %s"
        " AND (lease_owner IS NULL OR lease_expires_at <= %s)"
        " ORDER BY available_at, id LIMIT %s",
        (now, now, limit),
    )
    return [Record.from_row(r) for r in rows]


def cancel(tx: Tx, record_id: str, now: int) -> bool:
    """Withdraw a send: one conditional statement, only at ``recorded`` and not held."""
    return (
        tx.execute(
            "UPDATE outgoing_emails SET stage = 'cancelled', stage_changed_at = %s,"
            " lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = %s AND stage = 'recorded'"
            " AND (lease_owner IS NULL OR lease_expires_at <= %s)",
            (now, record_id, now),
        )
        == 1
    )


def resolve(tx: Tx, record_id: str, resolution: str, now: int) -> bool:
    """An operator's decision about an uncertain send: sent or refused, once."""
    stage = "sent" if resolution == "delivered" else "refused"
    return (
        tx.execute(
            "UPDATE outgoing_emails SET stage = %s, resolution = %s, resolved_at = %s,"
            " stage_changed_at = %s, lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = %s AND stage = 'transmission_begun' AND last_failure_code = %s",
            (stage, resolution, now, now, record_id, UNKNOWN_OUTCOME),
        )
        == 1
    )


@dataclass(frozen=True)
class OutboxFilter:
    tenant_id: str | None = None
    identity_id: str | None = None
    stages: tuple[str, ...] = ()
    outstanding: bool = False


def list_page(tx: Tx, f: OutboxFilter, after: tuple[int, str] | None, limit: int) -> list[Record]:
    """Newest first; keyset on (recorded_at, id)."""
    clauses: list[str] = []
    params: list[object] = []
    if f.tenant_id is not None:
        clauses.append("tenant_id = %s")
        params.append(f.tenant_id)
    if f.identity_id is not None:
        clauses.append("identity_id = %s")
        params.append(f.identity_id)
    if f.stages:
        among, values = member_of(tx, "stage", f.stages)
        clauses.append(among)
        params.extend(values)
    if f.outstanding:
        clauses.append("stage NOT IN ('sent', 'refused', 'cancelled')")
    if after is not None:
        clauses.append("(recorded_at < %s OR (recorded_at = %s AND id < %s))")
        params.extend([after[0], after[0], after[1]])
    where = " WHERE " + " AND ".join(clauses) if clauses else ""
    rows = tx.fetchall(
        f"SELECT * FROM outgoing_emails{where} ORDER BY recorded_at DESC, id DESC LIMIT %s",
        (*params, limit),
    )
    return [Record.from_row(r) for r in rows]


# --- deliveries (seed 000) ----------------------------------------------------------


def insert_deliveries(
    tx: Tx, message_rowid: int, rows: Sequence[tuple[str, str, str]], now: int
) -> None:
    """(address, field, status) per recipient of a sent message; the first role wins
    when one address is named twice."""
    seen: set[str] = set()
    values = []
    for address, field, status in rows:
        if address in seen:
            continue
        seen.add(address)
        values.append((message_rowid, address, field, status, now))
    tx.executemany(
        "INSERT INTO deliveries (message_rowid, address, field, status, updated_at)"
        " VALUES (%s, %s, %s, %s, %s)",
        values,
    )


def update_delivery(
    tx: Tx,
    message_rowid: int,
    address: str,
    *,
    status: str,
    now: int,
    smtp_code: int | None = None,
    enhanced_code: str | None = None,
    response: str | None = None,
    bounce_type: str | None = None,
) -> bool:
    return (
        tx.execute(
            "UPDATE deliveries SET status = %s, smtp_code = COALESCE(%s, smtp_code),"
            " enhanced_code = COALESCE(%s, enhanced_code),"
            " smtp_response = COALESCE(%s, smtp_response),"
            " bounce_type = COALESCE(%s, bounce_type), updated_at = %s"
            " WHERE message_rowid = %s AND address = %s",
            (
                status,
                None if smtp_code is None else str(smtp_code),
                enhanced_code,
                None if response is None else response[:512],
                bounce_type,
                now,
                message_rowid,
                address,
            ),
        )
        == 1
    )


def deliveries(tx: Tx, message_rowid: int) -> list[Row]:
    return tx.fetchall(
        "SELECT address, field, status, smtp_code, enhanced_code, smtp_response, bounce_type,"
        " updated_at FROM deliveries WHERE message_rowid = %s",
        (message_rowid,),
    )


def set_message_status(tx: Tx, message_id: str, status: str) -> None:
    tx.execute("UPDATE messages SET status = %s WHERE id = %s", (status, message_id))


# --- counters (seed 000) ------------------------------------------------------------


def bump_counter(tx: Tx, tenant_id: str, metric: str, day: str, by: int = 1) -> int:
    """Add to a daily counter; returns the new value."""
    value = tx.fetchval(
        "INSERT INTO counters (tenant_id, metric, day, value) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (tenant_id, metric, day) DO UPDATE SET value = counters.value + %s"
        " RETURNING value",
        (tenant_id, metric, day, by, by),
    )
    return int(value)


def counter(tx: Tx, tenant_id: str, metric: str, day: str) -> int:
    value = tx.fetchval(
        "SELECT value FROM counters WHERE tenant_id = %s AND metric = %s AND day = %s",
        (tenant_id, metric, day),
    )
    return int(value or 0)


# --- suppressions (seed 000) --------------------------------------------------------


@dataclass(frozen=True)
class Suppression:
    tenant_id: str
    address_hash: str
    address_hint: str
    reason: str
    source_message_id: str | None
    note: str | None
    created_at: int
    expires_at: int | None

    @classmethod
    def from_row(cls, row: Row) -> Suppression:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


def suppressed_hashes(tx: Tx, tenant_id: str, hashes: Sequence[str], now: int) -> set[str]:
    if not hashes:
        return set()
    among, params = member_of(tx, "address_hash", hashes)
    rows = tx.fetchall(
        f"SELECT address_hash FROM suppressions WHERE tenant_id = %s AND {among}"
        " AND (expires_at IS NULL OR expires_at > %s)",
        (tenant_id, *params, now),
    )
    return {r["address_hash"] for r in rows}


def upsert_suppression(tx: Tx, s: Suppression) -> bool:
    """Add a suppression; an existing one keeps its first reason. True when new."""
    return (
        tx.execute(
            "INSERT INTO suppressions (tenant_id, address_hash, address_hint, reason,"
            " source_message_id, note, created_at, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (tenant_id, address_hash) DO NOTHING",
            (
                s.tenant_id,
                s.address_hash,
                s.address_hint,
                s.reason,
                s.source_message_id,
                s.note,
                s.created_at,
                s.expires_at,
            ),
        )
        == 1
    )


def get_suppression(tx: Tx, tenant_id: str, address_hash: str) -> Suppression | None:
    row = tx.fetchone(
        "SELECT * FROM suppressions WHERE tenant_id = %s AND address_hash = %s",
        (tenant_id, address_hash),
    )
    return None if row is None else Suppression.from_row(row)


def tenants_suppressing(tx: Tx, address_hash: str) -> list[str]:
    rows = tx.fetchall(
        "SELECT tenant_id FROM suppressions WHERE address_hash = %s", (address_hash,)
    )
    return [r["tenant_id"] for r in rows]


def delete_suppression(tx: Tx, tenant_id: str, address_hash: str) -> bool:
    return (
        tx.execute(
            "DELETE FROM suppressions WHERE tenant_id = %s AND address_hash = %s",
            (tenant_id, address_hash),
        )
        == 1
    )


def list_suppressions(
    tx: Tx, tenant_id: str, after: tuple[int, str] | None, limit: int, reason: str | None = None
) -> list[Suppression]:
    clauses = ["tenant_id = %s"]
    params: list[object] = [tenant_id]
    if reason is not None:
        clauses.append("reason = %s")
        params.append(reason)
    if after is not None:
        clauses.append("(created_at < %s OR (created_at = %s AND address_hash < %s))")
        params.extend([after[0], after[0], after[1]])
    rows = tx.fetchall(
        f"SELECT * FROM suppressions WHERE {' AND '.join(clauses)}"
        " ORDER BY created_at DESC, address_hash DESC LIMIT %s",
        (*params, limit),
    )
    return [Suppression.from_row(r) for r in rows]

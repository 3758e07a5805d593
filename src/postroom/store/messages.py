"""The mailbox aggregate: messages and what hangs on them (attachments, labels, refs,
verifications) plus the per-identity contact book.

Every function runs inside the caller's transaction: the ingest pipeline stores a
message, its thread update, its children, its index rows and its event together or not
at all (seed 000).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Row, Tx

LABEL_MAX = 64


@dataclass(frozen=True)
class NewMessage:
    """One row of ``messages`` as the ingest pipeline writes it."""

    id: str
    identity_id: str
    tenant_id: str
    thread_id: str
    parent_rowid: int | None
    direction: str
    status: str
    source: str
    rfc_message_id: str
    message_id_synthetic: bool
    in_reply_to: str | None
    references: Sequence[str]
    raw_sha256: str
    raw_blob_key: str
    raw_size: int
    envelope: dict[str, Any] | None
    from_address: str | None
    from_name: str | None
    sender_domain: str | None
    reply_to: Sequence[dict[str, str | None]]
    to: Sequence[dict[str, str | None]]
    cc: Sequence[dict[str, str | None]]
    bcc: Sequence[dict[str, str | None]]
    delivered_to: str | None
    is_bcc: bool
    is_primary_recipient: bool
    subject: str | None
    text: str | None
    html_sanitized: str | None
    extracted_text: str | None
    snippet: str | None
    sent_at: int | None
    received_at: int
    kind: str
    automated: dict[str, Any] | None
    flags: Sequence[str]
    read: bool
    parser_version: int
    created_at: int


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def insert_message(tx: Tx, m: NewMessage) -> int:
    """Insert the row; returns its rowid (the full-text row id)."""
    row = tx.fetchone(
        "INSERT INTO messages (id, identity_id, tenant_id, thread_id, parent_rowid, direction,"
        " status, source, rfc_message_id, message_id_synthetic, in_reply_to, references_json,"
        " raw_sha256, raw_blob_key, raw_size, envelope_json, from_address, from_name,"
        " sender_domain, reply_to_json, to_json, cc_json, bcc_json, delivered_to, is_bcc,"
        " is_primary_recipient, subject, text, html_sanitized, extracted_text, snippet,"
        " sent_at, received_at, kind, automated_json, flags_json, read, parser_version,"
        " created_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " RETURNING rowid",
        (
            m.id,
            m.identity_id,
            m.tenant_id,
            m.thread_id,
            m.parent_rowid,
            m.direction,
            m.status,
            m.source,
            m.rfc_message_id,
            int(m.message_id_synthetic),
            m.in_reply_to,
            _json(list(m.references)),
            m.raw_sha256,
            m.raw_blob_key,
            m.raw_size,
            None if m.envelope is None else _json(m.envelope),
            m.from_address,
            m.from_name,
            m.sender_domain,
            _json(list(m.reply_to)),
            _json(list(m.to)),
            _json(list(m.cc)),
            _json(list(m.bcc)),
            m.delivered_to,
            int(m.is_bcc),
            int(m.is_primary_recipient),
            m.subject,
            m.text,
            m.html_sanitized,
            m.extracted_text,
            m.snippet,
            m.sent_at,
            m.received_at,
            m.kind,
            None if m.automated is None else _json(m.automated),
            _json(sorted(m.flags)),
            int(m.read),
            m.parser_version,
            m.created_at,
        ),
    )
    assert row is not None
    return int(row["rowid"])


def insert_attachments(tx: Tx, message_rowid: int, rows: Iterable[dict[str, Any]]) -> None:
    tx.executemany(
        "INSERT INTO attachments (id, message_rowid, filename, content_type, sniffed_type, size,"
        " sha256, disposition, content_id, part_path, blob_key, text_status, risk)"
        " VALUES (%(id)s, %(message_rowid)s, %(filename)s, %(content_type)s, %(sniffed_type)s,"
        " %(size)s, %(sha256)s, %(disposition)s, %(content_id)s, %(part_path)s, %(blob_key)s,"
        " %(text_status)s, %(risk)s)",
        [{**row, "message_rowid": message_rowid} for row in rows],
    )


def insert_labels(tx: Tx, message_rowid: int, labels: Iterable[str]) -> None:
    tx.executemany(
        "INSERT INTO labels (message_rowid, label) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        [(message_rowid, label) for label in sorted(set(labels))],
    )


def insert_refs(tx: Tx, message_rowid: int, refs: Iterable[tuple[str, str, str]]) -> None:
    """(kind, value, source) triples."""
    tx.executemany(
        "INSERT INTO refs (message_rowid, kind, value, source) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        [(message_rowid, kind, value, source) for kind, value, source in refs],
    )


def insert_verifications(
    tx: Tx,
    message_rowid: int,
    *,
    identity_id: str,
    items: Iterable[tuple[str, str]],
    sender_domain: str,
    received_at: int,
    expires_at: int,
) -> None:
    """(kind, value) pairs found in the message: codes and links."""
    tx.executemany(
        "INSERT INTO verifications (message_rowid, identity_id, kind, value, sender_domain,"
        " received_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        [
            (message_rowid, identity_id, kind, value, sender_domain, received_at, expires_at)
            for kind, value in items
        ],
    )


def upsert_contact(
    tx: Tx,
    *,
    identity_id: str,
    address: str,
    name: str | None,
    inbound: bool,
    thread_id: str,
    seen_at: int,
) -> None:
    """Count one more message from (inbound) or to (outbound) an address."""
    domain = address.rpartition("@")[2]
    tx.execute(
        "INSERT INTO contacts (identity_id, address, name, domain, first_seen_at, last_seen_at,"
        " inbound_count, outbound_count, last_thread_id) VALUES (%s, %s, %s, %s, %s, %s, %s,"
        " %s, %s)"
        " ON CONFLICT (identity_id, address) DO UPDATE SET"
        " name = COALESCE(excluded.name, contacts.name),"
        " last_seen_at = CASE WHEN excluded.last_seen_at > contacts.last_seen_at"
        "   THEN excluded.last_seen_at ELSE contacts.last_seen_at END,"
        " first_seen_at = CASE WHEN excluded.first_seen_at < contacts.first_seen_at"
        "   THEN excluded.first_seen_at ELSE contacts.first_seen_at END,"
        " inbound_count = contacts.inbound_count + excluded.inbound_count,"
        " outbound_count = contacts.outbound_count + excluded.outbound_count,"
        " last_thread_id = excluded.last_thread_id",
        (
            identity_id,
            address,
            name,
            domain,
            seen_at,
            seen_at,
            1 if inbound else 0,
            0 if inbound else 1,
            thread_id,
        ),
    )


def find_by_raw_sha256(tx: Tx, identity_id: str, raw_sha256: str) -> str | None:
    """The id of a stored message of this identity with exactly these bytes."""
    value = tx.fetchval(
        "SELECT id FROM messages WHERE identity_id = %s AND raw_sha256 = %s LIMIT 1",
        (identity_id, raw_sha256),
    )
    return None if value is None else str(value)


def has_rfc_message_id(tx: Tx, identity_id: str, rfc_message_id: str) -> bool:
    return (
        tx.fetchval(
            "SELECT 1 FROM messages WHERE identity_id = %s AND rfc_message_id = %s LIMIT 1",
            (identity_id, rfc_message_id),
        )
        is not None
    )


def get_message(tx: Tx, message_id: str) -> Row | None:
    return tx.fetchone("SELECT * FROM messages WHERE id = %s", (message_id,))


def labels_of(tx: Tx, message_rowid: int) -> list[str]:
    return [
        r["label"]
        for r in tx.fetchall(
            "SELECT label FROM labels WHERE message_rowid = %s ORDER BY label", (message_rowid,)
        )
    ]


def count_messages(tx: Tx, identity_id: str) -> int:
    return int(tx.fetchval("SELECT count(*) FROM messages WHERE identity_id = %s", (identity_id,)))

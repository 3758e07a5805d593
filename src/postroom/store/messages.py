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

from postroom.store.db import Row, Tx, member_of

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


# --- reading and changing mail for the API (mailbox services) --------------------------

# The columns a list row or a thread's message row needs: no bodies, no HTML.
SUMMARY_COLUMNS = (
    "m.rowid, m.id, m.identity_id, m.tenant_id, m.thread_id, m.direction, m.status,"
    " m.from_address, m.from_name, m.to_json, m.cc_json, m.subject, m.snippet, m.sent_at,"
    " m.received_at, m.kind, m.flags_json, m.read, m.archived, p.id AS parent_id"
)
_PARENT_JOIN = " LEFT JOIN messages AS p ON p.rowid = m.parent_rowid"


@dataclass(frozen=True)
class MessageFilter:
    """What :func:`list_page` keeps of one identity's messages; None filters nothing."""

    identity_id: str
    label: str | None = None
    unread: bool | None = None
    thread_id: str | None = None
    since: int | None = None  # received_at >= since
    until: int | None = None  # received_at < until


def list_page(tx: Tx, f: MessageFilter, after: tuple[int, str] | None, limit: int) -> list[Row]:
    """Summary rows, newest first (received_at DESC, id DESC), after the position
    ``(received_at, id)`` of the previous page's last row."""
    where = ["m.identity_id = %s"]
    params: list[Any] = [f.identity_id]
    if f.label is not None:
        where.append(
            "EXISTS (SELECT 1 FROM labels AS l WHERE l.message_rowid = m.rowid AND l.label = %s)"
        )
        params.append(f.label)
    if f.unread is not None:
        where.append("m.read = %s")
        params.append(0 if f.unread else 1)
    if f.thread_id is not None:
        where.append("m.thread_id = %s")
        params.append(f.thread_id)
    if f.since is not None:
        where.append("m.received_at >= %s")
        params.append(f.since)
    if f.until is not None:
        where.append("m.received_at < %s")
        params.append(f.until)
    if after is not None:
        where.append("(m.received_at < %s OR (m.received_at = %s AND m.id < %s))")
        params.extend((after[0], after[0], after[1]))
    return tx.fetchall(
        f"SELECT {SUMMARY_COLUMNS} FROM messages AS m{_PARENT_JOIN}"
        f" WHERE {' AND '.join(where)} ORDER BY m.received_at DESC, m.id DESC LIMIT %s",
        (*params, limit),
    )


def thread_messages(tx: Tx, thread_id: str, limit: int) -> list[Row]:
    """Summary rows of a conversation in the order they were received."""
    return tx.fetchall(
        f"SELECT {SUMMARY_COLUMNS} FROM messages AS m{_PARENT_JOIN}"
        " WHERE m.thread_id = %s ORDER BY m.received_at, m.rowid LIMIT %s",
        (thread_id, limit),
    )


def get_full(tx: Tx, message_id: str) -> Row | None:
    """Every column of one message, plus ``parent_id`` (the parent's message id)."""
    return tx.fetchone(
        f"SELECT m.*, p.id AS parent_id FROM messages AS m{_PARENT_JOIN} WHERE m.id = %s",
        (message_id,),
    )


def owner_of(tx: Tx, message_id: str) -> Row | None:
    """``rowid``, ``identity_id``, ``tenant_id`` and ``thread_id`` of one message."""
    return tx.fetchone(
        "SELECT rowid, id, identity_id, tenant_id, thread_id, raw_blob_key, raw_size"
        " FROM messages WHERE id = %s",
        (message_id,),
    )


def labels_for(tx: Tx, message_rowids: Sequence[int]) -> dict[int, list[str]]:
    """message rowid → its labels, sorted."""
    if not message_rowids:
        return {}
    among, params = member_of(tx, "message_rowid", list(message_rowids))
    found: dict[int, list[str]] = {}
    for r in tx.fetchall(
        f"SELECT message_rowid, label FROM labels WHERE {among} ORDER BY label", params
    ):
        found.setdefault(int(r["message_rowid"]), []).append(r["label"])
    return found


def attachment_counts(tx: Tx, message_rowids: Sequence[int]) -> dict[int, int]:
    if not message_rowids:
        return {}
    among, params = member_of(tx, "message_rowid", list(message_rowids))
    rows = tx.fetchall(
        f"SELECT message_rowid, count(*) AS n FROM attachments WHERE {among}"
        " GROUP BY message_rowid",
        params,
    )
    return {int(r["message_rowid"]): int(r["n"]) for r in rows}


def attachments_of(tx: Tx, message_rowid: int) -> list[Row]:
    """The message's attachment rows in MIME tree order."""
    rows = tx.fetchall("SELECT * FROM attachments WHERE message_rowid = %s", (message_rowid,))

    def tree_order(row: Row) -> tuple[int, ...]:
        path = str(row.get("part_path") or "")
        return tuple(int(p) if p.isdigit() else 0 for p in path.split("."))

    return sorted(rows, key=lambda r: (tree_order(r), str(r["id"])))


def get_attachment(tx: Tx, message_rowid: int, attachment_id: str) -> Row | None:
    return tx.fetchone(
        "SELECT * FROM attachments WHERE id = %s AND message_rowid = %s",
        (attachment_id, message_rowid),
    )


def refs_of(tx: Tx, message_rowid: int) -> list[Row]:
    return tx.fetchall(
        "SELECT kind, value, source FROM refs WHERE message_rowid = %s"
        " ORDER BY kind, value, source",
        (message_rowid,),
    )


def thread_of_message(tx: Tx, message_rowid: int) -> str | None:
    value = tx.fetchval("SELECT thread_id FROM messages WHERE rowid = %s", (message_rowid,))
    return None if value is None else str(value)


def set_state(
    tx: Tx, message_rowid: int, *, read: bool | None = None, archived: bool | None = None
) -> None:
    """Mark one message read/unread and/or archived/not archived."""
    if read is not None:
        tx.execute("UPDATE messages SET read = %s WHERE rowid = %s", (int(read), message_rowid))
    if archived is not None:
        tx.execute(
            "UPDATE messages SET archived = %s WHERE rowid = %s", (int(archived), message_rowid)
        )


def set_thread_state(
    tx: Tx, thread_id: str, *, read: bool | None = None, archived: bool | None = None
) -> None:
    """Mark every message of a conversation read/unread and/or archived/not archived."""
    if read is not None:
        tx.execute(
            "UPDATE messages SET read = %s WHERE thread_id = %s AND read <> %s",
            (int(read), thread_id, int(read)),
        )
    if archived is not None:
        tx.execute(
            "UPDATE messages SET archived = %s WHERE thread_id = %s AND archived <> %s",
            (int(archived), thread_id, int(archived)),
        )


def add_labels(tx: Tx, message_rowid: int, labels: Iterable[str]) -> None:
    insert_labels(tx, message_rowid, labels)


def remove_labels(tx: Tx, message_rowid: int, labels: Iterable[str]) -> None:
    tx.executemany(
        "DELETE FROM labels WHERE message_rowid = %s AND label = %s",
        [(message_rowid, label) for label in sorted(set(labels))],
    )


def add_thread_labels(tx: Tx, thread_id: str, labels: Iterable[str]) -> None:
    """Give every message of a conversation these labels."""
    for label in sorted(set(labels)):
        tx.execute(
            "INSERT INTO labels (message_rowid, label) SELECT rowid, %s FROM messages"
            " WHERE thread_id = %s ON CONFLICT DO NOTHING",
            (label, thread_id),
        )


def remove_thread_labels(tx: Tx, thread_id: str, labels: Iterable[str]) -> None:
    """Take these labels off every message of a conversation."""
    for label in sorted(set(labels)):
        tx.execute(
            "DELETE FROM labels WHERE label = %s"
            " AND message_rowid IN (SELECT rowid FROM messages WHERE thread_id = %s)",
            (label, thread_id),
        )


def count_in_thread(tx: Tx, thread_id: str) -> int:
    return int(tx.fetchval("SELECT count(*) FROM messages WHERE thread_id = %s", (thread_id,)))


def search_rows(tx: Tx, message_rowids: Sequence[int], text_chars: int) -> list[Row]:
    """What a search hit shows, with the first ``text_chars`` of each text for snippets."""
    if not message_rowids:
        return []
    among, params = member_of(tx, "rowid", list(message_rowids))
    return tx.fetchall(
        "SELECT rowid, id, identity_id, thread_id, subject, from_address, from_name,"
        " received_at, snippet, substr(extracted_text, 1, %s) AS extracted_head,"
        f" substr(text, 1, %s) AS text_head FROM messages WHERE {among}",
        (text_chars, text_chars, *params),
    )

"""Accepted-but-not-yet-ingested messages (``inbound_queue``) and the per-sender throttle
(``rate_windows``).

A message accepted over SMTP is durable when its raw blob is fsynced and its
``inbound_queue`` row (with the ingest job) is committed; only then does the SMTP server
answer 250. The ingest job deletes the row in the transaction that stores the message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Row, Tx


@dataclass(frozen=True)
class StagedMessage:
    id: str
    tenant_id: str
    identity_id: str
    raw_blob_key: str
    raw_sha256: str
    raw_size: int
    source: str
    envelope: dict[str, Any]
    delivered_to: str
    labels: tuple[str, ...]
    is_primary_recipient: bool
    received_at: int

    @classmethod
    def from_row(cls, row: Row) -> StagedMessage:
        return cls(
            id=row["id"],
            tenant_id=row["tenant_id"],
            identity_id=row["identity_id"],
            raw_blob_key=row["raw_blob_key"],
            raw_sha256=row["raw_sha256"],
            raw_size=row["raw_size"],
            source=row["source"],
            envelope=json.loads(row["envelope_json"]),
            delivered_to=row["delivered_to"],
            labels=tuple(json.loads(row["labels_json"])),
            is_primary_recipient=bool(row["is_primary_recipient"]),
            received_at=row["received_at"],
        )


def insert_staged(tx: Tx, staged: StagedMessage) -> None:
    tx.execute(
        "INSERT INTO inbound_queue (id, tenant_id, identity_id, raw_blob_key, raw_sha256,"
        " raw_size, source, envelope_json, delivered_to, labels_json, is_primary_recipient,"
        " received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            staged.id,
            staged.tenant_id,
            staged.identity_id,
            staged.raw_blob_key,
            staged.raw_sha256,
            staged.raw_size,
            staged.source,
            json.dumps(staged.envelope, separators=(",", ":")),
            staged.delivered_to,
            json.dumps(list(staged.labels)),
            int(staged.is_primary_recipient),
            staged.received_at,
        ),
    )


def get_staged(tx: Tx, message_id: str) -> StagedMessage | None:
    row = tx.fetchone("SELECT * FROM inbound_queue WHERE id = %s", (message_id,))
    return None if row is None else StagedMessage.from_row(row)


def delete_staged(tx: Tx, message_id: str) -> bool:
    return tx.execute("DELETE FROM inbound_queue WHERE id = %s", (message_id,)) == 1


def count_staged(tx: Tx) -> int:
    return int(tx.fetchval("SELECT count(*) FROM inbound_queue"))


def sender_count(tx: Tx, sender: str, window_start: int) -> int:
    value = tx.fetchval(
        "SELECT count FROM rate_windows WHERE sender = %s AND window_start = %s",
        (sender, window_start),
    )
    return 0 if value is None else int(value)


def add_to_sender_window(tx: Tx, sender: str, window_start: int, n: int = 1) -> None:
    tx.execute(
        "INSERT INTO rate_windows (sender, window_start, count) VALUES (%s, %s, %s)"
        " ON CONFLICT (sender, window_start) DO UPDATE SET count = rate_windows.count + %s",
        (sender, window_start, n, n),
    )


def purge_sender_windows(tx: Tx, before: int) -> int:
    return tx.execute("DELETE FROM rate_windows WHERE window_start < %s", (before,))

"""The ``verifications`` table read back: codes and links of an identity's mail.

Ingestion writes the rows (:func:`postroom.store.messages.insert_verifications`); this
module reads them for ``wait`` and for the list of recent codes, and marks a row
released (``consumed_at``, seed 000: "first released by wait"). Each row is joined to
its message for the message id, thread, subject and sender that travel with a code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Row, Tx


@dataclass(frozen=True)
class VerificationRow:
    message_rowid: int
    identity_id: str
    kind: str  # "code" | "link"
    value: str
    sender_domain: str  # the organisational domain of the From address ("" if none)
    received_at: int
    expires_at: int
    consumed_at: int | None
    message_id: str
    thread_id: str
    subject: str | None
    from_address: str | None
    from_name: str | None

    @classmethod
    def from_row(cls, row: Row) -> VerificationRow:
        return cls(
            message_rowid=int(row["message_rowid"]),
            identity_id=row["identity_id"],
            kind=row["kind"],
            value=row["value"],
            sender_domain=row["sender_domain"],
            received_at=int(row["received_at"]),
            expires_at=int(row["expires_at"]),
            consumed_at=None if row["consumed_at"] is None else int(row["consumed_at"]),
            message_id=row["message_id"],
            thread_id=row["thread_id"],
            subject=row["subject"],
            from_address=row["from_address"],
            from_name=row["from_name"],
        )

    @property
    def key(self) -> tuple[int, str, str]:
        """The primary key of the row."""
        return (self.message_rowid, self.kind, self.value)


_SELECT = (
    "SELECT v.message_rowid, v.identity_id, v.kind, v.value, v.sender_domain, v.received_at,"
    " v.expires_at, v.consumed_at, m.id AS message_id, m.thread_id, m.subject,"
    " m.from_address, m.from_name"
    " FROM verifications v JOIN messages m ON m.rowid = v.message_rowid"
)


def _filters(kind: str | None, sender_domain: str | None) -> tuple[str, list[Any]]:
    sql = ""
    params: list[Any] = []
    if kind is not None:
        sql += " AND v.kind = %s"
        params.append(kind)
    if sender_domain is not None:
        sql += " AND v.sender_domain = %s"
        params.append(sender_domain)
    return sql, params


def find_releasable(
    tx: Tx,
    identity_id: str,
    *,
    arrived_since: int,
    unconsumed_since: int,
    now: int,
    kind: str | None = None,
    sender_domain: str | None = None,
    limit: int = 20,
) -> list[VerificationRow]:
    """Unexpired rows of the identity a wait may release, oldest first: every row
    received at or after ``arrived_since`` whether consumed or not, and the unconsumed
    rows received at or after ``unconsumed_since``. Within a message codes come before
    links."""
    extra, params = _filters(kind, sender_domain)
    rows = tx.fetchall(
        f"{_SELECT} WHERE v.identity_id = %s AND v.expires_at > %s"
        " AND (v.received_at >= %s OR (v.consumed_at IS NULL AND v.received_at >= %s))"
        f"{extra} ORDER BY v.received_at, v.message_rowid, v.kind, v.value LIMIT %s",
        (identity_id, now, arrived_since, unconsumed_since, *params, limit),
    )
    return [VerificationRow.from_row(row) for row in rows]


def mark_consumed(tx: Tx, key: tuple[int, str, str], now: int) -> bool:
    """Set ``consumed_at`` of a row that has none; False when it was already set (by
    another wait) or the row is gone."""
    message_rowid, kind, value = key
    changed = tx.execute(
        "UPDATE verifications SET consumed_at = %s"
        " WHERE message_rowid = %s AND kind = %s AND value = %s AND consumed_at IS NULL",
        (now, message_rowid, kind, value),
    )
    return changed > 0


def list_recent(
    tx: Tx,
    identity_id: str,
    *,
    now: int,
    before: Sequence[Any] | None,
    limit: int,
    kind: str | None = None,
    sender_domain: str | None = None,
) -> list[VerificationRow]:
    """Unexpired rows of the identity, newest first, ordered by (received_at,
    message_rowid, kind, value) descending; ``before`` is the position of the last row
    of the previous page."""
    extra, params = _filters(kind, sender_domain)
    if before is not None:
        extra += " AND (v.received_at, v.message_rowid, v.kind, v.value) < (%s, %s, %s, %s)"
        params.extend(before)
    rows = tx.fetchall(
        f"{_SELECT} WHERE v.identity_id = %s AND v.expires_at > %s{extra}"
        " ORDER BY v.received_at DESC, v.message_rowid DESC, v.kind DESC, v.value DESC"
        " LIMIT %s",
        (identity_id, now, *params, limit),
    )
    return [VerificationRow.from_row(row) for row in rows]

"""Test helpers for IMAP state that needs no server: bind a stored message to a folder."""

from __future__ import annotations

from typing import Any

from postroom.ids import new_id
from postroom.store import imap as rows


def bind_synced(app: Any, account_id: str, message_id: str, *, uid: int = 1) -> None:
    """Record ``message_id`` as the occurrence (INBOX, 1, ``uid``) of ``account_id``, as a
    sync would have (for tests of what needs a synced message, such as IMAP changes)."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        folder = rows.upsert_folder(tx, new_id("fld"), account_id, "INBOX", None, now)
        rows.set_folder_checkpoint(tx, folder.id, now=now, uidvalidity=1, last_uid=uid)
        rowid = int(tx.fetchval("SELECT rowid FROM messages WHERE id = %s", (message_id,)))
        rows.insert_occurrence(
            tx,
            rows.Occurrence(
                message_rowid=rowid,
                folder_id=folder.id,
                uidvalidity=1,
                uid=uid,
                size_octets=1,
                content_availability="stored",
                remote_flags_observed_at=now,
                modseq=None,
                remote_expunge_observed_at=None,
                **rows.flag_columns(frozenset()),
            ),
        )

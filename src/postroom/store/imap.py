"""IMAP sync state: accounts, folder bindings, occurrences, mailbox mutations (seed 003)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Engine, Row, Tx, member_of

UNKNOWN_MUTATION_OUTCOME = "25002"


@dataclass(frozen=True)
class Account:
    id: str
    tenant_id: str
    identity_id: str
    host: str
    port: int
    tls_mode: str
    username: str
    auth_kind: str
    secret_sealed: str
    folders_json: str | None
    include_trash: int
    include_junk: int
    remote_delete: str
    max_message_bytes: int
    status: str
    status_reason: str | None
    status_changed_at: int
    consecutive_failures: int
    last_synced_at: int | None
    next_sync_at: int
    sync_interval_seconds: int
    paused: int
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Account:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    @property
    def folders(self) -> list[str] | None:
        return None if self.folders_json is None else list(json.loads(self.folders_json))


def insert_account(tx: Tx, a: Account) -> None:
    names = list(Account.__dataclass_fields__)
    tx.execute(
        f"INSERT INTO imap_accounts ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})",
        tuple(getattr(a, n) for n in names),
    )


def get_account(tx: Tx, account_id: str) -> Account | None:
    row = tx.fetchone("SELECT * FROM imap_accounts WHERE id = %s", (account_id,))
    return None if row is None else Account.from_row(row)


def accounts_of(tx: Tx, identity_id: str) -> list[Account]:
    rows = tx.fetchall(
        "SELECT * FROM imap_accounts WHERE identity_id = %s ORDER BY id", (identity_id,)
    )
    return [Account.from_row(r) for r in rows]


def list_accounts(
    tx: Tx, tenant_ids: Sequence[str] | None, identity_id: str | None, after: str | None, limit: int
) -> list[Account]:
    clauses: list[str] = []
    params: list[Any] = []
    if tenant_ids is not None:
        among, values = member_of(tx, "tenant_id", tenant_ids) if tenant_ids else ("1 = 0", [])
        clauses.append(among)
        params.extend(values)
    if identity_id is not None:
        clauses.append("identity_id = %s")
        params.append(identity_id)
    if after is not None:
        clauses.append("id > %s")
        params.append(after)
    where = " WHERE " + " AND ".join(clauses) if clauses else ""
    rows = tx.fetchall(f"SELECT * FROM imap_accounts{where} ORDER BY id LIMIT %s", (*params, limit))
    return [Account.from_row(r) for r in rows]


def update_account(tx: Tx, account_id: str, changes: dict[str, Any], now: int) -> bool:
    if not changes:
        return True
    sets = ", ".join(f"{k} = %s" for k in changes)
    return (
        tx.execute(
            f"UPDATE imap_accounts SET {sets}, updated_at = %s WHERE id = %s",
            (*changes.values(), now, account_id),
        )
        == 1
    )


def set_status(
    tx: Tx, account_id: str, status: str, reason: str | None, now: int, *, failed: bool
) -> str | None:
    """Record the outcome of a sync; returns the previous status when it changed."""
    row = tx.fetchone("SELECT status FROM imap_accounts WHERE id = %s", (account_id,))
    if row is None:
        return None
    previous = str(row["status"])
    changed = previous != status
    tx.execute(
        "UPDATE imap_accounts SET status = %s, status_reason = %s,"
        " status_changed_at = CASE WHEN %s THEN %s ELSE status_changed_at END,"
        " consecutive_failures = CASE WHEN %s THEN consecutive_failures + 1 ELSE 0 END,"
        " last_synced_at = CASE WHEN %s THEN last_synced_at ELSE %s END, updated_at = %s"
        " WHERE id = %s",
        (status, reason, changed, now, failed, failed, now, now, account_id),
    )
    return previous if changed else None


def delete_account(tx: Tx, account_id: str) -> bool:
    return tx.execute("DELETE FROM imap_accounts WHERE id = %s", (account_id,)) == 1


def due_accounts(tx: Tx, now: int, limit: int) -> list[Account]:
    rows = tx.fetchall(
        "SELECT * FROM imap_accounts WHERE paused = 0 AND next_sync_at <= %s"
        " ORDER BY next_sync_at LIMIT %s",
        (now, limit),
    )
    return [Account.from_row(r) for r in rows]


def schedule_next(tx: Tx, account_id: str, at: int) -> None:
    tx.execute("UPDATE imap_accounts SET next_sync_at = %s WHERE id = %s", (at, account_id))


# --- folders -------------------------------------------------------------------------


@dataclass(frozen=True)
class Folder:
    id: str
    account_id: str
    path: str
    special_use: str | None
    uidvalidity: int | None
    last_uid: int
    highest_modseq: int | None
    removed_at: int | None
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Folder:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


def folders(tx: Tx, account_id: str) -> list[Folder]:
    rows = tx.fetchall(
        "SELECT * FROM mail_folders WHERE account_id = %s ORDER BY path", (account_id,)
    )
    return [Folder.from_row(r) for r in rows]


def get_folder(tx: Tx, folder_id: str) -> Folder | None:
    row = tx.fetchone("SELECT * FROM mail_folders WHERE id = %s", (folder_id,))
    return None if row is None else Folder.from_row(row)


def upsert_folder(
    tx: Tx, folder_id: str, account_id: str, path: str, special_use: str | None, now: int
) -> Folder:
    tx.execute(
        "INSERT INTO mail_folders (id, account_id, path, special_use, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (account_id, path) DO UPDATE SET special_use = excluded.special_use,"
        " removed_at = NULL, updated_at = excluded.updated_at",
        (folder_id, account_id, path, special_use, now, now),
    )
    row = tx.fetchone(
        "SELECT * FROM mail_folders WHERE account_id = %s AND path = %s", (account_id, path)
    )
    assert row is not None
    return Folder.from_row(row)


def mark_folder_removed(tx: Tx, folder_id: str, now: int) -> None:
    tx.execute(
        "UPDATE mail_folders SET removed_at = %s, updated_at = %s WHERE id = %s"
        " AND removed_at IS NULL",
        (now, now, folder_id),
    )


def set_folder_checkpoint(
    tx: Tx,
    folder_id: str,
    *,
    now: int,
    uidvalidity: int | None = None,
    last_uid: int | None = None,
    highest_modseq: int | None = None,
    reset: bool = False,
) -> None:
    """Advance a folder's checkpoint (``reset``: a new UIDVALIDITY starts it over)."""
    if reset:
        tx.execute(
            "UPDATE mail_folders SET uidvalidity = %s, last_uid = 0, highest_modseq = NULL,"
            " updated_at = %s WHERE id = %s",
            (uidvalidity, now, folder_id),
        )
        return
    tx.execute(
        "UPDATE mail_folders SET uidvalidity = COALESCE(CAST(%s AS BIGINT), uidvalidity),"
        " last_uid = CASE WHEN CAST(%s AS BIGINT) > last_uid THEN CAST(%s AS BIGINT)"
        " ELSE last_uid END,"
        " highest_modseq = COALESCE(CAST(%s AS BIGINT), highest_modseq), updated_at = %s"
        " WHERE id = %s",
        (uidvalidity, last_uid, last_uid, highest_modseq, now, folder_id),
    )


# --- occurrences ---------------------------------------------------------------------


@dataclass(frozen=True)
class Occurrence:
    message_rowid: int
    folder_id: str
    uidvalidity: int
    uid: int
    size_octets: int
    content_availability: str
    remote_flags_observed_at: int | None
    is_seen: int
    is_answered: int
    is_flagged: int
    is_draft: int
    is_deleted: int
    keywords_json: str
    modseq: int | None
    remote_expunge_observed_at: int | None

    @classmethod
    def from_row(cls, row: Row) -> Occurrence:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


SYSTEM_FLAGS = {
    "\\SEEN": "is_seen",
    "\\ANSWERED": "is_answered",
    "\\FLAGGED": "is_flagged",
    "\\DRAFT": "is_draft",
    "\\DELETED": "is_deleted",
}
MAX_KEYWORDS = 64


def flag_columns(flags: Sequence[str] | frozenset[str]) -> dict[str, Any]:
    """The snapshot columns for a FLAGS answer: five booleans and the keywords
    (upper-cased, deduplicated, sorted, at most 64 of at most 64 characters)."""
    upper = {f.upper() for f in flags}
    values: dict[str, Any] = {col: int(flag in upper) for flag, col in SYSTEM_FLAGS.items()}
    keywords = sorted(
        f for f in upper if not f.startswith("\\") and 0 < len(f) <= 64 and f.isprintable()
    )[:MAX_KEYWORDS]
    values["keywords_json"] = json.dumps(keywords)
    return values


def insert_occurrence(tx: Tx, o: Occurrence) -> None:
    names = list(Occurrence.__dataclass_fields__)
    tx.execute(
        f"INSERT INTO message_occurrences ({', '.join(names)})"
        f" VALUES ({', '.join(['%s'] * len(names))})",
        tuple(getattr(o, n) for n in names),
    )


def occurrence_of(tx: Tx, message_rowid: int) -> Occurrence | None:
    row = tx.fetchone(
        "SELECT * FROM message_occurrences WHERE message_rowid = %s", (message_rowid,)
    )
    return None if row is None else Occurrence.from_row(row)


def occurrences_by_uid(
    tx: Tx, folder_id: str, uidvalidity: int, uids: Sequence[int]
) -> dict[int, Occurrence]:
    if not uids:
        return {}
    among, params = member_of(tx, "uid", list(uids))
    rows = tx.fetchall(
        f"SELECT * FROM message_occurrences WHERE folder_id = %s AND uidvalidity = %s AND {among}",
        (folder_id, uidvalidity, *params),
    )
    return {int(r["uid"]): Occurrence.from_row(r) for r in rows}


def live_uids(tx: Tx, folder_id: str, uidvalidity: int) -> list[int]:
    rows = tx.fetchall(
        "SELECT uid FROM message_occurrences WHERE folder_id = %s AND uidvalidity = %s"
        " AND remote_expunge_observed_at IS NULL ORDER BY uid",
        (folder_id, uidvalidity),
    )
    return [int(r["uid"]) for r in rows]


def reconciliation_window(tx: Tx, folder_id: str, uidvalidity: int, limit: int) -> list[int]:
    """The next UIDs whose flags to read: never observed first, then the oldest."""
    never = tx.fetchall(
        "SELECT uid FROM message_occurrences WHERE folder_id = %s AND uidvalidity = %s"
        " AND remote_expunge_observed_at IS NULL AND remote_flags_observed_at IS NULL"
        " ORDER BY uid LIMIT %s",
        (folder_id, uidvalidity, limit),
    )
    uids = [int(r["uid"]) for r in never]
    if len(uids) < limit:
        oldest = tx.fetchall(
            "SELECT uid FROM message_occurrences WHERE folder_id = %s AND uidvalidity = %s"
            " AND remote_expunge_observed_at IS NULL AND remote_flags_observed_at IS NOT NULL"
            " ORDER BY remote_flags_observed_at, uid LIMIT %s",
            (folder_id, uidvalidity, limit - len(uids)),
        )
        uids += [int(r["uid"]) for r in oldest]
    return uids


def observe_flags(
    tx: Tx,
    folder_id: str,
    uidvalidity: int,
    uid: int,
    flags: frozenset[str],
    modseq: int | None,
    now: int,
) -> int | None:
    """Write the flag snapshot of one occurrence; returns its message rowid when the
    \\Seen observation changed (the caller mirrors it into the message's read state)."""
    columns = flag_columns(flags)
    row = tx.fetchone(
        "SELECT message_rowid, is_seen, remote_flags_observed_at FROM message_occurrences"
        " WHERE folder_id = %s AND uidvalidity = %s AND uid = %s",
        (folder_id, uidvalidity, uid),
    )
    if row is None:
        return None
    sets = ", ".join(f"{k} = %s" for k in columns)
    tx.execute(
        f"UPDATE message_occurrences SET {sets}, modseq = COALESCE(CAST(%s AS BIGINT), modseq),"
        " remote_flags_observed_at = %s WHERE message_rowid = %s",
        (*columns.values(), modseq, now, row["message_rowid"]),
    )
    if int(row["is_seen"]) != columns["is_seen"] or row["remote_flags_observed_at"] is None:
        return int(row["message_rowid"])
    return None


def tombstone(tx: Tx, folder_id: str, uidvalidity: int, uids: Sequence[int], now: int) -> list[int]:
    """Mark occurrences expunged on the server; returns their message rowids."""
    if not uids:
        return []
    among, params = member_of(tx, "uid", list(uids))
    rows = tx.fetchall(
        "SELECT message_rowid FROM message_occurrences WHERE folder_id = %s AND uidvalidity = %s"
        f" AND remote_expunge_observed_at IS NULL AND {among}",
        (folder_id, uidvalidity, *params),
    )
    rowids = [int(r["message_rowid"]) for r in rows]
    if rowids:
        among_rows, row_params = member_of(tx, "message_rowid", rowids)
        tx.execute(
            f"UPDATE message_occurrences SET remote_expunge_observed_at = %s WHERE {among_rows}",
            (now, *row_params),
        )
    return rowids


def stale_generation(tx: Tx, folder_id: str, uidvalidity: int) -> list[Row]:
    """Occurrences of a folder under an older UIDVALIDITY (a reset), with what matches a
    message again: Message-ID and raw SHA-256."""
    return tx.fetchall(
        "SELECT o.message_rowid, m.rfc_message_id, m.raw_sha256 FROM message_occurrences o"
        " JOIN messages m ON m.rowid = o.message_rowid"
        " WHERE o.folder_id = %s AND o.uidvalidity <> %s AND o.remote_expunge_observed_at IS NULL",
        (folder_id, uidvalidity),
    )


def rebind(tx: Tx, message_rowid: int, uidvalidity: int, uid: int) -> None:
    tx.execute(
        "UPDATE message_occurrences SET uidvalidity = %s, uid = %s, remote_flags_observed_at = NULL"
        " WHERE message_rowid = %s",
        (uidvalidity, uid, message_rowid),
    )


def lock_account(tx: Tx, account_id: str) -> bool:
    """Serialise syncs of one account (PostgreSQL row lock; SQLite has one writer)."""
    if tx.engine is Engine.POSTGRESQL:
        row = tx.fetchone(
            "SELECT id FROM imap_accounts WHERE id = %s FOR UPDATE SKIP LOCKED", (account_id,)
        )
        return row is not None
    return True

"""The conversation tables' statements: ``threads``, ``thread_identifiers`` and the
thread columns of ``messages`` (seed 003 "The conversation a message belongs to").

Everything here runs inside the caller's transaction and never leaves it aborted on
PostgreSQL: identifier rows are inserted with ``ON CONFLICT DO NOTHING`` and the winner
is re-read, and a conversation that is about to absorb another is locked first
(``FOR UPDATE``), so two arrivals settling merges at once queue on the row instead of
writing a chain that ends at a conversation which is no longer anybody's survivor. On
SQLite the single writer serialises arrivals and the lock clause is left out.

A folded conversation keeps its row with ``merged_into_thread_id`` set; a fold repoints
its identifiers, its messages and the conversations folded into it earlier, so every
chain is one step long and :func:`resolve` rarely takes more than one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Engine, Row, Tx, member_of

__all__ = [
    "MAX_CHAIN",
    "MAX_PARTICIPANTS",
    "StoredReply",
    "Thread",
    "ThreadEnds",
    "ThreadFilter",
    "ancestor_chain_contains",
    "archive_when_all_archived",
    "ends_of_threads",
    "find_subject_candidates",
    "first_stored",
    "fold",
    "get",
    "insert",
    "insert_identifiers",
    "labels_of_threads",
    "list_page",
    "lock",
    "lookup_identifiers",
    "merge_participants",
    "participant_pattern",
    "recount_unread",
    "replies_naming",
    "resolve",
    "set_archived",
    "set_parent",
    "set_subject",
    "update_activity",
    "delete_unused",
]

MAX_PARTICIPANTS = 50
# How far a chain of folds or parents is followed before it is treated as broken. Folds
# are path-compressed, so a real chain is one step; parents are bounded by real depth.
MAX_CHAIN = 10_000


@dataclass(frozen=True)
class Thread:
    id: str
    identity_id: str
    tenant_id: str
    subject: str
    assembled_at: int
    merged_into_thread_id: str | None
    first_at: int
    last_at: int
    last_inbound_at: int | None
    last_outbound_at: int | None
    message_count: int
    unread_count: int
    participants: tuple[dict[str, Any], ...]
    archived: bool
    hold_json: str | None
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> Thread:
        return cls(
            id=row["id"],
            identity_id=row["identity_id"],
            tenant_id=row["tenant_id"],
            subject=row["subject"],
            assembled_at=row["assembled_at"],
            merged_into_thread_id=row["merged_into_thread_id"],
            first_at=row["first_at"],
            last_at=row["last_at"],
            last_inbound_at=row["last_inbound_at"],
            last_outbound_at=row["last_outbound_at"],
            message_count=row["message_count"],
            unread_count=row["unread_count"],
            participants=tuple(json.loads(row["participants_json"])),
            archived=bool(row["archived"]),
            hold_json=row["hold_json"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    @property
    def participant_addresses(self) -> frozenset[str]:
        return frozenset(str(p.get("address")) for p in self.participants)


def _lock_clause(tx: Tx) -> str:
    return " FOR UPDATE" if tx.engine is Engine.POSTGRESQL else ""


# --- threads --------------------------------------------------------------------------


def get(tx: Tx, thread_id: str) -> Thread | None:
    row = tx.fetchone("SELECT * FROM threads WHERE id = %s", (thread_id,))
    return None if row is None else Thread.from_row(row)


def insert(
    tx: Tx,
    *,
    thread_id: str,
    identity_id: str,
    tenant_id: str,
    subject: str,
    at: int,
    now: int,
) -> Thread:
    """A new, empty conversation assembled now; ``at`` seeds first_at and last_at."""
    row = tx.fetchone(
        "INSERT INTO threads (id, identity_id, tenant_id, subject, assembled_at, first_at,"
        " last_at, message_count, unread_count, participants_json, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, 0, 0, '[]', %s, %s) RETURNING *",
        (thread_id, identity_id, tenant_id, subject, now, at, at, now, now),
    )
    assert row is not None
    return Thread.from_row(row)


def lock(tx: Tx, identity_id: str, thread_ids: Iterable[str]) -> list[Thread]:
    """The identity's conversations named, locked on PostgreSQL, in id order.

    Locking in one order everywhere is what keeps two arrivals that name the same pair
    of conversations from deadlocking each other.
    """
    ids = sorted(set(thread_ids))
    if not ids:
        return []
    among, params = member_of(tx, "id", ids)
    rows = tx.fetchall(
        f"SELECT * FROM threads WHERE identity_id = %s AND {among} ORDER BY id{_lock_clause(tx)}",
        (identity_id, *params),
    )
    return [Thread.from_row(r) for r in rows]


def resolve(tx: Tx, identity_id: str, thread_id: str) -> str | None:
    """Follow ``merged_into_thread_id`` to the survivor; None when the identity has no
    such conversation (or the chain is broken)."""
    current = thread_id
    seen: set[str] = set()
    while len(seen) < MAX_CHAIN:
        row = tx.fetchone(
            "SELECT merged_into_thread_id FROM threads WHERE id = %s AND identity_id = %s",
            (current, identity_id),
        )
        if row is None:
            return None
        nxt = row["merged_into_thread_id"]
        if nxt is None:
            return current
        seen.add(current)
        if nxt in seen:
            # A cycle of folds cannot be written by this module; refuse rather than spin.
            return None
        current = nxt
    return None


def find_subject_candidates(
    tx: Tx,
    identity_id: str,
    subject: str,
    *,
    active_since: int,
    started_by: int,
    limit: int = 20,
) -> list[Thread]:
    """Live conversations with this subject, last active at or after ``active_since`` and
    started at or before ``started_by``, most recently active first.

    The range on ``last_at`` is what ``threads_identity_last`` serves; the subject is
    compared on the rows inside the window.
    """
    rows = tx.fetchall(
        "SELECT * FROM threads WHERE identity_id = %s AND merged_into_thread_id IS NULL"
        " AND last_at >= %s AND subject = %s AND first_at <= %s"
        " ORDER BY last_at DESC, id DESC LIMIT %s",
        (identity_id, active_since, subject, started_by, limit),
    )
    return [Thread.from_row(r) for r in rows]


def set_subject(tx: Tx, thread_id: str, subject: str, now: int) -> None:
    tx.execute(
        "UPDATE threads SET subject = %s, updated_at = %s WHERE id = %s",
        (subject, now, thread_id),
    )


def merge_participants(
    existing: Sequence[dict[str, Any]], new: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Existing participants in order, then new addresses, at most 50; a name learnt later
    fills a participant whose name was unknown."""
    merged = [dict(p) for p in existing]
    index = {str(p.get("address")): i for i, p in enumerate(merged)}
    for person in new:
        address = person.get("address")
        if not address:
            continue
        at = index.get(address)
        if at is not None:
            if not merged[at].get("name") and person.get("name"):
                merged[at]["name"] = person["name"]
            continue
        if len(merged) >= MAX_PARTICIPANTS:
            continue
        index[address] = len(merged)
        merged.append({"address": address, "name": person.get("name")})
    return merged[:MAX_PARTICIPANTS]


def update_activity(
    tx: Tx,
    thread_id: str,
    *,
    add_messages: int,
    add_unread: int,
    first_at: int,
    last_at: int,
    last_inbound_at: int | None,
    last_outbound_at: int | None,
    participants: Sequence[dict[str, Any]],
    now: int,
) -> None:
    """Write counters and activity already computed by the caller from a locked row.

    A message joining a thread arrives unarchived, so the thread is unarchived too (a
    thread is archived exactly when none of its messages is unarchived): a reply brings
    an archived conversation back to the inbox."""
    tx.execute(
        "UPDATE threads SET message_count = message_count + %s, archived = 0,"
        " unread_count = unread_count + %s, first_at = %s, last_at = %s,"
        " last_inbound_at = %s, last_outbound_at = %s, participants_json = %s,"
        " updated_at = %s WHERE id = %s",
        (
            add_messages,
            add_unread,
            first_at,
            last_at,
            last_inbound_at,
            last_outbound_at,
            json.dumps(list(participants), ensure_ascii=False),
            now,
            thread_id,
        ),
    )


def _latest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def fold(tx: Tx, *, identity_id: str, folded: Thread, survivor: Thread, now: int) -> Thread:
    """Fold one locked conversation into another; returns the survivor as now written.

    The folded row stays, pointing at the survivor, so an id published before still
    resolves. Its identifiers, its messages and the conversations folded into it earlier
    move to the survivor; its counters and participants are added to the survivor's and
    zeroed on the folded row, so a sum over rows never counts a message twice. A legal
    hold on the folded conversation is carried over when the survivor has none, because
    the held messages now live there.
    """
    tx.execute(
        "UPDATE thread_identifiers SET thread_id = %s WHERE identity_id = %s AND thread_id = %s",
        (survivor.id, identity_id, folded.id),
    )
    tx.execute(
        "UPDATE messages SET thread_id = %s WHERE thread_id = %s",
        (survivor.id, folded.id),
    )
    tx.execute(
        "UPDATE threads SET merged_into_thread_id = %s, updated_at = %s"
        " WHERE merged_into_thread_id = %s",
        (survivor.id, now, folded.id),
    )
    tx.execute(
        "UPDATE threads SET merged_into_thread_id = %s, message_count = 0, unread_count = 0,"
        " updated_at = %s WHERE id = %s",
        (survivor.id, now, folded.id),
    )
    participants = merge_participants(survivor.participants, folded.participants)
    subject = survivor.subject or folded.subject
    hold = survivor.hold_json if survivor.hold_json is not None else folded.hold_json
    row = tx.fetchone(
        "UPDATE threads SET message_count = message_count + %s,"
        " unread_count = unread_count + %s, first_at = %s, last_at = %s,"
        " last_inbound_at = %s, last_outbound_at = %s, participants_json = %s,"
        " subject = %s, hold_json = %s, updated_at = %s WHERE id = %s RETURNING *",
        (
            folded.message_count,
            folded.unread_count,
            min(survivor.first_at, folded.first_at) if folded.message_count else survivor.first_at,
            max(survivor.last_at, folded.last_at) if folded.message_count else survivor.last_at,
            _latest(survivor.last_inbound_at, folded.last_inbound_at),
            _latest(survivor.last_outbound_at, folded.last_outbound_at),
            json.dumps(participants, ensure_ascii=False),
            subject,
            hold,
            now,
            survivor.id,
        ),
    )
    assert row is not None
    return Thread.from_row(row)


def delete_unused(tx: Tx, thread_id: str) -> None:
    """Remove a conversation this transaction created and then folded before any message
    or identifier reached it (it was never visible to anyone else)."""
    tx.execute(
        "DELETE FROM threads WHERE id = %s AND message_count = 0"
        " AND NOT EXISTS (SELECT 1 FROM messages WHERE thread_id = %s)"
        " AND NOT EXISTS (SELECT 1 FROM thread_identifiers WHERE thread_id = %s)"
        " AND NOT EXISTS (SELECT 1 FROM threads AS t WHERE t.merged_into_thread_id = %s)",
        (thread_id, thread_id, thread_id, thread_id),
    )


# --- thread_identifiers ---------------------------------------------------------------


def lookup_identifiers(tx: Tx, identity_id: str, hashes: Sequence[str]) -> dict[str, str]:
    """identifier hash → thread id, for the hashes the identity has rows for."""
    if not hashes:
        return {}
    among, params = member_of(tx, "identifier_hash", hashes)
    rows = tx.fetchall(
        f"SELECT identifier_hash, thread_id FROM thread_identifiers"
        f" WHERE identity_id = %s AND {among}",
        (identity_id, *params),
    )
    return {r["identifier_hash"]: r["thread_id"] for r in rows}


def insert_identifiers(tx: Tx, identity_id: str, hashes: Sequence[str], thread_id: str) -> set[str]:
    """Bind identifiers to a conversation; returns the hashes this call inserted.

    A hash another transaction bound first is skipped (``ON CONFLICT DO NOTHING``; on
    PostgreSQL the statement waits for that transaction and then skips), and the caller
    re-reads it. Rows go in hash order so two arrivals never wait on each other in
    opposite orders.
    """
    ordered = sorted(set(hashes))
    if not ordered:
        return set()
    values = ", ".join(["(%s, %s, %s)"] * len(ordered))
    params: list[str] = []
    for h in ordered:
        params.extend((identity_id, h, thread_id))
    rows = tx.fetchall(
        "INSERT INTO thread_identifiers (identity_id, identifier_hash, thread_id)"
        f" VALUES {values} ON CONFLICT (identity_id, identifier_hash) DO NOTHING"
        " RETURNING identifier_hash",
        params,
    )
    return {r["identifier_hash"] for r in rows}


# --- the message tree -----------------------------------------------------------------


def first_stored(
    tx: Tx, identity_id: str, rfc_message_ids: Sequence[str], *, exclude_rowid: int | None = None
) -> dict[str, int]:
    """rfc_message_id → the lowest rowid of the identity's messages carrying it.

    The lowest rowid is the copy stored first, so a duplicate arriving later never
    takes a parent role away from it.
    """
    ids = list(dict.fromkeys(rfc_message_ids))
    if not ids:
        return {}
    among, params = member_of(tx, "rfc_message_id", ids)
    rows = tx.fetchall(
        "SELECT rfc_message_id, min(rowid) AS rowid FROM messages"
        f" WHERE identity_id = %s AND {among}"
        " AND rowid <> %s GROUP BY rfc_message_id",
        (identity_id, *params, -1 if exclude_rowid is None else exclude_rowid),
    )
    return {r["rfc_message_id"]: int(r["rowid"]) for r in rows}


@dataclass(frozen=True)
class StoredReply:
    """A stored message that names another one as its parent or ancestor."""

    rowid: int
    rfc_message_id: str | None
    in_reply_to: str | None
    references: tuple[str, ...]
    parent_rowid: int | None


def replies_naming(
    tx: Tx, identity_id: str, thread_id: str, identifier: str, *, exclude_rowid: int
) -> list[StoredReply]:
    """The conversation's messages whose In-Reply-To or References name ``identifier``.

    References are a JSON text column, so the containment test is a substring match (on
    the identifier as written and as JSON escapes it) confirmed here on the decoded list.
    """
    # The forms the identifier can take inside a JSON list, whichever way it was dumped.
    forms = list(
        dict.fromkeys(
            (
                identifier,
                json.dumps(identifier)[1:-1],
                json.dumps(identifier, ensure_ascii=False)[1:-1],
            )
        )
    )
    find = "strpos" if tx.engine is Engine.POSTGRESQL else "instr"
    contains = " OR ".join([f"{find}(references_json, %s) > 0"] * len(forms))
    rows = tx.fetchall(
        "SELECT rowid, rfc_message_id, in_reply_to, references_json, parent_rowid"
        " FROM messages WHERE thread_id = %s AND identity_id = %s AND rowid <> %s"
        f" AND (in_reply_to = %s OR {contains}) ORDER BY rowid",
        (thread_id, identity_id, exclude_rowid, identifier, *forms),
    )
    found: list[StoredReply] = []
    for r in rows:
        try:
            decoded = json.loads(r["references_json"] or "[]")
        except ValueError:
            decoded = []
        references = tuple(x for x in decoded if isinstance(x, str))
        if r["in_reply_to"] != identifier and identifier not in references:
            continue
        found.append(
            StoredReply(
                rowid=int(r["rowid"]),
                rfc_message_id=r["rfc_message_id"],
                in_reply_to=r["in_reply_to"],
                references=references,
                parent_rowid=None if r["parent_rowid"] is None else int(r["parent_rowid"]),
            )
        )
    return found


def ancestor_chain_contains(tx: Tx, start_rowid: int, target_rowid: int) -> bool:
    """Whether ``target_rowid`` is ``start_rowid`` or one of its ancestors.

    Walked in one recursive query with a depth bound, so a cycle already in the data
    (which this module never writes) ends the walk instead of looping.
    """
    if start_rowid == target_rowid:
        return True
    found = tx.fetchval(
        "WITH RECURSIVE chain(node, depth) AS ("
        " SELECT parent_rowid, 1 FROM messages WHERE rowid = %s"
        " UNION ALL"
        " SELECT m.parent_rowid, c.depth + 1 FROM messages AS m JOIN chain AS c"
        " ON m.rowid = c.node WHERE c.depth < %s"
        ") SELECT 1 AS hit FROM chain WHERE node = %s LIMIT 1",
        (start_rowid, MAX_CHAIN, target_rowid),
    )
    return found is not None


def set_parent(tx: Tx, rowid: int, parent_rowid: int) -> None:
    tx.execute("UPDATE messages SET parent_rowid = %s WHERE rowid = %s", (parent_rowid, rowid))


# --- reading and changing conversations for the API (mailbox services) ----------------


@dataclass(frozen=True)
class ThreadFilter:
    """What :func:`list_page` keeps of one identity's live conversations."""

    identity_id: str
    label: str | None = None  # a message of the conversation carries this label
    unread: bool | None = None  # unread_count > 0 (True) or = 0 (False)
    archived: bool | None = None
    participant: str | None = None  # an address in participants_json
    since: int | None = None  # last_at >= since
    until: int | None = None  # last_at < until


def participant_pattern(address: str) -> str:
    """The text ``participants_json`` holds for an address, as ``update_activity`` and
    ``fold`` write it (``json.dumps`` with its default separators)."""
    return '"address": ' + json.dumps(address, ensure_ascii=False)


def list_page(tx: Tx, f: ThreadFilter, after: tuple[int, str] | None, limit: int) -> list[Thread]:
    """Live (never folded) conversations, newest activity first (last_at DESC, id DESC),
    after the position ``(last_at, id)`` of the previous page's last row."""
    where = ["t.identity_id = %s", "t.merged_into_thread_id IS NULL"]
    params: list[Any] = [f.identity_id]
    if f.label is not None:
        where.append(
            "EXISTS (SELECT 1 FROM messages AS m JOIN labels AS l ON l.message_rowid = m.rowid"
            " WHERE m.thread_id = t.id AND l.label = %s)"
        )
        params.append(f.label)
    if f.unread is not None:
        where.append("t.unread_count > 0" if f.unread else "t.unread_count = 0")
    if f.archived is not None:
        where.append("t.archived = %s")
        params.append(int(f.archived))
    if f.participant is not None:
        find = "strpos" if tx.engine is Engine.POSTGRESQL else "instr"
        where.append(f"{find}(t.participants_json, %s) > 0")
        params.append(participant_pattern(f.participant))
    if f.since is not None:
        where.append("t.last_at >= %s")
        params.append(f.since)
    if f.until is not None:
        where.append("t.last_at < %s")
        params.append(f.until)
    if after is not None:
        where.append("(t.last_at < %s OR (t.last_at = %s AND t.id < %s))")
        params.extend((after[0], after[0], after[1]))
    rows = tx.fetchall(
        f"SELECT t.* FROM threads AS t WHERE {' AND '.join(where)}"
        " ORDER BY t.last_at DESC, t.id DESC LIMIT %s",
        (*params, limit),
    )
    return [Thread.from_row(r) for r in rows]


def labels_of_threads(tx: Tx, thread_ids: Sequence[str]) -> dict[str, list[str]]:
    """thread id → the union of its messages' labels, sorted."""
    if not thread_ids:
        return {}
    among, params = member_of(tx, "m.thread_id", list(thread_ids))
    rows = tx.fetchall(
        "SELECT DISTINCT m.thread_id, l.label FROM messages AS m"
        f" JOIN labels AS l ON l.message_rowid = m.rowid WHERE {among}"
        " ORDER BY m.thread_id, l.label",
        params,
    )
    found: dict[str, list[str]] = {}
    for r in rows:
        found.setdefault(r["thread_id"], []).append(r["label"])
    return found


@dataclass(frozen=True)
class ThreadEnds:
    """What a conversation's list row shows from its messages."""

    first_subject: str | None  # the subject of the first message received
    latest_snippet: str | None  # the snippet of the latest message received


def ends_of_threads(tx: Tx, thread_ids: Sequence[str]) -> dict[str, ThreadEnds]:
    """thread id → the first message's subject and the latest message's snippet."""
    if not thread_ids:
        return {}
    among, params = member_of(tx, "thread_id", list(thread_ids))
    rows = tx.fetchall(
        "SELECT thread_id, subject, snippet, first_n, last_n FROM ("
        " SELECT thread_id, subject, snippet,"
        " ROW_NUMBER() OVER (PARTITION BY thread_id ORDER BY received_at, rowid) AS first_n,"
        " ROW_NUMBER() OVER (PARTITION BY thread_id ORDER BY received_at DESC, rowid DESC)"
        " AS last_n"
        f" FROM messages WHERE {among}"
        ") AS ranked WHERE first_n = 1 OR last_n = 1",
        params,
    )
    first: dict[str, str | None] = {}
    latest: dict[str, str | None] = {}
    for r in rows:
        if r["first_n"] == 1:
            first[r["thread_id"]] = r["subject"]
        if r["last_n"] == 1:
            latest[r["thread_id"]] = r["snippet"]
    return {tid: ThreadEnds(first.get(tid), latest.get(tid)) for tid in set(first) | set(latest)}


def recount_unread(tx: Tx, thread_id: str, now: int) -> None:
    """Set ``unread_count`` from the messages (call with the row locked)."""
    tx.execute(
        "UPDATE threads SET unread_count ="
        " (SELECT count(*) FROM messages WHERE thread_id = %s AND read = 0),"
        " updated_at = %s WHERE id = %s",
        (thread_id, now, thread_id),
    )


def set_archived(tx: Tx, thread_id: str, archived: bool, now: int) -> None:
    tx.execute(
        "UPDATE threads SET archived = %s, updated_at = %s WHERE id = %s",
        (int(archived), now, thread_id),
    )


def archive_when_all_archived(tx: Tx, thread_id: str, now: int) -> None:
    """A conversation is archived exactly when none of its messages is left unarchived."""
    tx.execute(
        "UPDATE threads SET archived = CASE WHEN EXISTS"
        " (SELECT 1 FROM messages WHERE thread_id = %s AND archived = 0) THEN 0 ELSE 1 END,"
        " updated_at = %s WHERE id = %s",
        (thread_id, now, thread_id),
    )

"""Placing a message in its conversation, inside the caller's transaction (seed 003).

The ingest pipeline calls two functions around the ``messages`` insert::

    placement = place_message(tx, identity_id=..., tenant_id=..., parsed=parsed,
                              received_at=..., now=...)
    rowid = insert the messages row with placement.thread_id and placement.parent_rowid
    record_in_thread(tx, placement, message_rowid=rowid, direction=..., read=...,
                     received_at=..., participants=[...], now=...)

Membership is decided by identifiers alone, per identity: the message's own Message-ID,
its In-Reply-To and its References each have a ``thread_identifiers`` row (stored as a
digest) naming the conversation they belong to. An identifier nobody stored gets a row
of its own, so two replies to a message this identity never received meet in one
conversation, and the message itself joins them if it turns up later. A message naming
identifiers of two or more conversations folds the later-assembled ones into the
earliest (``assembled_at``, then id); the folded rows stay and resolve to the survivor.

Only a message with no In-Reply-To and no References at all may join by subject, and
only under the conditions in :func:`place_message`; such a placement says
``subject_join=True`` so the caller can flag it ``thread_join_unverified``.

The parent is the stored message whose Message-ID is the In-Reply-To, else the nearest
stored ancestor in References. When a message arrives after replies that name it,
:func:`record_in_thread` gives those replies their parent, never making a cycle.

``docs/threading.md`` has the rules with their reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from postroom.errors import DatabaseBusy, NotFound
from postroom.ids import new_id
from postroom.mail.message import Mailbox, ParsedMessage
from postroom.mail.threading import (
    SubjectKey,
    ThreadKeys,
    identifier_hash,
    subject_key,
    thread_keys,
)
from postroom.store import threads as thread_rows
from postroom.store.db import Tx
from postroom.store.threads import Thread

__all__ = [
    "SUBJECT_JOIN_WINDOW_MS",
    "ThreadPlacement",
    "place_message",
    "record_in_thread",
    "resolve_thread",
]

# A message without references joins by subject only a conversation active in the last
# 30 days: long enough for a reply written after a holiday, short enough that a yearly
# "Re: Invoice" does not land in last year's conversation.
SUBJECT_JOIN_WINDOW_MS = 30 * 24 * 3_600_000
# Rounds of read–lock–bind before placement gives up. Each extra round means another
# transaction changed these conversations in between, which is rare; running out raises
# DatabaseBusy and the ingest job retries the whole transaction.
_MAX_ROUNDS = 8
_DIRECTIONS = ("inbound", "outbound")


@dataclass(frozen=True)
class ThreadPlacement:
    """Where a message goes, decided before its row is inserted."""

    thread_id: str
    parent_rowid: int | None
    created: bool  # a new conversation was assembled for this message
    merged_thread_ids: tuple[str, ...]  # conversations folded into thread_id just now
    subject_join: bool  # joined by subject alone: flag the message thread_join_unverified
    identity_id: str = ""
    # The message's own identifier when stored mail already named it (replies came
    # first): record_in_thread then gives those replies their parent.
    awaited_identifier: str | None = None


def resolve_thread(tx: Tx, identity_id: str, thread_id: str) -> str:
    """The conversation an id names now, following folds; NotFound if not the identity's."""
    survivor = thread_rows.resolve(tx, identity_id, thread_id)
    if survivor is None:
        raise NotFound(f"no thread {thread_id}", code="thread_not_found")
    return survivor


def place_message(
    tx: Tx,
    *,
    identity_id: str,
    tenant_id: str,
    parsed: ParsedMessage,
    received_at: int,
    now: int,
    subject_window_ms: int = SUBJECT_JOIN_WINDOW_MS,
) -> ThreadPlacement:
    """Find or assemble the message's conversation, fold any others it connects, bind its
    identifiers, and find its parent. Runs before the message row exists.

    Subject join (only when nothing bound the message by identifier): the message has
    no In-Reply-To and no References, its subject carried a reply or forward prefix and
    normalises to a non-empty subject, and a live conversation of the identity with that
    normalised subject was active within ``subject_window_ms`` before ``received_at``,
    started no later than ``received_at``, and has the message's From address among its
    participants. The most recently active such conversation is joined.
    """
    keys = thread_keys(parsed.rfc_message_id, parsed.in_reply_to, parsed.references)
    subject = subject_key(parsed.subject)
    hashes = {identifier_hash(i): i for i in keys.identifiers}
    own_hash = identifier_hash(keys.own) if keys.own else None

    created_id: str | None = None
    subject_join = False
    awaited = False
    ours: set[str] = set()  # identifier hashes this call bound
    merged: list[str] = []
    survivor: Thread | None = None
    for _round in range(_MAX_ROUNDS):
        bound = thread_rows.lookup_identifiers(tx, identity_id, list(hashes))
        if own_hash is not None and own_hash in bound and own_hash not in ours:
            awaited = True
        named = set(bound.values()) | ({created_id} if created_id else set())
        live: set[str] = set()
        for thread_id in named:
            resolved = thread_rows.resolve(tx, identity_id, thread_id)
            if resolved is not None:
                live.add(resolved)
        subject_join = False
        if not live:
            target = _subject_join_target(
                tx, identity_id, keys, subject, parsed, received_at, subject_window_ms
            )
            if target is not None:
                live.add(target)
                subject_join = True

        if live:
            locked = thread_rows.lock(tx, identity_id, live)
            if len(locked) != len(live) or any(t.merged_into_thread_id for t in locked):
                # Another transaction folded or removed one of these after we read it;
                # read the identifiers again.
                continue
            locked.sort(key=lambda t: (t.assembled_at, t.id))
            survivor, folded = locked[0], locked[1:]
        else:
            created_id = new_id("thr")
            survivor = thread_rows.insert(
                tx,
                thread_id=created_id,
                identity_id=identity_id,
                tenant_id=tenant_id,
                subject=subject.normalized,
                at=received_at,
                now=now,
            )
            folded = []
        for thread in folded:
            survivor = thread_rows.fold(
                tx, identity_id=identity_id, folded=thread, survivor=survivor, now=now
            )
            if thread.id != created_id:
                merged.append(thread.id)

        missing = [h for h in hashes if h not in bound]
        inserted = thread_rows.insert_identifiers(tx, identity_id, missing, survivor.id)
        ours |= inserted
        if inserted == set(missing):
            break
        # Another arrival bound one of our identifiers first; the next round reads its
        # conversation and folds it with ours.
    else:
        # DatabaseBusy is what the job runner retries: the contention clears on its own.
        raise DatabaseBusy(
            "thread placement did not settle; retry the transaction",
            code="thread_placement_contended",
        )

    assert survivor is not None
    if created_id is not None and created_id != survivor.id:
        # The conversation assembled in an earlier round lost to one another arrival
        # committed meanwhile; nothing outside this transaction ever saw it.
        thread_rows.delete_unused(tx, created_id)
    # The subject is the first message's: the first to arrive, unless the conversation's
    # root turns up after its replies (it answers nothing and replies already named it),
    # and an empty one gives way to the first non-empty subject.
    if survivor.id != created_id and subject.normalized:
        # A second copy of a stored root (or another message reusing its Message-ID) is
        # not the root arriving late.
        root_arrived_late = (
            awaited
            and keys.own is not None
            and not keys.answers
            and not thread_rows.first_stored(tx, identity_id, [keys.own])
        )
        if root_arrived_late or not survivor.subject:
            thread_rows.set_subject(tx, survivor.id, subject.normalized, now)

    return ThreadPlacement(
        thread_id=survivor.id,
        parent_rowid=_find_parent(tx, identity_id, keys),
        created=survivor.id == created_id,
        merged_thread_ids=tuple(merged),
        subject_join=subject_join,
        identity_id=identity_id,
        awaited_identifier=keys.own if awaited else None,
    )


def _subject_join_target(
    tx: Tx,
    identity_id: str,
    keys: ThreadKeys,
    subject: SubjectKey,
    parsed: ParsedMessage,
    received_at: int,
    window_ms: int,
) -> str | None:
    if keys.answers or not subject.reply_prefixed or not subject.normalized:
        return None
    if parsed.from_ is None:
        return None
    candidates = thread_rows.find_subject_candidates(
        tx,
        identity_id,
        subject.normalized,
        active_since=received_at - window_ms,
        started_by=received_at,
    )
    # The sender must have taken part: two customers who both answer "Re: Your order"
    # without references are two conversations, and a reply to one must never reach
    # the other.
    for thread in candidates:
        if parsed.from_.address in thread.participant_addresses:
            return thread.id
    return None


def _find_parent(tx: Tx, identity_id: str, keys: ThreadKeys) -> int | None:
    stored = thread_rows.first_stored(tx, identity_id, keys.parent_candidates)
    for identifier in keys.parent_candidates:
        if identifier in stored:
            return stored[identifier]
    return None


def record_in_thread(
    tx: Tx,
    placement: ThreadPlacement | str,
    *,
    message_rowid: int,
    direction: str,
    read: bool,
    received_at: int,
    participants: Sequence[Mailbox],
    now: int,
) -> None:
    """Count the inserted message in its conversation and adopt replies that came first.

    Updates message_count, unread_count, first_at/last_at, last_inbound_at or
    last_outbound_at and participants (at most 50). Given the placement (rather than
    its thread id), replies stored before this message get it as their parent.
    """
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {_DIRECTIONS}, not {direction!r}")
    thread_id = placement.thread_id if isinstance(placement, ThreadPlacement) else placement
    current = thread_rows.get(tx, thread_id)
    if current is None:
        raise ValueError(f"no thread {thread_id}")
    identity_id = current.identity_id
    survivor_id = thread_rows.resolve(tx, identity_id, thread_id) or thread_id
    locked = thread_rows.lock(tx, identity_id, [survivor_id])
    if not locked:
        raise ValueError(f"no thread {survivor_id}")
    thread = locked[0]
    empty = thread.message_count == 0
    thread_rows.update_activity(
        tx,
        thread.id,
        add_messages=1,
        add_unread=0 if read else 1,
        first_at=received_at if empty else min(thread.first_at, received_at),
        last_at=received_at if empty else max(thread.last_at, received_at),
        last_inbound_at=_later(thread.last_inbound_at, received_at)
        if direction == "inbound"
        else thread.last_inbound_at,
        last_outbound_at=_later(thread.last_outbound_at, received_at)
        if direction == "outbound"
        else thread.last_outbound_at,
        participants=thread_rows.merge_participants(
            thread.participants, (m.as_json() for m in participants)
        ),
        now=now,
    )
    if isinstance(placement, ThreadPlacement) and placement.awaited_identifier:
        _adopt_replies(tx, identity_id, thread.id, placement.awaited_identifier, message_rowid)


def _later(current: int | None, at: int) -> int:
    return at if current is None else max(current, at)


def _adopt_replies(
    tx: Tx, identity_id: str, thread_id: str, identifier: str, message_rowid: int
) -> None:
    """Give replies stored before their parent that parent, by the same rule as at
    placement: each reply is re-judged on all it names, so a nearer ancestor stored
    earlier keeps its place, and a link that would close a cycle (broken mail whose
    messages answer each other) is not written."""
    for reply in thread_rows.replies_naming(
        tx, identity_id, thread_id, identifier, exclude_rowid=message_rowid
    ):
        if reply.parent_rowid == message_rowid:
            continue
        keys = thread_keys(reply.rfc_message_id, reply.in_reply_to, reply.references)
        stored = thread_rows.first_stored(
            tx, identity_id, keys.parent_candidates, exclude_rowid=reply.rowid
        )
        best = next((stored[i] for i in keys.parent_candidates if i in stored), None)
        if best != message_rowid:
            continue
        if thread_rows.ancestor_chain_contains(tx, message_rowid, reply.rowid):
            continue
        thread_rows.set_parent(tx, reply.rowid, message_rowid)

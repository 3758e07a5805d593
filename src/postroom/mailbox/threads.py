"""Conversations of an identity: list, read with their messages in thread order, change.

A conversation folded into another (``merged_into_thread_id`` set) is never listed; its
id still works for reading and changing, and names the survivor (docs/threading.md).

Changes apply to every message of the conversation and keep the state rule of
:mod:`postroom.mailbox.messages`: ``archived`` is set on the conversation and on each
of its messages, ``read`` marks each message and recounts ``unread_count``, labels are
added to or removed from each message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postroom.errors import NotFound
from postroom.mailbox.messages import MailChange, MessageSummary, Person, summaries
from postroom.store import messages as message_rows
from postroom.store import threads as thread_rows
from postroom.store.db import Tx
from postroom.store.threads import Thread, ThreadFilter
from postroom.tenancy import audit

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "MAX_THREAD_MESSAGES",
    "ThreadDetail",
    "ThreadView",
    "find",
    "get_thread",
    "list_threads",
    "update_thread",
    "views",
]

# The most messages one read of a conversation returns (oldest first).
MAX_THREAD_MESSAGES = 1000


@dataclass(frozen=True)
class ThreadView:
    id: str
    identity_id: str
    subject: str
    message_count: int
    unread_count: int
    participants: tuple[Person, ...]
    first_at: int
    last_at: int
    archived: bool
    labels: tuple[str, ...]
    snippet: str | None


@dataclass(frozen=True)
class ThreadDetail:
    thread: ThreadView
    messages: tuple[MessageSummary, ...]
    truncated: bool


def find(tx: Tx, thread_id: str) -> Thread | None:
    """The conversation, following a fold to its survivor; None when there is none."""
    if "\x00" in thread_id or len(thread_id) > 200:
        return None
    row = thread_rows.get(tx, thread_id)
    if row is None:
        return None
    if row.merged_into_thread_id is None:
        return row
    survivor = thread_rows.resolve(tx, row.identity_id, row.id)
    return None if survivor is None else thread_rows.get(tx, survivor)


def views(tx: Tx, threads: Sequence[Thread]) -> list[ThreadView]:
    ids = [t.id for t in threads]
    labels = thread_rows.labels_of_threads(tx, ids)
    ends = thread_rows.ends_of_threads(tx, ids)
    out = []
    for t in threads:
        end = ends.get(t.id)
        subject = end.first_subject if end is not None and end.first_subject else t.subject
        out.append(
            ThreadView(
                id=t.id,
                identity_id=t.identity_id,
                subject=subject,
                message_count=t.message_count,
                unread_count=t.unread_count,
                participants=tuple(
                    Person(str(p["address"]), p["name"] if isinstance(p.get("name"), str) else None)
                    for p in t.participants
                    if isinstance(p, dict) and p.get("address")
                ),
                first_at=t.first_at,
                last_at=t.last_at,
                archived=t.archived,
                labels=tuple(labels.get(t.id, [])),
                snippet=end.latest_snippet if end is not None else None,
            )
        )
    return out


def list_threads(
    tx: Tx, f: ThreadFilter, after: tuple[int, str] | None, limit: int
) -> list[ThreadView]:
    return views(tx, thread_rows.list_page(tx, f, after, limit))


def get_thread(tx: Tx, thread: Thread) -> ThreadDetail:
    rows = message_rows.thread_messages(tx, thread.id, MAX_THREAD_MESSAGES + 1)
    return ThreadDetail(
        thread=views(tx, [thread])[0],
        messages=tuple(summaries(tx, rows[:MAX_THREAD_MESSAGES])),
        truncated=len(rows) > MAX_THREAD_MESSAGES,
    )


def update_thread(app: App, thread: Thread, change: MailChange, *, actor_key_id: str) -> str:
    """Apply ``change`` to the conversation and all of its messages; returns the id of
    the conversation changed (a fold meanwhile moves the change to the survivor)."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        thread_id = thread.id
        for _ in range(5):
            locked = thread_rows.lock(tx, thread.identity_id, [thread_id])
            if not locked:
                raise NotFound(f"no thread {thread.id!r}", code="thread_not_found")
            if locked[0].merged_into_thread_id is None:
                break
            thread_id = locked[0].merged_into_thread_id
        message_rows.set_thread_state(tx, thread_id, read=change.read, archived=change.archived)
        if change.archived is not None:
            thread_rows.set_archived(tx, thread_id, change.archived, now)
        if change.read is not None:
            thread_rows.recount_unread(tx, thread_id, now)
        if change.labels:
            message_rows.add_thread_labels(tx, thread_id, change.labels.add)
            message_rows.remove_thread_labels(tx, thread_id, change.labels.remove)
        audit.record(
            app,
            tx,
            action="thread.update",
            tenant_id=thread.tenant_id,
            target_type="thread",
            target_id=thread_id,
            actor_key_id=actor_key_id,
            details={
                "identity_id": thread.identity_id,
                "fields": change.fields(),
                "messages": message_rows.count_in_thread(tx, thread_id),
                "labels_added": len(change.labels.add) if change.labels else 0,
                "labels_removed": len(change.labels.remove) if change.labels else 0,
            },
        )
    return thread_id

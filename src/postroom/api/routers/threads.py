"""Threads (conversations): list an inbox's threads, read one with its messages in
thread order, archive, label or mark one read.

Reach is the owning identity's, as for messages: out of reach answers 404
``thread_not_found``. A thread folded into another resolves to the survivor.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from postroom.api.core import Caller, Principal, app_of, endpoint, paginate
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.mail import MailUpdate, ThreadDetailOut, ThreadOut
from postroom.api.models.query import Since, Until
from postroom.api.routers.messages import (
    LabelQuery,
    identity_reached,
    mail_change,
    ms_of,
    position_of,
    sees_identity,
)
from postroom.errors import InvalidInput, NotFound
from postroom.mailbox import threads as mailbox
from postroom.store.db import Tx
from postroom.store.threads import Thread, ThreadFilter

router = APIRouter(tags=["threads"])


def thread_in_reach(tx: Tx, caller: Principal, thread_id: str) -> Thread:
    thread = mailbox.find(tx, thread_id)
    if thread is None or not sees_identity(tx, caller, thread.identity_id):
        raise NotFound(f"no thread {thread_id[:80]!r}", code="thread_not_found")
    return thread


def _participant(address: str | None) -> str | None:
    if address is None:
        return None
    address = address.strip().lower()
    if not address or any(ord(c) < 0x20 or ord(c) == 0x7F for c in address):
        raise InvalidInput("participant must be an email address", code="invalid_participant")
    return address


@endpoint(router, "threads.list", response_model=Page[ThreadOut])
def list_threads(
    identity_id: str,
    request: Request,
    caller: Caller,
    label: LabelQuery = None,
    unread: Annotated[
        bool | None, Query(description="Only threads with (true) or without unread mail.")
    ] = None,
    archived: Annotated[
        bool, Query(description="Archived threads (true) or the inbox (false, the default).")
    ] = False,
    participant: Annotated[
        str | None, Query(max_length=320, description="Only threads this address took part in.")
    ] = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[ThreadOut]:
    app = app_of(request)
    after = position_of(request, cursor)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        views = mailbox.list_threads(
            tx,
            ThreadFilter(
                identity_id=identity.id,
                label=label,
                unread=unread,
                archived=archived,
                participant=_participant(participant),
                since=ms_of(since),
                until=ms_of(until),
            ),
            after,
            limit + 1,
        )
    page, next_cursor = paginate(request, views, limit, lambda t: [t.last_at, t.id])
    return Page[ThreadOut](data=[ThreadOut.of(t) for t in page], next_cursor=next_cursor)


@endpoint(router, "threads.get", response_model=ThreadDetailOut)
def get_thread(thread_id: str, request: Request, caller: Caller) -> ThreadDetailOut:
    with app_of(request).db.read() as tx:
        thread = thread_in_reach(tx, caller, thread_id)
        return ThreadDetailOut.of_detail(mailbox.get_thread(tx, thread))


@endpoint(router, "threads.update", response_model=ThreadOut)
def update_thread(thread_id: str, body: MailUpdate, request: Request, caller: Caller) -> ThreadOut:
    app = app_of(request)
    change = mail_change(body)
    with app.db.read() as tx:
        thread = thread_in_reach(tx, caller, thread_id)
    changed = mailbox.update_thread(app, thread, change, actor_key_id=caller.key_id)
    with app.db.read() as tx:
        current = mailbox.find(tx, changed)
        if current is None:
            raise NotFound(f"no thread {thread_id[:80]!r}", code="thread_not_found")
        return ThreadOut.of(mailbox.views(tx, [current])[0])

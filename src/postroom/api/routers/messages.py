"""Messages: list an inbox's mail, read one message, change it (read, archived, labels),
download the raw MIME and attachments.

Reach: a message belongs to an identity; the key must reach that identity (identity
keys: only their own; tenant keys: their tenant's; partner keys: their tenants';
platform keys: all). Anything else answers 404 ``message_not_found`` like a message
that does not exist.
"""

from __future__ import annotations

import unicodedata
import urllib.parse
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from postroom.api.core import (
    Caller,
    Principal,
    app_of,
    decode_cursor,
    endpoint,
    identity_in_reach,
    paginate,
)
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.mail import MailUpdate, MessageOut, MessageSummaryOut
from postroom.api.models.query import Since, Until, rfc3339_ms
from postroom.errors import NotFound
from postroom.mailbox import LABEL_PATTERN, LabelChange
from postroom.mailbox import messages as mailbox
from postroom.store.db import Tx
from postroom.store.messages import MessageFilter
from postroom.store.tenancy import Identity

router = APIRouter(tags=["messages"])

LabelQuery = Annotated[
    str | None, Query(pattern=LABEL_PATTERN, description="Only mail carrying this label.")
]


# --- helpers the thread and search routes share -------------------------------------------


def ms_of(moment: str | None) -> int | None:
    """A validated RFC 3339 ``since``/``until`` as Unix milliseconds."""
    return None if moment is None else rfc3339_ms(moment)


def identity_reached(tx: Tx, caller: Principal, identity_id: str) -> Identity:
    """``identity_in_reach`` for a path parameter, also for ids no database could hold."""
    if "\x00" in identity_id or len(identity_id) > 200:
        raise NotFound(f"no identity {identity_id[:80]!r}", code="identity_not_found")
    return identity_in_reach(tx, caller, identity_id)


def sees_identity(tx: Tx, caller: Principal, identity_id: str) -> bool:
    """Whether the key reaches the identity that owns a thread or a message."""
    try:
        identity_reached(tx, caller, identity_id)
    except NotFound:
        return False
    return True


def position_of(request: Request, cursor: str | None) -> tuple[int, str] | None:
    """A ``(time, id)`` list position from a cursor."""
    position = decode_cursor(request, cursor, (int, str))
    return None if position is None else (position[0], position[1])


def mail_change(body: MailUpdate) -> mailbox.MailChange:
    return mailbox.MailChange(
        read=body.read,
        archived=body.archived,
        labels=LabelChange(body.labels_add, body.labels_remove),
    )


def message_in_reach(tx: Tx, caller: Principal, message_id: str) -> mailbox.Owner:
    owner = mailbox.find(tx, message_id)
    if owner is None or not sees_identity(tx, caller, owner.identity_id):
        raise NotFound(f"no message {message_id[:80]!r}", code="message_not_found")
    return owner


# --- download headers ---------------------------------------------------------------------

# Types a browser would run or render as a document: served as bytes only.
_ACTIVE_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "text/xsl",
        "application/xslt+xml",
        "text/javascript",
        "application/javascript",
        "application/x-javascript",
        "text/ecmascript",
        "application/ecmascript",
        "application/x-shockwave-flash",
        "multipart/x-mixed-replace",
        "text/cache-manifest",
        "application/mathml+xml",
        "text/vtt",
    }
)
_TOKEN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789!#$&^_.+-")


def served_type(sniffed: str | None, declared: str | None) -> str:
    """The Content-Type an attachment is served with: the sniffed type when known, else
    the declared one; anything a browser could render as active content (HTML, SVG,
    XML, scripts) or that is not a plain ``type/subtype`` becomes
    ``application/octet-stream``."""
    chosen = (sniffed or declared or "").strip().lower()
    kind, slash, sub = chosen.partition("/")
    if (
        not slash
        or not kind
        or not sub
        or not set(kind) <= _TOKEN
        or not set(sub) <= _TOKEN
        or chosen in _ACTIVE_TYPES
        or sub.endswith(("+xml", "+html"))
        or "html" in sub
        or "script" in sub
    ):
        return "application/octet-stream"
    return chosen


def content_disposition(filename: str | None, fallback: str) -> str:
    """``attachment`` with a quoted ASCII ``filename`` and an RFC 5987 ``filename*``:
    path separators, control characters, quotes and backslashes never get through."""
    name = unicodedata.normalize("NFC", filename or "")
    name = "".join(c for c in name if not unicodedata.category(c).startswith("C"))
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = name.replace('"', "").strip(" .")[:255] or fallback
    plain = "".join(c if " " <= c <= "~" and c not in '"\\%;' else "_" for c in name)
    encoded = urllib.parse.quote(name, safe="")
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{encoded}"


_BINARY = {"schema": {"type": "string", "format": "binary"}}


# --- routes -----------------------------------------------------------------------------


@endpoint(router, "messages.list", response_model=Page[MessageSummaryOut])
def list_messages(
    identity_id: str,
    request: Request,
    caller: Caller,
    label: LabelQuery = None,
    unread: Annotated[bool | None, Query(description="Only unread (true) or read.")] = None,
    thread_id: Annotated[
        str | None, Query(max_length=200, description="Only this thread's messages.")
    ] = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[MessageSummaryOut]:
    app = app_of(request)
    after = position_of(request, cursor)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        rows = mailbox.list_messages(
            tx,
            MessageFilter(
                identity_id=identity.id,
                label=label,
                unread=unread,
                thread_id=thread_id,
                since=ms_of(since),
                until=ms_of(until),
            ),
            after,
            limit + 1,
        )
    page, next_cursor = paginate(request, rows, limit, lambda m: [m.received_at, m.id])
    return Page[MessageSummaryOut](
        data=[MessageSummaryOut.of(m) for m in page], next_cursor=next_cursor
    )


@endpoint(router, "messages.get", response_model=MessageOut)
def get_message(message_id: str, request: Request, caller: Caller) -> MessageOut:
    with app_of(request).db.read() as tx:
        owner = message_in_reach(tx, caller, message_id)
        return MessageOut.of_message(mailbox.get_message(tx, owner.id))


@endpoint(router, "messages.update", response_model=MessageOut)
def update_message(
    message_id: str, body: MailUpdate, request: Request, caller: Caller
) -> MessageOut:
    app = app_of(request)
    change = mail_change(body)
    with app.db.read() as tx:
        owner = message_in_reach(tx, caller, message_id)
    mailbox.update_message(app, owner, change, actor_key_id=caller.key_id)
    if body.read is not None:
        # A message mirrored from IMAP: the owner's change goes to the server too
        # (recorded first, carried out by a job; docs/imap-sync.md).
        from postroom.sync import mutations

        mutations.record_if_synced(
            app,
            owner.id,
            "seen" if body.read else "unseen",
            requester_identity=getattr(request.state, "request_id", None),
        )
    with app.db.read() as tx:
        return MessageOut.of_message(mailbox.get_message(tx, owner.id))


@endpoint(
    router,
    "messages.raw",
    response_class=StreamingResponse,
    response_model=None,
    responses={
        200: {"description": "The message as received.", "content": {"message/rfc822": _BINARY}}
    },
)
def raw_message(message_id: str, request: Request, caller: Caller) -> StreamingResponse:
    app = app_of(request)
    with app.db.read() as tx:
        owner = message_in_reach(tx, caller, message_id)
    chunks, _size = mailbox.open_raw(app, owner)
    return StreamingResponse(
        chunks,
        media_type="message/rfc822",
        headers={
            "Content-Disposition": content_disposition(f"{owner.id}.eml", "message.eml"),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox",
        },
    )


@endpoint(
    router,
    "messages.attachment",
    response_class=StreamingResponse,
    response_model=None,
    responses={200: {"description": "The attachment's bytes.", "content": {"*/*": _BINARY}}},
)
def download_attachment(
    message_id: str, attachment_id: str, request: Request, caller: Caller
) -> StreamingResponse:
    app = app_of(request)
    with app.db.read() as tx:
        owner = message_in_reach(tx, caller, message_id)
        row = mailbox.find_attachment(tx, owner, attachment_id)
    download = mailbox.attachment_download(app, owner, row)
    attachment = download.attachment
    # Content-Type is set as a header so no charset is claimed for text the sender
    # may have written in another one.
    headers: dict[str, Any] = {
        "Content-Type": served_type(attachment.sniffed_type, attachment.content_type),
        "Content-Disposition": content_disposition(attachment.filename, attachment.id),
        "Content-Length": str(download.size),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
    }
    return StreamingResponse(download.chunks, headers=headers)

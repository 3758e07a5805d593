"""Messages of an identity: list, read in full, change (read, archived, labels), and the
bytes that were received — the raw MIME and each attachment, re-extracted from it
(docs/adr/0006).

The state rule shared with :mod:`postroom.mailbox.threads`: a conversation's
``unread_count`` is the number of its messages not read, and a conversation is archived
exactly when none of its messages is left unarchived. Every change here keeps both true
in the transaction that makes it, with the conversation's row locked first so an arrival
storing into it at the same time queues behind the change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.errors import BlobNotFound, NotFound
from postroom.mail.parse import extract_part, iter_part_bytes
from postroom.mailbox import LabelChange
from postroom.store import messages as message_rows
from postroom.store import threads as thread_rows
from postroom.store.db import Row, Tx
from postroom.tenancy import audit

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "RAW_CHUNK",
    "Attachment",
    "Download",
    "Envelope",
    "MailChange",
    "Message",
    "MessageSummary",
    "Owner",
    "Person",
    "Ref",
    "attachment_download",
    "find",
    "find_attachment",
    "get_message",
    "list_messages",
    "open_raw",
    "summaries",
    "update_message",
]

RAW_CHUNK = 64 * 1024
# How many times a change follows its message into the conversation a concurrent merge
# moved it to before giving up.
_FOLLOW_MERGES = 5


@dataclass(frozen=True)
class Person:
    address: str
    name: str | None


@dataclass(frozen=True)
class MessageSummary:
    """A message as lists and conversations show it (no bodies)."""

    id: str
    identity_id: str
    thread_id: str
    parent_id: str | None
    direction: str
    status: str
    kind: str
    sender: Person | None
    to: tuple[Person, ...]
    cc: tuple[Person, ...]
    subject: str | None
    snippet: str | None
    sent_at: int | None
    received_at: int
    read: bool
    archived: bool
    labels: tuple[str, ...]
    flags: tuple[str, ...]
    attachment_count: int


@dataclass(frozen=True)
class Attachment:
    id: str
    filename: str | None
    content_type: str
    sniffed_type: str | None
    size: int
    disposition: str | None
    content_id: str | None
    risk: str | None


@dataclass(frozen=True)
class Ref:
    kind: str
    value: str
    source: str


@dataclass(frozen=True)
class Envelope:
    mail_from: str | None
    rcpt_to: tuple[str, ...]
    client_ip: str | None
    helo: str | None
    tls: dict[str, Any] | None


@dataclass(frozen=True)
class Message:
    """Everything the API shows of one message."""

    summary: MessageSummary
    tenant_id: str
    source: str
    reply_to: tuple[Person, ...]
    text: str | None
    extracted_text: str | None
    html: str | None
    attachments: tuple[Attachment, ...]
    refs: tuple[Ref, ...]
    verdict: str | None
    auth: dict[str, Any] | None
    spam_score: float | None
    known_sender: bool | None
    quarantine_reason: str | None
    rfc_message_id: str | None
    in_reply_to: str | None
    references: tuple[str, ...]
    delivered_to: str | None
    envelope: Envelope | None
    raw_size: int | None


@dataclass(frozen=True)
class Owner:
    """Who a message belongs to: enough for a reach check and a change."""

    id: str
    rowid: int
    identity_id: str
    tenant_id: str
    thread_id: str
    raw_blob_key: str | None
    raw_size: int | None


@dataclass(frozen=True)
class MailChange:
    """A change to a message or to every message of a conversation; None keeps."""

    read: bool | None = None
    archived: bool | None = None
    labels: LabelChange | None = None

    def fields(self) -> list[str]:
        named = [("read", self.read), ("archived", self.archived)]
        out = [name for name, value in named if value is not None]
        if self.labels:
            out.append("labels")
        return out


# --- decoding stored columns ------------------------------------------------------------


def _loads(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def _people(text: str | None) -> tuple[Person, ...]:
    found = []
    for item in _loads(text, []):
        if isinstance(item, dict) and isinstance(item.get("address"), str):
            name = item.get("name")
            found.append(Person(item["address"], name if isinstance(name, str) else None))
    return tuple(found)


def _strings(text: str | None) -> tuple[str, ...]:
    return tuple(x for x in _loads(text, []) if isinstance(x, str))


def _envelope(text: str | None) -> Envelope | None:
    data = _loads(text, None)
    if not isinstance(data, dict):
        return None
    tls = data.get("tls")
    rcpts = data.get("rcpt_to")
    return Envelope(
        mail_from=data.get("mail_from") if isinstance(data.get("mail_from"), str) else None,
        rcpt_to=tuple(r for r in rcpts if isinstance(r, str)) if isinstance(rcpts, list) else (),
        client_ip=data.get("client_ip") if isinstance(data.get("client_ip"), str) else None,
        helo=data.get("helo") if isinstance(data.get("helo"), str) else None,
        tls=tls if isinstance(tls, dict) else None,
    )


def _summary(row: Row, labels: Sequence[str], attachment_count: int) -> MessageSummary:
    sender = Person(row["from_address"], row["from_name"]) if row.get("from_address") else None
    return MessageSummary(
        id=row["id"],
        identity_id=row["identity_id"],
        thread_id=row["thread_id"],
        parent_id=row.get("parent_id"),
        direction=row["direction"],
        status=row["status"],
        kind=row["kind"],
        sender=sender,
        to=_people(row.get("to_json")),
        cc=_people(row.get("cc_json")),
        subject=row.get("subject"),
        snippet=row.get("snippet"),
        sent_at=row.get("sent_at"),
        received_at=int(row["received_at"]),
        read=bool(row["read"]),
        archived=bool(row["archived"]),
        labels=tuple(labels),
        flags=_strings(row.get("flags_json")),
        attachment_count=attachment_count,
    )


def summaries(tx: Tx, rows: Sequence[Row]) -> list[MessageSummary]:
    """Summary rows (``SUMMARY_COLUMNS``) with their labels and attachment counts."""
    rowids = [int(r["rowid"]) for r in rows]
    labels = message_rows.labels_for(tx, rowids)
    counts = message_rows.attachment_counts(tx, rowids)
    return [
        _summary(r, labels.get(int(r["rowid"]), []), counts.get(int(r["rowid"]), 0)) for r in rows
    ]


# --- reading --------------------------------------------------------------------------


def find(tx: Tx, message_id: str) -> Owner | None:
    """The message's owner, or None (also for ids no database could hold)."""
    if "\x00" in message_id or len(message_id) > 200:
        return None
    row = message_rows.owner_of(tx, message_id)
    if row is None:
        return None
    return Owner(
        id=row["id"],
        rowid=int(row["rowid"]),
        identity_id=row["identity_id"],
        tenant_id=row["tenant_id"],
        thread_id=row["thread_id"],
        raw_blob_key=row["raw_blob_key"],
        raw_size=row["raw_size"],
    )


def list_messages(
    tx: Tx, f: message_rows.MessageFilter, after: tuple[int, str] | None, limit: int
) -> list[MessageSummary]:
    """One identity's messages, newest first. A ``thread_id`` filter naming a folded
    conversation reads its survivor; one naming no conversation of the identity
    matches nothing."""
    if f.thread_id is not None:
        survivor = None
        if "\x00" not in f.thread_id and len(f.thread_id) <= 200:
            survivor = thread_rows.resolve(tx, f.identity_id, f.thread_id)
        if survivor is None:
            return []
        f = message_rows.MessageFilter(
            identity_id=f.identity_id,
            label=f.label,
            unread=f.unread,
            thread_id=survivor,
            since=f.since,
            until=f.until,
        )
    return summaries(tx, message_rows.list_page(tx, f, after, limit))


def get_message(tx: Tx, message_id: str) -> Message:
    row = message_rows.get_full(tx, message_id)
    if row is None:
        raise NotFound(f"no message {message_id!r}", code="message_not_found")
    rowid = int(row["rowid"])
    attachments = tuple(
        Attachment(
            id=a["id"],
            filename=a["filename"],
            content_type=a["content_type"],
            sniffed_type=a["sniffed_type"],
            size=int(a["size"]),
            disposition=a["disposition"],
            content_id=a["content_id"],
            risk=a["risk"],
        )
        for a in message_rows.attachments_of(tx, rowid)
    )
    auth = _loads(row.get("auth_json"), None)
    known = row.get("known_sender")
    return Message(
        summary=_summary(row, message_rows.labels_of(tx, rowid), len(attachments)),
        tenant_id=row["tenant_id"],
        source=row["source"],
        reply_to=_people(row.get("reply_to_json")),
        text=row.get("text"),
        extracted_text=row.get("extracted_text"),
        html=row.get("html_sanitized"),
        attachments=attachments,
        refs=tuple(
            Ref(r["kind"], r["value"], r["source"]) for r in message_rows.refs_of(tx, rowid)
        ),
        verdict=row.get("verdict"),
        auth=auth if isinstance(auth, dict) else None,
        spam_score=None if row.get("spam_score") is None else float(row["spam_score"]),
        known_sender=None if known is None else bool(known),
        quarantine_reason=row.get("quarantine_reason"),
        rfc_message_id=row.get("rfc_message_id"),
        in_reply_to=row.get("in_reply_to"),
        references=_strings(row.get("references_json")),
        delivered_to=row.get("delivered_to"),
        envelope=_envelope(row.get("envelope_json")),
        raw_size=row.get("raw_size"),
    )


# --- changing -------------------------------------------------------------------------


def _lock_thread_of(tx: Tx, owner: Owner) -> str:
    """Lock the conversation the message is in now (a merge may have moved it)."""
    thread_id = owner.thread_id
    for _ in range(_FOLLOW_MERGES):
        thread_rows.lock(tx, owner.identity_id, [thread_id])
        current = message_rows.thread_of_message(tx, owner.rowid)
        if current is None:
            raise NotFound(f"no message {owner.id!r}", code="message_not_found")
        if current == thread_id:
            return thread_id
        thread_id = current
    return thread_id


def update_message(app: App, owner: Owner, change: MailChange, *, actor_key_id: str) -> None:
    """Apply ``change`` to one message and keep its conversation's counters right."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        thread_id = _lock_thread_of(tx, owner)
        message_rows.set_state(tx, owner.rowid, read=change.read, archived=change.archived)
        if change.labels:
            message_rows.add_labels(tx, owner.rowid, change.labels.add)
            message_rows.remove_labels(tx, owner.rowid, change.labels.remove)
        if change.read is not None:
            thread_rows.recount_unread(tx, thread_id, now)
        if change.archived is not None:
            thread_rows.archive_when_all_archived(tx, thread_id, now)
        audit.record(
            app,
            tx,
            action="message.update",
            tenant_id=owner.tenant_id,
            target_type="message",
            target_id=owner.id,
            actor_key_id=actor_key_id,
            details={
                "identity_id": owner.identity_id,
                "thread_id": thread_id,
                "fields": change.fields(),
                "labels_added": len(change.labels.add) if change.labels else 0,
                "labels_removed": len(change.labels.remove) if change.labels else 0,
            },
        )


# --- bytes ----------------------------------------------------------------------------


def _raw_chunks(app: App, key: str) -> Iterator[bytes]:
    fh = app.blobs.open(key)
    try:
        while chunk := fh.read(RAW_CHUNK):
            yield chunk
    finally:
        fh.close()


def open_raw(app: App, owner: Owner) -> tuple[Iterator[bytes], int | None]:
    """The raw MIME as a stream of chunks (the blob is opened now, so a missing one is
    a NotFound here rather than a broken stream later) and its size when known."""
    if not owner.raw_blob_key:
        raise NotFound(f"message {owner.id!r} has no raw form", code="raw_not_found")
    try:
        chunks = _raw_chunks(app, owner.raw_blob_key)
        first = next(chunks, b"")
    except BlobNotFound:
        raise NotFound(f"message {owner.id!r} has no raw form", code="raw_not_found") from None

    def stream() -> Iterator[bytes]:
        if first:
            yield first
        yield from chunks

    return stream(), owner.raw_size


@dataclass(frozen=True)
class Download:
    """An attachment ready to send: its row and its decoded bytes as chunks."""

    attachment: Attachment
    size: int
    chunks: Iterator[bytes]


def _digest(chunks: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def find_attachment(tx: Tx, owner: Owner, attachment_id: str) -> Row:
    """The message's attachment row; NotFound ``attachment_not_found`` otherwise."""
    row = None
    if "\x00" not in attachment_id and len(attachment_id) <= 200:
        row = message_rows.get_attachment(tx, owner.rowid, attachment_id)
    if row is None:
        raise NotFound(f"no attachment {attachment_id[:80]!r}", code="attachment_not_found")
    return row


def attachment_download(app: App, owner: Owner, row: Row) -> Download:
    """An attachment's bytes (``row`` from :func:`find_attachment`), re-extracted from
    the raw message and checked against the digest taken at ingest; NotFound
    ``attachment_unavailable`` when its bytes cannot be found any more."""
    attachment = Attachment(
        id=row["id"],
        filename=row["filename"],
        content_type=row["content_type"],
        sniffed_type=row["sniffed_type"],
        size=int(row["size"]),
        disposition=row["disposition"],
        content_id=row["content_id"],
        risk=row["risk"],
    )
    unavailable = NotFound(
        f"the bytes of attachment {attachment.id!r} are no longer available",
        code="attachment_unavailable",
    )
    if row["blob_key"]:
        try:
            data = app.blobs.get(row["blob_key"])
        except BlobNotFound:
            raise unavailable from None
        return Download(attachment, len(data), iter((data,)))
    if not owner.raw_blob_key or not row["part_path"]:
        raise unavailable
    try:
        raw = app.blobs.get(owner.raw_blob_key)
    except BlobNotFound:
        raise unavailable from None
    # Check the digest in a first pass that keeps nothing, then stream a second pass:
    # memory stays near one chunk and the client never gets bytes that are not the
    # attachment's. A part the parser now numbers differently is found by its digest.
    first = iter_part_bytes(raw, row["part_path"])
    if first is not None and _digest(first) == row["sha256"]:
        again = iter_part_bytes(raw, row["part_path"])
        assert again is not None
        return Download(attachment, attachment.size, again)
    data, info = extract_part(raw, row["part_path"], expected_sha256=row["sha256"])
    if info is None:
        raise unavailable
    return Download(attachment, len(data), iter((data,)))

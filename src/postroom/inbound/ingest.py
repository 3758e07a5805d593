"""Ingestion: from raw bytes to a stored, threaded, indexed, announced message.

Two steps, so the expensive one can run anywhere (a worker thread, a process pool):

1. :func:`derive` — pure: parse the MIME, find refs and verification codes. No I/O.
2. :func:`store_arrival` — inside the caller's transaction: thread placement, the
   ``messages`` row, attachments, labels, refs, verifications, the contact book, the
   thread's counters, the lexical index and the ``message.received`` event. They commit
   together or not at all (seed 000).

The ``inbound.ingest`` job (one per message staged by the SMTP server) runs both and
deletes the staging row in the same transaction, so a job run twice stores once. The
importer (``inbound.importer``) runs :func:`derive` in a process pool and
:func:`store_arrival` in batches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.events import emit
from postroom.events.catalogue import MessageReceived
from postroom.ids import new_id
from postroom.inbound.accept import INGEST_JOB
from postroom.inbound.threading import place_message, record_in_thread
from postroom.jobs.handlers import JobContext
from postroom.mail.codes import Verification, extract_verifications
from postroom.mail.domains import organizational_domain
from postroom.mail.message import ParsedMessage
from postroom.mail.parse import parse_message
from postroom.mail.refs import Ref, extract_refs
from postroom.store import inbound as inbound_rows
from postroom.store import messages as message_rows
from postroom.store import search_index
from postroom.store.db import Tx
from postroom.store.inbound import StagedMessage

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "INGEST_JOB",
    "Arrival",
    "Derived",
    "StoredMessage",
    "derive",
    "handle_ingest",
    "ingest_staged",
    "store_arrival",
]

log = logging.getLogger("postroom.inbound")

VERIFICATION_TTL_MS = 24 * 3_600_000
SCAN_CHARS = 32_768


@dataclass(frozen=True)
class Arrival:
    """A message whose bytes are durable, and what is known of how it arrived."""

    message_id: str
    tenant_id: str
    identity_id: str
    raw_blob_key: str
    raw_sha256: str
    raw_size: int
    source: str
    envelope: dict[str, Any] | None
    delivered_to: str | None
    labels: tuple[str, ...]
    is_primary_recipient: bool
    received_at: int
    read: bool = False
    # The sent copy of an outbound message is stored through the same pipeline.
    direction: str = "inbound"
    status: str = "received"
    kind: str | None = None  # outbound: transactional | marketing | auto_reply

    @classmethod
    def from_staged(cls, staged: StagedMessage) -> Arrival:
        return cls(
            message_id=staged.id,
            tenant_id=staged.tenant_id,
            identity_id=staged.identity_id,
            raw_blob_key=staged.raw_blob_key,
            raw_sha256=staged.raw_sha256,
            raw_size=staged.raw_size,
            source=staged.source,
            envelope=staged.envelope,
            delivered_to=staged.delivered_to,
            labels=staged.labels,
            is_primary_recipient=staged.is_primary_recipient,
            received_at=staged.received_at,
        )


@dataclass(frozen=True)
class Derived:
    """Everything computed from the bytes alone (picklable, for process pools)."""

    parsed: ParsedMessage
    refs: tuple[Ref, ...]
    verifications: tuple[Verification, ...]
    sender_domain: str | None


@dataclass(frozen=True)
class StoredMessage:
    id: str
    rowid: int
    thread_id: str
    event_id: str | None  # message.received; None for an outbound copy


def derive(raw: bytes) -> Derived:
    parsed = parse_message(raw)
    # References and codes are looked for in the new text only (quoted text was the
    # earlier message's, whose refs that message carries) and within a bounded prefix:
    # a sign-in code or an order number sits near the top, not in the 200th kilobyte of
    # a patch.
    new_text = (parsed.extracted_text or parsed.text or "")[:SCAN_CHARS]
    refs = tuple(extract_refs(parsed.subject, new_text))
    codes = tuple(
        extract_verifications(
            parsed.subject, (parsed.text or "")[:SCAN_CHARS], (parsed.html or "")[: SCAN_CHARS * 4]
        )
    )
    sender = parsed.from_.domain if parsed.from_ is not None else None
    return Derived(parsed, refs, codes, organizational_domain(sender) if sender else None)


def _is_bcc(parsed: ParsedMessage, delivered_to: str | None) -> bool:
    """The recipient is in no visible header (seed 000 A10)."""
    if not delivered_to:
        return False
    local, _, domain = delivered_to.rpartition("@")
    base = f"{local.partition('+')[0]}@{domain}"
    visible = {m.address for m in (*parsed.to, *parsed.cc)}
    visible |= {f"{a.partition('@')[0].partition('+')[0]}@{a.rpartition('@')[2]}" for a in visible}
    return delivered_to not in visible and base not in visible


def store_arrival(tx: Tx, arrival: Arrival, derived: Derived, now: int) -> StoredMessage:
    """Store one message with everything that hangs on it, in the caller's transaction."""
    parsed = derived.parsed
    flags = set(parsed.flags)
    if not parsed.message_id_synthetic and message_rows.has_rfc_message_id(
        tx, arrival.identity_id, parsed.rfc_message_id
    ):
        flags.add("message_id_conflict")
    inbound = arrival.direction == "inbound"
    is_bcc = inbound and _is_bcc(parsed, arrival.delivered_to)
    if is_bcc:
        flags.add("bcc")
    placement = place_message(
        tx,
        identity_id=arrival.identity_id,
        tenant_id=arrival.tenant_id,
        parsed=parsed,
        received_at=arrival.received_at,
        now=now,
    )
    if placement.subject_join:
        flags.add("thread_join_unverified")
    rowid = message_rows.insert_message(
        tx,
        message_rows.NewMessage(
            id=arrival.message_id,
            identity_id=arrival.identity_id,
            tenant_id=arrival.tenant_id,
            thread_id=placement.thread_id,
            parent_rowid=placement.parent_rowid,
            direction=arrival.direction,
            status=arrival.status,
            source=arrival.source,
            rfc_message_id=parsed.rfc_message_id,
            message_id_synthetic=parsed.message_id_synthetic,
            in_reply_to=parsed.in_reply_to,
            references=parsed.references,
            raw_sha256=arrival.raw_sha256,
            raw_blob_key=arrival.raw_blob_key,
            raw_size=arrival.raw_size,
            envelope=arrival.envelope,
            from_address=parsed.from_.address if parsed.from_ else None,
            from_name=parsed.from_.name if parsed.from_ else None,
            sender_domain=derived.sender_domain,
            reply_to=[m.as_json() for m in parsed.reply_to],
            to=[m.as_json() for m in parsed.to],
            cc=[m.as_json() for m in parsed.cc],
            bcc=[m.as_json() for m in parsed.bcc],
            delivered_to=arrival.delivered_to,
            is_bcc=is_bcc,
            is_primary_recipient=arrival.is_primary_recipient,
            subject=parsed.subject,
            text=parsed.text,
            html_sanitized=parsed.html,
            extracted_text=parsed.extracted_text,
            snippet=parsed.snippet,
            sent_at=parsed.sent_at,
            received_at=arrival.received_at,
            kind=arrival.kind or parsed.kind,
            automated=parsed.automated,
            flags=sorted(flags),
            read=arrival.read,
            parser_version=parsed.parser_version,
            created_at=now,
        ),
    )
    message_rows.insert_attachments(
        tx,
        rowid,
        (
            {
                "id": new_id("att"),
                "filename": a.filename,
                "content_type": a.content_type,
                "sniffed_type": a.sniffed_type,
                "size": a.size,
                "sha256": a.sha256,
                "disposition": a.disposition,
                "content_id": a.content_id,
                "part_path": a.part_path,
                "blob_key": None,  # re-extracted from the raw message (docs/adr/0006)
                "text_status": "skipped",
                "risk": a.risk,
            }
            for a in parsed.attachments
        ),
    )
    message_rows.insert_labels(tx, rowid, arrival.labels)
    message_rows.insert_refs(tx, rowid, ((r.kind, r.value, r.source) for r in derived.refs))
    if inbound and derived.verifications:
        message_rows.insert_verifications(
            tx,
            rowid,
            identity_id=arrival.identity_id,
            items=((v.kind, v.value) for v in derived.verifications),
            sender_domain=derived.sender_domain or "",
            received_at=arrival.received_at,
            expires_at=arrival.received_at + VERIFICATION_TTL_MS,
        )
    contacts = [parsed.from_] if inbound else [*parsed.to, *parsed.cc, *parsed.bcc]
    for contact in {m.address: m for m in contacts if m is not None}.values():
        message_rows.upsert_contact(
            tx,
            identity_id=arrival.identity_id,
            address=contact.address,
            name=contact.name,
            inbound=inbound,
            thread_id=placement.thread_id,
            seen_at=arrival.received_at,
        )
    participants = [m for m in (parsed.from_, *parsed.to, *parsed.cc) if m is not None]
    record_in_thread(
        tx,
        placement,
        message_rowid=rowid,
        direction=arrival.direction,
        read=arrival.read,
        received_at=arrival.received_at,
        participants=participants,
        now=now,
    )
    search_index.index_message(
        tx,
        rowid,
        arrival.identity_id,
        search_index.SearchDocument.build(
            subject=parsed.subject,
            participants=[(m.name, m.address) for m in participants],
            body_new=parsed.extracted_text,
            body_full=parsed.text,
            attachment_names=[a.filename for a in parsed.attachments if a.filename],
            refs=[r.value for r in derived.refs],
        ),
    )
    if not inbound:
        return StoredMessage(arrival.message_id, rowid, placement.thread_id, None)
    # Validated against the catalogue's schema (docs/events.md) as it is built.
    received = MessageReceived.model_validate(
        {
            "message_id": arrival.message_id,
            "thread_id": placement.thread_id,
            "source": arrival.source,
            "kind": parsed.kind,
            "labels": sorted(arrival.labels),
            "attachment_count": len(parsed.attachments),
            "size": arrival.raw_size,
            "has_verification": bool(derived.verifications),
            "flags": sorted(flags),
        }
    )
    event = emit(
        tx, received, tenant_id=arrival.tenant_id, identity_id=arrival.identity_id, now=now
    )
    return StoredMessage(arrival.message_id, rowid, placement.thread_id, event.id)


def ingest_staged(app: App, message_id: str) -> StoredMessage | None:
    """Parse and store one staged message; None when it was already ingested."""
    with app.db.read() as tx:
        staged = inbound_rows.get_staged(tx, message_id)
    if staged is None:
        return None
    derived = derive(app.blobs.get(staged.raw_blob_key))
    with app.db.write() as tx:
        # Another attempt may have finished while this one parsed.
        if not inbound_rows.delete_staged(tx, message_id):
            return None
        stored = store_arrival(tx, Arrival.from_staged(staged), derived, app.clock.now_ms())
        # A delivery report or complaint about one of our sends is applied by a job
        # that commits with the message (docs/outbound.md, "Bounces").
        from postroom.outbound.bounces import BOUNCE_JOB, is_candidate

        if is_candidate(derived.parsed.kind, derived.parsed.automated, staged.delivered_to):
            app.queue.enqueue_in(
                tx,
                BOUNCE_JOB,
                stored.id,
                {"message_id": stored.id},
                tenant_id=staged.tenant_id,
                identity_id=staged.identity_id,
            )
        return stored


def handle_ingest(ctx: JobContext) -> None:
    """The ``inbound.ingest`` job: payload ``{"message_id": "msg_..."}``."""
    ingest_staged(ctx.app, str(ctx.payload["message_id"]))

"""Recording sends: send, reply, reply-all and forward become outbox records.

:func:`record_send` does, in order: check the inbox and the From address, build the
composition (replies and forwards from the stored original), compose the MIME once with
a freshly minted Message-ID, DKIM-sign it when the From domain has a key, write the sent
copy's raw bytes to the blob store, then in ONE transaction: the idempotency check, the
daily caps, the suppression check, the sent copy in the mailbox (thread joined, status
``queued``), its ``deliveries``, the outbox record with its recipients and MIME, and the
job that will attempt it (at ``send_at`` for a scheduled send).

The same authored request twice (same Idempotency-Key from the same key) leaves one
record carrying the message stored the first time: the unique requester index refuses
the second insert and the first record is answered (seed 003).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.ids import new_id
from postroom.outbound import compose as c
from postroom.outbound import policy
from postroom.outbound.dkim import sign as dkim_sign
from postroom.outbound.engine import SEND_JOB
from postroom.store import messages as message_rows
from postroom.store import outbox as rows
from postroom.store import tenancy as directory
from postroom.store.blobs import message_raw_key
from postroom.store.db import Tx
from postroom.tenancy.domains import dkim_private_key

if TYPE_CHECKING:
    from postroom.app import App

MAX_RECIPIENTS = 100
Operation = Literal["send", "reply", "reply_all", "forward"]


@dataclass(frozen=True)
class Requester:
    """Who asked: ``origin`` (api | draft | cli | system) and the text two requests are
    compared by (``key_id:idempotency_key``), or None for a request that is never a
    replay; ``principal`` is the key that asked (stored as a digest)."""

    origin: str
    identity: str | None
    principal: str | None = None


@dataclass(frozen=True)
class SendInput:
    to: tuple[c.Address, ...] = ()
    cc: tuple[c.Address, ...] = ()
    bcc: tuple[c.Address, ...] = ()
    reply_to: tuple[c.Address, ...] = ()
    from_address: str | None = None  # an alias of the inbox; default its primary address
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    attachments: tuple[c.OutgoingAttachment, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    labels: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    kind: Literal["transactional", "marketing", "auto_reply"] = "transactional"
    list_unsubscribe: tuple[str, ...] = ()
    send_at: int | None = None  # Unix ms
    send_at_zone: str | None = None  # IANA zone the author named the time in
    forward_mode: Literal["inline", "attachment"] = "inline"


@dataclass(frozen=True)
class OutboxRecipient:
    address: str
    role: str
    status: str
    reply_code: int | None
    enhanced_code: str | None
    answered_at: int | None


@dataclass(frozen=True)
class OutboxEntry:
    id: str
    identity_id: str
    tenant_id: str
    message_id: str
    operation: str
    kind: str
    stage: str
    state: str  # what a reader wants: scheduled | queued | sending | sent | refused | ...
    attempt_count: int
    recorded_at: int
    available_at: int
    due_at: int | None
    due_zone_id: str | None
    last_failure_code: str | None
    last_reply_code: int | None
    resolution: str | None
    resolved_at: int | None
    recipients: tuple[OutboxRecipient, ...]


def state_of(record: rows.Record, now: int) -> str:
    if record.stage == "recorded":
        if record.due_at is not None and record.attempt_count == 0 and record.available_at > now:
            return "scheduled"
        return "deferred" if record.attempt_count > 0 else "queued"
    if record.stage == "transmission_begun":
        return "uncertain" if record.uncertain else "sending"
    return record.stage


def entry(record: rows.Record, recipients: Sequence[rows.Recipient], now: int) -> OutboxEntry:
    return OutboxEntry(
        id=record.id,
        identity_id=record.identity_id,
        tenant_id=record.tenant_id,
        message_id=record.message_id,
        operation=record.operation,
        kind=record.kind,
        stage=record.stage,
        state=state_of(record, now),
        attempt_count=record.attempt_count,
        recorded_at=record.recorded_at,
        available_at=record.available_at,
        due_at=record.due_at,
        due_zone_id=record.due_zone_id,
        last_failure_code=record.last_failure_code,
        last_reply_code=record.last_reply_code,
        resolution=record.resolution,
        resolved_at=record.resolved_at,
        recipients=tuple(
            OutboxRecipient(
                r.address, r.role, r.status, r.last_reply_code, r.last_enhanced_code, r.answered_at
            )
            for r in recipients
        ),
    )


# --- the original of a reply or forward ---------------------------------------------


def _addresses(text: str | None) -> tuple[c.Address, ...]:
    items = json.loads(text or "[]")
    return tuple(
        c.Address(str(i["address"]), i.get("name") or None) for i in items if i.get("address")
    )


def load_original(app: App, identity_id: str, message_id: str) -> tuple[c.Original, bytes | None]:
    """The stored message a reply or forward is about (it must be the inbox's own)."""
    with app.db.read() as tx:
        row = message_rows.get_full(tx, message_id)
    if row is None or row["identity_id"] != identity_id:
        raise NotFound(f"no message {message_id} in this inbox", code="message_not_found")
    original = c.Original(
        rfc_message_id=None if row["message_id_synthetic"] else row["rfc_message_id"],
        references=tuple(json.loads(row["references_json"] or "[]")),
        from_=c.Address(row["from_address"], row["from_name"]) if row["from_address"] else None,
        reply_to=_addresses(row["reply_to_json"]),
        to=_addresses(row["to_json"]),
        cc=_addresses(row["cc_json"]),
        subject=row["subject"],
        sent_at_ms=row["sent_at"],
        text=row["text"],
        html=row["html_sanitized"],
    )
    raw = None
    if row["raw_blob_key"]:
        raw = app.blobs.get(row["raw_blob_key"])
    return original, raw


# --- recording -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Sender:
    tenant: directory.Tenant
    identity: directory.IdentityDetail
    from_address: directory.Address


def _sender(tx: Tx, identity_id: str, from_address: str | None) -> _Sender:
    detail = directory.get_identity_detail(tx, identity_id)
    if detail is None or detail.identity.status in ("deleting", "deleted"):
        raise NotFound(f"no inbox {identity_id}", code="identity_not_found")
    if detail.identity.status == "paused":
        raise Conflict("this inbox is paused and cannot send", code="identity_paused")
    tenant = directory.get_tenant(tx, detail.identity.tenant_id)
    assert tenant is not None
    if tenant.status != "active":
        raise Conflict("the inbox's tenant is not active", code="tenant_not_active")
    wanted = policy.canonical(from_address, "from") if from_address else detail.address
    address = directory.get_address(tx, wanted) if wanted else None
    if (
        address is None
        or address.identity_id != identity_id
        or address.status != "active"
        or (from_address is None and address.role != "primary")
    ):
        raise InvalidInput(
            "from must be the inbox's primary address or one of its active aliases",
            code="invalid_from",
            field="from",
        )
    return _Sender(tenant, detail, address)


def _due(send_at: int | None, zone: str | None, now: int) -> tuple[int | None, str | None]:
    if send_at is None:
        if zone is not None:
            raise InvalidInput("send_at_zone needs send_at", field="send_at_zone")
        return None, None
    if zone is not None:
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput(
                f"{zone[:64]!r} is not an IANA time zone", field="send_at_zone"
            ) from None
    if send_at > now + 366 * 86_400_000:
        raise InvalidInput("send_at is more than a year away", field="send_at")
    return max(send_at, now), zone or "UTC"


def _with_signature(sender: _Sender, inp: SendInput) -> SendInput:
    sig_text = sender.identity.signature_text
    sig_html = sender.identity.signature_html
    text = inp.text
    html = inp.html
    if sig_text and text is not None:
        text = f"{text.rstrip()}\n\n-- \n{sig_text}"
    if sig_html and html is not None:
        html = f"{html}<br><br>{sig_html}"
    return replace(inp, text=text, html=html)


def build_composition(
    app: App,
    sender: _Sender,
    inp: SendInput,
    operation: Operation,
    original: c.Original | None,
    original_raw: bytes | None,
) -> c.Composition:
    from_ = c.Address(sender.from_address.address, sender.identity.identity.display_name or None)
    to, cc = inp.to, inp.cc
    subject = inp.subject
    text, html = inp.text, inp.html
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    attached: bytes | None = None
    if original is not None and operation in ("reply", "reply_all"):
        if not to and not cc:
            with app.db.read() as tx:
                own = frozenset(
                    a.address.address
                    for a in directory.list_identity_addresses(tx, sender.identity.identity.id)
                )
            to, cc = c.reply_recipients(
                original, own_addresses=own, reply_all=operation == "reply_all"
            )
        subject = subject if subject is not None else c.reply_subject(original.subject)
        in_reply_to, references = c.thread_headers(original)
        if text is not None or html is None:
            text = f"{(text or '').rstrip()}\n\n{c.quote_text(original)}"
        if html is not None:
            html = f"{html}{c.quote_html(original)}"
    elif original is not None and operation == "forward":
        subject = subject if subject is not None else c.forward_subject(original.subject)
        if inp.forward_mode == "attachment":
            attached = original_raw
        else:
            text = f"{(text or '').rstrip()}\n\n{c.forward_text(original)}".lstrip("\n")
            if html is not None:
                html = f"{html}{c.quote_html(original)}"
    if text is None and html is None and not inp.attachments and attached is None:
        raise InvalidInput("a message needs text, html or an attachment", field="text")
    return c.Composition(
        from_=from_,
        to=to,
        cc=cc,
        bcc=inp.bcc,
        reply_to=inp.reply_to,
        subject=subject or "",
        text=text,
        html=html,
        attachments=inp.attachments,
        headers=inp.headers,
        in_reply_to=in_reply_to,
        references=references,
        kind=inp.kind,
        list_unsubscribe=inp.list_unsubscribe,
        attached_message=attached,
    )


def _recipients(comp: c.Composition) -> list[tuple[str, str]]:
    """(canonical address, role) in request order, each address once (first role wins)."""
    out: dict[str, str] = {}
    for role, group in (("to", comp.to), ("cc", comp.cc), ("bcc", comp.bcc)):
        for i, a in enumerate(group):
            normal = policy.canonical(a.address, f"{role}.{i}.address")
            out.setdefault(normal, role)
    if not out:
        raise InvalidInput("a message needs at least one recipient", field="to")
    if len(out) > MAX_RECIPIENTS:
        raise InvalidInput(f"at most {MAX_RECIPIENTS} recipients per message", field="to")
    return list(out.items())


def _mail_from(address: directory.Address, record_id: str) -> str:
    from postroom.mail.bounces import verp_address

    local, _, domain = address.address.rpartition("@")
    return verp_address(local, domain, record_id.partition("_")[2].lower()) or address.address


def record_send(
    app: App,
    identity_id: str,
    inp: SendInput,
    requester: Requester,
    *,
    operation: Operation = "send",
    source_message_id: str | None = None,
) -> OutboxEntry:
    # The parsing and storing stack, imported when a send is recorded (CLI start-up).
    from postroom.inbound.ingest import Arrival, derive, store_arrival

    now = app.clock.now_ms()
    if requester.identity is not None:
        with app.db.read() as tx:
            found = rows.find_by_requester(tx, identity_id, requester.origin, requester.identity)
            if found is not None:
                return entry(found, rows.recipients(tx, found.id), now)
    with app.db.read() as tx:
        sender = _sender(tx, identity_id, inp.from_address)
    original: c.Original | None = None
    original_raw: bytes | None = None
    if operation != "send":
        if source_message_id is None:
            raise InvalidInput(f"{operation} needs the message it answers")
        original, original_raw = load_original(app, identity_id, source_message_id)
    inp = _with_signature(sender, inp)
    due_at, due_zone = _due(inp.send_at, inp.send_at_zone, now)
    comp = build_composition(app, sender, inp, operation, original, original_raw)
    c.validate(comp)
    recipients = _recipients(comp)
    domain_name = sender.from_address.address.rpartition("@")[2]
    rfc_message_id = c.new_message_id(domain_name)
    mime = c.compose(comp, message_id=rfc_message_id, date_ms=now)
    key = dkim_private_key(app, sender.from_address.domain_id)
    if key is not None:
        selector, pem = key
        mime = dkim_sign(mime, domain=domain_name, selector=selector, private_key_pem=pem)
    if len(mime) > app.settings.outbound_max_message_bytes:
        raise InvalidInput(
            f"the composed message is {len(mime)} bytes; the limit is "
            f"{app.settings.outbound_max_message_bytes}",
            code="message_too_large",
            field="attachments",
        )
    derived = derive(mime)
    record_id = new_id("out")
    message_id = new_id("msg")
    tenant = sender.tenant
    blob_key = message_raw_key(tenant.id, identity_id, message_id)
    app.blobs.put(blob_key, mime)
    try:
        with app.db.write() as tx:
            if requester.identity is not None:
                found = rows.find_by_requester(
                    tx, identity_id, requester.origin, requester.identity
                )
                if found is not None:
                    app.blobs.delete(blob_key)
                    return entry(found, rows.recipients(tx, found.id), now)
            policy.take_send(tx, app, tenant.id, tenant.timezone, identity_id, now)
            blocked = policy.suppressed(tx, app, tenant.id, [a for a, _ in recipients], now)
            record = rows.Record(
                id=record_id,
                tenant_id=tenant.id,
                identity_id=identity_id,
                message_id=message_id,
                requester_origin=requester.origin,
                requester_identity=requester.identity or record_id,
                principal_fingerprint=None
                if requester.principal is None
                else hashlib.sha256(requester.principal.encode()).hexdigest()[:32],
                operation=operation,
                kind=inp.kind,
                stage="recorded",
                transport=app.settings.outbound_transport,
                mail_from=_mail_from(sender.from_address, record_id),
                rfc_message_id=rfc_message_id,
                mime_byte_length=len(mime),
                attempt_count=0,
                available_at=due_at or now,
                due_at=due_at,
                due_zone_id=due_zone,
                lease_owner=None,
                lease_expires_at=None,
                recorded_at=now,
                stage_changed_at=now,
                last_failure_code=None,
                last_reply_code=None,
                resolution=None,
                resolved_at=None,
            )
            all_blocked = all(a in blocked for a, _ in recipients)
            if all_blocked:
                record = replace(record, stage="refused", last_failure_code="all_suppressed")
            stored = store_arrival(
                tx,
                Arrival(
                    message_id=message_id,
                    tenant_id=tenant.id,
                    identity_id=identity_id,
                    raw_blob_key=blob_key,
                    raw_sha256=hashlib.sha256(mime).hexdigest(),
                    raw_size=len(mime),
                    source="api",
                    envelope={"mail_from": record.mail_from, "rcpt_to": [a for a, _ in recipients]},
                    delivered_to=None,
                    labels=tuple(inp.labels),
                    is_primary_recipient=True,
                    received_at=now,
                    read=True,
                    direction="outbound",
                    status="suppressed" if all_blocked else "queued",
                    kind=inp.kind,
                ),
                derived,
                now,
            )
            tx.execute(
                "UPDATE messages SET operation = %s, metadata_json = %s WHERE rowid = %s",
                (operation, json.dumps(inp.metadata, separators=(",", ":")), stored.rowid),
            )
            rows.insert_record(
                tx,
                record,
                [
                    rows.NewRecipient(a, role, "suppressed" if a in blocked else "pending")
                    for a, role in recipients
                ],
                mime,
            )
            rows.insert_deliveries(
                tx,
                stored.rowid,
                [(a, role, "suppressed" if a in blocked else "queued") for a, role in recipients],
                now,
            )
            if not all_blocked:
                app.queue.enqueue_in(
                    tx,
                    SEND_JOB,
                    f"{record_id}:0",
                    {"outgoing_email_id": record_id},
                    available_at=record.available_at,
                    tenant_id=tenant.id,
                    identity_id=identity_id,
                )
            return entry(record, rows.recipients(tx, record_id), now)
    except BaseException:
        with contextlib.suppress(Exception):  # an orphan blob loses nothing
            app.blobs.delete(blob_key)
        raise


# --- reading, cancelling, resolving ---------------------------------------------------


def get_entry(app: App, record_id: str) -> OutboxEntry:
    with app.db.read() as tx:
        record = rows.get(tx, record_id)
        if record is None:
            raise NotFound(f"no outbox entry {record_id}", code="outbox_entry_not_found")
        return entry(record, rows.recipients(tx, record_id), app.clock.now_ms())


def get_record(app: App, record_id: str) -> rows.Record:
    with app.db.read() as tx:
        record = rows.get(tx, record_id)
    if record is None:
        raise NotFound(f"no outbox entry {record_id}", code="outbox_entry_not_found")
    return record


def list_entries(
    app: App, f: rows.OutboxFilter, after: tuple[int, str] | None, limit: int
) -> list[OutboxEntry]:
    now = app.clock.now_ms()
    with app.db.read() as tx:
        records = rows.list_page(tx, f, after, limit)
        recips = rows.recipients_of(tx, [r.id for r in records])
    return [entry(r, recips[r.id], now) for r in records]


def cancel(app: App, record_id: str) -> OutboxEntry:
    """Withdraw a scheduled or queued send while nothing was transmitted for it."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        record = rows.get(tx, record_id)
        if record is None:
            raise NotFound(f"no outbox entry {record_id}", code="outbox_entry_not_found")
        if not rows.cancel(tx, record_id, now):
            raise Conflict(
                f"the send is {state_of(record, now)} and can no longer be cancelled",
                code="not_cancellable",
            )
        rows.set_message_status(tx, record.message_id, "canceled")
        tx.execute(
            "UPDATE deliveries SET status = 'canceled', updated_at = %s"
            " WHERE message_rowid = (SELECT rowid FROM messages WHERE id = %s)"
            " AND status = 'queued'",
            (now, record.message_id),
        )
        updated = rows.get(tx, record_id)
        assert updated is not None
        return entry(updated, rows.recipients(tx, record_id), now)


def resolve(app: App, record_id: str, resolution: str) -> OutboxEntry:
    """An operator's decision about a send whose outcome is unknown (code 28011)."""
    if resolution not in ("delivered", "not_delivered"):
        raise InvalidInput("resolution must be delivered or not_delivered", field="resolution")
    now = app.clock.now_ms()
    with app.db.write() as tx:
        record = rows.get(tx, record_id)
        if record is None:
            raise NotFound(f"no outbox entry {record_id}", code="outbox_entry_not_found")
        if not rows.resolve(tx, record_id, resolution, now):
            raise Conflict(
                f"the send is {state_of(record, now)}, not uncertain; only an uncertain send "
                "is resolved by hand",
                code="not_uncertain",
            )
        status = "delivered" if resolution == "delivered" else "failed"
        rows.set_message_status(tx, record.message_id, status)
        tx.execute(
            "UPDATE deliveries SET status = %s, updated_at = %s"
            " WHERE message_rowid = (SELECT rowid FROM messages WHERE id = %s)"
            " AND status = 'uncertain'",
            (status, now, record.message_id),
        )
        updated = rows.get(tx, record_id)
        assert updated is not None
        return entry(updated, rows.recipients(tx, record_id), now)


def utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def resolve_send_at(text: str, zone: str | None) -> int:
    """A send time as Unix ms. An RFC 3339 time with an offset is taken as given; a
    local wall time without one (``2027-03-28T09:00:00``) is read in ``zone`` with that
    day's offset, so nine in the morning stays nine on both sides of a daylight-saving
    change."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            "send_at must be an RFC 3339 time, or a local time with send_at_zone",
            field="send_at",
        ) from None
    if parsed.tzinfo is None:
        if zone is None:
            raise InvalidInput(
                "send_at without an offset needs send_at_zone (an IANA zone)", field="send_at"
            )
        try:
            tz = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput(
                f"{zone[:64]!r} is not an IANA time zone", field="send_at_zone"
            ) from None
        parsed = parsed.replace(tzinfo=tz)
    return int(parsed.timestamp() * 1000)

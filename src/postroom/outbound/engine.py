"""The delivery attempt: claim a send, talk SMTP, settle every recipient (seed 003).

One attempt of one record:

1. **claim** — one conditional statement takes the record at ``recorded`` when it is due
   and no live lease holds it, stamping the lease and counting the attempt;
2. per route (local recipients first, then the configured transport's groups):
   MAIL FROM, one RCPT TO per pending recipient; when at least one was accepted the
   record moves to ``transmission_begun`` **before** DATA — durably, in its own
   transaction — and only then is the body sent;
3. **settle** — in one transaction: every recipient's answer (accepted / refused / still
   pending with the deferring reply), the sent copy's ``deliveries``, its status, the
   events, suppressions for hard bounces, and the record's next stage:

   * DATA was sent and the connection broke before its reply → the outcome is
     unknown: the record stays at ``transmission_begun``, stamped ``28011``, event
     ``message.send_uncertain``; nothing automatic moves it again (``postroom outbox
     resolve``);
   * recipients still pending (4xx, connection failures before DATA) → back to
     ``recorded`` with ``available_at`` moved by the retry schedule (a recipient already
     accepted is never offered again); when the schedule is spent they bounce (soft);
   * otherwise ``sent`` (at least one accepted, after ``transmission_begun``) or
     ``refused``.

A process killed mid-attempt leaves a lease that runs out. The sweep
(:func:`sweep`, every few seconds) stamps a record found at ``transmission_begun`` with
an expired lease as uncertain, and re-queues due ``recorded`` records that have no job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from postroom.clock import to_rfc3339
from postroom.events.catalogue import (
    MessageBounced,
    MessageDeferred,
    MessageDelivered,
    MessageSendUncertain,
    MessageSent,
)
from postroom.events.emit import emit
from postroom.jobs.handlers import JobContext
from postroom.outbound import policy
from postroom.outbound.transports import build_transport, is_local_recipient
from postroom.outbound.transports.base import Reply, Transport, TransportError
from postroom.store import outbox as rows
from postroom.store.db import Tx

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.outbound")

SEND_JOB = "outbound.send"
SWEEP_JOB = "outbound.sweep"
SWEEP_SCHEDULE = "outbound.sweep"
SWEEP_INTERVAL_MS = 5_000
UNCERTAIN = Reply(0, None, "unknown outcome")


def hard_address_failure(reply: Reply) -> bool:
    """A permanent reply that says the address itself is bad: suppress it."""
    if reply.enhanced is not None:
        return reply.enhanced.startswith(("5.1.", "5.2.1"))
    return reply.code in (550, 551, 553)


def _transports(app: App) -> dict[str, Transport]:
    cache = app.services.setdefault("outbound.transports", {})
    assert isinstance(cache, dict)
    return cache


def transport(app: App, name: str) -> Transport:
    cache = _transports(app)
    if name not in cache:
        cache[name] = build_transport(app, name)
    found: Transport = cache[name]
    return found


def close_transports(app: App) -> None:
    for t in _transports(app).values():
        try:
            t.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            log.debug("closing transport %s failed", t.name)
    _transports(app).clear()


@dataclass
class _Attempt:
    record: rows.Record
    owner: str
    began: bool = False
    uncertain: bool = False
    last_data_reply: int | None = None
    outcome: dict[str, Reply] = field(default_factory=dict)


def _synthetic(error: TransportError) -> Reply:
    if error.reply is not None and not error.reply.positive:
        return error.reply
    if error.permanent:
        return Reply(550, "5.4.4", error.code)
    return Reply(451, "4.4.1", error.code)


def _begin(app: App, a: _Attempt, accepted: Sequence[str]) -> bool:
    """Write ``transmission_begun`` before DATA; False when the lease was lost."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        if not rows.begin_transmission(tx, a.record.id, a.owner, now):
            return False
        if not a.began:
            rows.set_message_status(tx, a.record.message_id, "submitted")
        rowid = _message_rowid(tx, a.record.message_id)
        for address in accepted:
            rows.update_delivery(tx, rowid, address, status="submitted", now=now)
    a.began = True
    return True


def _message_rowid(tx: Tx, message_id: str) -> int:
    return int(tx.fetchval("SELECT rowid FROM messages WHERE id = %s", (message_id,)))


def _converse(app: App, a: _Attempt, t: Transport, addresses: Sequence[str], mime: bytes) -> bool:
    """Offer the message to ``addresses`` through ``t``; False when the lease was lost."""
    try:
        routes = t.routes(addresses)
    except TransportError as e:
        for address in addresses:
            a.outcome[address] = _synthetic(e)
        return True
    for route in routes:
        try:
            conn = t.connect(route)
        except TransportError as e:
            for address in route.recipients:
                a.outcome[address] = _synthetic(e)
            continue
        accepted: list[str] = []
        try:
            reply = conn.mail(a.record.mail_from, len(mime))
            if not reply.positive:
                for address in route.recipients:
                    a.outcome[address] = reply
                conn.reset()
                conn.close()
                continue
            for address in route.recipients:
                reply = conn.rcpt(address)
                if reply.positive:
                    accepted.append(address)
                else:
                    a.outcome[address] = reply
            if not accepted:
                conn.reset()
                conn.close()
                continue
        except TransportError as e:
            conn.discard()
            for address in route.recipients:
                if address not in a.outcome or a.outcome[address].positive:
                    a.outcome[address] = _synthetic(e)
            continue
        if not _begin(app, a, accepted):
            conn.discard()
            return False
        try:
            reply = conn.data(mime)
        except TransportError as e:
            conn.discard()
            if e.code == "data_not_sent":  # lost before 354: provably no body went out
                for address in accepted:
                    a.outcome[address] = _synthetic(e)
                continue
            a.uncertain = True
            for address in accepted:
                a.outcome[address] = UNCERTAIN
            continue
        a.last_data_reply = reply.code
        for address in accepted:
            a.outcome[address] = reply
        conn.close()
    return True


def attempt(app: App, record_id: str, owner: str) -> str | None:
    """Run one attempt of a record; returns the record's stage afterwards, or None when
    there was nothing to claim."""
    settings = app.settings
    now = app.clock.now_ms()
    with app.db.write() as tx:
        record = rows.claim(tx, record_id, owner, now, settings.outbound_lease_seconds * 1000)
    if record is None:
        return None
    with app.db.read() as tx:
        recipients = rows.recipients(tx, record.id)
        mime = rows.mime(tx, record.id)
        pending = [r.address for r in recipients if r.status == "pending"]
        keyring = app.keys()
        local = [p for p in pending if is_local_recipient(tx, keyring, p)]
    remote = [p for p in pending if p not in set(local)]
    a = _Attempt(record, owner)
    for name, addresses in (("local", local), (record.transport, remote)):
        if addresses and not _converse(app, a, transport(app, name), addresses, mime):
            log.warning("outbox %s: lease lost during the attempt", record.id)
            return None
    return _settle(app, a, recipients)


def _retry_delay_ms(app: App, attempt_count: int) -> int | None:
    schedule = app.settings.outbound_retry_schedule
    if attempt_count > len(schedule):
        return None
    return int(schedule[attempt_count - 1] * 1000)


def _settle(app: App, a: _Attempt, recipients: Sequence[rows.Recipient]) -> str | None:
    record = a.record
    now = app.clock.now_ms()
    delay = _retry_delay_ms(app, record.attempt_count)
    next_at = None if delay is None else now + delay
    ids: dict[str, Any] = {
        "tenant_id": record.tenant_id,
        "identity_id": record.identity_id,
        "now": now,
    }
    with app.db.write() as tx:
        current = rows.get(tx, record.id)
        if current is None or current.lease_owner != a.owner:
            return None  # cancelled by erasure, or the lease was taken over
        if current.uncertain:
            # The lease ran out mid-transmission and the sweep has already reported the
            # outcome unknown: that report stands (an operator resolves it), so a late
            # reply writes nothing over it.
            log.warning("outbox %s: reply came after the send was reported uncertain", record.id)
            return None
        rowid = _message_rowid(tx, record.message_id)
        accepted = sum(1 for r in recipients if r.status == "accepted")
        still_pending: list[rows.Recipient] = []
        for r in recipients:
            if r.status != "pending":
                continue
            reply = a.outcome.get(r.address)
            if reply is None:
                still_pending.append(r)
                continue
            if reply is UNCERTAIN:
                rows.update_delivery(tx, rowid, r.address, status="uncertain", now=now)
                continue
            if reply.positive:
                rows.settle_recipient(
                    tx, record.id, r.ordinal, "accepted", reply.code, reply.enhanced, now
                )
                rows.update_delivery(
                    tx,
                    rowid,
                    r.address,
                    status="delivered",
                    now=now,
                    smtp_code=reply.code,
                    enhanced_code=reply.enhanced,
                    response=reply.text,
                )
                accepted += 1
                emit(
                    tx,
                    MessageDelivered(
                        message_id=record.message_id,
                        recipient=r.address,
                        smtp_code=reply.code,
                        enhanced_code=reply.enhanced,
                    ),
                    **ids,
                )
            elif reply.permanent:
                _bounce(tx, app, record, rowid, r, reply, "hard", now)
            else:
                tx.execute(
                    "UPDATE outgoing_email_recipients SET last_reply_code = %s,"
                    " last_enhanced_code = %s, answered_at = %s"
                    " WHERE outgoing_email_id = %s AND ordinal = %s AND status = 'pending'",
                    (reply.code, reply.enhanced, now, record.id, r.ordinal),
                )
                if next_at is None:
                    _bounce(tx, app, record, rowid, r, reply, "soft", now)
                    continue
                still_pending.append(r)
                rows.update_delivery(
                    tx,
                    rowid,
                    r.address,
                    status="deferred",
                    now=now,
                    smtp_code=reply.code,
                    enhanced_code=reply.enhanced,
                    response=reply.text,
                )
                emit(
                    tx,
                    MessageDeferred(
                        message_id=record.message_id,
                        recipient=r.address,
                        attempt=record.attempt_count,
                        next_attempt_at=to_rfc3339(next_at) or "",
                        smtp_code=reply.code,
                        enhanced_code=reply.enhanced,
                    ),
                    **ids,
                )
        if a.uncertain:
            rows.mark_uncertain(tx, record.id, now, owner=a.owner)
            rows.set_message_status(tx, record.message_id, "uncertain")
            emit(
                tx,
                MessageSendUncertain(
                    message_id=record.message_id,
                    recipient_count=max(1, sum(1 for o in a.outcome.values() if o is UNCERTAIN)),
                ),
                **ids,
            )
            return "transmission_begun"
        if still_pending and next_at is not None:
            rows.finish(
                tx,
                record.id,
                a.owner,
                stage="recorded",
                now=now,
                last_reply_code=a.last_data_reply,
                failure_code="deferred",
                available_at=next_at,
            )
            rows.set_message_status(tx, record.message_id, "deferred")
            app.queue.enqueue_in(
                tx,
                SEND_JOB,
                f"{record.id}:{record.attempt_count}",
                {"outgoing_email_id": record.id},
                available_at=next_at,
                tenant_id=record.tenant_id,
                identity_id=record.identity_id,
            )
            return "recorded"
        if still_pending:  # no outcome at all and no retry left
            for r in still_pending:
                _bounce(
                    tx, app, record, rowid, r, Reply(451, "4.4.7", "retries spent"), "soft", now
                )
        stage = "sent" if a.began and accepted else "refused"
        rows.finish(
            tx,
            record.id,
            a.owner,
            stage=stage,
            now=now,
            last_reply_code=a.last_data_reply,
            failure_code=None if stage == "sent" else "all_refused",
        )
        rows.set_message_status(tx, record.message_id, "delivered" if accepted else "bounced")
        if stage == "sent":
            thread_id = tx.fetchval(
                "SELECT thread_id FROM messages WHERE id = %s", (record.message_id,)
            )
            emit(
                tx,
                MessageSent(
                    message_id=record.message_id,
                    thread_id=str(thread_id),
                    operation=record.operation,  # type: ignore[arg-type]
                    recipient_count=accepted,
                ),
                **ids,
            )
        return stage


def _bounce(
    tx: Tx,
    app: App,
    record: rows.Record,
    rowid: int,
    r: rows.Recipient,
    reply: Reply,
    bounce_type: str,
    now: int,
) -> None:
    rows.settle_recipient(tx, record.id, r.ordinal, "refused", reply.code, reply.enhanced, now)
    suppressed = False
    if bounce_type == "hard" and hard_address_failure(reply):
        suppressed = policy.suppress_in(
            tx,
            app,
            record.tenant_id,
            r.address,
            "hard_bounce",
            now=now,
            source_message_id=record.message_id,
        )
    rows.update_delivery(
        tx,
        rowid,
        r.address,
        status="bounced",
        now=now,
        smtp_code=reply.code,
        enhanced_code=reply.enhanced,
        response=reply.text,
        bounce_type=bounce_type,
    )
    emit(
        tx,
        MessageBounced(
            message_id=record.message_id,
            recipient=r.address,
            bounce="hard" if bounce_type == "hard" else "soft",
            smtp_code=reply.code,
            enhanced_code=reply.enhanced,
            suppressed=suppressed,
        ),
        tenant_id=record.tenant_id,
        identity_id=record.identity_id,
        now=now,
    )


def handle_send(ctx: JobContext) -> None:
    """The ``outbound.send`` job: payload ``{"outgoing_email_id": "out_..."}``."""
    attempt(ctx.app, str(ctx.payload["outgoing_email_id"]), ctx.owner)


# --- the sweep ------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    uncertain: int
    requeued: int


def mark_stranded(tx: Tx, record: rows.Record, now: int) -> bool:
    if not rows.mark_uncertain(tx, record.id, now):
        return False
    rowid = _message_rowid(tx, record.message_id)
    pending = [r for r in rows.recipients(tx, record.id) if r.status == "pending"]
    for r in pending:
        rows.update_delivery(tx, rowid, r.address, status="uncertain", now=now)
    rows.set_message_status(tx, record.message_id, "uncertain")
    emit(
        tx,
        MessageSendUncertain(message_id=record.message_id, recipient_count=max(1, len(pending))),
        tenant_id=record.tenant_id,
        identity_id=record.identity_id,
        now=now,
    )
    return True


def sweep(app: App, limit: int = 500) -> SweepResult:
    """Stamp stranded transmissions as uncertain; give due records without a job one."""
    now = app.clock.now_ms()
    uncertain = requeued = 0
    with app.db.write() as tx:
        for record in rows.stranded(tx, now, limit):
            if mark_stranded(tx, record, now):
                uncertain += 1
                log.warning("outbox %s: stopped mid-transmission; outcome unknown", record.id)
    with app.db.write() as tx:
        for record in rows.due_without_lease(tx, now, limit):
            key = f"{record.id}:{record.attempt_count}"
            job = app.queue.enqueue_in(
                tx,
                SEND_JOB,
                key,
                {"outgoing_email_id": record.id},
                tenant_id=record.tenant_id,
                identity_id=record.identity_id,
            )
            if job.state in ("succeeded", "dead_lettered", "dropped"):
                app.queue.enqueue_in(
                    tx,
                    SEND_JOB,
                    f"{key}:{now}",
                    {"outgoing_email_id": record.id},
                    tenant_id=record.tenant_id,
                    identity_id=record.identity_id,
                )
                requeued += 1
    return SweepResult(uncertain, requeued)


def handle_sweep(ctx: JobContext) -> None:
    result = sweep(ctx.app)
    if result.uncertain or result.requeued:
        log.info("outbox sweep: %d uncertain, %d re-queued", result.uncertain, result.requeued)

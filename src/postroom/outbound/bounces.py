"""Bounces and complaints that come back: matched to the send, applied per recipient.

An inbound message that is a delivery report (``kind`` dsn), a feedback report (ARF), or
that arrived at a VERP return path (``local+bnc-<token>@domain``) gets an
``outbound.bounce`` job in the transaction that stores it. The job parses the report
(:func:`postroom.mail.bounces.parse_bounce`), finds the send — by the VERP token first,
then by the returned Message-ID — **within the tenant that received the report** (a report
can never touch another tenant's sends), and for each recipient it names:

* ``failed`` → the delivery becomes ``bounced`` (hard or soft, the enhanced code and
  diagnostic kept); a hard bounce adds a ``hard_bounce`` suppression; ``message.bounced``;
* ``delivered`` / ``relayed`` → ``delivered``; ``message.delivered``;
* ``delayed`` → the delivery's response is updated (the remote MTA keeps trying);
* a complaint → ``complained``, a ``complaint`` suppression, ``message.complained``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from postroom.events.catalogue import MessageBounced, MessageComplained, MessageDelivered
from postroom.events.emit import emit
from postroom.jobs.handlers import JobContext
from postroom.mail.bounces import BounceReport, envelope_recipient_token, parse_bounce
from postroom.outbound import policy
from postroom.store import messages as message_rows
from postroom.store import outbox as rows
from postroom.store.db import Tx

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.outbound")

BOUNCE_JOB = "outbound.bounce"


def is_candidate(kind: str, automated: dict[str, object] | None, delivered_to: str | None) -> bool:
    """Whether a stored inbound message should be read as a bounce or complaint."""
    if kind == "dsn":
        return True
    if automated and automated.get("report_type") == "feedback-report":
        return True
    return envelope_recipient_token(delivered_to) is not None


def _find_record(
    tx: Tx, tenant_id: str, report: BounceReport, token: str | None
) -> rows.Record | None:
    if token:
        record = rows.get(tx, f"out_{token.upper()}")
        if record is not None and record.tenant_id == tenant_id:
            return record
    if report.original_message_id:
        record = rows.find_by_rfc_message_id(tx, report.original_message_id)
        if record is not None and record.tenant_id == tenant_id:
            return record
    return None


def apply_report(app: App, message_id: str) -> int:
    """Apply the report stored as ``message_id``; returns how many recipients changed."""
    with app.db.read() as tx:
        row = message_rows.get_full(tx, message_id)
    if row is None or row["direction"] != "inbound" or not row["raw_blob_key"]:
        return 0
    report = parse_bounce(app.blobs.get(row["raw_blob_key"]))
    token = envelope_recipient_token(row["delivered_to"])
    if report is None:
        return 0
    now = app.clock.now_ms()
    changed = 0
    with app.db.write() as tx:
        record = _find_record(tx, row["tenant_id"], report, token)
        if record is None:
            log.info("report %s matches no send of its tenant", message_id)
            return 0
        sent = message_rows.get_message(tx, record.message_id)
        if sent is None:
            return 0
        rowid = int(sent["rowid"])
        known = {d["address"]: d for d in rows.deliveries(tx, rowid)}
        ids: dict[str, Any] = {
            "tenant_id": record.tenant_id,
            "identity_id": record.identity_id,
            "now": now,
        }
        for item in report.recipients:
            address = item.address.lower()
            delivery = known.get(address)
            if delivery is None:
                continue
            if report.kind == "complaint":
                rows.update_delivery(tx, rowid, address, status="complained", now=now)
                policy.suppress_in(
                    tx,
                    app,
                    record.tenant_id,
                    address,
                    "complaint",
                    now=now,
                    source_message_id=record.message_id,
                )
                emit(
                    tx,
                    MessageComplained(
                        message_id=record.message_id,
                        recipient=address,
                        feedback_type=report.feedback_type,
                    ),
                    **ids,
                )
                changed += 1
            elif item.action == "failed":
                if delivery["status"] == "bounced":
                    continue
                hard = item.bounce_type != "soft"
                suppressed = hard and policy.suppress_in(
                    tx,
                    app,
                    record.tenant_id,
                    address,
                    "hard_bounce",
                    now=now,
                    source_message_id=record.message_id,
                )
                rows.update_delivery(
                    tx,
                    rowid,
                    address,
                    status="bounced",
                    now=now,
                    smtp_code=item.smtp_code,
                    enhanced_code=item.status,
                    response=item.diagnostic,
                    bounce_type="hard" if hard else "soft",
                )
                emit(
                    tx,
                    MessageBounced(
                        message_id=record.message_id,
                        recipient=address,
                        bounce="hard" if hard else "soft",
                        smtp_code=item.smtp_code,
                        enhanced_code=item.status,
                        suppressed=bool(suppressed),
                    ),
                    **ids,
                )
                changed += 1
            elif item.action in ("delivered", "relayed"):
                rows.update_delivery(
                    tx, rowid, address, status="delivered", now=now, enhanced_code=item.status
                )
                emit(
                    tx,
                    MessageDelivered(
                        message_id=record.message_id,
                        recipient=address,
                        smtp_code=item.smtp_code,
                        enhanced_code=item.status,
                    ),
                    **ids,
                )
                changed += 1
            elif item.action == "delayed":
                rows.update_delivery(
                    tx,
                    rowid,
                    address,
                    status=str(delivery["status"]),
                    now=now,
                    enhanced_code=item.status,
                    response=item.diagnostic,
                )
        statuses = {d["status"] for d in rows.deliveries(tx, rowid)}
        if report.kind == "complaint" and changed:
            rows.set_message_status(tx, record.message_id, "complained")
        elif statuses and statuses <= {"bounced", "suppressed"}:
            rows.set_message_status(tx, record.message_id, "bounced")
    return changed


def handle_bounce(ctx: JobContext) -> None:
    """The ``outbound.bounce`` job: payload ``{"message_id": "msg_..."}``."""
    apply_report(ctx.app, str(ctx.payload["message_id"]))

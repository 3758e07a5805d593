"""Accepting a message: make it durable, then say so.

``write_blobs`` and ``commit_batch`` are what stand between a DATA command and its
``250``. The first writes the raw bytes (with our Received header) to the blob store
once per recipient identity, without waiting for the disk; the second, for a whole batch
of messages, flushes all those blobs to disk at once and, in ONE database transaction,
inserts the ``inbound_queue`` rows, enqueues their ``inbound.ingest`` jobs and counts the
senders' throttle windows. Only after that commit may the SMTP server answer 250 (the
caller does, per message). If the flush or the transaction fails, every message of the
batch gets a temporary failure and its blobs are removed.

Parsing happens later, in a worker (FIELD-NOTES §2: the SMTP event loop is one core).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any

from postroom.ids import new_id
from postroom.inbound.directory import Route
from postroom.store import inbound as inbound_rows
from postroom.store.blobs import message_raw_key
from postroom.store.inbound import StagedMessage

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.inbound")

INGEST_JOB = "inbound.ingest"


@dataclass(frozen=True)
class Envelope:
    """What the SMTP transaction said about a message (recorded with it)."""

    mail_from: str
    rcpt_to: tuple[str, ...]
    client_ip: str | None = None
    client_port: int | None = None
    helo: str | None = None
    tls: dict[str, Any] | None = None

    def as_json(self, rcpts: list[str]) -> dict[str, Any]:
        return {
            "mail_from": self.mail_from,
            "rcpt_to": rcpts,
            "client_ip": self.client_ip,
            "client_port": self.client_port,
            "helo": self.helo,
            "tls": self.tls,
        }


@dataclass
class Submission:
    """One message to stage: its bytes, envelope and routed recipients."""

    raw: bytes
    envelope: Envelope
    routes: list[Route]
    received_at: int
    source: str = "smtp"
    staged: list[StagedMessage] = field(default_factory=list)
    throttled: bool = False

    @property
    def sender(self) -> str:
        return self.envelope.mail_from.lower()


def received_header(
    *, hostname: str, envelope: Envelope, smtp_id: str, received_at: int, single_rcpt: str | None
) -> bytes:
    """RFC 5321 trace header for the copy we store."""
    client = envelope.helo or "unknown"
    ip = envelope.client_ip or "unknown"
    protocol = "ESMTPS" if envelope.tls else "ESMTP"
    when = format_datetime(datetime.fromtimestamp(received_at / 1000, tz=UTC))
    tls = ""
    if envelope.tls:
        tls = (
            f"\r\n\t(using {envelope.tls.get('version')} with cipher {envelope.tls.get('cipher')})"
        )
    recipient = f"\r\n\tfor <{single_rcpt}>" if single_rcpt else ""
    text = (
        f"Received: from {client} ([{ip}])\r\n\tby {hostname} (Postroom) with {protocol}"
        f" id {smtp_id}{tls}{recipient};\r\n\t{when}\r\n"
    )
    # Header values come from the client (HELO): keep them to printable ASCII.
    return text.encode("ascii", "replace")


def _group_by_identity(routes: list[Route]) -> list[tuple[Route, list[str]]]:
    """One stored copy per identity, with every envelope recipient routed to it."""
    grouped: dict[str, tuple[Route, list[str]]] = {}
    for route in routes:
        if route.identity_id in grouped:
            first, rcpts = grouped[route.identity_id]
            rcpts.append(route.address)
            merged = tuple(dict.fromkeys((*first.labels, *route.labels)))
            grouped[route.identity_id] = (
                Route(first.address, first.identity_id, first.tenant_id, merged, first.catch_all),
                rcpts,
            )
        else:
            grouped[route.identity_id] = (route, [route.address])
    return list(grouped.values())


def write_blobs(app: App, submission: Submission) -> None:
    """Write one raw copy per recipient identity (not yet flushed to disk; see
    ``commit_batch``). Fills ``submission.staged``."""
    groups = _group_by_identity(submission.routes)
    primary_seen: set[str] = set()
    hostname = app.settings.smtp_hostname
    for route, rcpts in groups:
        message_id = new_id("msg")
        header = received_header(
            hostname=hostname,
            envelope=submission.envelope,
            smtp_id=message_id,
            received_at=submission.received_at,
            single_rcpt=rcpts[0] if len(rcpts) == 1 else None,
        )
        raw = header + submission.raw
        key = message_raw_key(route.tenant_id, route.identity_id, message_id)
        # Durable in commit_batch, together with the rest of the batch (one flush).
        app.blobs.put_unsynced(key, raw)
        is_primary = route.tenant_id not in primary_seen
        primary_seen.add(route.tenant_id)
        submission.staged.append(
            StagedMessage(
                id=message_id,
                tenant_id=route.tenant_id,
                identity_id=route.identity_id,
                raw_blob_key=key,
                raw_sha256=hashlib.sha256(raw).hexdigest(),
                raw_size=len(raw),
                source=submission.source,
                envelope=submission.envelope.as_json(rcpts),
                delivered_to=route.address,
                labels=route.labels,
                is_primary_recipient=is_primary,
                received_at=submission.received_at,
            )
        )


def remove_blobs(app: App, submission: Submission) -> None:
    for staged in submission.staged:
        try:
            app.blobs.delete(staged.raw_blob_key)
        except Exception:  # best effort: an orphan blob loses nothing
            log.warning("could not remove blob %s of a refused message", staged.raw_blob_key)


def window_start(app: App, now: int) -> int:
    window = app.settings.smtp_sender_rate_window_seconds * 1000
    return now - now % window


def commit_batch(app: App, batch: list[Submission]) -> None:
    """Make the batch's blobs durable (one flush), then stage every message in one
    transaction.

    Messages over their sender's throttle are marked ``throttled`` and not staged.
    Raises if the flush or the transaction fails: nothing of the batch is then staged.
    """
    app.blobs.sync(staged.raw_blob_key for submission in batch for staged in submission.staged)
    limit = app.settings.smtp_sender_rate_limit
    with app.db.write() as tx:
        used: dict[tuple[str, int], int] = {}  # in the window so far, this batch included
        added: dict[tuple[str, int], int] = {}
        for submission in batch:
            key = (submission.sender, window_start(app, submission.received_at))
            if limit:
                if key not in used:
                    used[key] = inbound_rows.sender_count(tx, *key)
                if used[key] >= limit:
                    submission.throttled = True
                    continue
                used[key] += 1
                added[key] = added.get(key, 0) + 1
            for staged in submission.staged:
                inbound_rows.insert_staged(tx, staged)
                app.queue.enqueue_in(
                    tx,
                    INGEST_JOB,
                    staged.id,
                    {"message_id": staged.id},
                    tenant_id=staged.tenant_id,
                    identity_id=staged.identity_id,
                )
        for (sender, start), count in added.items():
            inbound_rows.add_to_sender_window(tx, sender, start, count)

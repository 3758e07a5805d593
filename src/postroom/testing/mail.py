"""Delivering mail in tests through the real inbound pipeline, without the SMTP wire.

:func:`deliver` routes the recipients through the address directory, writes and flushes
the raw bytes, stages them in one transaction (exactly what the SMTP server does before
its 250), then runs the ``inbound.ingest`` step for each staged copy.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from postroom.inbound.accept import Envelope, Submission, commit_batch, write_blobs
from postroom.inbound.directory import Refusal, route_recipient
from postroom.inbound.ingest import ingest_staged


def make_message(
    *,
    subject: str = "Hello",
    body: str = "Hi there.",
    sender: str = "Ann Sender <ann@sender.example>",
    to: str = "someone@localhost",
    message_id: str | None = None,
    in_reply_to: str | None = None,
    extra_headers: dict[str, str] | None = None,
) -> bytes:
    """A small, valid RFC 5322 text message."""
    mid = message_id or f"{secrets.token_hex(8)}@sender.example"
    headers = {
        "From": sender,
        "To": to,
        "Subject": subject,
        "Date": format_datetime(datetime.now(UTC)),
        "Message-ID": f"<{mid}>",
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=utf-8",
    }
    if in_reply_to:
        headers["In-Reply-To"] = f"<{in_reply_to}>"
        headers["References"] = f"<{in_reply_to}>"
    headers.update(extra_headers or {})
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (head + "\r\n" + body.replace("\n", "\r\n") + "\r\n").encode()


def deliver(
    app: Any, raw: bytes, to: list[str] | str, *, mail_from: str = "ann@sender.example"
) -> list[str]:
    """Receive ``raw`` for the recipients ``to``; returns the stored message IDs (one per
    receiving identity). Raises ValueError when a recipient is refused."""
    recipients = [to] if isinstance(to, str) else to
    routes = []
    with app.db.read() as tx:
        for address in recipients:
            decision = route_recipient(tx, app.keys(), address)
            if isinstance(decision, Refusal):
                raise ValueError(f"{address} refused: {decision.reply}")
            routes.append(decision)
    submission = Submission(
        raw=raw,
        envelope=Envelope(mail_from=mail_from, rcpt_to=tuple(recipients), client_ip="127.0.0.1"),
        routes=routes,
        received_at=app.clock.now_ms(),
    )
    write_blobs(app, submission)
    commit_batch(app, [submission])
    stored = []
    for staged in submission.staged:
        result = ingest_staged(app, staged.id)
        if result is not None:
            stored.append(result.id)
    return stored

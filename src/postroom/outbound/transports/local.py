"""``local``: recipients hosted by this Postroom, delivered through the inbound pipeline.

No SMTP wire: RCPT asks the address directory (:func:`route_recipient`, the same answer
the SMTP server would give: ``250 2.1.5`` or the refusal's reply), and DATA does what the
SMTP server does before its 250 — writes the raw copies (:func:`write_blobs`) and stages
them with their ``inbound.ingest`` jobs in one transaction (:func:`commit_batch`). The
ingest workers then store, thread and index the copies like any received mail
(``messages.source = 'local'``).

:func:`is_local_recipient` tells the outbox which recipients go this way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from postroom.inbound.accept import Envelope, Submission, commit_batch, remove_blobs, write_blobs
from postroom.inbound.directory import Refusal, normalize_address, route_recipient
from postroom.inbound.directory import Route as InboxRoute
from postroom.keyring import Keyring
from postroom.outbound.transports.base import Reply, Route
from postroom.outbound.transports.smtp import parse_reply
from postroom.store import tenancy as directory
from postroom.store.db import Tx

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.outbound")

ACCEPTED = Reply(250, "2.1.5", "Recipient OK")
_CLOSED_DOMAIN_STATES = ("suspended", "removing", "removed")


def is_local_recipient(tx: Tx, keyring: Keyring, address: str) -> bool:
    """Whether mail for ``address`` is ours to deliver: it routes to an inbox here, or
    its domain is one this Postroom receives for (an unknown user there is then refused
    by the directory, locally, rather than sent out to whatever its MX says)."""
    if isinstance(route_recipient(tx, keyring, address), InboxRoute):
        return True
    normalized = normalize_address(address)
    if normalized is None:
        return False
    domain = directory.get_domain_by_name(tx, normalized.rpartition("@")[2])
    return domain is not None and domain.receiving and domain.state not in _CLOSED_DOMAIN_STATES


def refusal_reply(refusal: Refusal) -> Reply:
    """``"550 5.1.1 No such recipient here"`` → Reply(550, "5.1.1", "No such ...")."""
    code_text, _, rest = refusal.reply.partition(" ")
    code = int(code_text) if code_text.isdigit() else 550
    return parse_reply(code, rest)


def stage(
    app: App, submission: Submission, *, envelope_rcpt_to: Sequence[str] | None = None
) -> Reply:
    """Write and stage ``submission`` (with its ingest jobs); the reply to DATA.

    ``envelope_rcpt_to`` replaces the recipients recorded in each stored envelope
    (``write_blobs`` records those routed to that inbox). A failure leaves nothing
    staged and answers ``451``: the outcome is known.
    """
    try:
        write_blobs(app, submission)
        if envelope_rcpt_to is not None:
            submission.staged = [
                replace(staged, envelope={**staged.envelope, "rcpt_to": list(envelope_rcpt_to)})
                for staged in submission.staged
            ]
        commit_batch(app, [submission])
    except Exception:
        log.exception("local delivery could not stage a message")
        remove_blobs(app, submission)
        return Reply(451, "4.3.0", "Local delivery failed; try again later")
    if submission.throttled:
        remove_blobs(app, submission)
        return Reply(451, "4.7.1", "Sender over its rate limit; try again later")
    return Reply(250, "2.0.0", f"Delivered locally ({len(submission.staged)} inbox(es))")


class LocalConnection:
    """One transaction into local inboxes."""

    def __init__(self, app: App, source: str = "local") -> None:
        self.app = app
        self.source = source
        self.mail_from: str | None = None
        self.routes: list[InboxRoute] = []
        self.accepted: list[str] = []

    def mail(self, mail_from: str, size: int) -> Reply:
        if size > self.app.settings.smtp_max_message_bytes:
            return Reply(552, "5.3.4", "Message too big for the receiving inbox")
        self.mail_from = mail_from
        return Reply(250, "2.1.0", "Sender OK")

    def rcpt(self, address: str) -> Reply:
        if self.mail_from is None:
            return Reply(503, "5.5.1", "MAIL first")
        with self.app.db.read() as tx:
            decision = route_recipient(tx, self.app.keys(), address)
        if isinstance(decision, Refusal):
            return refusal_reply(decision)
        self.routes.append(decision)
        self.accepted.append(address)
        return ACCEPTED

    def data(self, message: bytes) -> Reply:
        if self.mail_from is None or not self.routes:
            return Reply(503, "5.5.1", "No valid recipients")
        submission = Submission(
            raw=message,
            envelope=Envelope(
                mail_from=self.mail_from,
                rcpt_to=tuple(self.accepted),
                helo=self.app.settings.smtp_hostname,
            ),
            routes=list(self.routes),
            received_at=self.app.clock.now_ms(),
            source=self.source,
        )
        reply = stage(self.app, submission)
        self.reset()
        return reply

    def reset(self) -> None:
        self.mail_from = None
        self.routes = []
        self.accepted = []

    def close(self) -> None:
        self.reset()

    def discard(self) -> None:
        self.reset()


class LocalTransport:
    """Delivery into this Postroom's own inboxes."""

    name = "local"
    provider = "local"

    def __init__(self, app: App) -> None:
        self.app = app

    def routes(self, recipients: Sequence[str]) -> list[Route]:
        return [Route(tuple(recipients), "local")] if recipients else []

    def connect(self, route: Route) -> LocalConnection:
        return LocalConnection(self.app)

    def close(self) -> None:
        """Nothing to close."""

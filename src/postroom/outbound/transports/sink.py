"""``sink``: for development — nothing leaves the machine, everything is captured.

Every RCPT is accepted (``250``); DATA stores the message in the capture inbox, the
identity owning ``outbound.sink_address``, through the inbound pipeline (like the
``local`` transport; ``messages.source = 'local'``). The stored envelope keeps the real
recipients: ``rcpt_to`` lists them, ``delivered_to`` is the sink address.

The capture inbox is created on first use, in the default tenant, when the address
routes nowhere yet. That is possible only on the platform domain; any other address must
be an existing inbox, or the transport refuses with a ConfigError saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from postroom.config import normalize_domain
from postroom.errors import ConfigError, Conflict, PostroomError
from postroom.inbound.accept import Envelope, Submission
from postroom.inbound.directory import Refusal, normalize_address, route_recipient
from postroom.inbound.directory import Route as InboxRoute
from postroom.outbound.transports.base import Reply, Route
from postroom.outbound.transports.local import stage
from postroom.tenancy.service import create_identity

if TYPE_CHECKING:
    from postroom.app import App

SINK_CLIENT_ID = "postroom:outbound-sink"
SINK_DISPLAY_NAME = "Outbound sink"


def sink_route(app: App) -> InboxRoute:
    """Where the sink delivers: the inbox of ``outbound.sink_address``, created in the
    default tenant if it does not exist yet. ConfigError when that cannot be."""
    configured = app.settings.outbound_sink_address
    address = normalize_address(configured)
    if address is None:
        raise ConfigError(f"outbound.sink_address {configured!r} is not an email address")
    found = _route(app, address)
    if found is not None:
        return found
    local, _, domain = address.rpartition("@")
    platform = normalize_domain(app.settings.platform_domain)
    if domain != platform:
        raise ConfigError(
            f"outbound.sink_address {address} has no inbox, and the sink can create one only"
            f" on the platform domain {platform}: create that inbox or change the setting"
        )
    try:
        create_identity(app, local, display_name=SINK_DISPLAY_NAME, client_id=SINK_CLIENT_ID)
    except Conflict:
        # Created concurrently by another worker, or the name is otherwise taken: the
        # directory below says which.
        pass
    except PostroomError as exc:
        raise ConfigError(
            f"outbound.sink_address {address}: cannot create its inbox: {exc}"
        ) from None
    found = _route(app, address)
    if found is None:
        raise ConfigError(
            f"outbound.sink_address {address} does not route to an inbox, and one could not"
            " be created (the address may be taken, retired or in a suspended tenant)"
        )
    return found


def _route(app: App, address: str) -> InboxRoute | None:
    with app.db.read() as tx:
        decision = route_recipient(tx, app.keys(), address)
    return None if isinstance(decision, Refusal) else decision


class SinkConnection:
    """Accepts every recipient; DATA captures one copy in the sink inbox."""

    def __init__(self, app: App, route: InboxRoute) -> None:
        self.app = app
        self.route = route
        self.mail_from: str | None = None
        self.recipients: list[str] = []

    def mail(self, mail_from: str, size: int) -> Reply:
        self.mail_from = mail_from
        return Reply(250, "2.1.0", "Sender OK")

    def rcpt(self, address: str) -> Reply:
        if self.mail_from is None:
            return Reply(503, "5.5.1", "MAIL first")
        self.recipients.append(address)
        return Reply(250, "2.1.5", "Recipient OK (captured by the sink)")

    def data(self, message: bytes) -> Reply:
        if self.mail_from is None or not self.recipients:
            return Reply(503, "5.5.1", "No valid recipients")
        recipients = tuple(self.recipients)
        submission = Submission(
            raw=message,
            envelope=Envelope(
                mail_from=self.mail_from,
                rcpt_to=recipients,
                helo=self.app.settings.smtp_hostname,
            ),
            routes=[self.route],
            received_at=self.app.clock.now_ms(),
            source="local",
        )
        reply = stage(self.app, submission, envelope_rcpt_to=recipients)
        self.reset()
        return reply

    def reset(self) -> None:
        self.mail_from = None
        self.recipients = []

    def close(self) -> None:
        self.reset()

    def discard(self) -> None:
        self.reset()


class SinkTransport:
    """The development transport: every message captured in one inbox."""

    name = "sink"
    provider = "sink"

    def __init__(self, app: App) -> None:
        self.app = app

    def routes(self, recipients: Sequence[str]) -> list[Route]:
        return [Route(tuple(recipients), "sink")] if recipients else []

    def connect(self, route: Route) -> SinkConnection:
        return SinkConnection(self.app, sink_route(self.app))

    def close(self) -> None:
        """Nothing to close."""

"""The event catalogue: every event type, the version of its data schema, and that schema.

Each type's ``data`` is a pydantic model here; its JSON Schema (``EventSpec.json_schema``)
is what docs/events.md publishes and what tests validate stored events against. A
schema version changes only by adding optional fields; consumers ignore fields they do
not know. A change that would break a consumer is a new version, documented in
docs/events.md and the CHANGELOG before it ships.

Events carry ids and metadata, never message bodies, subjects or clear mail addresses
(a consumer fetches the message through the API). The one exception is documented per
field: the recipient a delivery status is about (outbound, not yet emitted).

``available`` tells which types Postroom emits today; the others are the schemas the
issues that add them (outbound, trust, webhooks) emit.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from postroom.errors import InvalidInput

__all__ = [
    "CATALOGUE",
    "DomainFailing",
    "DomainVerified",
    "EventData",
    "EventSpec",
    "IdentityCreated",
    "IdentityDeleted",
    "IdentityUpdated",
    "MessageBounced",
    "MessageComplained",
    "MessageDeferred",
    "MessageDelivered",
    "MessageQuarantined",
    "MessageReceived",
    "MessageSendUncertain",
    "MessageSent",
    "WebhookDisabled",
    "WebhookTest",
    "spec_of",
    "validate_data",
]

MessageKind = Literal[
    "normal",
    "automated",
    "dsn",
    "list",
    "calendar",
    "mdn",
    "transactional",
    "marketing",
    "auto_reply",
]
MessageSource = Literal["smtp", "imap", "import", "api", "local"]
Operation = Literal["send", "reply", "reply_all", "forward"]
QuarantineReason = Literal[
    "auth_failed",
    "auth_unverified",
    "spam",
    "risky_attachment",
    "blocked_sender",
    "otp_unsolicited",
]
IdentityField = Literal["display_name", "signature_text", "signature_html", "metadata"]


def _message_id() -> Any:
    return Field(description="The message (`msg_...`); fetch it with `GET /v1/messages/{id}`.")


def _smtp_code() -> Any:
    return Field(description="The SMTP reply code of the receiving server (e.g. 250, 421, 550).")


def _enhanced_code() -> Any:
    return Field(description="The RFC 3463 enhanced status code the server gave (`5.1.1`), if any.")


def _recipient() -> Any:
    return Field(
        description="The envelope recipient this status is about, in clear: the one clear "
        "address events carry (the tenant's own outbound recipient)."
    )


class EventData(BaseModel):
    """The ``data`` of an event. Unknown fields are refused when emitting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_type: ClassVar[str]


# --- available today ------------------------------------------------------------------


class MessageReceived(EventData):
    """A message was stored in an inbox (SMTP, IMAP sync, import)."""

    event_type: ClassVar[str] = "message.received"

    message_id: str = _message_id()
    thread_id: str = Field(description="The thread (`thr_...`) it was placed in.")
    source: MessageSource = Field(description="How it arrived.")
    kind: MessageKind = Field(description="What kind of mail it is, as classified on arrival.")
    labels: list[str] = Field(description="Labels it was stored with, sorted.")
    attachment_count: int = Field(ge=0, description="How many attachments it has.")
    size: int = Field(ge=0, description="Size of the raw message in bytes.")
    has_verification: bool = Field(
        description="A verification code or link was found (see `GET .../codes`)."
    )
    flags: list[str] = Field(
        description="Parser and ingestion flags, sorted (e.g. `bcc`, `message_id_conflict`)."
    )


class IdentityCreated(EventData):
    """An inbox was created with its primary address."""

    event_type: ClassVar[str] = "identity.created"

    address_id: str = Field(description="The primary address (`adr_...`).")
    domain_id: str = Field(description="The domain (`dom_...`) of the primary address.")
    client_id: str | None = Field(
        description="The caller's `client_id` the inbox was created with, if any."
    )


class IdentityUpdated(EventData):
    """An inbox's settings or status changed."""

    event_type: ClassVar[str] = "identity.updated"

    fields: list[IdentityField] = Field(description="The settings that changed, sorted.")
    status: Literal["active", "paused", "deleting"] = Field(
        description="The inbox's status now (`deleting` while an erasure runs)."
    )
    status_changed: bool = Field(description="Whether this change paused or resumed it.")


class IdentityDeleted(EventData):
    """An inbox was deleted: its addresses are retired for good, its keys revoked."""

    event_type: ClassVar[str] = "identity.deleted"

    address_ids: list[str] = Field(description="The addresses (`adr_...`) it had.")
    keys_revoked: int = Field(ge=0, description="How many identity keys were revoked.")


# --- later issues ------------------------------------------------------------------------


class MessageSent(EventData):
    """An outbound message was accepted by the next hop for at least one recipient."""

    event_type: ClassVar[str] = "message.sent"

    message_id: str = _message_id()
    thread_id: str
    operation: Operation
    recipient_count: int = Field(ge=1)


class MessageDelivered(EventData):
    """The receiving server accepted the message for one recipient."""

    event_type: ClassVar[str] = "message.delivered"

    message_id: str = _message_id()
    recipient: str = _recipient()
    smtp_code: int | None = _smtp_code()
    enhanced_code: str | None = _enhanced_code()


class MessageDeferred(EventData):
    """A temporary failure for one recipient; another attempt is scheduled."""

    event_type: ClassVar[str] = "message.deferred"

    message_id: str = _message_id()
    recipient: str = _recipient()
    attempt: int = Field(ge=1)
    next_attempt_at: str = Field(description="RFC 3339 UTC time of the next attempt.")
    smtp_code: int | None = _smtp_code()
    enhanced_code: str | None = _enhanced_code()


class MessageBounced(EventData):
    """Delivery to one recipient failed for good (a 5xx, a DSN, or retries spent)."""

    event_type: ClassVar[str] = "message.bounced"

    message_id: str = _message_id()
    recipient: str = _recipient()
    bounce: Literal["hard", "soft"] = Field(
        description="`hard`: the address does not exist or refuses mail; `soft`: retries spent."
    )
    smtp_code: int | None = _smtp_code()
    enhanced_code: str | None = _enhanced_code()
    suppressed: bool = Field(description="The recipient was added to the suppression list.")


class MessageComplained(EventData):
    """A recipient reported the message as spam (feedback loop, ARF)."""

    event_type: ClassVar[str] = "message.complained"

    message_id: str = _message_id()
    recipient: str = _recipient()
    feedback_type: str | None = Field(description="The ARF Feedback-Type (`abuse`, ...).")


class MessageSendUncertain(EventData):
    """A send was interrupted mid-transmission: whether it reached anyone is unknown, and
    it is never retried automatically."""

    event_type: ClassVar[str] = "message.send_uncertain"

    message_id: str = _message_id()
    recipient_count: int = Field(ge=1)


class MessageQuarantined(EventData):
    """An inbound message was stored in quarantine instead of the inbox."""

    event_type: ClassVar[str] = "message.quarantined"

    message_id: str = _message_id()
    thread_id: str
    reason: QuarantineReason


class DomainVerified(EventData):
    """A domain's DNS records check out (it became healthy)."""

    event_type: ClassVar[str] = "domain.verified"

    domain_id: str
    name: str = Field(description="The domain name.")


class DomainFailing(EventData):
    """A verified domain's DNS records no longer check out."""

    event_type: ClassVar[str] = "domain.failing"

    domain_id: str
    name: str = Field(description="The domain name.")
    reason: str = Field(description="A machine code (e.g. `dkim_missing`, `mx_missing`).")


class WebhookDisabled(EventData):
    """Postroom disabled a webhook endpoint."""

    event_type: ClassVar[str] = "webhook.disabled"

    endpoint_id: str = Field(description="The endpoint (`whk_...`).")
    reason: Literal["failing", "gone"] = Field(
        description="`failing`: it failed continuously for 5 days; `gone`: it answered 410."
    )


class WebhookTest(EventData):
    """A test event sent to one webhook endpoint on request."""

    event_type: ClassVar[str] = "webhook.test"

    endpoint_id: str = Field(description="The endpoint the test goes to (`whk_...`).")


ImapStatus = Literal[
    "pending", "ok", "auth_failed", "tls_failed", "unreachable", "throttled", "error"
]


class ImapAccountStatusChanged(EventData):
    """An IMAP account's sync status changed (e.g. the server started refusing the
    password, or became reachable again)."""

    event_type: ClassVar[str] = "imap_account.status_changed"

    account_id: str = Field(description="The IMAP account (`imp_...`).")
    status: ImapStatus
    previous_status: ImapStatus
    reason: str | None = Field(description="A machine code for a failure; null when ok.")


@dataclass(frozen=True)
class EventSpec:
    """One event type: its name, data schema version, model and where it comes from."""

    type: str
    version: int
    data: builtins.type[EventData]
    available: bool
    emitted_by: str
    example: Mapping[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        return (self.data.__doc__ or "").strip().splitlines()[0]

    def json_schema(self) -> dict[str, Any]:
        """The published JSON Schema of this type's ``data``."""
        schema = self.data.model_json_schema()
        schema["title"] = f"{self.type} v{self.version}"
        schema["description"] = " ".join((self.data.__doc__ or "").split())
        return schema


_SPECS: Final[tuple[EventSpec, ...]] = (
    EventSpec(
        "message.received",
        1,
        MessageReceived,
        True,
        "inbound",
        {
            "message_id": "msg_01JC4Z8N8G3W4Q6VJ4K7T2H5RB",
            "thread_id": "thr_01JC4Z8N8G5D0M4N7S9V0X2Y3Z",
            "source": "smtp",
            "kind": "normal",
            "labels": ["inbox"],
            "attachment_count": 1,
            "size": 48213,
            "has_verification": True,
            "flags": [],
        },
    ),
    EventSpec(
        "identity.created",
        1,
        IdentityCreated,
        True,
        "tenancy",
        {
            "address_id": "adr_01JC4Z2B6Q1H8K9M3N4P5R6S7T",
            "domain_id": "dom_01JC4YZ3C2D4E5F6G7H8J9K0M1",
            "client_id": "agent-42",
        },
    ),
    EventSpec(
        "identity.updated",
        1,
        IdentityUpdated,
        True,
        "tenancy",
        {"fields": ["display_name"], "status": "paused", "status_changed": True},
    ),
    EventSpec(
        "identity.deleted",
        1,
        IdentityDeleted,
        True,
        "tenancy",
        {"address_ids": ["adr_01JC4Z2B6Q1H8K9M3N4P5R6S7T"], "keys_revoked": 1},
    ),
    EventSpec(
        "message.sent",
        1,
        MessageSent,
        True,
        "outbound",
        {
            "message_id": "msg_01JC5A0B1C2D3E4F5G6H7J8K9M",
            "thread_id": "thr_01JC4Z8N8G5D0M4N7S9V0X2Y3Z",
            "operation": "reply",
            "recipient_count": 2,
        },
    ),
    EventSpec(
        "message.delivered",
        1,
        MessageDelivered,
        True,
        "outbound",
        {
            "message_id": "msg_01JC5A0B1C2D3E4F5G6H7J8K9M",
            "recipient": "bob@example.org",
            "smtp_code": 250,
            "enhanced_code": "2.0.0",
        },
    ),
    EventSpec(
        "message.deferred",
        1,
        MessageDeferred,
        True,
        "outbound",
        {
            "message_id": "msg_01JC5A0B1C2D3E4F5G6H7J8K9M",
            "recipient": "bob@example.org",
            "attempt": 1,
            "next_attempt_at": "2026-11-30T10:05:00.000Z",
            "smtp_code": 421,
            "enhanced_code": "4.7.0",
        },
    ),
    EventSpec(
        "message.bounced",
        1,
        MessageBounced,
        True,
        "outbound",
        {
            "message_id": "msg_01JC5A0B1C2D3E4F5G6H7J8K9M",
            "recipient": "nobody@example.org",
            "bounce": "hard",
            "smtp_code": 550,
            "enhanced_code": "5.1.1",
            "suppressed": True,
        },
    ),
    EventSpec(
        "message.complained",
        1,
        MessageComplained,
        True,
        "outbound",
        {
            "message_id": "msg_01JC5A0B1C2D3E4F5G6H7J8K9M",
            "recipient": "bob@example.org",
            "feedback_type": "abuse",
        },
    ),
    EventSpec(
        "message.send_uncertain",
        1,
        MessageSendUncertain,
        True,
        "outbound",
        {"message_id": "msg_01JC5A0B1C2D3E4F5G6H7J8K9M", "recipient_count": 3},
    ),
    EventSpec(
        "message.quarantined",
        1,
        MessageQuarantined,
        False,
        "trust",
        {
            "message_id": "msg_01JC4Z8N8G3W4Q6VJ4K7T2H5RB",
            "thread_id": "thr_01JC4Z8N8G5D0M4N7S9V0X2Y3Z",
            "reason": "auth_failed",
        },
    ),
    EventSpec(
        "domain.verified",
        1,
        DomainVerified,
        False,
        "trust",
        {"domain_id": "dom_01JC4YZ3C2D4E5F6G7H8J9K0M1", "name": "mail.acme.example"},
    ),
    EventSpec(
        "domain.failing",
        1,
        DomainFailing,
        False,
        "trust",
        {
            "domain_id": "dom_01JC4YZ3C2D4E5F6G7H8J9K0M1",
            "name": "mail.acme.example",
            "reason": "dkim_missing",
        },
    ),
    EventSpec(
        "webhook.disabled",
        1,
        WebhookDisabled,
        True,
        "webhooks",
        {"endpoint_id": "whk_01JC5B1C2D3E4F5G6H7J8K9M0N", "reason": "failing"},
    ),
    EventSpec(
        "webhook.test",
        1,
        WebhookTest,
        True,
        "webhooks",
        {"endpoint_id": "whk_01JC5B1C2D3E4F5G6H7J8K9M0N"},
    ),
    EventSpec(
        "imap_account.status_changed",
        1,
        ImapAccountStatusChanged,
        True,
        "IMAP sync",
        {
            "account_id": "imp_01JC5B1C2D3E4F5G6H7J8K9M0N",
            "status": "auth_failed",
            "previous_status": "ok",
            "reason": "auth_failed",
        },
    ),
)

CATALOGUE: Final[Mapping[str, EventSpec]] = {spec.type: spec for spec in _SPECS}
_BY_MODEL: Final[Mapping[type[EventData], EventSpec]] = {spec.data: spec for spec in _SPECS}


def spec_of(data: EventData) -> EventSpec:
    """The catalogue entry of a data model instance."""
    return _BY_MODEL[type(data)]


def validate_data(event_type: str, data: Mapping[str, Any]) -> EventData:
    """``data`` checked against its type's schema (InvalidInput ``invalid_event_data``,
    or ``unknown_event_type`` for a type not in the catalogue)."""
    spec = CATALOGUE.get(event_type)
    if spec is None:
        raise InvalidInput(f"no event type {event_type!r}", code="unknown_event_type")
    try:
        return spec.data.model_validate(dict(data), strict=False)
    except ValidationError as exc:
        raise InvalidInput(
            f"invalid data for {event_type}: {exc.error_count()} error(s)",
            code="invalid_event_data",
        ) from None

"""Shapes of sending: send/reply/forward bodies, the outbox, drafts, suppressions."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field

from postroom.api.models.common import Model, Out, time_of, time_req
from postroom.errors import InvalidInput
from postroom.outbound import compose as c
from postroom.outbound.drafts import Draft
from postroom.outbound.policy import SuppressionView, Usage
from postroom.outbound.service import OutboxEntry, SendInput, resolve_send_at

LABEL = r"^[a-z0-9][a-z0-9_:-]{0,63}$"


class AddressIn(Model):
    address: str = Field(min_length=3, max_length=320, examples=["ann@example.com"])
    name: str | None = Field(default=None, max_length=200, examples=["Ann Example"])


Recipients = Annotated[list[AddressIn], Field(max_length=100)]


class AttachmentIn(Model):
    filename: str = Field(min_length=1, max_length=255, examples=["invoice.pdf"])
    content_type: str | None = Field(
        default=None,
        max_length=255,
        description="`type/subtype`; guessed from the file name when left out.",
        examples=["application/pdf"],
    )
    content: str = Field(
        max_length=36 * 1024 * 1024, description="The file's bytes, base64-encoded."
    )
    disposition: Literal["attachment", "inline"] = "attachment"
    content_id: str | None = Field(
        default=None, max_length=250, description="For inline parts referenced as `cid:`."
    )


class ComposeFields(Model):
    """What a send, a reply, a forward and a draft have in common."""

    to: Recipients = []
    cc: Recipients = []
    bcc: Recipients = Field(default=[], description="Envelope only; never in the headers.")
    reply_to: Annotated[list[AddressIn], Field(max_length=10)] = []
    from_: str | None = Field(
        default=None,
        alias="from",
        max_length=320,
        description="One of the inbox's active aliases; default its primary address.",
    )
    subject: str | None = Field(default=None, max_length=998)
    text: str | None = Field(default=None, max_length=5_000_000)
    html: str | None = Field(default=None, max_length=10_000_000)
    attachments: Annotated[list[AttachmentIn], Field(max_length=100)] = []
    headers: dict[str, str] = Field(
        default={},
        max_length=20,
        description="Extra headers: `X-*` and a small allowlist (docs/sending.md).",
    )
    labels: Annotated[list[Annotated[str, Field(pattern=LABEL)]], Field(max_length=20)] = []
    metadata: dict[str, Annotated[str, Field(max_length=512)]] = Field(default={}, max_length=16)
    kind: Literal["transactional", "marketing", "auto_reply"] = "transactional"
    list_unsubscribe: Annotated[list[str], Field(max_length=4)] = Field(
        default=[],
        description="`https:` and/or `mailto:` URIs; required for the marketing kind "
        "(adds List-Unsubscribe and List-Unsubscribe-Post, RFC 8058).",
    )

    model_config = Model.model_config | {"populate_by_name": True}


class SendBody(ComposeFields):
    send_at: str | None = Field(
        default=None,
        max_length=64,
        description="When to send: an RFC 3339 time, or a local time without offset read "
        "in `send_at_zone` (nine o'clock stays nine o'clock across a DST change).",
        examples=["2027-03-29T09:00:00"],
    )
    send_at_zone: str | None = Field(
        default=None, max_length=64, description="IANA time zone.", examples=["Europe/London"]
    )


class ForwardBody(SendBody):
    mode: Literal["inline", "attachment"] = Field(
        default="inline",
        description="`inline` quotes the original; `attachment` attaches it as message/rfc822.",
    )


def _addresses(items: list[AddressIn]) -> tuple[c.Address, ...]:
    return tuple(c.Address(a.address, a.name) for a in items)


def _attachments(items: list[AttachmentIn]) -> tuple[c.OutgoingAttachment, ...]:
    out = []
    for i, a in enumerate(items):
        try:
            data = base64.b64decode(a.content, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(
                "attachment content is not valid base64", field=f"attachments.{i}.content"
            ) from None
        out.append(
            c.OutgoingAttachment(
                filename=a.filename,
                content_type=a.content_type or "",
                data=data,
                disposition=a.disposition,
                content_id=a.content_id,
            )
        )
    return tuple(out)


def send_input(body: ComposeFields, *, forward_mode: str = "inline") -> SendInput:
    send_at = send_zone = None
    if isinstance(body, SendBody):
        send_zone = body.send_at_zone
        if body.send_at is not None:
            send_at = resolve_send_at(body.send_at, body.send_at_zone)
        elif body.send_at_zone is not None:
            raise InvalidInput("send_at_zone needs send_at", field="send_at_zone")
    return SendInput(
        to=_addresses(body.to),
        cc=_addresses(body.cc),
        bcc=_addresses(body.bcc),
        reply_to=_addresses(body.reply_to),
        from_address=body.from_,
        subject=body.subject,
        text=body.text,
        html=body.html,
        attachments=_attachments(body.attachments),
        headers=tuple(body.headers.items()),
        labels=tuple(body.labels),
        metadata=dict(body.metadata),
        kind=body.kind,
        list_unsubscribe=tuple(body.list_unsubscribe),
        send_at=send_at,
        send_at_zone=send_zone,
        forward_mode="attachment" if forward_mode == "attachment" else "inline",
    )


class OutboxRecipientOut(Out):
    address: str
    role: Literal["to", "cc", "bcc"]
    status: Literal["pending", "accepted", "refused", "suppressed"]
    reply_code: int | None
    enhanced_code: str | None
    answered_at: str | None


class OutboxEntryOut(Out):
    id: str = Field(examples=["out_01JD7ZC9X4K2M5N6P8Q0R1S2T3"])
    identity_id: str
    message_id: str = Field(description="The sent copy in the inbox (`msg_...`).")
    operation: Literal["send", "reply", "reply_all", "forward"]
    kind: str
    stage: Literal["recorded", "transmission_begun", "sent", "refused", "cancelled"]
    state: Literal[
        "scheduled", "queued", "deferred", "sending", "uncertain", "sent", "refused", "cancelled"
    ] = Field(
        description="`uncertain`: the connection broke after the message was transmitted "
        "and before the server answered; it is never retried automatically."
    )
    attempt_count: int
    recorded_at: str
    next_attempt_at: str | None
    due_at: str | None
    due_zone: str | None
    last_failure_code: str | None = Field(
        description="`28011` marks an unknown outcome; otherwise a stable code."
    )
    last_reply_code: int | None
    resolution: Literal["delivered", "not_delivered"] | None
    resolved_at: str | None
    recipients: list[OutboxRecipientOut]

    @classmethod
    def of(cls, e: OutboxEntry) -> OutboxEntryOut:
        return cls(
            id=e.id,
            identity_id=e.identity_id,
            message_id=e.message_id,
            operation=e.operation,  # type: ignore[arg-type]
            kind=e.kind,
            stage=e.stage,  # type: ignore[arg-type]
            state=e.state,  # type: ignore[arg-type]
            attempt_count=e.attempt_count,
            recorded_at=time_req(e.recorded_at),
            next_attempt_at=time_of(e.available_at) if e.stage == "recorded" else None,
            due_at=time_of(e.due_at),
            due_zone=e.due_zone_id,
            last_failure_code=e.last_failure_code,
            last_reply_code=e.last_reply_code,
            resolution=e.resolution,  # type: ignore[arg-type]
            resolved_at=time_of(e.resolved_at),
            recipients=[
                OutboxRecipientOut(
                    address=r.address,
                    role=r.role,  # type: ignore[arg-type]
                    status=r.status,  # type: ignore[arg-type]
                    reply_code=r.reply_code,
                    enhanced_code=r.enhanced_code,
                    answered_at=time_of(r.answered_at),
                )
                for r in e.recipients
            ],
        )


class ResolveBody(Model):
    resolution: Literal["delivered", "not_delivered"] = Field(
        description="What the operator established about the uncertain send."
    )


class DraftCreate(ComposeFields):
    operation: Literal["send", "reply", "reply_all", "forward"] = "send"
    message_id: str | None = Field(
        default=None, max_length=64, description="The message a reply or forward is about."
    )
    forward_mode: Literal["inline", "attachment"] = "inline"


class DraftUpdate(ComposeFields):
    forward_mode: Literal["inline", "attachment"] | None = None


def draft_content(body: ComposeFields, *, only_set: bool) -> dict[str, Any]:
    """The authored fields of a draft as stored (attachments stay base64)."""
    data = body.model_dump(by_alias=True, exclude_unset=only_set, mode="json")
    data.pop("operation", None)
    data.pop("message_id", None)
    for i, a in enumerate(body.attachments):
        try:
            base64.b64decode(a.content, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(
                "attachment content is not valid base64", field=f"attachments.{i}.content"
            ) from None
    return {k: v for k, v in data.items() if v is not None or not only_set}


class DraftOut(Out):
    id: str = Field(examples=["drf_01JD7ZC9X4K2M5N6P8Q0R1S2T3"])
    identity_id: str
    operation: str
    message_id: str | None
    revision: int
    content: dict[str, Any] = Field(description="The authored fields, as sent to create/update.")
    created_at: str
    updated_at: str
    sent_as: str | None = Field(description="The outbox entry the draft became, once sent.")

    @classmethod
    def of(cls, d: Draft) -> DraftOut:
        return cls(
            id=d.id,
            identity_id=d.identity_id,
            operation=d.operation,
            message_id=d.source_message_id,
            revision=d.revision,
            content=d.content,
            created_at=time_req(d.composed_at),
            updated_at=time_req(d.revised_at),
            sent_as=d.promoted_to,
        )


class SuppressionCreate(Model):
    tenant_id: str | None = Field(default=None, max_length=64)
    address: str = Field(min_length=3, max_length=320)
    reason: Literal["hard_bounce", "complaint", "unsubscribe", "manual", "provider"] = "manual"
    note: str | None = Field(default=None, max_length=500)
    expires_at: AwareDatetime | None = Field(
        default=None, description="RFC 3339; none = permanent."
    )


class SuppressionOut(Out):
    id: str = Field(description="The keyed hash of the address (the suppression's id).")
    address_hint: str = Field(examples=["a***@example.com"])
    reason: str
    source_message_id: str | None
    note: str | None
    created_at: str
    expires_at: str | None

    @classmethod
    def of(cls, s: SuppressionView) -> SuppressionOut:
        return cls(
            id=s.address_hash,
            address_hint=s.address_hint,
            reason=s.reason,
            source_message_id=s.source_message_id,
            note=s.note,
            created_at=time_req(s.created_at),
            expires_at=time_of(s.expires_at),
        )


class SuppressionCheckOut(Out):
    suppressed: bool
    suppression: SuppressionOut | None


class SendUsageOut(Out):
    day: str = Field(description="The day counted, in the tenant's time zone.")
    identity_sent: int
    identity_cap: int = Field(description="0 = no cap.")
    tenant_sent: int
    tenant_cap: int = Field(description="0 = no cap.")

    @classmethod
    def of(cls, u: Usage) -> SendUsageOut:
        return cls(
            day=u.day,
            identity_sent=u.identity_sent,
            identity_cap=u.identity_cap,
            tenant_sent=u.tenant_sent,
            tenant_cap=u.tenant_cap,
        )

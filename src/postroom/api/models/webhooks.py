"""Shapes of webhook endpoints and their deliveries (``webhooks.*`` routes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, Field

from postroom.api.models.common import Model, Out, time_of, time_req
from postroom.store.webhooks import Delivery, Endpoint
from postroom.webhooks.endpoints import (
    EVENT_TYPE_PATTERN,
    MAX_DESCRIPTION,
    MAX_EVENT_TYPES,
    MAX_IDENTITIES,
    MAX_OVERLAP_MS,
)

Scope = Literal["tenant", "partner", "platform"]
EventType = Annotated[
    str, Field(max_length=100, pattern=EVENT_TYPE_PATTERN, examples=["message.received"])
]
PlainId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")]
Url = Annotated[
    str,
    Field(min_length=1, max_length=2048, examples=["https://hooks.example.com/postroom"]),
]
EventTypes = Annotated[
    list[EventType],
    Field(
        min_length=1,
        max_length=MAX_EVENT_TYPES,
        description='Event types to deliver: `["*"]` for all, exact types '
        "(`message.received`) or families (`message.*`).",
    ),
]
IdentityFilter = Annotated[
    list[PlainId] | None,
    Field(
        min_length=1,
        max_length=MAX_IDENTITIES,
        description="Only events of these identities; null: every identity (and events of none).",
    ),
]
Description = Annotated[str | None, Field(max_length=MAX_DESCRIPTION)]


class WebhookCreate(Model):
    url: Url
    description: Description = None
    event_types: EventTypes = Field(default_factory=lambda: ["*"])
    identity_ids: IdentityFilter = None
    enabled: bool = True
    scope: Scope | None = Field(
        default=None,
        description="tenant, partner or platform; omitted: tenant when tenant_id is given, "
        "else the calling key's level.",
    )
    tenant_id: Annotated[str | None, Field(max_length=64)] = None
    partner_id: Annotated[str | None, Field(max_length=64)] = None


class WebhookUpdate(Model):
    url: Url | None = None
    description: Description = None
    event_types: EventTypes | None = None
    identity_ids: IdentityFilter = None
    enabled: bool | None = None


class WebhookRotate(Model):
    overlap_seconds: Annotated[
        int,
        Field(
            ge=0,
            le=MAX_OVERLAP_MS // 1000,
            description="How long the previous secret keeps signing beside the new one "
            "(0: stops at once).",
        ),
    ] = 86_400


class WebhookReplay(Model):
    event_id: Annotated[str | None, Field(max_length=64)] = None
    since: AwareDatetime | None = Field(
        default=None, description="Replay the events at or after this time (RFC 3339)."
    )
    until: AwareDatetime | None = Field(
        default=None, description="... and before this time; omitted: now."
    )


class WebhookOut(Out):
    id: str
    scope: Scope
    tenant_id: str | None
    partner_id: str | None
    url: str
    description: str | None
    event_types: list[str]
    identity_ids: list[str] | None
    enabled: bool
    disabled_reason: str | None = Field(description="manual or failing; null when enabled.")
    consecutive_failures: int
    failing_since: str | None = Field(description="Start of the current failure streak.")
    previous_secret_until: str | None = Field(
        description="While set and in the future, the previous secret signs too."
    )
    created_at: str
    updated_at: str

    @classmethod
    def of(cls, endpoint: Endpoint) -> WebhookOut:
        return cls(
            id=endpoint.id,
            scope=endpoint.scope,  # type: ignore[arg-type]
            tenant_id=endpoint.tenant_id,
            partner_id=endpoint.partner_id,
            url=endpoint.url,
            description=endpoint.description,
            event_types=list(endpoint.event_types),
            identity_ids=None if endpoint.identity_ids is None else list(endpoint.identity_ids),
            enabled=endpoint.enabled,
            disabled_reason=endpoint.disabled_reason,
            consecutive_failures=endpoint.consecutive_failures,
            failing_since=time_of(endpoint.failing_since),
            previous_secret_until=time_of(endpoint.prev_secret_expires_at),
            created_at=time_req(endpoint.created_at),
            updated_at=time_req(endpoint.updated_at),
        )


class WebhookWithSecret(WebhookOut):
    secret: str | None = Field(
        default=None,
        description="The signing secret (whsec_...), shown this once; absent on an "
        "Idempotency-Key replay.",
    )
    secret_replayed: bool | None = Field(
        default=None, description="false on an Idempotency-Key replay: the secret is not shown."
    )


class WebhookTestOut(Out):
    webhook_id: str
    event_id: str = Field(description="The webhook.test event; also the webhook-id header.")
    job_id: str


class WebhookReplayOut(Out):
    webhook_id: str
    queued: int = Field(description="Events queued for delivery.")


class DeliveryOut(Out):
    id: str
    webhook_id: str
    event_id: str
    event_type: str
    attempt: int = Field(description="1 for the first attempt of this event to this endpoint.")
    status: Literal["succeeded", "failed", "dead"]
    http_status: int | None
    error: str | None = Field(
        description="Why it failed: status_4xx, status_5xx, status_3xx, status_410, timeout, "
        "connection_refused, connection_reset, tls, dns, forbidden_address, ..."
    )
    duration_ms: int | None
    next_attempt_at: str | None
    created_at: str

    @classmethod
    def of(cls, delivery: Delivery) -> DeliveryOut:
        return cls(
            id=delivery.id,
            webhook_id=delivery.endpoint_id,
            event_id=delivery.event_id,
            event_type=delivery.event_type,
            attempt=delivery.attempt,
            status=delivery.status,  # type: ignore[arg-type]
            http_status=delivery.http_status,
            error=delivery.error,
            duration_ms=delivery.duration_ms,
            next_attempt_at=time_of(delivery.next_attempt_at),
            created_at=time_req(delivery.created_at),
        )

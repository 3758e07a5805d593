"""Webhook endpoints: create, list, get, change, delete, rotate the secret, send a test
event, read the delivery log and replay events.

Reach (see :mod:`postroom.webhooks.endpoints`): platform keys every endpoint, partner
keys their partner's endpoints and their tenants', tenant keys their tenant's. An
endpoint outside reach answers 404 ``webhook_not_found``; a scope above the key's level
answers 403 ``permission_denied`` (audited as ``auth.denied``). The secret is in the
responses to create and rotate, once; an Idempotency-Key replay returns the body without
it (``"secret_replayed": false``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from postroom.api.core import (
    Caller,
    Principal,
    app_of,
    decode_cursor,
    endpoint,
    paginate,
    refusals,
)
from postroom.api.idempotency import run_idempotent
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.webhooks import (
    DeliveryOut,
    WebhookCreate,
    WebhookOut,
    WebhookReplay,
    WebhookReplayOut,
    WebhookRotate,
    WebhookTestOut,
    WebhookUpdate,
    WebhookWithSecret,
)
from postroom.store import webhooks as rows
from postroom.store.webhooks import Endpoint
from postroom.webhooks import endpoints as service
from postroom.webhooks.endpoints import Actor, EndpointChange, NewEndpoint

router = APIRouter(tags=["webhooks"])

DEFAULT_OVERLAP_SECONDS = 86_400


def _actor(caller: Principal) -> Actor:
    return Actor(caller.level, caller.tenant_id, caller.partner_id, caller.key_id)


def _with_secret(found: Endpoint, secret: str) -> dict[str, object]:
    return {**WebhookOut.of(found).model_dump(mode="json"), "secret": secret}


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


@endpoint(router, "webhooks.create", status_code=201, response_model=WebhookWithSecret)
def create_webhook(body: WebhookCreate, request: Request, caller: Caller) -> JSONResponse:
    app = app_of(request)
    spec = NewEndpoint(
        url=body.url,
        description=body.description,
        event_types=body.event_types,
        identity_ids=body.identity_ids,
        enabled=body.enabled,
        scope=body.scope,
        tenant_id=body.tenant_id,
        partner_id=body.partner_id,
    )
    with refusals(request, caller), app.db.read() as tx:
        service.check_owner(tx, _actor(caller), spec)

    def action() -> tuple[int, dict[str, object], str | None]:
        created, secret = service.create(app, _actor(caller), spec)
        return 201, _with_secret(created, secret), created.tenant_id

    return run_idempotent(request, caller, body, action, secret_field="secret")


@endpoint(router, "webhooks.list", response_model=Page[WebhookOut])
def list_webhooks(
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    tenant_id: Annotated[
        str | None, Query(max_length=64, description="Only this tenant's endpoints.")
    ] = None,
) -> Page[WebhookOut]:
    position = decode_cursor(request, cursor, (str,))
    with app_of(request).db.read() as tx:
        found = service.list_in_reach(
            tx,
            _actor(caller),
            tenant_id=tenant_id,
            after=None if position is None else str(position[0]),
            limit=limit + 1,
        )
    page, next_cursor = paginate(request, found, limit, lambda e: [e.id])
    return Page[WebhookOut](data=[WebhookOut.of(e) for e in page], next_cursor=next_cursor)


@endpoint(router, "webhooks.get", response_model=WebhookOut)
def get_webhook(webhook_id: str, request: Request, caller: Caller) -> WebhookOut:
    with app_of(request).db.read() as tx:
        return WebhookOut.of(service.endpoint_in_reach(tx, _actor(caller), webhook_id))


@endpoint(router, "webhooks.update", response_model=WebhookOut)
def update_webhook(
    webhook_id: str, body: WebhookUpdate, request: Request, caller: Caller
) -> WebhookOut:
    given = body.model_fields_set
    # Fields that cannot be null are left alone when sent as null.
    change = EndpointChange(
        **{
            name: getattr(body, name)
            for name in ("url", "description", "event_types", "identity_ids", "enabled")
            if name in given
            and (getattr(body, name) is not None or name in ("description", "identity_ids"))
        }
    )
    updated = service.update(app_of(request), _actor(caller), webhook_id, change)
    return WebhookOut.of(updated)


@endpoint(
    router,
    "webhooks.delete",
    status_code=204,
    response_class=Response,
    response_model=None,
)
def delete_webhook(webhook_id: str, request: Request, caller: Caller) -> Response:
    service.delete(app_of(request), _actor(caller), webhook_id)
    return Response(status_code=204)


@endpoint(router, "webhooks.rotate", response_model=WebhookWithSecret)
def rotate_webhook_secret(
    webhook_id: str, request: Request, caller: Caller, body: WebhookRotate | None = None
) -> JSONResponse:
    app = app_of(request)
    overlap = DEFAULT_OVERLAP_SECONDS if body is None else body.overlap_seconds
    with app.db.read() as tx:
        service.endpoint_in_reach(tx, _actor(caller), webhook_id)

    def action() -> tuple[int, dict[str, object], str | None]:
        rotated, secret = service.rotate(app, _actor(caller), webhook_id, overlap * 1000)
        return 200, _with_secret(rotated, secret), rotated.tenant_id

    return run_idempotent(request, caller, body, action, secret_field="secret")


@endpoint(router, "webhooks.test", status_code=202, response_model=WebhookTestOut)
def test_webhook(webhook_id: str, request: Request, caller: Caller) -> JSONResponse:
    app = app_of(request)
    with app.db.read() as tx:
        found = service.endpoint_in_reach(tx, _actor(caller), webhook_id)

    def action() -> tuple[int, dict[str, object], str | None]:
        event_id, job_id = service.send_test(app, _actor(caller), webhook_id)
        out = WebhookTestOut(webhook_id=webhook_id, event_id=event_id, job_id=job_id)
        return 202, out.model_dump(mode="json"), found.tenant_id

    return run_idempotent(request, caller, None, action)


@endpoint(router, "webhooks.deliveries", response_model=Page[DeliveryOut])
def list_webhook_deliveries(
    webhook_id: str,
    request: Request,
    caller: Caller,
    status: Annotated[
        Literal["succeeded", "failed", "dead"] | None,
        Query(description="Only attempts with this outcome."),
    ] = None,
    event_id: Annotated[
        str | None,
        Query(max_length=64, pattern=r"^[A-Za-z0-9_\-]+$", description="Only this event's."),
    ] = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[DeliveryOut]:
    position = decode_cursor(request, cursor, (int, str))
    with app_of(request).db.read() as tx:
        found = service.endpoint_in_reach(tx, _actor(caller), webhook_id)
        attempts = rows.list_deliveries(
            tx, found.id, status=status, event_id=event_id, before=position, limit=limit + 1
        )
    page, next_cursor = paginate(request, attempts, limit, lambda d: [d.created_at, d.id])
    return Page[DeliveryOut](data=[DeliveryOut.of(d) for d in page], next_cursor=next_cursor)


@endpoint(router, "webhooks.replay", status_code=202, response_model=WebhookReplayOut)
def replay_webhook(
    webhook_id: str, body: WebhookReplay, request: Request, caller: Caller
) -> JSONResponse:
    app = app_of(request)
    with app.db.read() as tx:
        found = service.endpoint_in_reach(tx, _actor(caller), webhook_id)

    def action() -> tuple[int, dict[str, object], str | None]:
        queued = service.replay(
            app,
            _actor(caller),
            webhook_id,
            event_id=body.event_id,
            since=_ms(body.since),
            until=_ms(body.until),
        )
        out = WebhookReplayOut(webhook_id=webhook_id, queued=len(queued))
        return 202, out.model_dump(mode="json"), found.tenant_id

    return run_idempotent(request, caller, body, action)

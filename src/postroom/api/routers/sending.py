"""Sending: send, reply, reply-all, forward, drafts, the outbox, suppressions, usage.

Reach: the inbox in the path (or of the draft / outbox entry) must be in the key's reach,
else 404. ``Idempotency-Key`` on a send is honoured twice over: the response is replayed
(seed 000 idempotency_records) and the outbox refuses a second record for the same
(key, Idempotency-Key) (seed 003), so the same authored request is one send.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from postroom.api.core import (
    Caller,
    Principal,
    app_of,
    endpoint,
    owning_tenant,
    paginate,
    tenant_ids_in_reach,
)
from postroom.api.errors import ApiError
from postroom.api.idempotency import HEADER, run_idempotent
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.outbound import (
    DraftCreate,
    DraftOut,
    DraftUpdate,
    ForwardBody,
    OutboxEntryOut,
    ResolveBody,
    SendBody,
    SendUsageOut,
    SuppressionCheckOut,
    SuppressionCreate,
    SuppressionOut,
    draft_content,
    send_input,
)
from postroom.api.routers.messages import (
    identity_reached,
    message_in_reach,
    position_of,
    sees_identity,
)
from postroom.errors import NotFound
from postroom.outbound import drafts as draft_service
from postroom.outbound import policy
from postroom.outbound import service as outbox
from postroom.outbound.service import Operation, Requester
from postroom.store import outbox as outbox_rows
from postroom.store import tenancy as directory

router = APIRouter(tags=["sending"])


def _requester(request: Request, caller: Principal) -> Requester:
    key = request.headers.get(HEADER)
    return Requester("api", None if key is None else f"{caller.key_id}:{key}", caller.key_id)


def _send(
    request: Request,
    caller: Caller,
    identity_id: str,
    body: SendBody,
    operation: Operation,
    message_id: str | None = None,
) -> JSONResponse:
    app = app_of(request)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        if message_id is not None:
            owner = message_in_reach(tx, caller, message_id)
            if owner.identity_id != identity.id:
                raise NotFound(f"no message {message_id[:80]!r}", code="message_not_found")
    inp = send_input(body, forward_mode=getattr(body, "mode", "inline"))
    requester = _requester(request, caller)

    def action() -> tuple[int, dict[str, Any], str | None]:
        made = outbox.record_send(
            app, identity.id, inp, requester, operation=operation, source_message_id=message_id
        )
        return 202, OutboxEntryOut.of(made).model_dump(mode="json"), identity.tenant_id

    return run_idempotent(request, caller, body, action)


@endpoint(router, "messages.send", status_code=202, response_model=OutboxEntryOut)
def send_message(
    identity_id: str, body: SendBody, request: Request, caller: Caller
) -> JSONResponse:
    return _send(request, caller, identity_id, body, "send")


@endpoint(router, "messages.reply", status_code=202, response_model=OutboxEntryOut)
def reply(
    identity_id: str, message_id: str, body: SendBody, request: Request, caller: Caller
) -> JSONResponse:
    return _send(request, caller, identity_id, body, "reply", message_id)


@endpoint(router, "messages.reply_all", status_code=202, response_model=OutboxEntryOut)
def reply_all(
    identity_id: str, message_id: str, body: SendBody, request: Request, caller: Caller
) -> JSONResponse:
    return _send(request, caller, identity_id, body, "reply_all", message_id)


@endpoint(router, "messages.forward", status_code=202, response_model=OutboxEntryOut)
def forward(
    identity_id: str, message_id: str, body: ForwardBody, request: Request, caller: Caller
) -> JSONResponse:
    return _send(request, caller, identity_id, body, "forward", message_id)


@endpoint(router, "sending.usage", response_model=SendUsageOut)
def usage(identity_id: str, request: Request, caller: Caller) -> SendUsageOut:
    app = app_of(request)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        tenant = directory.get_tenant(tx, identity.tenant_id)
    assert tenant is not None
    return SendUsageOut.of(policy.usage(app, tenant.id, tenant.timezone, identity.id))


# --- the outbox -----------------------------------------------------------------------


def _entry_in_reach(request: Request, caller: Principal, outbox_id: str) -> outbox_rows.Record:
    app = app_of(request)
    missing = NotFound(f"no outbox entry {outbox_id[:80]!r}", code="outbox_entry_not_found")
    if "\x00" in outbox_id or len(outbox_id) > 200:
        raise missing
    with app.db.read() as tx:
        record = outbox_rows.get(tx, outbox_id)
        if record is None or not sees_identity(tx, caller, record.identity_id):
            raise missing
    return record


StageQuery = Annotated[
    str | None,
    Query(
        pattern=r"^(recorded|transmission_begun|sent|refused|cancelled)$",
        description="Only sends at this stage.",
    ),
]


@endpoint(router, "outbox.list", response_model=Page[OutboxEntryOut])
def list_outbox(
    request: Request,
    caller: Caller,
    identity_id: Annotated[str | None, Query(max_length=64)] = None,
    tenant_id: Annotated[str | None, Query(max_length=64)] = None,
    stage: StageQuery = None,
    outstanding: Annotated[
        bool, Query(description="Only sends not yet sent, refused or cancelled.")
    ] = False,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[OutboxEntryOut]:
    app = app_of(request)
    with app.db.read() as tx:
        if caller.level == "identity":
            identity_id = caller.identity_id
        if identity_id is not None:
            identity = identity_reached(tx, caller, identity_id)
            tenant = identity.tenant_id
        else:
            tenant = owning_tenant(tx, caller, tenant_id).id
    after = position_of(request, cursor)
    f = outbox_rows.OutboxFilter(
        tenant_id=tenant,
        identity_id=identity_id,
        stages=(stage,) if stage else (),
        outstanding=outstanding,
    )
    entries = outbox.list_entries(app, f, after, limit + 1)
    page, next_cursor = paginate(request, entries, limit, lambda e: (e.recorded_at, e.id))
    return Page[OutboxEntryOut](data=[OutboxEntryOut.of(e) for e in page], next_cursor=next_cursor)


@endpoint(router, "outbox.get", response_model=OutboxEntryOut)
def get_outbox(outbox_id: str, request: Request, caller: Caller) -> OutboxEntryOut:
    record = _entry_in_reach(request, caller, outbox_id)
    return OutboxEntryOut.of(outbox.get_entry(app_of(request), record.id))


@endpoint(router, "outbox.cancel", response_model=OutboxEntryOut)
def cancel_outbox(outbox_id: str, request: Request, caller: Caller) -> OutboxEntryOut:
    record = _entry_in_reach(request, caller, outbox_id)
    return OutboxEntryOut.of(outbox.cancel(app_of(request), record.id))


@endpoint(router, "outbox.resolve", response_model=OutboxEntryOut)
def resolve_outbox(
    outbox_id: str, body: ResolveBody, request: Request, caller: Caller
) -> OutboxEntryOut:
    record = _entry_in_reach(request, caller, outbox_id)
    return OutboxEntryOut.of(outbox.resolve(app_of(request), record.id, body.resolution))


# --- drafts ---------------------------------------------------------------------------


def _draft_in_reach(request: Request, caller: Principal, draft_id: str) -> draft_service.Draft:
    app = app_of(request)
    missing = NotFound(f"no draft {draft_id[:80]!r}", code="draft_not_found")
    if "\x00" in draft_id or len(draft_id) > 200:
        raise missing
    try:
        draft = draft_service.get(app, draft_id)
    except NotFound:
        raise missing from None
    with app.db.read() as tx:
        if not sees_identity(tx, caller, draft.identity_id):
            raise missing
    return draft


@endpoint(router, "drafts.create", status_code=201, response_model=DraftOut)
def create_draft(identity_id: str, body: DraftCreate, request: Request, caller: Caller) -> DraftOut:
    app = app_of(request)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        if body.message_id is not None:
            owner = message_in_reach(tx, caller, body.message_id)
            if owner.identity_id != identity.id:
                raise NotFound(f"no message {body.message_id[:80]!r}", code="message_not_found")
    content = draft_content(body, only_set=False)
    draft = draft_service.create(
        app,
        identity.tenant_id,
        identity.id,
        content,
        operation=body.operation,
        source_message_id=body.message_id,
    )
    return DraftOut.of(draft)


@endpoint(router, "drafts.list", response_model=Page[DraftOut])
def list_drafts(
    identity_id: str,
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[DraftOut]:
    app = app_of(request)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
    after = position_of(request, cursor)
    found = draft_service.list_page(app, identity.id, after, limit + 1)
    page, next_cursor = paginate(request, found, limit, lambda d: (d.revised_at, d.id))
    return Page[DraftOut](data=[DraftOut.of(d) for d in page], next_cursor=next_cursor)


@endpoint(router, "drafts.get", response_model=DraftOut)
def get_draft(draft_id: str, request: Request, caller: Caller) -> DraftOut:
    return DraftOut.of(_draft_in_reach(request, caller, draft_id))


@endpoint(router, "drafts.update", response_model=DraftOut)
def update_draft(draft_id: str, body: DraftUpdate, request: Request, caller: Caller) -> DraftOut:
    draft = _draft_in_reach(request, caller, draft_id)
    changes = draft_content(body, only_set=True)
    return DraftOut.of(draft_service.update(app_of(request), draft.id, changes))


@endpoint(router, "drafts.delete", status_code=204, response_class=Response, response_model=None)
def delete_draft(draft_id: str, request: Request, caller: Caller) -> Response:
    draft = _draft_in_reach(request, caller, draft_id)
    draft_service.delete(app_of(request), draft.id)
    return Response(status_code=204)


@endpoint(router, "drafts.send", status_code=202, response_model=OutboxEntryOut)
def send_draft(draft_id: str, request: Request, caller: Caller) -> OutboxEntryOut:
    draft = _draft_in_reach(request, caller, draft_id)
    return OutboxEntryOut.of(draft_service.send(app_of(request), draft.id, caller.key_id))


# --- suppressions ---------------------------------------------------------------------


TenantQuery = Annotated[
    str | None, Query(max_length=64, description="Required for platform and partner keys.")
]


@endpoint(router, "suppressions.list", response_model=Page[SuppressionOut])
def list_suppressions(
    request: Request,
    caller: Caller,
    tenant_id: TenantQuery = None,
    reason: Annotated[
        str | None,
        Query(pattern=r"^(hard_bounce|complaint|unsubscribe|manual|provider)$"),
    ] = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[SuppressionOut]:
    app = app_of(request)
    with app.db.read() as tx:
        tenant = owning_tenant(tx, caller, tenant_id)
    after = position_of(request, cursor)
    found = policy.list_suppressions(app, tenant.id, after, limit + 1, reason)
    page, next_cursor = paginate(request, found, limit, lambda s: (s.created_at, s.address_hash))
    return Page[SuppressionOut](data=[SuppressionOut.of(s) for s in page], next_cursor=next_cursor)


@endpoint(router, "suppressions.create", status_code=201, response_model=SuppressionOut)
def create_suppression(body: SuppressionCreate, request: Request, caller: Caller) -> SuppressionOut:
    app = app_of(request)
    with app.db.read() as tx:
        tenant = owning_tenant(tx, caller, body.tenant_id)
    expires = None if body.expires_at is None else int(body.expires_at.timestamp() * 1000)
    made = policy.add_suppression(
        app, tenant.id, body.address, reason=body.reason, note=body.note, expires_at=expires
    )
    return SuppressionOut.of(made)


@endpoint(router, "suppressions.check", response_model=SuppressionCheckOut)
def check_suppression(
    request: Request,
    caller: Caller,
    address: Annotated[str, Query(min_length=3, max_length=320)],
    tenant_id: TenantQuery = None,
) -> SuppressionCheckOut:
    app = app_of(request)
    with app.db.read() as tx:
        tenant = owning_tenant(tx, caller, tenant_id)
    found = policy.check_suppression(app, tenant.id, address)
    return SuppressionCheckOut(
        suppressed=found is not None,
        suppression=None if found is None else SuppressionOut.of(found),
    )


@endpoint(
    router, "suppressions.delete", status_code=204, response_class=Response, response_model=None
)
def delete_suppression(
    suppression_id: str, request: Request, caller: Caller, tenant_id: TenantQuery = None
) -> Response:
    app = app_of(request)
    with app.db.read() as tx:
        if tenant_id is not None or caller.tenant_id is not None:
            tenant = owning_tenant(tx, caller, tenant_id).id
        else:
            # Platform and partner keys: the tenant in reach holding this suppression.
            reach = tenant_ids_in_reach(tx, caller)
            holders = [
                t
                for t in outbox_rows.tenants_suppressing(tx, suppression_id[:128])
                if reach is None or t in reach
            ]
            if len(holders) > 1:
                raise ApiError(
                    "several tenants hold this suppression: name the tenant (tenant_id)",
                    code="tenant_required",
                    status=422,
                )
            if not holders:
                raise NotFound("no such suppression", code="suppression_not_found")
            tenant = holders[0]
    policy.remove_suppression_by_id(app, tenant, suppression_id)
    return Response(status_code=204)

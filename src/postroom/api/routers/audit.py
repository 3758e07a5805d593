"""The audit log: who changed what, newest first.

Platform keys read every entry; partner keys the entries of their tenants and those
their own keys wrote; tenant keys their tenant's. (Identity keys cannot hold
``audit:read``.)
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from postroom.api.core import Caller, Principal, app_of, decode_cursor, endpoint, paginate
from postroom.api.models.audit import AuditEntryOut
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.query import PRINTABLE, Since, Until, rfc3339_ms
from postroom.store import audit as audit_rows
from postroom.store.audit import AuditQuery, AuditReach

router = APIRouter(tags=["audit"])


def reach_of(caller: Principal) -> AuditReach:
    if caller.level == "platform":
        return AuditReach()
    if caller.level == "partner":
        return AuditReach(partner_id=caller.partner_id)
    return AuditReach(tenant_id=caller.tenant_id)


@endpoint(router, "audit.list", response_model=Page[AuditEntryOut])
def list_audit(
    request: Request,
    caller: Caller,
    actor_key_id: Annotated[
        str | None,
        Query(max_length=200, pattern=PRINTABLE, description="Only entries this key wrote."),
    ] = None,
    action: Annotated[
        str | None,
        Query(max_length=200, pattern=PRINTABLE, description="An action (`tenant.create`)."),
    ] = None,
    target_type: Annotated[
        str | None,
        Query(max_length=200, pattern=PRINTABLE, description="A target type (`tenant`)."),
    ] = None,
    target_id: Annotated[
        str | None,
        Query(max_length=200, pattern=PRINTABLE, description="A target's id."),
    ] = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[AuditEntryOut]:
    position = decode_cursor(request, cursor, (int, str))
    query = AuditQuery(
        actor_key_id=actor_key_id,
        action=action,
        target_type=target_type,
        target_id=target_id,
        since=None if since is None else rfc3339_ms(since),
        until=None if until is None else rfc3339_ms(until),
    )
    with app_of(request).db.read() as tx:
        rows = audit_rows.list_page(tx, reach_of(caller), query, before=position, limit=limit + 1)
    page, next_cursor = paginate(request, rows, limit, lambda e: [e.created_at, e.id])
    return Page[AuditEntryOut](data=[AuditEntryOut.of(e) for e in page], next_cursor=next_cursor)

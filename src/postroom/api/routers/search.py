"""Search: words over the lexical index of one inbox, or of every inbox in reach.

``GET /v1/identities/{identity_id}/search`` reads one identity (reach as for messages);
``GET /v1/search`` reads an identity key's own identity, a tenant key's tenant, or —
for platform and partner keys, which must name it — the tenant ``tenant_id``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from postroom.api.core import (
    Caller,
    Principal,
    app_of,
    decode_cursor,
    endpoint,
    paginate,
    tenant_in_reach,
)
from postroom.api.errors import ApiError
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.mail import SearchHitOut
from postroom.api.routers.messages import identity_reached
from postroom.errors import NotFound
from postroom.mailbox import search as mailbox
from postroom.store.db import Tx
from postroom.store.search_index import SearchScope

router = APIRouter(tags=["search"])

Q = Annotated[
    str,
    Query(max_length=1000, description="Words to find; every word must occur (any order)."),
]


def _offset(request: Request, cursor: str | None) -> int:
    position = decode_cursor(request, cursor)
    if position is None:
        return 0
    if len(position) != 1 or not isinstance(position[0], int) or position[0] < 0:
        raise ApiError("the cursor is invalid or has expired", code="invalid_cursor")
    return int(position[0])


def _page(
    request: Request, tx: Tx, q: str, scope: SearchScope, limit: int, cursor: str | None
) -> Page[SearchHitOut]:
    offset = _offset(request, cursor)
    hits = mailbox.search(tx, q, scope, offset=offset, limit=limit + 1)
    page, next_cursor = paginate(
        request, list(enumerate(hits, start=offset)), limit, lambda h: [h[0] + 1]
    )
    return Page[SearchHitOut](
        data=[SearchHitOut.of(hit) for _, hit in page], next_cursor=next_cursor
    )


def _tenant_scope(tx: Tx, caller: Principal, tenant_id: str | None) -> SearchScope:
    if caller.level == "identity":
        assert caller.identity_id is not None
        if tenant_id is not None and tenant_id != caller.tenant_id:
            raise NotFound(f"no tenant {tenant_id[:80]!r}", code="tenant_not_found")
        identity = identity_reached(tx, caller, caller.identity_id)
        return SearchScope(identity_id=identity.id)
    if caller.tenant_id is not None:
        if tenant_id is not None and tenant_id != caller.tenant_id:
            raise NotFound(f"no tenant {tenant_id[:80]!r}", code="tenant_not_found")
        return SearchScope(tenant_id=tenant_in_reach(tx, caller, caller.tenant_id).id)
    if tenant_id is None:
        raise ApiError(
            "platform and partner keys name the tenant to search: tenant_id",
            code="tenant_required",
            status=422,
        )
    if "\x00" in tenant_id:
        raise NotFound(f"no tenant {tenant_id[:80]!r}", code="tenant_not_found")
    return SearchScope(tenant_id=tenant_in_reach(tx, caller, tenant_id).id)


@endpoint(router, "search.identity", response_model=Page[SearchHitOut])
def search_identity(
    identity_id: str,
    q: Q,
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[SearchHitOut]:
    with app_of(request).db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        return _page(request, tx, q, SearchScope(identity_id=identity.id), limit, cursor)


@endpoint(router, "search.tenant", response_model=Page[SearchHitOut])
def search_tenant(
    q: Q,
    request: Request,
    caller: Caller,
    tenant_id: Annotated[
        str | None,
        Query(max_length=200, description="The tenant (platform and partner keys)."),
    ] = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[SearchHitOut]:
    with app_of(request).db.read() as tx:
        scope = _tenant_scope(tx, caller, tenant_id)
        return _page(request, tx, q, scope, limit, cursor)

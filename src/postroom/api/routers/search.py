"""Search: the query language over the lexical index of one inbox, or every inbox in reach.

``GET /v1/identities/{identity_id}/search`` reads one identity (reach as for messages);
``GET /v1/search`` reads an identity key's own identity, a tenant key's tenant, or —
for platform and partner keys, which must name it — the tenant ``tenant_id``.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

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
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit
from postroom.api.models.mail import SearchHitOut, SearchPageOut
from postroom.api.routers.messages import identity_reached
from postroom.errors import NotFound
from postroom.mailbox import search as mailbox
from postroom.search.query import QueryError
from postroom.store.db import Tx
from postroom.store.search_index import SearchScope

router = APIRouter(tags=["search"])

Q = Annotated[
    str,
    Query(
        max_length=1000,
        description='The query (docs/search.md): words, "phrases", -negation, OR,'
        " parentheses, prefix*, and fields such as from:, subject:, label:, is:unread,"
        " has:attachment, before:, newer_than:, ref:.",
    ),
]
Sort = Annotated[
    Literal["relevance", "date"],
    Query(description="relevance (best first, ties newest first) or date (newest first)."),
]
Group = Annotated[
    Literal["thread"] | None,
    Query(description="thread: one hit per thread (its best message) with thread_hits."),
]


def _digest(q: str, sort: str, group: str | None) -> str:
    """Ties a cursor to the search it was issued for."""
    return hashlib.sha256(f"{q}\x00{sort}\x00{group}".encode()).hexdigest()[:16]


def _offset(request: Request, cursor: str | None, digest: str) -> int:
    position = decode_cursor(request, cursor, (int, str))
    if position is None:
        return 0
    if position[0] < 0 or position[1] != digest:
        raise ApiError("the cursor is invalid or has expired", code="invalid_cursor")
    return int(position[0])


def _page(
    request: Request,
    tx: Tx,
    q: str,
    scope: SearchScope,
    params: tuple[str, str | None, int, str | None],
) -> SearchPageOut:
    sort, group, limit, cursor = params
    digest = _digest(q, sort, group)
    offset = _offset(request, cursor, digest)
    try:
        result = mailbox.search(
            tx,
            q,
            scope,
            offset=offset,
            limit=limit + 1,
            now_ms=app_of(request).clock.now_ms(),
            sort=sort,
            group=group,
        )
    except QueryError as exc:
        raise ApiError(
            str(exc), code="invalid_query", status=422, extra={"position": exc.position}
        ) from None
    page, next_cursor = paginate(
        request,
        list(enumerate(result.hits, start=offset)),
        limit,
        lambda h: [h[0] + 1, digest],
    )
    return SearchPageOut(
        data=[SearchHitOut.of(hit) for _, hit in page],
        next_cursor=next_cursor,
        total=result.total if result.total_exact else "10000+",
        fuzzy=result.fuzzy,
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


@endpoint(
    router,
    "search.identity",
    response_model=SearchPageOut,
    responses={422: {"description": "invalid_query (with position) or validation_failed"}},
)
def search_identity(
    identity_id: str,
    q: Q,
    request: Request,
    caller: Caller,
    sort: Sort = "relevance",
    group: Group = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> SearchPageOut:
    with app_of(request).db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        scope = SearchScope(identity_id=identity.id)
        return _page(request, tx, q, scope, (sort, group, limit, cursor))


@endpoint(
    router,
    "search.tenant",
    response_model=SearchPageOut,
    responses={422: {"description": "invalid_query (with position), tenant_required"}},
)
def search_tenant(
    q: Q,
    request: Request,
    caller: Caller,
    tenant_id: Annotated[
        str | None,
        Query(max_length=200, description="The tenant (platform and partner keys)."),
    ] = None,
    sort: Sort = "relevance",
    group: Group = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> SearchPageOut:
    with app_of(request).db.read() as tx:
        scope = _tenant_scope(tx, caller, tenant_id)
        return _page(request, tx, q, scope, (sort, group, limit, cursor))

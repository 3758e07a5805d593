"""Events: the history of what happened, as the envelopes webhooks deliver.

Platform keys read every event; partner keys the events of their tenants (and those
stamped with the partner); tenant keys their tenant's; identity keys their identity's.
A list runs oldest first so a consumer can follow it with ``cursor``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from postroom.api.core import Caller, Principal, app_of, decode_cursor, endpoint, paginate
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.events import EventOut
from postroom.api.models.query import Since, Until, is_plain_id, rfc3339_ms
from postroom.errors import NotFound
from postroom.store import events as event_rows
from postroom.store.events import EventQuery, EventReach

router = APIRouter(tags=["events"])


def reach_of(caller: Principal) -> EventReach:
    if caller.level == "platform":
        return EventReach()
    if caller.level == "partner":
        return EventReach(partner_id=caller.partner_id)
    if caller.level == "identity":
        return EventReach(identity_id=caller.identity_id)
    return EventReach(tenant_id=caller.tenant_id)


@endpoint(router, "events.list", response_model=Page[EventOut])
def list_events(
    request: Request,
    caller: Caller,
    event_type: Annotated[
        str | None,
        Query(
            alias="type",
            max_length=100,
            pattern=r"^(\*|[A-Za-z0-9_.:\-]+\*?)$",
            description="An event type (`message.received`), or a prefix ending in `*` "
            "(`message.*`).",
        ),
    ] = None,
    identity_id: Annotated[
        str | None,
        Query(max_length=64, pattern=r"^[A-Za-z0-9_\-]+$", description="Only this identity's."),
    ] = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[EventOut]:
    position = decode_cursor(request, cursor, (int, str))
    exact = prefix = None
    if event_type is not None and event_type != "*":
        if event_type.endswith("*"):
            prefix = event_type[:-1]
        else:
            exact = event_type
    query = EventQuery(
        event_type=exact,
        type_prefix=prefix,
        identity_id=identity_id,
        since=None if since is None else rfc3339_ms(since),
        until=None if until is None else rfc3339_ms(until),
    )
    with app_of(request).db.read() as tx:
        rows = event_rows.list_page(tx, reach_of(caller), query, after=position, limit=limit + 1)
    page, next_cursor = paginate(request, rows, limit, lambda e: [e.occurred_at, e.id])
    return Page[EventOut](data=[EventOut.of(e) for e in page], next_cursor=next_cursor)


@endpoint(router, "events.get", response_model=EventOut)
def get_event(event_id: str, request: Request, caller: Caller) -> EventOut:
    event = None
    if is_plain_id(event_id):
        with app_of(request).db.read() as tx:
            event = event_rows.get_event(tx, event_id, reach_of(caller))
    if event is None:
        raise NotFound(f"no event {event_id!r}", code="event_not_found")
    return EventOut.of(event)

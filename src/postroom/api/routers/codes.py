"""Verification codes and links: wait for the next one (a long-poll), list recent ones.

Both need ``messages:read`` and reach the identities the key reaches (404
``identity_not_found`` otherwise). See :mod:`postroom.verification.wait` for which code a
wait releases.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Literal

import anyio.to_thread
from fastapi import APIRouter, Query, Request

from postroom.api.core import (
    Caller,
    Principal,
    app_of,
    decode_cursor,
    endpoint,
    identity_in_reach,
    paginate,
)
from postroom.api.errors import ApiError, WaitTimeout
from postroom.api.models.codes import RecentVerificationOut, VerificationOut
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.query import is_plain_id
from postroom.app import App
from postroom.errors import NotFound
from postroom.verification import recent
from postroom.verification import wait as waiting

router = APIRouter(tags=["codes"])

MAX_TIMEOUT_S = 300  # the ceiling of http.max_wait_seconds

SenderDomain = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9\-.]*[A-Za-z0-9])?\.?$",
        description=(
            "Only verifications from this sender: its organisational domain is compared, "
            "so `mail.example.com` and `example.com` match the same mail. IDNs in "
            "punycode (`xn--...`)."
        ),
    ),
]
Kind = Literal["code", "link", "any"]


def _check_identity(app: App, caller: Principal, identity_id: str) -> str:
    if not is_plain_id(identity_id):
        raise NotFound(f"no identity {identity_id!r}", code="identity_not_found")
    with app.db.read() as tx:
        return identity_in_reach(tx, caller, identity_id).id


async def _client_gone(request: Request) -> None:
    """Return once the client has disconnected.

    ``request.is_disconnected()`` cannot see a disconnect behind the app's
    ``@middleware("http")`` (a BaseHTTPMiddleware: its receive wrapper swallows the
    message when the immediate cancel of ``is_disconnected`` interrupts it), so this
    blocks on ``receive`` instead, which answers ``http.disconnect`` once the client
    has gone (a GET's empty body comes first).
    """
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _kind_filter(kind: Kind) -> str | None:
    return None if kind == "any" else kind


def _timeout_error(field: str, message: str) -> ApiError:
    return ApiError(
        f"invalid request: {field}",
        code="validation_failed",
        status=422,
        extra={"errors": [{"field": field, "message": message}]},
    )


@endpoint(
    router,
    "codes.wait",
    response_model=VerificationOut,
    responses={408: {"description": "No verification arrived in time (`wait_timeout`)."}},
)
async def wait_for_code(
    identity_id: str,
    request: Request,
    caller: Caller,
    sender_domain: SenderDomain = None,
    timeout: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_TIMEOUT_S,
            description=(
                "Seconds to wait, 1 to `http.max_wait_seconds` (default 300); default 60 "
                "or that maximum when lower."
            ),
        ),
    ] = None,
    kind: Annotated[Kind, Query(description="`code`, `link` or `any`.")] = "any",
) -> VerificationOut:
    app = app_of(request)
    started = app.clock.now_ms()
    ceiling = app.settings.http_max_wait_seconds
    if timeout is not None and timeout > ceiling:
        raise _timeout_error("query.timeout", f"Input should be less than or equal to {ceiling}")
    seconds = timeout if timeout is not None else min(waiting.DEFAULT_TIMEOUT_S, ceiling)
    identity = await anyio.to_thread.run_sync(_check_identity, app, caller, identity_id)
    found = await waiting.wait_for_verification(
        app,
        waiting.WaitFor(
            identity_id=identity,
            started_at=started,
            kind=_kind_filter(kind),
            sender_domain=None if sender_domain is None else waiting.sender_filter(sender_domain),
        ),
        timeout_s=seconds,
        client_gone=partial(_client_gone, request),
    )
    if found is None:
        raise WaitTimeout(f"no verification arrived within {seconds} s")
    return VerificationOut.of(found)


@endpoint(router, "codes.list", response_model=Page[RecentVerificationOut])
def list_codes(
    identity_id: str,
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    sender_domain: SenderDomain = None,
    kind: Annotated[Kind, Query(description="`code`, `link` or `any`.")] = "any",
) -> Page[RecentVerificationOut]:
    app = app_of(request)
    position = decode_cursor(request, cursor, recent.POSITION_SHAPE)
    identity = _check_identity(app, caller, identity_id)
    rows = recent.list_recent(
        app,
        identity,
        before=position,
        limit=limit + 1,
        kind=_kind_filter(kind),
        sender_domain=None if sender_domain is None else waiting.sender_filter(sender_domain),
    )
    page, next_cursor = paginate(request, rows, limit, recent.position_of)
    return Page[RecentVerificationOut](
        data=[RecentVerificationOut.of(row) for row in page], next_cursor=next_cursor
    )

"""IMAP accounts: mirror an existing mailbox into an inbox.

Reach: the account's inbox must be in the key's reach, else 404
``imap_account_not_found``. The credential is never shown again.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from postroom.api.core import Caller, Principal, app_of, decode_cursor, endpoint, paginate
from postroom.api.models.common import DEFAULT_LIMIT, Cursor, Limit, Page
from postroom.api.models.imap import (
    ImapAccountCreate,
    ImapAccountOut,
    ImapAccountUpdate,
    ImapChangeCreate,
    ImapChangeOut,
)
from postroom.api.routers.messages import identity_reached, message_in_reach, sees_identity
from postroom.errors import NotFound
from postroom.store import imap as imap_rows
from postroom.sync import accounts as service
from postroom.sync import mutations

router = APIRouter(tags=["imap"])


def _account_in_reach(request: Request, caller: Principal, account_id: str) -> imap_rows.Account:
    missing = NotFound(f"no IMAP account {account_id[:80]!r}", code="imap_account_not_found")
    if "\x00" in account_id or len(account_id) > 200:
        raise missing
    app = app_of(request)
    with app.db.read() as tx:
        account = imap_rows.get_account(tx, account_id)
        if account is None or not sees_identity(tx, caller, account.identity_id):
            raise missing
    return account


@endpoint(router, "imap_accounts.create", status_code=201, response_model=ImapAccountOut)
def create_account(
    identity_id: str, body: ImapAccountCreate, request: Request, caller: Caller
) -> ImapAccountOut:
    app = app_of(request)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
    made = service.create_account(
        app,
        identity.id,
        service.NewAccount(
            host=body.host,
            port=body.port,
            tls_mode=body.tls_mode,
            username=body.username,
            password=body.password,
            access_token=body.access_token,
            folders=None if body.folders is None else tuple(body.folders),
            include_trash=body.include_trash,
            include_junk=body.include_junk,
            remote_delete=body.remote_delete,
            allow_plaintext=body.allow_plaintext,
            sync_interval_seconds=body.sync_interval_seconds,
        ),
    )
    return ImapAccountOut.of(made)


@endpoint(router, "imap_accounts.list", response_model=Page[ImapAccountOut])
def list_accounts(
    identity_id: str,
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[ImapAccountOut]:
    app = app_of(request)
    with app.db.read() as tx:
        identity = identity_reached(tx, caller, identity_id)
        position = decode_cursor(request, cursor, (str,))
        after = None if position is None else str(position[0])
        found = imap_rows.list_accounts(tx, None, identity.id, after, limit + 1)
    page, next_cursor = paginate(request, found, limit, lambda a: (a.id,))
    return Page[ImapAccountOut](data=[ImapAccountOut.of(a) for a in page], next_cursor=next_cursor)


@endpoint(router, "imap_accounts.get", response_model=ImapAccountOut)
def get_account(account_id: str, request: Request, caller: Caller) -> ImapAccountOut:
    return ImapAccountOut.of(_account_in_reach(request, caller, account_id))


@endpoint(router, "imap_accounts.update", response_model=ImapAccountOut)
def update_account(
    account_id: str, body: ImapAccountUpdate, request: Request, caller: Caller
) -> ImapAccountOut:
    account = _account_in_reach(request, caller, account_id)
    changes = body.model_dump(exclude_unset=True)
    return ImapAccountOut.of(service.update_account(app_of(request), account.id, changes))


@endpoint(
    router, "imap_accounts.delete", status_code=204, response_class=Response, response_model=None
)
def delete_account(account_id: str, request: Request, caller: Caller) -> Response:
    account = _account_in_reach(request, caller, account_id)
    service.delete_account(app_of(request), account.id)
    return Response(status_code=204)


@endpoint(router, "imap_accounts.sync", status_code=202, response_model=ImapAccountOut)
def sync_now(account_id: str, request: Request, caller: Caller) -> ImapAccountOut:
    account = _account_in_reach(request, caller, account_id)
    service.request_sync(app_of(request), account.id)
    return ImapAccountOut.of(service.get_account(app_of(request), account.id))


@endpoint(router, "imap_changes.create", status_code=202, response_model=ImapChangeOut)
def create_change(
    message_id: str, body: ImapChangeCreate, request: Request, caller: Caller
) -> ImapChangeOut:
    app = app_of(request)
    with app.db.read() as tx:
        owner = message_in_reach(tx, caller, message_id)
    key = request.headers.get("Idempotency-Key")
    made = mutations.record(
        app,
        owner.id,
        body.action,
        keywords=body.keywords,
        folder=body.folder,
        requester_identity=None if key is None else f"{caller.key_id}:{key}"[:300],
    )
    return ImapChangeOut.of(made)


@endpoint(router, "imap_changes.get", response_model=ImapChangeOut)
def get_change(change_id: str, request: Request, caller: Caller) -> ImapChangeOut:
    app = app_of(request)
    missing = NotFound(f"no IMAP change {change_id[:80]!r}", code="mutation_not_found")
    if "\x00" in change_id or len(change_id) > 200:
        raise missing
    try:
        change = mutations.get(app, change_id)
    except NotFound:
        raise missing from None
    with app.db.read() as tx:
        if not sees_identity(tx, caller, change.identity_id):
            raise missing
    return ImapChangeOut.of(change)

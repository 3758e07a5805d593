"""API keys: create, list, get, rotate and revoke the keys in the caller's reach.

Reach follows the tenants a key reaches (see :func:`postroom.tenancy.api_keys.reaches`);
a key outside it answers 404 ``key_not_found``. Only platform keys create platform and
partner keys. A key never grants what it does not hold: creating a key with, or rotating a
key holding, a permission the caller lacks answers 403 ``permission_escalation``. The
secret is in the response to create and rotate, once; an Idempotency-Key replay returns
the body without it (``"secret_replayed": false``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, Field

from postroom.api.core import (
    Caller,
    app_of,
    decode_cursor,
    endpoint,
    paginate,
    refusals,
)
from postroom.api.errors import ApiError
from postroom.api.idempotency import run_idempotent
from postroom.api.models.common import (
    DEFAULT_LIMIT,
    Cursor,
    Limit,
    Model,
    Out,
    Page,
    time_of,
    time_req,
)
from postroom.store.api_keys import ApiKey
from postroom.tenancy import api_keys
from postroom.tenancy.permissions import PERMISSIONS, resolve_permissions

router = APIRouter(tags=["keys"])

Level = Literal["platform", "partner", "tenant", "identity"]
# The names of postroom.tenancy.permissions.PERMISSIONS (a test keeps the two equal).
PermissionName = Literal[
    "tenants:read",
    "tenants:write",
    "partners:manage",
    "identities:read",
    "identities:write",
    "domains:read",
    "domains:write",
    "keys:manage",
    "messages:read",
    "messages:write",
    "messages:send",
    "webhooks:manage",
    "events:read",
    "audit:read",
    "platform:ops",
]
MAX_OVERLAP_SECONDS = api_keys.MAX_ROTATION_OVERLAP_MS // 1000
DEFAULT_OVERLAP_SECONDS = 86_400
# Latest expiry accepted (9999-12-31): keeps the Unix milliseconds in range everywhere.
_MAX_EXPIRY_MS = 253_402_300_799_000

IdText = Annotated[str | None, Field(max_length=64, examples=["ten_01JD3M0Q8W5T2N6B4K7R9X1Y3Z"])]


class KeyCreate(Model):
    level: Level
    name: Annotated[str | None, Field(min_length=1, max_length=100, examples=["ci"])] = None
    permissions: Annotated[
        list[PermissionName] | None,
        Field(
            min_length=1,
            max_length=len(PERMISSIONS),
            description="Permissions to grant; omitted: the level's defaults.",
        ),
    ] = None
    tenant_id: IdText = None
    identity_id: IdText = None
    partner_id: IdText = None
    expires_at: AwareDatetime | None = Field(
        default=None, description="RFC 3339 time after which the key stops working."
    )


class KeyRotate(Model):
    overlap_seconds: Annotated[
        int,
        Field(
            ge=0,
            le=MAX_OVERLAP_SECONDS,
            description="How long the old secret keeps working (0: stops at once).",
        ),
    ] = DEFAULT_OVERLAP_SECONDS


class KeyOut(Out):
    id: str
    name: str
    level: str
    prefix: str = Field(description="The public head of the secret: names the key safely.")
    tenant_id: str | None
    identity_id: str | None
    partner_id: str | None
    mode: str
    permissions: list[str]
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None
    created_at: str

    @classmethod
    def of(cls, key: ApiKey) -> KeyOut:
        return cls(
            id=key.id,
            name=key.name,
            level=key.level,
            prefix=key.prefix,
            tenant_id=key.tenant_id,
            identity_id=key.identity_id,
            partner_id=key.partner_id,
            mode=key.mode,
            permissions=list(key.permissions),
            expires_at=time_of(key.expires_at),
            revoked_at=time_of(key.revoked_at),
            last_used_at=time_of(key.last_used_at),
            created_at=time_req(key.created_at),
        )


class KeyWithSecret(KeyOut):
    secret: str | None = Field(
        default=None,
        description="The key's secret, shown this once; absent on an Idempotency-Key replay.",
    )
    secret_replayed: bool | None = Field(
        default=None, description="false on an Idempotency-Key replay: the secret is not shown."
    )


def _with_secret(key: ApiKey, secret: str) -> dict[str, object]:
    return {**KeyOut.of(key).model_dump(mode="json"), "secret": secret}


def _ms(moment: datetime) -> int:
    ms = int(moment.timestamp() * 1000)
    if ms > _MAX_EXPIRY_MS:
        raise ApiError(
            "expires_at must be before the year 10000", code="invalid_expiry", status=422
        )
    return ms


@endpoint(router, "keys.create", status_code=201, response_model=KeyWithSecret)
def create_key(body: KeyCreate, request: Request, caller: Caller) -> JSONResponse:
    app = app_of(request)
    expires_at = None if body.expires_at is None else _ms(body.expires_at)
    with refusals(request, caller), app.db.read() as tx:
        tenant_id = api_keys.creation_scope(
            tx, caller.key, body.level, tenant_id=body.tenant_id, identity_id=body.identity_id
        )
        granted = resolve_permissions(body.level, body.permissions)
        api_keys.check_grant(caller.key, granted)

    def action() -> tuple[int, dict[str, object], str | None]:
        key, secret = api_keys.create_key(
            app,
            body.level,
            tenant_id=tenant_id,
            identity_id=body.identity_id,
            partner_id=body.partner_id,
            name=body.name,
            permissions=granted,
            expires_at=expires_at,
            created_by_key_id=caller.key_id,
        )
        return 201, _with_secret(key, secret), key.tenant_id

    return run_idempotent(request, caller, body, action, secret_field="secret")


@endpoint(router, "keys.list", response_model=Page[KeyOut])
def list_keys(
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    tenant_id: Annotated[
        str | None, Query(max_length=64, description="Only this tenant's keys.")
    ] = None,
) -> Page[KeyOut]:
    app = app_of(request)
    position = decode_cursor(request, cursor)
    with app.db.read() as tx:
        rows = api_keys.list_in_reach(
            tx,
            caller.key,
            tenant_id=tenant_id,
            after=None if position is None else str(position[0]),
            limit=limit + 1,
        )
    page, next_cursor = paginate(request, rows, limit, lambda k: [k.id])
    return Page[KeyOut](data=[KeyOut.of(k) for k in page], next_cursor=next_cursor)


@endpoint(router, "keys.get", response_model=KeyOut)
def get_key(key_id: str, request: Request, caller: Caller) -> KeyOut:
    with app_of(request).db.read() as tx:
        return KeyOut.of(api_keys.key_in_reach(tx, caller.key, key_id))


@endpoint(router, "keys.rotate", response_model=KeyWithSecret)
def rotate_key(
    key_id: str, request: Request, caller: Caller, body: KeyRotate | None = None
) -> JSONResponse:
    app = app_of(request)
    overlap_seconds = DEFAULT_OVERLAP_SECONDS if body is None else body.overlap_seconds
    with refusals(request, caller), app.db.read() as tx:
        key = api_keys.key_in_reach(tx, caller.key, key_id)
        api_keys.check_rotate(caller.key, key)

    def action() -> tuple[int, dict[str, object], str | None]:
        rotated, secret = api_keys.rotate(
            app, key.id, overlap_seconds * 1000, actor_key_id=caller.key_id
        )
        return 200, _with_secret(rotated, secret), rotated.tenant_id

    return run_idempotent(request, caller, body, action, secret_field="secret")


@endpoint(router, "keys.revoke", response_model=KeyOut)
def revoke_key(key_id: str, request: Request, caller: Caller) -> KeyOut:
    app = app_of(request)
    with app.db.read() as tx:
        key = api_keys.key_in_reach(tx, caller.key, key_id)
    return KeyOut.of(api_keys.revoke(app, key.id, actor_key_id=caller.key_id))

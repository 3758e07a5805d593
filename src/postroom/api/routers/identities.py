"""Identities (inboxes) and their addresses.

Reach: platform keys every identity, partner keys those of their partner's tenants,
tenant keys their tenant's, identity keys only their own (read). An identity outside
the key's reach, deleted, or the system identity answers 404 ``identity_not_found``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from postroom.api.core import (
    Caller,
    Principal,
    app_of,
    decode_cursor,
    endpoint,
    identity_in_reach,
    owning_tenant,
    paginate,
    tenant_ids_in_reach,
    tenant_in_reach,
)
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
from postroom.store import tenancy as directory
from postroom.store.db import Tx
from postroom.store.tenancy import AddressDetail, IdentityDetail
from postroom.tenancy import service

router = APIRouter(tags=["identities"])

Username = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,23}$",
        description="1-24 lower-case letters, digits, '.', '_' or '-'.",
        examples=["alice"],
    ),
]
DisplayName = Annotated[str, Field(min_length=1, max_length=78)]
MetadataKey = Annotated[str, Field(min_length=1, max_length=64)]
MetadataValue = Annotated[str, Field(max_length=512)]
Metadata = Annotated[
    dict[MetadataKey, MetadataValue],
    Field(
        max_length=16,
        description="At most 16 string keys (1-64 characters), values at most 512 bytes.",
    ),
]


class IdentityCreate(Model):
    username: Username
    domain: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=253,
            description="Default: the platform domain; otherwise one of the tenant's domains.",
        ),
    ] = None
    display_name: DisplayName | None = None
    client_id: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=128,
            pattern=r"^[\x20-\x7e]+$",
            description="Your idempotent create key (printable ASCII): repeating it with"
            " the same body returns the identity made before (200).",
        ),
    ] = None
    metadata: Metadata | None = None
    tenant_id: Annotated[
        str | None,
        Field(
            max_length=64,
            description="Platform and partner keys: the tenant (platform default: the"
            " default tenant). Tenant keys: their own, or omit.",
        ),
    ] = None


class IdentityUpdate(Model):
    display_name: DisplayName | None = None
    signature_text: Annotated[str | None, Field(max_length=10_000)] = None
    signature_html: Annotated[str | None, Field(max_length=100_000)] = None
    metadata: Metadata | None = Field(
        default=None, description="Replaces the metadata whole; null empties it."
    )
    status: Literal["active", "paused"] | None = Field(
        default=None, description="paused: pause the inbox (mail is still received)."
    )


class IdentityOut(Out):
    id: str
    tenant_id: str
    username: str
    address: str | None = Field(description="The primary address; null once deleted.")
    display_name: str
    status: str
    pause_reason: str | None
    metadata: dict[str, str]
    client_id: str | None
    signature_text: str | None
    signature_html: str | None
    created_at: str
    updated_at: str

    @classmethod
    def of(cls, detail: IdentityDetail) -> IdentityOut:
        identity = detail.identity
        return cls(
            id=identity.id,
            tenant_id=identity.tenant_id,
            username=identity.username,
            address=detail.address,
            display_name=identity.display_name,
            status=identity.status,
            pause_reason=detail.pause_reason,
            metadata=detail.metadata,
            client_id=detail.client_id,
            signature_text=detail.signature_text,
            signature_html=detail.signature_html,
            created_at=time_req(identity.created_at),
            updated_at=time_req(identity.updated_at),
        )


class AddressCreate(Model):
    local_part: Annotated[
        str,
        Field(
            min_length=1,
            max_length=64,
            description="On the platform domain the tenant suffix is added, as for"
            " primaries; on the tenant's own domain it is used as given.",
            examples=["sales"],
        ),
    ]
    domain: Annotated[
        str | None,
        Field(min_length=1, max_length=253, description="Default: the platform domain."),
    ] = None


class AddressOut(Out):
    id: str
    identity_id: str
    address: str
    local_part: str
    domain_id: str
    role: Literal["primary", "alias"]
    status: str
    created_at: str
    updated_at: str
    retired_at: str | None

    @classmethod
    def of(cls, detail: AddressDetail) -> AddressOut:
        address = detail.address
        role: Literal["primary", "alias"] = "primary" if address.role == "primary" else "alias"
        return cls(
            id=address.id,
            identity_id=address.identity_id,
            address=address.address,
            local_part=address.local_part,
            domain_id=address.domain_id,
            role=role,
            status=address.status,
            created_at=time_req(address.created_at),
            updated_at=time_req(address.updated_at),
            retired_at=time_of(detail.retired_at),
        )


def _detail(tx: Tx, identity_id: str) -> IdentityDetail:
    detail = directory.get_identity_detail(tx, identity_id)
    assert detail is not None
    return detail


def _writable_identity(request: Request, caller: Principal, identity_id: str) -> str:
    with app_of(request).db.read() as tx:
        return identity_in_reach(tx, caller, identity_id).id


@endpoint(
    router,
    "identities.create",
    status_code=201,
    response_model=IdentityOut,
    responses={
        200: {
            "model": IdentityOut,
            "description": "The identity an earlier create with the same client_id and body made",
        }
    },
)
def create_identity(body: IdentityCreate, request: Request, caller: Caller) -> JSONResponse:
    app = app_of(request)
    with app.db.read() as tx:
        tenant = owning_tenant(tx, caller, body.tenant_id)

    def action() -> tuple[int, dict[str, Any], str | None]:
        made = service.create_identity(
            app,
            body.username,
            domain=body.domain,
            tenant=tenant.id,
            display_name=body.display_name,
            client_id=body.client_id,
            metadata=body.metadata,
            actor_key_id=caller.key_id,
        )
        with app.db.read() as tx:
            out = IdentityOut.of(_detail(tx, made.identity.id))
        return (200 if made.existing else 201), out.model_dump(mode="json"), tenant.id

    return run_idempotent(request, caller, body, action)


@endpoint(router, "identities.list", response_model=Page[IdentityOut])
def list_identities(
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    status: Annotated[
        Literal["active", "paused", "deleted"] | None,
        Query(description="Only this status; deleted identities are listed only when asked."),
    ] = None,
    tenant_id: Annotated[str | None, Query(max_length=64)] = None,
    username: Annotated[str | None, Query(max_length=64, description="Exact username.")] = None,
) -> Page[IdentityOut]:
    app = app_of(request)
    position = decode_cursor(request, cursor)
    with app.db.read() as tx:
        tenant_ids = tenant_ids_in_reach(tx, caller)
        if tenant_id is not None:
            tenant_ids = [tenant_in_reach(tx, caller, tenant_id).id]
        rows = directory.list_identity_page(
            tx,
            tenant_ids=tenant_ids,
            after=None if position is None else str(position[0]),
            limit=limit + 1,
            identity_id=caller.identity_id if caller.level == "identity" else None,
            status=status,
            username=username,
        )
    page, next_cursor = paginate(request, rows, limit, lambda d: [d.identity.id])
    return Page[IdentityOut](data=[IdentityOut.of(d) for d in page], next_cursor=next_cursor)


@endpoint(router, "identities.get", response_model=IdentityOut)
def get_identity(identity_id: str, request: Request, caller: Caller) -> IdentityOut:
    with app_of(request).db.read() as tx:
        identity = identity_in_reach(tx, caller, identity_id)
        return IdentityOut.of(_detail(tx, identity.id))


@endpoint(router, "identities.update", response_model=IdentityOut)
def update_identity(
    identity_id: str, body: IdentityUpdate, request: Request, caller: Caller
) -> IdentityOut:
    found = _writable_identity(request, caller, identity_id)
    changes = body.model_dump(exclude_unset=True)
    updated = service.update_identity(
        app_of(request),
        found,
        changes,
        actor_level=caller.level,
        actor_key_id=caller.key_id,
    )
    return IdentityOut.of(updated)


@endpoint(
    router,
    "identities.delete",
    status_code=204,
    response_class=Response,
    response_model=None,
)
def delete_identity(identity_id: str, request: Request, caller: Caller) -> Response:
    found = _writable_identity(request, caller, identity_id)
    service.delete_identity(app_of(request), found, actor_key_id=caller.key_id)
    return Response(status_code=204)


@endpoint(router, "addresses.create", status_code=201, response_model=AddressOut)
def create_address(
    identity_id: str, body: AddressCreate, request: Request, caller: Caller
) -> JSONResponse:
    app = app_of(request)
    with app.db.read() as tx:
        identity = identity_in_reach(tx, caller, identity_id)

    def action() -> tuple[int, dict[str, Any], str | None]:
        made = service.add_alias(
            app, identity.id, body.local_part, domain=body.domain, actor_key_id=caller.key_id
        )
        return 201, AddressOut.of(made).model_dump(mode="json"), identity.tenant_id

    return run_idempotent(request, caller, body, action)


@endpoint(router, "addresses.list", response_model=Page[AddressOut])
def list_addresses(
    identity_id: str,
    request: Request,
    caller: Caller,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> Page[AddressOut]:
    app = app_of(request)
    position = decode_cursor(request, cursor)
    with app.db.read() as tx:
        identity = identity_in_reach(tx, caller, identity_id)
        rows = directory.list_identity_addresses(
            tx, identity.id, None if position is None else str(position[0]), limit + 1
        )
    page, next_cursor = paginate(request, rows, limit, lambda d: [d.address.id])
    return Page[AddressOut](data=[AddressOut.of(d) for d in page], next_cursor=next_cursor)


@endpoint(
    router,
    "addresses.retire",
    status_code=204,
    response_class=Response,
    response_model=None,
)
def retire_address(identity_id: str, address_id: str, request: Request, caller: Caller) -> Response:
    found = _writable_identity(request, caller, identity_id)
    service.retire_alias(app_of(request), found, address_id, actor_key_id=caller.key_id)
    return Response(status_code=204)

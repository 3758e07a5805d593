"""Tenants: platform keys reach every tenant, partner keys the tenants they created,
tenant keys their own (read)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from postroom.api.core import (
    Caller,
    app_of,
    decode_cursor,
    deny,
    endpoint,
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
from postroom.store.tenancy import Tenant
from postroom.tenancy import service, tenants

router = APIRouter(tags=["tenants"])


class TenantCreate(Model):
    slug: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{1,31}$", examples=["acme"])]
    name: Annotated[str | None, Field(min_length=1, max_length=200)] = None
    mode: Literal["live", "test"] = "live"


class TenantUpdate(Model):
    name: Annotated[str | None, Field(min_length=1, max_length=200)] = None
    status: Literal["active", "suspended"] | None = None


class TenantOut(Out):
    id: str
    slug: str
    name: str
    mode: str
    status: str
    partner_id: str | None
    is_default: bool
    timezone: str
    suspended_at: str | None
    suspended_by: str | None
    created_at: str
    updated_at: str

    @classmethod
    def of(cls, tenant: Tenant) -> TenantOut:
        return cls(
            id=tenant.id,
            slug=tenant.slug,
            name=tenant.name,
            mode=tenant.mode,
            status=tenant.status,
            partner_id=tenant.partner_id,
            is_default=tenant.is_default,
            timezone=tenant.timezone,
            suspended_at=time_of(tenant.suspended_at),
            suspended_by=tenant.suspended_by,
            created_at=time_req(tenant.created_at),
            updated_at=time_req(tenant.updated_at),
        )


class Policy(Out):
    max_identities: int | None = Field(
        description="Most identities the tenant may have; null: no limit."
    )
    events_retention_days: int = Field(description="Days event history is kept.")
    daily_send_cap: int | None = Field(
        description="Sends per day for the whole tenant (0: no cap); null: the installation's "
        "outbound.daily_cap_tenant."
    )
    daily_send_cap_per_identity: int | None = Field(
        description="Sends per day per inbox (0: no cap); null: the installation's "
        "outbound.daily_cap_identity."
    )


class PolicyUpdate(Model):
    max_identities: Annotated[int | None, Field(ge=0, le=1_000_000)] = None
    events_retention_days: Annotated[int | None, Field(ge=1, le=3650)] = None
    daily_send_cap: Annotated[int | None, Field(ge=0, le=1 << 31)] = None
    daily_send_cap_per_identity: Annotated[int | None, Field(ge=0, le=1 << 31)] = None


@endpoint(router, "tenants.create", status_code=201, response_model=TenantOut)
def create_tenant(body: TenantCreate, request: Request, caller: Caller) -> JSONResponse:
    if caller.level not in ("platform", "partner"):
        raise deny(request, caller, "only platform and partner keys create tenants")
    app = app_of(request)

    def action() -> tuple[int, dict[str, object], str | None]:
        tenant = service.create_tenant(
            app,
            body.slug,
            body.name,
            mode=body.mode,
            partner_id=caller.partner_id,
            actor_key_id=caller.key_id,
        )
        return 201, TenantOut.of(tenant).model_dump(mode="json"), tenant.id

    return run_idempotent(request, caller, body, action)


@endpoint(router, "tenants.list", response_model=Page[TenantOut])
def list_tenants(
    request: Request, caller: Caller, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> Page[TenantOut]:
    app = app_of(request)
    position = decode_cursor(request, cursor)
    with app.db.read() as tx:
        rows = tenants.list_page(
            tx,
            tenant_ids_in_reach(tx, caller),
            None if position is None else str(position[0]),
            limit + 1,
        )
    page, next_cursor = paginate(request, rows, limit, lambda t: [t.id])
    return Page[TenantOut](data=[TenantOut.of(t) for t in page], next_cursor=next_cursor)


@endpoint(router, "tenants.get", response_model=TenantOut)
def get_tenant(tenant_id: str, request: Request, caller: Caller) -> TenantOut:
    with app_of(request).db.read() as tx:
        return TenantOut.of(tenant_in_reach(tx, caller, tenant_id))


@endpoint(router, "tenants.update", response_model=TenantOut)
def update_tenant(
    tenant_id: str, body: TenantUpdate, request: Request, caller: Caller
) -> TenantOut:
    app = app_of(request)
    with app.db.read() as tx:
        tenant_in_reach(tx, caller, tenant_id)
    if body.status is not None and caller.level not in ("platform", "partner"):
        raise deny(request, caller, "only platform and partner keys suspend or resume tenants")
    updated = tenants.update_tenant(
        app,
        tenant_id,
        tenants.TenantChange(name=body.name, status=body.status),
        actor_level=caller.level,
        actor_key_id=caller.key_id,
    )
    return TenantOut.of(updated)


@endpoint(router, "tenants.policy.get", response_model=Policy)
def get_policy(tenant_id: str, request: Request, caller: Caller) -> Policy:
    with app_of(request).db.read() as tx:
        tenant = tenant_in_reach(tx, caller, tenant_id)
        return Policy(**tenants.get_policy(tx, tenant.id))


@endpoint(router, "tenants.policy.update", response_model=Policy)
def update_policy(tenant_id: str, body: PolicyUpdate, request: Request, caller: Caller) -> Policy:
    app = app_of(request)
    with app.db.read() as tx:
        tenant = tenant_in_reach(tx, caller, tenant_id)
    if caller.level not in ("platform", "partner"):
        raise deny(request, caller, "only platform and partner keys change policy")
    changes = body.model_dump(exclude_unset=True)
    return Policy(**tenants.update_policy(app, tenant.id, changes, actor_key_id=caller.key_id))

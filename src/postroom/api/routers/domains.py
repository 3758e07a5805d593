"""Domains: a tenant's own mail domains and the DNS records to publish for them.

Reach: every key that may read domains sees the platform domain (read-only, kind
``platform``); platform keys see every tenant's domains, partner keys those of their
partner's tenants, tenant keys their own. Anything else answers 404
``domain_not_found``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from postroom.api.core import (
    Caller,
    Principal,
    app_of,
    decode_cursor,
    endpoint,
    owning_tenant,
    paginate,
    tenant_ids_in_reach,
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
from postroom.config import Settings
from postroom.errors import NotFound
from postroom.store import tenancy as directory
from postroom.store.db import Tx
from postroom.store.tenancy import DomainDetail
from postroom.tenancy import domains

router = APIRouter(tags=["domains"])


class DomainCreate(Model):
    name: Annotated[
        str,
        Field(min_length=1, max_length=253, examples=["example.com"]),
    ]
    method: Literal["dns_records", "send_only", "smtp_relay"] = Field(
        description="dns_records: receive and send; send_only: send only;"
        " smtp_relay: send through your own relay."
    )
    tenant_id: Annotated[
        str | None,
        Field(
            max_length=64,
            description="Platform and partner keys: the tenant (platform default: the"
            " default tenant). Tenant keys: their own, or omit.",
        ),
    ] = None


class DnsRecordOut(Out):
    type: Literal["MX", "TXT"]
    name: str = Field(description="Fully qualified owner name.")
    value: str
    priority: int | None = Field(description="MX only.")
    purpose: Literal["inbound", "spf", "dkim", "dmarc", "ownership"]
    status: str = Field(description="unverified until DNS checks run.")


class DomainOut(Out):
    id: str
    tenant_id: str | None = Field(description="null for the platform domain.")
    name: str
    kind: Literal["platform", "external"]
    method: str
    state: str
    state_reason: str | None
    receiving: bool
    sending: bool
    routing_mode: str
    dkim_selector: str | None
    ownership_verified_at: str | None
    created_at: str
    updated_at: str


class DomainDetailOut(DomainOut):
    records: list[DnsRecordOut]


def _fields(detail: DomainDetail) -> dict[str, Any]:
    domain = detail.domain
    return {
        "id": domain.id,
        "tenant_id": domain.tenant_id,
        "name": domain.name,
        "kind": domain.kind,
        "method": domain.method,
        "state": domain.state,
        "state_reason": domain.state_reason,
        "receiving": domain.receiving,
        "sending": domain.sending,
        "routing_mode": domain.routing_mode,
        "dkim_selector": detail.dkim_selector,
        "ownership_verified_at": time_of(detail.ownership_verified_at),
        "created_at": time_req(domain.created_at),
        "updated_at": time_req(domain.updated_at),
    }


def _detail_out(settings: Settings, detail: DomainDetail) -> DomainDetailOut:
    records = [
        DnsRecordOut.model_validate(
            {
                "type": r.type,
                "name": r.name,
                "value": r.value,
                "priority": r.priority,
                "purpose": r.purpose,
                "status": r.status,
            }
        )
        for r in domains.dns_records(settings, detail)
    ]
    return DomainDetailOut.model_validate({**_fields(detail), "records": records})


def _domain_in_reach(tx: Tx, caller: Principal, domain_id: str) -> DomainDetail:
    """The domain, or 404 ``domain_not_found`` when missing or outside the key's reach."""
    detail = directory.get_domain_detail(tx, domain_id)
    if detail is not None:
        tenant_id = detail.domain.tenant_id
        if tenant_id is None:
            return detail
        tenant = directory.get_tenant(tx, tenant_id)
        if tenant is not None and caller.sees_tenant(tenant):
            return detail
    raise NotFound(f"no domain {domain_id!r}", code="domain_not_found")


@endpoint(router, "domains.create", status_code=201, response_model=DomainDetailOut)
def create_domain(body: DomainCreate, request: Request, caller: Caller) -> JSONResponse:
    app = app_of(request)
    with app.db.read() as tx:
        tenant = owning_tenant(tx, caller, body.tenant_id)

    def action() -> tuple[int, dict[str, Any], str | None]:
        detail = domains.create_domain(
            app, body.name, body.method, tenant=tenant.id, actor_key_id=caller.key_id
        )
        return 201, _detail_out(app.settings, detail).model_dump(mode="json"), tenant.id

    return run_idempotent(request, caller, body, action)


@endpoint(router, "domains.list", response_model=Page[DomainOut])
def list_domains(
    request: Request, caller: Caller, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> Page[DomainOut]:
    app = app_of(request)
    position = decode_cursor(request, cursor)
    with app.db.read() as tx:
        rows = directory.list_domain_page(
            tx,
            tenant_ids_in_reach(tx, caller),
            None if position is None else str(position[0]),
            limit + 1,
        )
    page, next_cursor = paginate(request, rows, limit, lambda d: [d.domain.id])
    return Page[DomainOut](
        data=[DomainOut.model_validate(_fields(d)) for d in page], next_cursor=next_cursor
    )


@endpoint(router, "domains.get", response_model=DomainDetailOut)
def get_domain(domain_id: str, request: Request, caller: Caller) -> DomainDetailOut:
    app = app_of(request)
    with app.db.read() as tx:
        detail = _domain_in_reach(tx, caller, domain_id)
    return _detail_out(app.settings, detail)

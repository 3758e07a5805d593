"""What every route uses: the App, the caller (Principal), reach checks, cursors.

A handler is declared by route name; method, path and the permission it needs come from
the route table (:mod:`postroom.api.routes`)::

    @endpoint(router, "identities.get", response_model=IdentityOut)
    def get_identity(identity_id: str, request: Request, caller: Caller) -> IdentityOut:
        app = app_of(request)
        with app.db.read() as tx:
            identity = identity_in_reach(tx, caller, identity_id)
        ...

``Caller`` authenticates the bearer key, checks the route's permission (403
``permission_denied``), applies the key's rate limit (429) and records use. What the key
may *see* is checked by the ``*_in_reach`` helpers: an object outside the key's reach
answers 404 exactly like a missing one, so existence never leaks across tenants.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request

from postroom.api.errors import ApiError, Forbidden, RateLimited
from postroom.api.routes import ROUTES
from postroom.errors import NotFound, Refused
from postroom.store import tenancy as directory
from postroom.store.api_keys import ApiKey
from postroom.store.db import Tx
from postroom.store.tenancy import Identity, Tenant
from postroom.tenancy import api_keys
from postroom.tenancy import audit as audit_service
from postroom.tenancy.api_keys import Unauthenticated

if TYPE_CHECKING:
    from postroom.api.ratelimit import RateLimiter
    from postroom.app import App

F = TypeVar("F", bound=Callable[..., Any])

CURSOR_LIFETIME_MS = 24 * 3_600_000


def app_of(request: Request) -> App:
    app: App = request.app.state.postroom
    return app


def endpoint(router: APIRouter, name: str, **kwargs: Any) -> Callable[[F], F]:
    """Register a handler for the route ``name`` of the route table."""
    spec = ROUTES[name]
    kwargs.setdefault("summary", spec.summary)
    kwargs.setdefault("operation_id", name.replace(".", "_"))

    def register(func: F) -> F:
        router.add_api_route(spec.path, func, methods=[spec.method], name=name, **kwargs)
        return func

    return register


# --- the caller ----------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """The authenticated API key a request acts as."""

    key: ApiKey

    @property
    def key_id(self) -> str:
        return self.key.id

    @property
    def level(self) -> str:
        return self.key.level

    @property
    def tenant_id(self) -> str | None:
        return self.key.tenant_id

    @property
    def partner_id(self) -> str | None:
        return self.key.partner_id

    @property
    def identity_id(self) -> str | None:
        return self.key.identity_id

    @property
    def idempotency_scope(self) -> str:
        """seed 000 idempotency_records.scope: the tenant, else the partner, else platform."""
        return self.key.tenant_id or self.key.partner_id or "platform"

    def has(self, permission: str) -> bool:
        return permission in self.key.permissions

    def sees_tenant(self, tenant: Tenant) -> bool:
        if self.level == "platform":
            return True
        if self.level == "partner":
            return tenant.partner_id is not None and tenant.partner_id == self.partner_id
        return tenant.id == self.tenant_id


def _route_name(request: Request) -> str | None:
    route = request.scope.get("route")
    return getattr(route, "name", None)


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization")
    if header is None:
        raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <key>'")
    return token.strip()


def deny(
    request: Request, principal: Principal, detail: str, code: str = "permission_denied"
) -> Forbidden:
    """Record an authorization denial (``auth.denied``) in the audit log and hand back
    the 403 to raise. Every 403 a route gives goes through here."""
    app = app_of(request)
    with app.db.write() as tx:
        audit_service.record(
            app,
            tx,
            action="auth.denied",
            tenant_id=principal.tenant_id,
            target_type="route",
            target_id=_route_name(request) or request.url.path,
            actor_key_id=principal.key_id,
            details={"code": code, "method": request.method},
        )
    return Forbidden(detail, code=code)


def authenticate(request: Request) -> Principal:
    """The dependency behind :data:`Caller`."""
    app = app_of(request)
    name = _route_name(request)
    spec = ROUTES.get(name) if name else None
    key = api_keys.verify(app, _bearer(request))
    principal = Principal(key)
    request.state.principal = principal
    limiter: RateLimiter = request.app.state.rate_limiter
    decision = limiter.take(key.id)
    request.state.rate_limit = decision
    if not decision.allowed:
        raise RateLimited(
            "too many requests for this API key; retry after the Retry-After seconds",
            headers={"Retry-After": str(decision.retry_after)},
        )
    with app.db.read() as tx:
        _check_standing(tx, key)
    if spec is not None and spec.permission is not None and not principal.has(spec.permission):
        raise deny(request, principal, f"this API key lacks the permission {spec.permission}")
    api_keys.touch_last_used(app, key)
    return principal


def _check_standing(tx: Tx, key: ApiKey) -> None:
    """A suspended tenant or partner stops its keys (seed 000: status read by auth)."""
    if key.partner_id is not None:
        partner = directory.get_partner(tx, key.partner_id)
        if partner is None or partner.status != "active":
            raise Forbidden("this partner is not active", code="partner_suspended")
    if key.tenant_id is not None:
        tenant = directory.get_tenant(tx, key.tenant_id)
        if tenant is None or tenant.status != "active":
            raise Forbidden("this tenant is suspended", code="tenant_suspended")
        if tenant.partner_id is not None:
            partner = directory.get_partner(tx, tenant.partner_id)
            if partner is not None and partner.status != "active":
                raise Forbidden("this tenant's partner is not active", code="partner_suspended")


Caller = Annotated[Principal, Depends(authenticate)]


@contextmanager
def refusals(request: Request, caller: Principal) -> Iterator[None]:
    """Turn a service's :class:`~postroom.errors.Refused` into the 403 :func:`deny`
    gives, with its ``auth.denied`` audit row."""
    try:
        yield
    except Refused as refused:
        raise deny(request, caller, str(refused), refused.code) from None


# --- reach ---------------------------------------------------------------------------


def tenant_in_reach(tx: Tx, caller: Principal, tenant_id: str) -> Tenant:
    """The tenant, or 404 ``tenant_not_found`` when missing or outside the key's reach."""
    tenant = directory.get_tenant(tx, tenant_id)
    if tenant is None or not caller.sees_tenant(tenant):
        raise NotFound(f"no tenant {tenant_id!r}", code="tenant_not_found")
    return tenant


def identity_in_reach(tx: Tx, caller: Principal, identity_id: str) -> Identity:
    """The identity, or 404 ``identity_not_found`` when missing, deleted, the system
    identity, or outside the key's reach."""
    identity = directory.get_identity(tx, identity_id)
    if (
        identity is None
        or identity.is_system
        or identity.status == "deleted"
        or (caller.level == "identity" and identity.id != caller.identity_id)
    ):
        raise NotFound(f"no identity {identity_id!r}", code="identity_not_found")
    tenant = directory.get_tenant(tx, identity.tenant_id)
    if tenant is None or not caller.sees_tenant(tenant):
        raise NotFound(f"no identity {identity_id!r}", code="identity_not_found")
    return identity


def tenant_ids_in_reach(tx: Tx, caller: Principal) -> list[str] | None:
    """The tenants a list may show: None means every tenant (platform keys)."""
    if caller.level == "platform":
        return None
    if caller.level == "partner":
        rows = tx.fetchall("SELECT id FROM tenants WHERE partner_id = %s", (caller.partner_id,))
        return [row["id"] for row in rows]
    assert caller.tenant_id is not None
    return [caller.tenant_id]


def owning_tenant(tx: Tx, caller: Principal, tenant_id: str | None) -> Tenant:
    """The tenant a create acts in: the key's own, or for platform and partner keys the
    ``tenant_id`` the body names (platform keys default to the default tenant)."""
    if caller.tenant_id is not None:
        if tenant_id is not None and tenant_id != caller.tenant_id:
            raise NotFound(f"no tenant {tenant_id!r}", code="tenant_not_found")
        return tenant_in_reach(tx, caller, caller.tenant_id)
    if tenant_id is None:
        if caller.level == "platform":
            default = directory.get_default_tenant(tx)
            if default is not None:
                return default
        raise ApiError("name the tenant: tenant_id", code="tenant_required", status=422)
    return tenant_in_reach(tx, caller, tenant_id)


# --- cursors -------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Cursors:
    """Opaque signed cursors: ``base64url(json).base64url(hmac)``.

    A cursor names the route it was issued for and the sort position after which the
    next page starts; it expires after 24 hours. A cursor that was altered, belongs to
    another route or has expired answers 400 ``invalid_cursor``.
    """

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, b"postroom cursor v1", hashlib.sha256).digest()

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:16]

    def encode(self, route: str, position: Sequence[Any], now_ms: int) -> str:
        payload = json.dumps(
            {"r": route, "p": list(position), "t": now_ms}, separators=(",", ":")
        ).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def decode(self, route: str, cursor: str, now_ms: int) -> list[Any]:
        invalid = ApiError("the cursor is invalid or has expired", code="invalid_cursor")
        head, _, tail = cursor.partition(".")
        try:
            payload = _unb64(head)
            mac = _unb64(tail)
        except (ValueError, UnicodeEncodeError):
            raise invalid from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise invalid
        data = json.loads(payload)
        if data.get("r") != route or now_ms - int(data.get("t", 0)) > CURSOR_LIFETIME_MS:
            raise invalid
        position = data.get("p")
        if not isinstance(position, list):
            raise invalid
        return position


def _fits(position: list[Any], shape: Sequence[type]) -> bool:
    return len(position) == len(shape) and all(
        isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        for value, kind in zip(position, shape, strict=True)
    )


def decode_cursor(
    request: Request, cursor: str | None, shape: Sequence[type] | None = None
) -> list[Any] | None:
    """The position a ``cursor`` query parameter names, or None for the first page.

    ``shape`` (e.g. ``(int, str)`` for a time and an ID) is checked too: a cursor that
    does not fit it answers 400 ``invalid_cursor`` like a forged one.
    """
    if cursor is None or cursor == "":
        return None
    cursors: Cursors = request.app.state.cursors
    position = cursors.decode(_route_name(request) or "", cursor, app_of(request).clock.now_ms())
    if shape is not None and not _fits(position, shape):
        raise ApiError("the cursor is invalid or has expired", code="invalid_cursor")
    return position


def encode_cursor(request: Request, position: Sequence[Any]) -> str:
    cursors: Cursors = request.app.state.cursors
    return cursors.encode(_route_name(request) or "", position, app_of(request).clock.now_ms())


T = TypeVar("T")


def paginate(
    request: Request,
    rows: Sequence[T],
    limit: int,
    position: Callable[[T], Sequence[Any]],
) -> tuple[list[T], str | None]:
    """Cut a page from ``rows`` fetched with ``limit + 1``; the cursor points past the
    last row kept, or is None when there is no further page."""
    page = list(rows[:limit])
    if len(rows) > limit and page:
        return page, encode_cursor(request, position(page[-1]))
    return page, None

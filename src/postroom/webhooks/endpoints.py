"""Webhook endpoints: create, change, rotate, delete, test and replay (one use case each).

An endpoint has a scope (seed 000 webhook_endpoints):

* ``tenant`` — hears its tenant's events;
* ``partner`` — hears the events of every tenant of its partner (and those stamped with
  the partner);
* ``platform`` — hears every event.

Who may manage which: a platform key every endpoint; a partner key its partner's
endpoints and those of its tenants; a tenant key its tenant's. An endpoint outside reach
is answered like a missing one (``webhook_not_found``). Asking for a scope above the
key's level is refused with :class:`~postroom.errors.Refused` (403 in the API).

Every change writes its audit row in its transaction; secrets are sealed before they
reach the database and shown once, by create and rotate.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.errors import Conflict, InvalidInput, NotFound, Refused
from postroom.events.catalogue import WebhookTest
from postroom.events.emit import emit
from postroom.ids import new_id
from postroom.store import tenancy as directory
from postroom.store import webhooks as rows
from postroom.store.db import Tx
from postroom.store.webhooks import Endpoint, EndpointReach
from postroom.tenancy import audit
from postroom.webhooks import signing
from postroom.webhooks.addresses import check_url

if TYPE_CHECKING:
    from postroom.app import App

DELIVER_JOB = "webhook.deliver"
TEST_EVENT = "webhook.test"
MAX_EVENT_TYPES = 100
MAX_IDENTITIES = 100
MAX_DESCRIPTION = 500
MAX_OVERLAP_MS = 7 * 86_400_000
MAX_REPLAY_EVENTS = 10_000
EVENT_TYPE_PATTERN = r"^(\*|[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*(\.\*)?)$"
_EVENT_TYPE = re.compile(EVENT_TYPE_PATTERN)
_ID = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


@dataclass(frozen=True)
class Actor:
    """Who acts: a key's level and scope (the CLI acts as the platform, no key)."""

    level: str
    tenant_id: str | None = None
    partner_id: str | None = None
    key_id: str | None = None

    def reach(self) -> EndpointReach:
        if self.level == "platform":
            return EndpointReach()
        if self.level == "partner":
            return EndpointReach(partner_id=self.partner_id)
        return EndpointReach(tenant_id=self.tenant_id or "")


PLATFORM = Actor("platform")


# --- matching events ------------------------------------------------------------------


def wants_type(endpoint: Endpoint, event_type: str) -> bool:
    for pattern in endpoint.event_types:
        if pattern == "*" or pattern == event_type:
            return True
        if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
            return True
    return False


def hears(endpoint: Endpoint, tenant_id: str | None, partner_id: str | None) -> bool:
    """Whether an event of this tenant (and partner) is in the endpoint's scope."""
    if endpoint.tenant_id is not None:
        return tenant_id == endpoint.tenant_id
    if endpoint.partner_id is not None:
        return partner_id == endpoint.partner_id
    return True


def matches(
    endpoint: Endpoint,
    *,
    event_type: str,
    tenant_id: str | None,
    partner_id: str | None,
    identity_id: str | None,
) -> bool:
    """Whether the endpoint subscribes to this event: scope, types and identity filter."""
    if not hears(endpoint, tenant_id, partner_id) or not wants_type(endpoint, event_type):
        return False
    return endpoint.identity_ids is None or identity_id in endpoint.identity_ids


# --- reach ----------------------------------------------------------------------------


def _tenant_partner(tx: Tx, tenant_id: str) -> str | None:
    tenant = directory.get_tenant(tx, tenant_id)
    return None if tenant is None else tenant.partner_id


def sees(tx: Tx, actor: Actor, endpoint: Endpoint) -> bool:
    if actor.level == "platform":
        return True
    if actor.level == "partner":
        if endpoint.partner_id is not None:
            return endpoint.partner_id == actor.partner_id
        return (
            endpoint.tenant_id is not None
            and actor.partner_id is not None
            and _tenant_partner(tx, endpoint.tenant_id) == actor.partner_id
        )
    if actor.level == "tenant":
        return endpoint.tenant_id is not None and endpoint.tenant_id == actor.tenant_id
    return False


def endpoint_in_reach(tx: Tx, actor: Actor, endpoint_id: str) -> Endpoint:
    endpoint = rows.get_endpoint(tx, endpoint_id) if _ID.match(endpoint_id) else None
    if endpoint is None or not sees(tx, actor, endpoint):
        raise NotFound(f"no webhook endpoint {endpoint_id!r}", code="webhook_not_found")
    return endpoint


def list_in_reach(
    tx: Tx, actor: Actor, *, tenant_id: str | None, after: str | None, limit: int
) -> list[Endpoint]:
    if tenant_id is not None:
        _tenant_seen(tx, actor, tenant_id)
    if actor.level == "identity":
        return []
    return rows.list_endpoints(tx, actor.reach(), tenant_id=tenant_id, after=after, limit=limit)


def _tenant_seen(tx: Tx, actor: Actor, tenant_id: str) -> None:
    tenant = directory.get_tenant(tx, tenant_id) if _ID.match(tenant_id) else None
    seen = tenant is not None and (
        actor.level == "platform"
        or (
            actor.level == "partner"
            and actor.partner_id is not None
            and tenant.partner_id == actor.partner_id
        )
        or (actor.level == "tenant" and tenant.id == actor.tenant_id)
    )
    if not seen:
        raise NotFound(f"no tenant {tenant_id!r}", code="tenant_not_found")


# --- checks ---------------------------------------------------------------------------


def check_event_types(event_types: Sequence[str]) -> list[str]:
    types = list(dict.fromkeys(event_types))
    if not 1 <= len(types) <= MAX_EVENT_TYPES:
        raise InvalidInput(
            f'name 1-{MAX_EVENT_TYPES} event types, or ["*"] for all',
            code="invalid_event_types",
        )
    for item in types:
        if len(item) > 100 or not _EVENT_TYPE.match(item):
            raise InvalidInput(
                f"{item!r} is not an event type (message.received), a family (message.*) or *",
                code="invalid_event_types",
            )
    return ["*"] if "*" in types else types


def _check_description(description: str | None) -> str | None:
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise InvalidInput(
            f"a description is at most {MAX_DESCRIPTION} characters", code="invalid_description"
        )
    return description


def _check_url(app: App, url: str) -> str:
    settings = app.settings
    check_url(
        url,
        allow_insecure=settings.webhooks_allow_insecure,
        allow_loopback=settings.webhooks_allow_loopback,
    )
    return url


def _check_identities(
    tx: Tx,
    identity_ids: Sequence[str] | None,
    *,
    tenant_id: str | None,
    partner_id: str | None,
) -> list[str] | None:
    """The identity filter: identities of the endpoint's scope (else identity_not_found)."""
    if identity_ids is None:
        return None
    wanted = list(dict.fromkeys(identity_ids))
    if not 1 <= len(wanted) <= MAX_IDENTITIES:
        raise InvalidInput(
            f"an identity filter names 1-{MAX_IDENTITIES} identities (null: every identity)",
            code="invalid_identity_filter",
        )
    for identity_id in wanted:
        identity = directory.get_identity(tx, identity_id) if _ID.match(identity_id) else None
        ok = identity is not None and not identity.is_system and identity.status != "deleted"
        if ok and identity is not None:
            if tenant_id is not None:
                ok = identity.tenant_id == tenant_id
            elif partner_id is not None:
                ok = _tenant_partner(tx, identity.tenant_id) == partner_id
        if not ok:
            raise NotFound(f"no identity {identity_id!r}", code="identity_not_found")
    return wanted


# --- create ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NewEndpoint:
    url: str
    description: str | None = None
    event_types: Sequence[str] = ("*",)
    identity_ids: Sequence[str] | None = None
    enabled: bool = True
    scope: str | None = None  # tenant | partner | platform; None: from tenant_id / level
    tenant_id: str | None = None
    partner_id: str | None = None


def _owner(tx: Tx, actor: Actor, spec: NewEndpoint) -> tuple[str | None, str | None]:
    """(tenant_id, partner_id) of a new endpoint, checked against the actor's reach."""
    scope = spec.scope or (
        "tenant" if spec.tenant_id is not None or actor.level == "tenant" else actor.level
    )
    if scope not in ("tenant", "partner", "platform"):
        raise InvalidInput(f"unknown scope {scope!r}", code="invalid_webhook_scope")
    if scope != "tenant" and spec.tenant_id is not None:
        raise InvalidInput(f"a {scope} endpoint names no tenant_id", code="invalid_webhook_scope")
    if scope != "partner" and spec.partner_id is not None:
        raise InvalidInput(f"a {scope} endpoint names no partner_id", code="invalid_webhook_scope")
    if scope == "platform":
        if actor.level != "platform":
            raise Refused("only platform keys manage platform webhook endpoints")
        return None, None
    if scope == "partner":
        if actor.level == "partner":
            if spec.partner_id not in (None, actor.partner_id):
                raise NotFound(f"no partner {spec.partner_id!r}", code="partner_not_found")
            return None, actor.partner_id
        if actor.level != "platform":
            raise Refused("only platform and partner keys manage partner webhook endpoints")
        if spec.partner_id is None:
            raise InvalidInput("name the partner: partner_id", code="partner_required")
        if not _ID.match(spec.partner_id) or directory.get_partner(tx, spec.partner_id) is None:
            raise NotFound(f"no partner {spec.partner_id!r}", code="partner_not_found")
        return None, spec.partner_id
    tenant_id = spec.tenant_id
    if tenant_id is None:
        if actor.tenant_id is None:
            raise InvalidInput("name the tenant: tenant_id", code="tenant_required")
        tenant_id = actor.tenant_id
    _tenant_seen(tx, actor, tenant_id)
    return tenant_id, None


def check_owner(tx: Tx, actor: Actor, spec: NewEndpoint) -> None:
    """Refuse (Refused, NotFound, InvalidInput) a scope the actor may not use,
    before anything is written."""
    _owner(tx, actor, spec)


def create(app: App, actor: Actor, spec: NewEndpoint) -> tuple[Endpoint, str]:
    """Create an endpoint; returns it and its secret (shown once)."""
    url = _check_url(app, spec.url)
    event_types = check_event_types(spec.event_types)
    description = _check_description(spec.description)
    secret = signing.new_secret()
    endpoint_id = new_id("whk")
    sealed = app.keys().seal(secret.encode(), "webhook_endpoints", "secret_enc", endpoint_id)
    with app.db.write() as tx:
        tenant_id, partner_id = _owner(tx, actor, spec)
        identity_ids = _check_identities(
            tx, spec.identity_ids, tenant_id=tenant_id, partner_id=partner_id
        )
        endpoint = rows.insert_endpoint(
            tx,
            endpoint_id=endpoint_id,
            tenant_id=tenant_id,
            partner_id=partner_id,
            url=url,
            description=description,
            event_types=event_types,
            identity_ids=identity_ids,
            enabled=spec.enabled,
            secret_enc=sealed,
            now=app.clock.now_ms(),
        )
        _audit(app, tx, actor, "webhook.create", endpoint, {"scope": endpoint.scope})
    return endpoint, secret


def _audit(
    app: App, tx: Tx, actor: Actor, action: str, endpoint: Endpoint, details: dict[str, Any]
) -> None:
    audit.record(
        app,
        tx,
        action=action,
        tenant_id=endpoint.tenant_id,
        target_type="webhook_endpoint",
        target_id=endpoint.id,
        actor_key_id=actor.key_id,
        details=details,
    )


# --- change, delete, rotate -----------------------------------------------------------

_UNSET: Any = object()


@dataclass(frozen=True)
class EndpointChange:
    """Fields to change; ``_UNSET`` (the default) leaves a field as it is."""

    url: Any = _UNSET
    description: Any = _UNSET
    event_types: Any = _UNSET
    identity_ids: Any = _UNSET
    enabled: Any = _UNSET


def update(app: App, actor: Actor, endpoint_id: str, change: EndpointChange) -> Endpoint:
    """Change an endpoint. Enabling clears the failure streak; disabling is 'manual'."""
    columns: dict[str, Any] = {}
    if change.url is not _UNSET:
        columns["url"] = _check_url(app, str(change.url))
    if change.description is not _UNSET:
        columns["description"] = _check_description(change.description)
    if change.event_types is not _UNSET:
        types = check_event_types(list(change.event_types))
        columns["event_types_json"] = json.dumps(types, separators=(",", ":"))
    with app.db.write() as tx:
        endpoint = endpoint_in_reach(tx, actor, endpoint_id)
        if change.identity_ids is not _UNSET:
            ids = _check_identities(
                tx,
                None if change.identity_ids is None else list(change.identity_ids),
                tenant_id=endpoint.tenant_id,
                partner_id=endpoint.partner_id,
            )
            columns["identity_ids_json"] = (
                None if ids is None else json.dumps(ids, separators=(",", ":"))
            )
        if change.enabled is not _UNSET and bool(change.enabled) != endpoint.enabled:
            if change.enabled:
                columns.update(
                    enabled=1, disabled_reason=None, consecutive_failures=0, failing_since=None
                )
            else:
                columns.update(enabled=0, disabled_reason="manual")
        if not columns:
            return endpoint
        updated = rows.update_endpoint(tx, endpoint.id, columns, app.clock.now_ms())
        changed = sorted(k.removesuffix("_json") for k in columns if not k.startswith("cons"))
        _audit(app, tx, actor, "webhook.update", updated, {"changed": changed})
    return updated


def delete(app: App, actor: Actor, endpoint_id: str) -> None:
    """Delete an endpoint and its delivery log; queued deliveries to it end unsent."""
    with app.db.write() as tx:
        endpoint = endpoint_in_reach(tx, actor, endpoint_id)
        rows.delete_endpoint(tx, endpoint.id)
        _audit(app, tx, actor, "webhook.delete", endpoint, {"scope": endpoint.scope})


def rotate(app: App, actor: Actor, endpoint_id: str, overlap_ms: int) -> tuple[Endpoint, str]:
    """A new secret; the current one keeps signing beside it for ``overlap_ms``."""
    if not 0 <= overlap_ms <= MAX_OVERLAP_MS:
        raise InvalidInput("the overlap is between 0 seconds and 7 days", code="invalid_overlap")
    keys = app.keys()
    secret = signing.new_secret()
    now = app.clock.now_ms()
    with app.db.write() as tx:
        endpoint = endpoint_in_reach(tx, actor, endpoint_id)
        sealed = keys.seal(secret.encode(), "webhook_endpoints", "secret_enc", endpoint.id)
        columns: dict[str, Any] = {
            "secret_enc": sealed,
            "prev_secret_enc": None,
            "prev_secret_expires_at": None,
        }
        if overlap_ms > 0:
            current = keys.open(endpoint.secret_enc, "webhook_endpoints", "secret_enc", endpoint.id)
            columns["prev_secret_enc"] = keys.seal(
                current, "webhook_endpoints", "prev_secret_enc", endpoint.id
            )
            columns["prev_secret_expires_at"] = now + overlap_ms
        updated = rows.update_endpoint(tx, endpoint.id, columns, now)
        _audit(app, tx, actor, "webhook.rotate", updated, {"overlap_ms": overlap_ms})
    return updated, secret


def secrets_in_use(app: App, endpoint: Endpoint, now: int) -> list[str]:
    """The secrets that sign a delivery now: the current one, then the previous one
    while its overlap lasts."""
    keys = app.keys()
    found = [keys.open(endpoint.secret_enc, "webhook_endpoints", "secret_enc", endpoint.id)]
    if (
        endpoint.prev_secret_enc is not None
        and endpoint.prev_secret_expires_at is not None
        and endpoint.prev_secret_expires_at > now
    ):
        found.append(
            keys.open(endpoint.prev_secret_enc, "webhook_endpoints", "prev_secret_enc", endpoint.id)
        )
    return [s.decode() for s in found]


# --- test and replay ------------------------------------------------------------------


def chain_payload(
    endpoint: Endpoint, event_id: str, *, chain: str, since: int, test: bool = False
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "endpoint_id": endpoint.id,
        "event_id": event_id,
        "chain": chain,
        "since": since,
        "step": 0,
    }
    if test:
        payload["test"] = True
    return payload


def send_test(app: App, actor: Actor, endpoint_id: str) -> tuple[str, str]:
    """Write a ``webhook.test`` event for this endpoint only and queue its delivery (one
    attempt, whether the endpoint is enabled or not). Returns (event id, job id)."""
    now = app.clock.now_ms()
    with app.db.write() as tx:
        endpoint = endpoint_in_reach(tx, actor, endpoint_id)
        event = emit(
            tx,
            WebhookTest(endpoint_id=endpoint.id),
            tenant_id=endpoint.tenant_id,
            identity_id=None,
            now=now,
        )
        if endpoint.partner_id is not None:
            rows.stamp_event_partner(tx, event.id, endpoint.partner_id)
        # Only this endpoint hears a test: the event is born fanned out.
        rows.mark_dispatched(tx, [event.id], now)
        chain = f"{endpoint.id}:{event.id}"
        job = app.queue.enqueue_in(
            tx,
            DELIVER_JOB,
            chain,
            chain_payload(endpoint, event.id, chain=chain, since=now, test=True),
            tenant_id=endpoint.tenant_id,
        )
        _audit(app, tx, actor, "webhook.test", endpoint, {"event_id": event.id})
    return event.id, job.id


def replay(
    app: App,
    actor: Actor,
    endpoint_id: str,
    *,
    event_id: str | None = None,
    since: int | None = None,
    until: int | None = None,
) -> list[str]:
    """Deliver one event, or every matching event of [since, until), to the endpoint
    again (a fresh chain of attempts each). Returns the event ids queued."""
    if (event_id is None) == (since is None):
        raise InvalidInput("name either event_id or since (and until)", code="invalid_replay")
    now = app.clock.now_ms()
    with app.db.write() as tx:
        endpoint = endpoint_in_reach(tx, actor, endpoint_id)
        if not endpoint.enabled:
            raise Conflict(
                f"webhook endpoint {endpoint.id} is disabled; enable it first",
                code="webhook_disabled",
            )
        if event_id is not None:
            stored = rows.get_stored_event(tx, event_id) if _ID.match(event_id) else None
            if stored is None or not hears(endpoint, stored.tenant_id, stored.partner_id):
                raise NotFound(f"no event {event_id!r}", code="event_not_found")
            chosen = [stored.id]
        else:
            assert since is not None
            end = now if until is None else until
            if end <= since:
                raise InvalidInput("until must be after since", code="invalid_replay")
            found = rows.events_between(
                tx,
                tenant_id=endpoint.tenant_id,
                partner_id=endpoint.partner_id,
                since=since,
                until=end,
                limit=MAX_REPLAY_EVENTS + 1,
            )
            chosen = [
                e.id
                for e in found
                if matches(
                    endpoint,
                    event_type=e.type,
                    tenant_id=e.tenant_id,
                    partner_id=e.partner_id,
                    identity_id=e.identity_id,
                )
            ]
            if len(found) > MAX_REPLAY_EVENTS:
                raise InvalidInput(
                    f"the range holds more than {MAX_REPLAY_EVENTS} events; replay a shorter one",
                    code="replay_too_large",
                )
        # Each replay is its own chain, even two in the same millisecond.
        round_id = f"r{now}.{secrets.token_hex(4)}"
        for chosen_id in chosen:
            chain = f"{endpoint.id}:{chosen_id}@{round_id}"
            app.queue.enqueue_in(
                tx,
                DELIVER_JOB,
                chain,
                chain_payload(endpoint, chosen_id, chain=chain, since=now),
                tenant_id=endpoint.tenant_id,
            )
        details: dict[str, Any] = {"events": len(chosen)}
        if event_id is not None:
            details["event_id"] = event_id
        _audit(app, tx, actor, "webhook.replay", endpoint, details)
    return chosen

"""``postroom webhook``: webhook endpoints, their delivery log, tests and replays.

The commands act as the operator (platform reach, audit actor ``cli``). The secret is
printed once, by ``create`` and ``rotate``.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Column, Table

from postroom.app import App
from postroom.cli.context import emit_json, json_option, state
from postroom.clock import to_rfc3339
from postroom.errors import InvalidInput, NotFound
from postroom.store import tenancy as directory
from postroom.store import webhooks as rows
from postroom.store.webhooks import Delivery, Endpoint
from postroom.webhooks import endpoints as service
from postroom.webhooks.endpoints import PLATFORM, EndpointChange, NewEndpoint


def endpoint_json(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": endpoint.id,
        "scope": endpoint.scope,
        "tenant_id": endpoint.tenant_id,
        "partner_id": endpoint.partner_id,
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": list(endpoint.event_types),
        "identity_ids": None if endpoint.identity_ids is None else list(endpoint.identity_ids),
        "enabled": endpoint.enabled,
        "disabled_reason": endpoint.disabled_reason,
        "consecutive_failures": endpoint.consecutive_failures,
        "failing_since": to_rfc3339(endpoint.failing_since),
        "previous_secret_until": to_rfc3339(endpoint.prev_secret_expires_at),
        "created_at": to_rfc3339(endpoint.created_at),
    }


def delivery_json(delivery: Delivery) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "attempt": delivery.attempt,
        "status": delivery.status,
        "http_status": delivery.http_status,
        "error": delivery.error,
        "duration_ms": delivery.duration_ms,
        "next_attempt_at": to_rfc3339(delivery.next_attempt_at),
        "created_at": to_rfc3339(delivery.created_at),
    }


def _tenant_id(app: App, ref: str | None) -> str | None:
    if ref is None:
        return None
    with app.db.read() as tx:
        tenant = directory.get_tenant(tx, ref) or directory.get_tenant_by_slug(tx, ref)
    if tenant is None:
        raise NotFound(f"no tenant {ref!r}", code="tenant_not_found")
    return tenant.id


def _secret(heading: str, secret: str) -> None:
    click.echo(f"{heading} (shown once; keep it somewhere safe):")
    click.echo(f"  {secret}")


def _time(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    try:
        from postroom.api.models.query import rfc3339_ms  # FastAPI only when used

        return rfc3339_ms(text)
    except ValueError as exc:
        raise InvalidInput(f"{option}: {exc}", code="invalid_time") from None


@click.group()
def webhook() -> None:
    """Webhook endpoints: signed event deliveries to your URLs."""


@webhook.command("create")
@click.argument("url")
@click.option("--tenant", "tenant_ref", default=None, help="Tenant ID or slug (tenant scope).")
@click.option("--partner", "partner_id", default=None, help="Partner ID (partner scope).")
@click.option(
    "--scope",
    type=click.Choice(["tenant", "partner", "platform"]),
    default=None,
    help="Whose events it hears (default: tenant with --tenant, partner with --partner, "
    "else platform).",
)
@click.option(
    "--event-type",
    "event_types",
    multiple=True,
    help="Deliver this type or family (message.*) only (repeatable; default: every type).",
)
@click.option(
    "--identity", "identity_ids", multiple=True, help="Only this identity's events (repeatable)."
)
@click.option("--description", default=None, help="A note for people.")
@click.option("--disabled", is_flag=True, help="Create it disabled.")
@json_option
@click.pass_context
def webhook_create(
    ctx: click.Context,
    url: str,
    tenant_ref: str | None,
    partner_id: str | None,
    scope: str | None,
    event_types: tuple[str, ...],
    identity_ids: tuple[str, ...],
    description: str | None,
    disabled: bool,
    as_json: bool,
) -> None:
    """Create an endpoint; prints its signing secret (whsec_...) once."""
    app = state(ctx).app()
    try:
        if scope is None and partner_id is not None:
            scope = "partner"
        spec = NewEndpoint(
            url=url,
            description=description,
            event_types=list(event_types) or ["*"],
            identity_ids=list(identity_ids) or None,
            enabled=not disabled,
            scope=scope,
            tenant_id=_tenant_id(app, tenant_ref),
            partner_id=partner_id,
        )
        created, secret = service.create(app, PLATFORM, spec)
    finally:
        app.close()
    if as_json:
        emit_json({**endpoint_json(created), "secret": secret})
        return
    click.echo(f"created webhook endpoint {created.id} ({created.scope}) -> {created.url}")
    _secret("Signing secret", secret)


@webhook.command("list")
@click.option("--tenant", "tenant_ref", default=None, help="Only this tenant's (ID or slug).")
@json_option
@click.pass_context
def webhook_list(ctx: click.Context, tenant_ref: str | None, as_json: bool) -> None:
    """List endpoints, oldest first."""
    app = state(ctx).app()
    try:
        tenant_id = _tenant_id(app, tenant_ref)
        with app.db.read() as tx:
            found = service.list_in_reach(
                tx, PLATFORM, tenant_id=tenant_id, after=None, limit=10_000
            )
    finally:
        app.close()
    if as_json:
        emit_json({"webhooks": [endpoint_json(e) for e in found]})
        return
    table = Table(Column("id", no_wrap=True), "scope", "url", "types", "enabled", "failures")
    for e in found:
        table.add_row(
            e.id,
            e.scope,
            e.url,
            ",".join(e.event_types),
            "yes" if e.enabled else f"no ({e.disabled_reason})",
            str(e.consecutive_failures),
        )
    state(ctx).console.print(table)


@webhook.command("show")
@click.argument("webhook_id")
@json_option
@click.pass_context
def webhook_show(ctx: click.Context, webhook_id: str, as_json: bool) -> None:
    """One endpoint (never its secret)."""
    app = state(ctx).app()
    try:
        with app.db.read() as tx:
            found = service.endpoint_in_reach(tx, PLATFORM, webhook_id)
    finally:
        app.close()
    shown = endpoint_json(found)
    if as_json:
        emit_json(shown)
        return
    for name, value in shown.items():
        click.echo(f"{name:22} {value if value is not None else ''}")


@webhook.command("update")
@click.argument("webhook_id")
@click.option("--url", default=None, help="A new URL.")
@click.option("--event-type", "event_types", multiple=True, help="Replace the event types.")
@click.option("--enable/--disable", "enabled", default=None, help="Enable or disable it.")
@json_option
@click.pass_context
def webhook_update(
    ctx: click.Context,
    webhook_id: str,
    url: str | None,
    event_types: tuple[str, ...],
    enabled: bool | None,
    as_json: bool,
) -> None:
    """Change an endpoint; --enable also clears its failure streak."""
    fields: dict[str, Any] = {}
    if url is not None:
        fields["url"] = url
    if event_types:
        fields["event_types"] = list(event_types)
    if enabled is not None:
        fields["enabled"] = enabled
    app = state(ctx).app()
    try:
        updated = service.update(app, PLATFORM, webhook_id, EndpointChange(**fields))
    finally:
        app.close()
    if as_json:
        emit_json(endpoint_json(updated))
        return
    click.echo(f"updated webhook endpoint {updated.id} (enabled: {updated.enabled})")


@webhook.command("rotate")
@click.argument("webhook_id")
@click.option(
    "--overlap-hours",
    type=click.FloatRange(0, 168),
    default=24.0,
    show_default=True,
    help="How long the previous secret keeps signing beside the new one.",
)
@json_option
@click.pass_context
def webhook_rotate(
    ctx: click.Context, webhook_id: str, overlap_hours: float, as_json: bool
) -> None:
    """Give an endpoint a new signing secret; prints it once."""
    app = state(ctx).app()
    try:
        rotated, secret = service.rotate(app, PLATFORM, webhook_id, int(overlap_hours * 3_600_000))
    finally:
        app.close()
    if as_json:
        emit_json({**endpoint_json(rotated), "secret": secret})
        return
    click.echo(f"rotated the secret of {rotated.id}")
    _secret("New signing secret", secret)


@webhook.command("test")
@click.argument("webhook_id")
@json_option
@click.pass_context
def webhook_test(ctx: click.Context, webhook_id: str, as_json: bool) -> None:
    """Queue a webhook.test event for this endpoint only (a worker delivers it)."""
    app = state(ctx).app()
    try:
        event_id, job_id = service.send_test(app, PLATFORM, webhook_id)
    finally:
        app.close()
    if as_json:
        emit_json({"webhook_id": webhook_id, "event_id": event_id, "job_id": job_id})
        return
    click.echo(f"queued test event {event_id} (job {job_id})")


@webhook.command("deliveries")
@click.argument("webhook_id")
@click.option(
    "--status", type=click.Choice(["succeeded", "failed", "dead"]), default=None, help="Only these."
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Rows.")
@json_option
@click.pass_context
def webhook_deliveries(
    ctx: click.Context, webhook_id: str, status: str | None, limit: int, as_json: bool
) -> None:
    """An endpoint's delivery attempts, newest first."""
    app = state(ctx).app()
    try:
        with app.db.read() as tx:
            found = service.endpoint_in_reach(tx, PLATFORM, webhook_id)
            attempts = rows.list_deliveries(tx, found.id, status=status, limit=limit)
    finally:
        app.close()
    if as_json:
        emit_json({"deliveries": [delivery_json(d) for d in attempts]})
        return
    table = Table(
        Column("event", no_wrap=True), "type", "attempt", "status", "http", "error", "ms", "at"
    )
    for d in attempts:
        table.add_row(
            d.event_id,
            d.event_type,
            str(d.attempt),
            d.status,
            "" if d.http_status is None else str(d.http_status),
            d.error or "",
            "" if d.duration_ms is None else str(d.duration_ms),
            to_rfc3339(d.created_at) or "",
        )
    state(ctx).console.print(table)


@webhook.command("replay")
@click.argument("webhook_id")
@click.option("--event", "event_id", default=None, help="Deliver this event again.")
@click.option("--since", default=None, help="Deliver the events from this time (RFC 3339).")
@click.option("--until", default=None, help="... up to this time (default: now).")
@json_option
@click.pass_context
def webhook_replay(
    ctx: click.Context,
    webhook_id: str,
    event_id: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """Deliver one event, or a time range of events, to an endpoint again."""
    app = state(ctx).app()
    try:
        queued = service.replay(
            app,
            PLATFORM,
            webhook_id,
            event_id=event_id,
            since=_time(since, "--since"),
            until=_time(until, "--until"),
        )
    finally:
        app.close()
    if as_json:
        emit_json({"webhook_id": webhook_id, "queued": len(queued)})
        return
    click.echo(f"queued {len(queued)} event(s) for {webhook_id}")


@webhook.command("delete")
@click.argument("webhook_id")
@json_option
@click.pass_context
def webhook_delete(ctx: click.Context, webhook_id: str, as_json: bool) -> None:
    """Delete an endpoint and its delivery log."""
    app = state(ctx).app()
    try:
        service.delete(app, PLATFORM, webhook_id)
    finally:
        app.close()
    if as_json:
        emit_json({"deleted": webhook_id})
        return
    click.echo(f"deleted webhook endpoint {webhook_id}")


COMMANDS: list[click.Command] = [webhook]

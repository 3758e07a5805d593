"""``postroom tenant|identity|key``: tenants, identities (inboxes) and API keys.

These commands act as the operator on the local installation (audit actor ``cli``).
Commands that create something print exactly one JSON object with ``--json``; a key's
secret is printed once, when it is created or rotated, and never again.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Column, Table

from postroom.cli.context import emit_json, json_option, state
from postroom.clock import to_rfc3339
from postroom.store.api_keys import ApiKey
from postroom.store.tenancy import IdentityWithAddress, Tenant
from postroom.tenancy import api_keys, service
from postroom.tenancy.permissions import LEVELS, PERMISSIONS

DAY_MS = 86_400_000


def _whole(header: str) -> Column:
    """A column never cut or wrapped: IDs and addresses are copied from it."""
    return Column(header, no_wrap=True, min_width=len(header))


def tenant_json(tenant: Tenant) -> dict[str, Any]:
    return {
        "id": tenant.id,
        "slug": tenant.slug,
        "name": tenant.name,
        "mode": tenant.mode,
        "status": tenant.status,
        "is_default": tenant.is_default,
        "address_suffix": tenant.address_suffix,
        "partner_id": tenant.partner_id,
        "created_at": to_rfc3339(tenant.created_at),
    }


def identity_json(entry: IdentityWithAddress) -> dict[str, Any]:
    identity = entry.identity
    return {
        "id": identity.id,
        "address": entry.address,
        "tenant_id": identity.tenant_id,
        "username": identity.username,
        "display_name": identity.display_name,
        "status": identity.status,
        "created_at": to_rfc3339(identity.created_at),
    }


def key_json(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "prefix": key.prefix,
        "name": key.name,
        "level": key.level,
        "mode": key.mode,
        "tenant_id": key.tenant_id,
        "identity_id": key.identity_id,
        "partner_id": key.partner_id,
        "permissions": list(key.permissions),
        "expires_at": to_rfc3339(key.expires_at),
        "revoked_at": to_rfc3339(key.revoked_at),
        "last_used_at": to_rfc3339(key.last_used_at),
        "previous_secret_until": to_rfc3339(key.prev_expires_at),
        "created_at": to_rfc3339(key.created_at),
    }


def _key_state(key: ApiKey, now: int) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


# --- tenant ---------------------------------------------------------------------------


@click.group()
def tenant() -> None:
    """Tenants: the workspaces identities, domains and keys belong to."""


@tenant.command("create")
@click.argument("slug")
@click.option("--name", default=None, help="Display name (default: the slug).")
@click.option(
    "--mode",
    type=click.Choice(["live", "test"]),
    default="live",
    show_default=True,
    help="Test tenants get pr_test_ keys.",
)
@json_option
@click.pass_context
def tenant_create(
    ctx: click.Context, slug: str, name: str | None, mode: str, as_json: bool
) -> None:
    """Create a tenant; its addresses end in .SLUG (alice.SLUG@domain)."""
    app = state(ctx).app()
    try:
        created = service.create_tenant(app, slug, name, mode=mode)
    finally:
        app.close()
    if as_json:
        emit_json(tenant_json(created))
        return
    click.echo(f"created tenant {created.slug} ({created.id}, {created.mode})")


@tenant.command("list")
@json_option
@click.pass_context
def tenant_list(ctx: click.Context, as_json: bool) -> None:
    """List tenants, oldest first."""
    app = state(ctx).app()
    try:
        tenants = service.list_tenants(app)
    finally:
        app.close()
    if as_json:
        emit_json({"tenants": [tenant_json(t) for t in tenants]})
        return
    table = Table(_whole("id"), "slug", "name", "mode", "status", "suffix", "created")
    for t in tenants:
        table.add_row(
            t.id,
            t.slug + (" (default)" if t.is_default else ""),
            t.name,
            t.mode,
            t.status,
            t.address_suffix,
            to_rfc3339(t.created_at) or "",
        )
    state(ctx).console.print(table)


# --- identity -------------------------------------------------------------------------


@click.group()
def identity() -> None:
    """Identities: inboxes, each with a primary address."""


@identity.command("create")
@click.argument("username")
@click.option("--domain", default=None, help="Domain of the address (default: platform_domain).")
@click.option("--tenant", "tenant_ref", default=None, help="Tenant ID or slug (default: default).")
@click.option("--display-name", default=None, help="Name shown in From (default: the username).")
@json_option
@click.pass_context
def identity_create(
    ctx: click.Context,
    username: str,
    domain: str | None,
    tenant_ref: str | None,
    display_name: str | None,
    as_json: bool,
) -> None:
    """Create an identity and its address USERNAME[.tenant]@DOMAIN."""
    app = state(ctx).app()
    try:
        created = service.create_identity(
            app, username, domain=domain, tenant=tenant_ref, display_name=display_name
        )
    finally:
        app.close()
    entry = IdentityWithAddress(created.identity, created.address.address)
    if as_json:
        emit_json(identity_json(entry))
        return
    click.echo(f"created identity {created.identity.id} <{created.address.address}>")


@identity.command("list")
@click.option("--tenant", "tenant_ref", default=None, help="Only this tenant (ID or slug).")
@json_option
@click.pass_context
def identity_list(ctx: click.Context, tenant_ref: str | None, as_json: bool) -> None:
    """List identities with their addresses, oldest first."""
    app = state(ctx).app()
    try:
        entries = service.list_identities(app, tenant_ref)
    finally:
        app.close()
    if as_json:
        emit_json({"identities": [identity_json(e) for e in entries]})
        return
    table = Table(_whole("id"), _whole("address"), "display name", "tenant", "status", "created")
    for e in entries:
        table.add_row(
            e.identity.id,
            e.address or "",
            e.identity.display_name,
            e.identity.tenant_id,
            e.identity.status,
            to_rfc3339(e.identity.created_at) or "",
        )
    state(ctx).console.print(table)


# --- key ------------------------------------------------------------------------------


@click.group()
def key() -> None:
    """API keys: create, list, rotate and revoke."""


def _print_secret(ctx: click.Context, heading: str, secret: str) -> None:
    console = state(ctx).console
    console.print(f"[bold]{heading}[/bold] (shown once; keep it somewhere safe):")
    # Printed plainly so terminals and scripts copy it whole, never wrapped.
    click.echo(f"  {secret}")


@key.command("create")
@click.option(
    "--level",
    type=click.Choice([lvl for lvl in LEVELS if lvl != "partner"]),
    required=True,
    help="What the key reaches: the installation, one tenant, or one identity.",
)
@click.option("--tenant", "tenant_ref", default=None, help="Tenant ID or slug (tenant keys).")
@click.option(
    "--identity",
    "identity_ref",
    default=None,
    help="Identity ID, address or username (identity keys).",
)
@click.option("--name", default=None, help="A label for the key (default: '<level> key').")
@click.option(
    "--permission",
    "permissions",
    multiple=True,
    type=click.Choice([p.name for p in PERMISSIONS]),
    help="Grant this permission (repeatable; default: the level's defaults).",
)
@click.option(
    "--expires-in-days", type=click.IntRange(1, 3650), default=None, help="Expire after N days."
)
@json_option
@click.pass_context
def key_create(
    ctx: click.Context,
    level: str,
    tenant_ref: str | None,
    identity_ref: str | None,
    name: str | None,
    permissions: tuple[str, ...],
    expires_in_days: int | None,
    as_json: bool,
) -> None:
    """Create an API key and print its secret once."""
    app = state(ctx).app()
    try:
        tenant_id = identity_id = None
        if tenant_ref is not None:
            tenant_id = service.get_tenant(app, tenant_ref).id
        if identity_ref is not None:
            found = service.get_identity(app, identity_ref, tenant=tenant_ref)
            identity_id = found.identity.id
        expires_at = (
            None if expires_in_days is None else app.clock.now_ms() + expires_in_days * DAY_MS
        )
        created, secret = api_keys.create_key(
            app,
            level,
            tenant_id=tenant_id,
            identity_id=identity_id,
            name=name,
            permissions=permissions or None,
            expires_at=expires_at,
        )
    finally:
        app.close()
    if as_json:
        emit_json({**key_json(created), "secret": secret})
        return
    click.echo(f"created {created.level} key {created.id} ({created.name})")
    _print_secret(ctx, "Secret", secret)


@key.command("list")
@click.option("--tenant", "tenant_ref", default=None, help="Only this tenant's keys (ID or slug).")
@json_option
@click.pass_context
def key_list(ctx: click.Context, tenant_ref: str | None, as_json: bool) -> None:
    """List API keys (never their secrets), oldest first."""
    app = state(ctx).app()
    try:
        tenant_id = None if tenant_ref is None else service.get_tenant(app, tenant_ref).id
        keys = api_keys.list_keys(app, tenant_id=tenant_id)
        now = app.clock.now_ms()
    finally:
        app.close()
    if as_json:
        emit_json({"keys": [{**key_json(k), "state": _key_state(k, now)} for k in keys]})
        return
    table = Table(_whole("id"), "prefix", "name", "level", "scope", "state", "last used")
    for k in keys:
        table.add_row(
            k.id,
            k.prefix,
            k.name,
            k.level,
            k.identity_id or k.tenant_id or k.partner_id or "",
            _key_state(k, now),
            to_rfc3339(k.last_used_at) or "never",
        )
    state(ctx).console.print(table)


@key.command("revoke")
@click.argument("key_id")
@json_option
@click.pass_context
def key_revoke(ctx: click.Context, key_id: str, as_json: bool) -> None:
    """Revoke a key at once (revoking twice changes nothing)."""
    app = state(ctx).app()
    try:
        revoked = api_keys.revoke(app, key_id)
    finally:
        app.close()
    if as_json:
        emit_json(key_json(revoked))
        return
    click.echo(f"{revoked.id} revoked at {to_rfc3339(revoked.revoked_at)}")


@key.command("rotate")
@click.argument("key_id")
@click.option(
    "--overlap-hours",
    type=click.IntRange(0, 720),
    default=24,
    show_default=True,
    help="How long the old secret keeps working (0: it stops now).",
)
@json_option
@click.pass_context
def key_rotate(ctx: click.Context, key_id: str, overlap_hours: int, as_json: bool) -> None:
    """Give a key a new secret; the old one works for --overlap-hours more."""
    app = state(ctx).app()
    try:
        rotated, secret = api_keys.rotate(app, key_id, overlap_hours * 3_600_000)
    finally:
        app.close()
    if as_json:
        emit_json({**key_json(rotated), "secret": secret})
        return
    until = to_rfc3339(rotated.prev_expires_at)
    click.echo(
        f"rotated {rotated.id}; the old secret "
        + (f"works until {until}" if until else "stopped working")
    )
    _print_secret(ctx, "New secret", secret)


COMMANDS: list[click.Command] = [tenant, identity, key]

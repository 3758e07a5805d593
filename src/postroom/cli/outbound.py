"""``postroom send``, ``postroom outbox ...``, ``postroom suppression ...`` and
``postroom domain dkim-key generate``: sending mail from the command line.

The commands act as the operator (every inbox and tenant; requester origin ``cli``).
A send is recorded in the outbox and attempted by a worker (``postroom worker`` or
``postroom serve``); these commands never speak SMTP themselves.
"""

from __future__ import annotations

from email.utils import parseaddr
from pathlib import Path
from typing import Any

import click
from rich.table import Column, Table

from postroom.app import App
from postroom.cli.context import emit_json, json_option, state
from postroom.clock import to_rfc3339
from postroom.errors import InvalidInput
from postroom.outbound import compose as c
from postroom.outbound import policy
from postroom.outbound import service as outbox
from postroom.outbound.policy import SuppressionView
from postroom.outbound.service import OutboxEntry, Requester, SendInput
from postroom.store import outbox as rows
from postroom.store import tenancy as directory
from postroom.store.tenancy import Tenant
from postroom.tenancy import dkim_keys
from postroom.tenancy import service as tenancy

CLI_REQUESTER = Requester(origin="cli", identity=None)
LIST_PAGE = 500


def _whole(header: str) -> Column:
    """A column never cut or wrapped: IDs and addresses are copied from it."""
    return Column(header, no_wrap=True, min_width=len(header))


def entry_json(e: OutboxEntry) -> dict[str, Any]:
    return {
        "id": e.id,
        "identity_id": e.identity_id,
        "tenant_id": e.tenant_id,
        "message_id": e.message_id,
        "operation": e.operation,
        "kind": e.kind,
        "stage": e.stage,
        "state": e.state,
        "attempt_count": e.attempt_count,
        "recorded_at": to_rfc3339(e.recorded_at),
        "next_attempt_at": to_rfc3339(e.available_at) if e.stage == "recorded" else None,
        "due_at": to_rfc3339(e.due_at),
        "due_zone": e.due_zone_id,
        "last_failure_code": e.last_failure_code,
        "last_reply_code": e.last_reply_code,
        "resolution": e.resolution,
        "resolved_at": to_rfc3339(e.resolved_at),
        "recipients": [
            {
                "address": r.address,
                "role": r.role,
                "status": r.status,
                "reply_code": r.reply_code,
                "enhanced_code": r.enhanced_code,
                "answered_at": to_rfc3339(r.answered_at),
            }
            for r in e.recipients
        ],
    }


def suppression_json(s: SuppressionView) -> dict[str, Any]:
    return {
        "id": s.address_hash,
        "address_hint": s.address_hint,
        "reason": s.reason,
        "source_message_id": s.source_message_id,
        "note": s.note,
        "created_at": to_rfc3339(s.created_at),
        "expires_at": to_rfc3339(s.expires_at),
    }


def _print_entry(ctx: click.Context, e: OutboxEntry) -> None:
    shown = entry_json(e)
    for name, value in shown.items():
        if name != "recipients":
            click.echo(f"{name:18} {value if value is not None else ''}")
    table = Table(_whole("recipient"), "role", "status", "reply", "enhanced", "answered")
    for r in e.recipients:
        table.add_row(
            r.address,
            r.role,
            r.status,
            "" if r.reply_code is None else str(r.reply_code),
            r.enhanced_code or "",
            to_rfc3339(r.answered_at) or "",
        )
    state(ctx).console.print(table)


def _tenant(app: App, ref: str | None) -> Tenant:
    """The tenant named by ID or slug, else the default tenant."""
    if ref is not None:
        return tenancy.get_tenant(app, ref)
    with app.db.read() as tx:
        found = directory.get_default_tenant(tx)
    if found is None:
        raise InvalidInput("there is no default tenant; run `postroom init` first")
    return found


def _address(text: str) -> c.Address:
    """``alice@example.com`` or ``Alice <alice@example.com>``; checked when composed."""
    if "<" in text:
        name, address = parseaddr(text)
        if address:
            return c.Address(address, name or None)
    return c.Address(text.strip())


def _read_text(path: str, option: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{option} {path}: not UTF-8 text") from None
    except OSError as exc:
        raise InvalidInput(f"{option} {path}: {exc.strerror or exc}") from None


def _attachment(app: App, path: str) -> c.OutgoingAttachment:
    file = Path(path)
    limit = app.settings.outbound_max_message_bytes
    try:
        size = file.stat().st_size
        # Checked before reading: a file over the message limit could never be sent.
        if size > limit:
            raise InvalidInput(
                f"--attach {path}: {size} bytes; a message may be at most {limit} bytes",
                code="message_too_large",
            )
        data = file.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"--attach {path}: {exc.strerror or exc}") from None
    return c.OutgoingAttachment(filename=file.name, content_type="", data=data)


# --- send -----------------------------------------------------------------------------


_FILE = click.Path(exists=True, dir_okay=False)


@click.command("send")
@click.option(
    "--from",
    "sender",
    required=True,
    help="The inbox to send from: an idn_ ID, or one of its addresses (an alias sends as it).",
)
@click.option("--to", "to", multiple=True, help="A recipient (repeatable; 'Name <addr>' too).")
@click.option("--cc", "cc", multiple=True, help="A Cc recipient (repeatable).")
@click.option("--bcc", "bcc", multiple=True, help="A Bcc recipient, never shown (repeatable).")
@click.option("--subject", required=True, help="The subject line.")
@click.option("--text", default=None, help="The plain-text body.")
@click.option("--text-file", type=_FILE, default=None, help="Read the plain-text body (UTF-8).")
@click.option("--html-file", type=_FILE, default=None, help="Read an HTML body (UTF-8).")
@click.option("--attach", "attach", multiple=True, type=_FILE, help="Attach a file (repeatable).")
@click.option(
    "--send-at",
    default=None,
    help="Send later: RFC 3339 (2027-03-28T09:00:00Z), or a local time with --zone.",
)
@click.option("--zone", default=None, help="IANA time zone of a --send-at without offset.")
@json_option
@click.pass_context
def send(
    ctx: click.Context,
    sender: str,
    to: tuple[str, ...],
    cc: tuple[str, ...],
    bcc: tuple[str, ...],
    subject: str,
    text: str | None,
    text_file: str | None,
    html_file: str | None,
    attach: tuple[str, ...],
    send_at: str | None,
    zone: str | None,
    as_json: bool,
) -> None:
    """Record a send in the outbox; a worker attempts it (at --send-at when given)."""
    if text is not None and text_file is not None:
        raise click.UsageError("give --text or --text-file, not both")
    if zone is not None and send_at is None:
        raise click.UsageError("--zone needs --send-at")
    if text_file is not None:
        text = _read_text(text_file, "--text-file")
    html = None if html_file is None else _read_text(html_file, "--html-file")
    app = state(ctx).app()
    try:
        found = tenancy.get_identity(app, sender)
        attachments = tuple(_attachment(app, p) for p in attach)
        inp = SendInput(
            to=tuple(_address(a) for a in to),
            cc=tuple(_address(a) for a in cc),
            bcc=tuple(_address(a) for a in bcc),
            from_address=sender.strip() if "@" in sender else None,
            subject=subject,
            text=text,
            html=html,
            attachments=attachments,
            send_at=None if send_at is None else outbox.resolve_send_at(send_at, zone),
            send_at_zone=zone,
        )
        recorded = outbox.record_send(app, found.identity.id, inp, CLI_REQUESTER)
    finally:
        app.close()
    if as_json:
        emit_json(entry_json(recorded))
        return
    _print_entry(ctx, recorded)


# --- outbox ---------------------------------------------------------------------------


@click.group("outbox")
def outbox_group() -> None:
    """The outbox: recorded sends, their recipients and outcomes."""


@outbox_group.command("list")
@click.option("--identity", "identity_ref", default=None, help="Only this inbox (ID or address).")
@click.option("--tenant", "tenant_ref", default=None, help="Only this tenant (ID or slug).")
@click.option(
    "--stage",
    "stages",
    multiple=True,
    type=click.Choice(rows.STAGES),
    help="Only sends at this stage (repeatable).",
)
@click.option("--outstanding", is_flag=True, help="Only sends not yet sent, refused or cancelled.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Rows.")
@json_option
@click.pass_context
def outbox_list(
    ctx: click.Context,
    identity_ref: str | None,
    tenant_ref: str | None,
    stages: tuple[str, ...],
    outstanding: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Sends, newest first."""
    app = state(ctx).app()
    try:
        identity_id = (
            None if identity_ref is None else tenancy.get_identity(app, identity_ref).identity.id
        )
        tenant_id = None if tenant_ref is None else tenancy.get_tenant(app, tenant_ref).id
        found = outbox.list_entries(
            app,
            rows.OutboxFilter(
                tenant_id=tenant_id,
                identity_id=identity_id,
                stages=stages,
                outstanding=outstanding,
            ),
            None,
            limit,
        )
    finally:
        app.close()
    if as_json:
        emit_json({"outbox": [entry_json(e) for e in found]})
        return
    table = Table(
        _whole("id"), "state", _whole("identity"), "recipients", "attempts", "recorded", "due"
    )
    for e in found:
        first = e.recipients[0].address if e.recipients else ""
        more = f" (+{len(e.recipients) - 1})" if len(e.recipients) > 1 else ""
        table.add_row(
            e.id,
            e.state,
            e.identity_id,
            first + more,
            str(e.attempt_count),
            to_rfc3339(e.recorded_at) or "",
            to_rfc3339(e.due_at) or "",
        )
    state(ctx).console.print(table)


@outbox_group.command("show")
@click.argument("outbox_id")
@json_option
@click.pass_context
def outbox_show(ctx: click.Context, outbox_id: str, as_json: bool) -> None:
    """One send with each recipient's status and the server's reply codes."""
    app = state(ctx).app()
    try:
        found = outbox.get_entry(app, outbox_id)
    finally:
        app.close()
    if as_json:
        emit_json(entry_json(found))
        return
    _print_entry(ctx, found)


@outbox_group.command("cancel")
@click.argument("outbox_id")
@json_option
@click.pass_context
def outbox_cancel(ctx: click.Context, outbox_id: str, as_json: bool) -> None:
    """Withdraw a scheduled or queued send while nothing was transmitted for it."""
    app = state(ctx).app()
    try:
        cancelled = outbox.cancel(app, outbox_id)
    finally:
        app.close()
    if as_json:
        emit_json(entry_json(cancelled))
        return
    click.echo(f"cancelled {cancelled.id}")


@outbox_group.command("resolve")
@click.argument("outbox_id")
@click.option(
    "--delivered/--not-delivered",
    "delivered",
    default=None,
    help="What you established about a send whose outcome is unknown (code 28011).",
)
@json_option
@click.pass_context
def outbox_resolve(
    ctx: click.Context, outbox_id: str, delivered: bool | None, as_json: bool
) -> None:
    """Settle an uncertain send (stamped 28011) as delivered or not delivered."""
    if delivered is None:
        raise click.UsageError("say --delivered or --not-delivered")
    app = state(ctx).app()
    try:
        resolved = outbox.resolve(app, outbox_id, "delivered" if delivered else "not_delivered")
    finally:
        app.close()
    if as_json:
        emit_json(entry_json(resolved))
        return
    click.echo(f"resolved {resolved.id} as {resolved.resolution}")


# --- suppression ----------------------------------------------------------------------


@click.group("suppression")
def suppression() -> None:
    """Suppressions: addresses a tenant never sends to."""


_TENANT = click.option(
    "--tenant", "tenant_ref", default=None, help="Tenant ID or slug (default: the default)."
)


@suppression.command("list")
@_TENANT
@click.option("--reason", type=click.Choice(policy.REASONS), default=None, help="Only this reason.")
@json_option
@click.pass_context
def suppression_list(
    ctx: click.Context, tenant_ref: str | None, reason: str | None, as_json: bool
) -> None:
    """A tenant's suppressions, newest first (addresses are shown masked)."""
    app = state(ctx).app()
    found: list[SuppressionView] = []
    try:
        tenant_id = _tenant(app, tenant_ref).id
        after: tuple[int, str] | None = None
        while True:
            page = policy.list_suppressions(app, tenant_id, after, LIST_PAGE, reason)
            found.extend(page)
            if len(page) < LIST_PAGE:
                break
            after = (page[-1].created_at, page[-1].address_hash)
    finally:
        app.close()
    if as_json:
        emit_json({"suppressions": [suppression_json(s) for s in found]})
        return
    table = Table("address", "reason", "note", "created", "expires", _whole("id"))
    for s in found:
        table.add_row(
            s.address_hint,
            s.reason,
            s.note or "",
            to_rfc3339(s.created_at) or "",
            to_rfc3339(s.expires_at) or "never",
            s.address_hash,
        )
    state(ctx).console.print(table)


@suppression.command("add")
@click.argument("address")
@_TENANT
@click.option(
    "--reason",
    type=click.Choice(policy.REASONS),
    default="manual",
    show_default=True,
    help="Why it is suppressed.",
)
@click.option("--note", default=None, help="A note for people (at most 500 characters).")
@json_option
@click.pass_context
def suppression_add(
    ctx: click.Context,
    address: str,
    tenant_ref: str | None,
    reason: str,
    note: str | None,
    as_json: bool,
) -> None:
    """Never send to ADDRESS again from this tenant (an existing entry keeps its reason)."""
    app = state(ctx).app()
    try:
        added = policy.add_suppression(
            app, _tenant(app, tenant_ref).id, address, reason=reason, note=note
        )
    finally:
        app.close()
    if as_json:
        emit_json(suppression_json(added))
        return
    click.echo(f"suppressed {added.address_hint} ({added.reason})")


@suppression.command("remove")
@click.argument("address")
@_TENANT
@json_option
@click.pass_context
def suppression_remove(
    ctx: click.Context, address: str, tenant_ref: str | None, as_json: bool
) -> None:
    """Allow sending to ADDRESS again."""
    app = state(ctx).app()
    try:
        policy.remove_suppression(app, _tenant(app, tenant_ref).id, address)
    finally:
        app.close()
    if as_json:
        emit_json({"removed": True, "address_hint": policy.hint(policy.canonical(address))})
        return
    click.echo(f"removed the suppression of {policy.hint(policy.canonical(address))}")


@suppression.command("check")
@click.argument("address")
@_TENANT
@json_option
@click.pass_context
def suppression_check(
    ctx: click.Context, address: str, tenant_ref: str | None, as_json: bool
) -> None:
    """Whether the tenant suppresses ADDRESS, and why."""
    app = state(ctx).app()
    try:
        found = policy.check_suppression(app, _tenant(app, tenant_ref).id, address)
    finally:
        app.close()
    if as_json:
        emit_json(
            {
                "suppressed": found is not None,
                "suppression": None if found is None else suppression_json(found),
            }
        )
        return
    if found is None:
        click.echo("not suppressed")
        return
    click.echo(
        f"suppressed: {found.reason} since {to_rfc3339(found.created_at)}"
        + (f" ({found.note})" if found.note else "")
    )


# --- domain dkim-key ------------------------------------------------------------------


@click.group("domain")
def domain() -> None:
    """Mail domains."""


@domain.group("dkim-key")
def dkim_key() -> None:
    """A domain's DKIM signing key."""


@dkim_key.command("generate")
@click.argument("domain_name", metavar="DOMAIN")
@json_option
@click.pass_context
def dkim_key_generate(ctx: click.Context, domain_name: str, as_json: bool) -> None:
    """A new RSA-2048 key under the next selector; prints the TXT record to publish."""
    app = state(ctx).app()
    try:
        change = dkim_keys.generate_dkim_key(app, domain_name)
    finally:
        app.close()
    record = change.record
    if as_json:
        emit_json(
            {
                "domain": change.domain.name,
                "domain_id": change.domain.id,
                "selector": change.selector,
                "previous_selector": change.previous_selector,
                "record": {"type": record.type, "name": record.name, "value": record.value},
            }
        )
        return
    was = f" (was {change.previous_selector})" if change.previous_selector else ""
    click.echo(f"new DKIM key for {change.domain.name}: selector {change.selector}{was}")
    click.echo("Publish this TXT record; mail is signed with the new key from now on:")
    # Printed plainly so the long value is copied whole, never wrapped.
    click.echo(f"  {record.name}  TXT  {record.value}")


COMMANDS: list[click.Command] = [send, outbox_group, suppression, domain]

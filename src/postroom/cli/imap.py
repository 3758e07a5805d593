"""``postroom imap add|list|show|sync|remove``: mirror IMAP mailboxes into inboxes."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.table import Table

from postroom.cli.context import emit_json, json_option, state
from postroom.clock import to_rfc3339
from postroom.store import imap as rows
from postroom.sync import accounts as service
from postroom.tenancy import service as tenancy


def account_json(a: rows.Account) -> dict[str, Any]:
    return {
        "id": a.id,
        "identity_id": a.identity_id,
        "host": a.host,
        "port": a.port,
        "tls_mode": a.tls_mode,
        "username": a.username,
        "auth": a.auth_kind,
        "folders": a.folders,
        "include_trash": bool(a.include_trash),
        "include_junk": bool(a.include_junk),
        "remote_delete": a.remote_delete,
        "status": a.status,
        "status_reason": a.status_reason,
        "last_synced_at": to_rfc3339(a.last_synced_at),
        "next_sync_at": to_rfc3339(a.next_sync_at),
        "paused": bool(a.paused),
    }


@click.group()
def imap() -> None:
    """Mirror existing IMAP mailboxes into inboxes."""


@imap.command("add")
@click.argument("identity_ref")
@click.option("--host", required=True, help="IMAP server host name.")
@click.option("--port", type=int, default=None, help="Default 993 (implicit TLS) or 143.")
@click.option(
    "--tls", "tls_mode", type=click.Choice(["implicit", "starttls", "none"]), default="implicit"
)
@click.option("--allow-plaintext", is_flag=True, help="Allow --tls none (loopback hosts only).")
@click.option("--username", required=True)
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from standard input (one line)."
)
@click.option("--token-stdin", is_flag=True, help="Read an OAuth2 access token from stdin.")
@click.option("--folder", "folders", multiple=True, help="A folder to mirror (repeat).")
@click.option("--include-trash", is_flag=True)
@click.option("--include-junk", is_flag=True)
@click.option("--remote-delete", type=click.Choice(["tombstone", "erase"]), default="tombstone")
@json_option
@click.pass_context
def imap_add(
    ctx: click.Context,
    identity_ref: str,
    host: str,
    port: int | None,
    tls_mode: str,
    allow_plaintext: bool,
    username: str,
    password_stdin: bool,
    token_stdin: bool,
    folders: tuple[str, ...],
    include_trash: bool,
    include_junk: bool,
    remote_delete: str,
    as_json: bool,
) -> None:
    """Connect IDENTITY_REF (an inbox id, address or user name) to an IMAP mailbox."""
    if password_stdin == token_stdin:
        raise click.UsageError("give exactly one of --password-stdin and --token-stdin")
    secret = sys.stdin.readline().rstrip("\r\n")
    cli = state(ctx)
    app = cli.app()
    identity = tenancy.get_identity(app, identity_ref).identity
    made = service.create_account(
        app,
        identity.id,
        service.NewAccount(
            host=host,
            port=port,
            tls_mode=tls_mode,
            username=username,
            password=secret if password_stdin else None,
            access_token=secret if token_stdin else None,
            folders=folders or None,
            include_trash=include_trash,
            include_junk=include_junk,
            remote_delete=remote_delete,
            allow_plaintext=allow_plaintext,
        ),
    )
    if as_json:
        emit_json(account_json(made))
        return
    cli.console.print(f"IMAP account {made.id} added; the first sync is queued.")


@imap.command("list")
@click.option("--identity", "identity_ref", default=None)
@json_option
@click.pass_context
def imap_list(ctx: click.Context, identity_ref: str | None, as_json: bool) -> None:
    """IMAP accounts with their sync status."""
    cli = state(ctx)
    app = cli.app()
    identity_id = (
        None if identity_ref is None else tenancy.get_identity(app, identity_ref).identity.id
    )
    with app.db.read() as tx:
        found = rows.list_accounts(tx, None, identity_id, None, 10_000)
    if as_json:
        emit_json({"accounts": [account_json(a) for a in found]})
        return
    table = Table("id", "inbox", "server", "user", "status", "last sync")
    for a in found:
        table.add_row(
            a.id,
            a.identity_id,
            f"{a.host}:{a.port}",
            a.username,
            a.status + (f" ({a.status_reason})" if a.status_reason else ""),
            to_rfc3339(a.last_synced_at) or "never",
        )
    cli.console.print(table)


@imap.command("sync")
@click.argument("account_id")
@click.option("--wait", is_flag=True, help="Synchronise here and now instead of queueing.")
@json_option
@click.pass_context
def imap_sync(ctx: click.Context, account_id: str, wait: bool, as_json: bool) -> None:
    """Synchronise an account now."""
    cli = state(ctx)
    app = cli.app()
    if not wait:
        service.request_sync(app, account_id)
        if as_json:
            emit_json(account_json(service.get_account(app, account_id)))
        else:
            cli.console.print(f"sync of {account_id} queued")
        return
    from postroom.sync.engine import sync_account

    service.get_account(app, account_id)
    result = sync_account(app, account_id)
    summary = {
        "account_id": result.account_id,
        "status": result.status,
        "folders": [
            {
                "path": f.path,
                "stored": f.stored,
                "rebound": f.rebound,
                "flags_changed": f.flags_changed,
                "expunged": f.expunged,
                "reset": f.reset,
            }
            for f in result.folders
        ],
    }
    if as_json:
        emit_json(summary)
        return
    cli.console.print(f"{result.account_id}: {result.status}, {result.stored} stored")
    if result.status != "ok":
        raise SystemExit(1)


@imap.command("remove")
@click.argument("account_id")
@json_option
@click.pass_context
def imap_remove(ctx: click.Context, account_id: str, as_json: bool) -> None:
    """Stop mirroring an account (the mail already synced stays)."""
    cli = state(ctx)
    service.delete_account(cli.app(), account_id)
    if as_json:
        emit_json({"id": account_id, "removed": True})
    else:
        cli.console.print(f"IMAP account {account_id} removed")


COMMANDS: list[click.Command] = [imap]

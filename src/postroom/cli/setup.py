"""Setting up and inspecting an installation: init, migrate, db status, config show."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from postroom.app import App, build_blobs, queue_policy
from postroom.cli.context import emit_json, json_option, state
from postroom.clock import SystemClock, to_rfc3339
from postroom.config import SETTINGS, Settings, mask_url_password
from postroom.errors import DataDirError, KeyFileError
from postroom.jobs.queue import JobQueue
from postroom.keyring import Keyring, create_key_files, key_files
from postroom.store import apply_migrations, database_status, open_database


def ensure_data_dir(path: Path) -> None:
    """Create the data folder (0700) and prove it is writable."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise DataDirError(f"cannot create data folder {path}: {exc.strerror}") from None
    if not path.is_dir():
        raise DataDirError(f"data folder {path} exists but is not a folder")
    probe = path / f".write-probe-{secrets.token_hex(4)}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise DataDirError(f"data folder {path} is not writable: {exc.strerror}") from None


@click.command()
@json_option
@click.pass_context
def init(ctx: click.Context, as_json: bool) -> None:
    """Create the data folder, keys, database, default tenant and a platform API key.

    Safe to run again: an initialised installation is left as it is.
    """
    from postroom.tenancy import bootstrap

    settings = state(ctx).settings
    ensure_data_dir(settings.data_dir)
    clock = SystemClock()
    db = open_database(
        settings.database_url,
        now_ms=clock.now_ms(),
        create=True,
        apply_pending=True,
        busy_timeout_ms=settings.database_busy_timeout_ms,
        pool_size=settings.database_pool_size,
    )
    try:
        missing = [path for path, _what in key_files(settings) if not path.exists()]
        if missing and bootstrap.is_initialized(db):
            raise KeyFileError(
                f"{missing[0]} is missing but the database is already initialised; restore "
                "the key file from your backup (a new key would lock out existing secrets)"
            )
        create_key_files(settings)
        keyring = Keyring.load(settings)
        app = App(
            settings,
            db,
            build_blobs(settings),
            JobQueue(db, clock, queue_policy(settings)),
            clock,
            keyring,
        )
        result = bootstrap.initialize(app)
    finally:
        db.close()

    database = mask_url_password(settings.database_url)
    if as_json:
        out: dict[str, Any] = {
            "initialized": result.created,
            "tenant_id": result.tenant_id,
            "domain": result.domain,
            "data_dir": str(settings.data_dir),
            "database": database,
        }
        if result.api_key_secret is not None:
            out["api_key"] = result.api_key_secret
            out["api_key_id"] = result.api_key_id
        else:
            out["message"] = "already initialised; nothing changed"
        emit_json(out)
        return
    console = state(ctx).console
    if not result.created:
        console.print(
            f"Postroom is already initialised in {settings.data_dir} (default tenant "
            f"{result.tenant_id}); nothing changed."
        )
        return
    console.print(f"[bold]Initialised Postroom[/bold] in {settings.data_dir}")
    console.print(f"  database         {database}")
    console.print(f"  default tenant   {result.tenant_id}")
    console.print(f"  platform domain  {result.domain}")
    console.print(f"  master key       {settings.master_key_file} (mode 0600; back it up)")
    console.print(f"  key pepper       {settings.key_pepper_file} (mode 0600; back it up)")
    console.print(f"  hash key         {settings.hash_key_file} (mode 0600; back it up)")
    console.print("")
    console.print("[bold]Platform API key[/bold] (shown once; keep it somewhere safe):")
    console.print(f"  {result.api_key_secret}")


@click.command()
@json_option
@click.pass_context
def migrate(ctx: click.Context, as_json: bool) -> None:
    """Apply pending schema migrations (needed on PostgreSQL after an upgrade)."""
    settings = state(ctx).settings
    if settings.is_sqlite and not settings.sqlite_path().exists():
        raise DataDirError(f"no database at {settings.sqlite_path()}; run `postroom init`")
    applied = apply_migrations(settings.database_url, SystemClock().now_ms())
    status = database_status(settings.database_url)
    names = {m.version: m.name for m in status.chain}
    if as_json:
        emit_json({"applied": [names[v] for v in applied], "version": status.head})
        return
    if not applied:
        click.echo(f"The database is up to date (schema version {status.head}).")
    for version in applied:
        click.echo(f"applied {names[version]}")


@click.group()
def db() -> None:
    """Inspect the database."""


@db.command("status")
@json_option
@click.pass_context
def db_status(ctx: click.Context, as_json: bool) -> None:
    """Show the migration chain of this build and what the database has applied."""
    settings = state(ctx).settings
    status = database_status(settings.database_url)
    applied = {v: at for v, _name, at in (status.state.applied if status.state else [])}
    current = status.state.version if status.state else 0
    if as_json:
        emit_json(
            {
                "engine": status.engine.value,
                "location": status.location,
                "exists": status.exists,
                "version": current,
                "head": status.head,
                "migrations": [
                    {
                        "version": m.version,
                        "name": m.name,
                        "applied_at": to_rfc3339(applied.get(m.version)),
                    }
                    for m in status.chain
                ],
            }
        )
        return
    console = state(ctx).console
    console.print(f"engine    {status.engine.value}")
    console.print(f"database  {status.location}{'' if status.exists else ' (does not exist yet)'}")
    console.print(f"version   {current} of {status.head}")
    table = Table("version", "migration", "applied")
    for migration in status.chain:
        at = applied.get(migration.version)
        table.add_row(str(migration.version), migration.name, to_rfc3339(at) or "pending")
    console.print(table)
    if status.pending:
        console.print(
            f"{len(status.pending)} pending: run `postroom migrate` (SQLite: any command)"
        )


@click.group()
def config() -> None:
    """Inspect the effective settings."""


@config.command("show")
@json_option
@click.pass_context
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Print every setting's effective value (secrets masked)."""
    settings: Settings = state(ctx).settings
    values = settings.display_values()
    if as_json:
        emit_json(values)
        return
    table = Table("setting", "value", "environment variable")
    for spec in SETTINGS:
        table.add_row(spec.name, values[spec.name], spec.env_var)
    state(ctx).console.print(table)
    source = state(ctx).config_path or os.environ.get("POSTROOM_CONFIG")
    if source:
        state(ctx).console.print(f"config file: {source}")


COMMANDS = [init, migrate, db, config]

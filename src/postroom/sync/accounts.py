"""IMAP accounts: connect an existing mailbox to an inbox, check it, change it, remove it.

The password (or OAuth2 access token) is sealed at rest under the master key with
associated data naming ``imap_accounts.secret_sealed`` and the account's id. Creating an
account tests the connection first (connect, TLS, log in, the named folders exist) and
answers a specific error: ``imap_auth_failed``, ``imap_tls_failed``,
``imap_unreachable``, ``imap_folder_missing``. Plaintext IMAP is accepted only to a
loopback host and only when asked for (``allow_plaintext``).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.ids import new_id
from postroom.store import imap as rows
from postroom.store import tenancy as directory
from postroom.sync.imap_client import (
    ImapAuthError,
    ImapClient,
    ImapError,
    ImapNoSuchFolder,
    ImapThrottled,
    ImapTlsError,
    ImapUnreachable,
)

if TYPE_CHECKING:
    from postroom.app import App

SEALED_TABLE = "imap_accounts"
SEALED_COLUMN = "secret_sealed"
MAX_ACCOUNTS_PER_IDENTITY = 10


class ImapConnectionFailed(InvalidInput):
    """The connection test failed; ``code`` names how (never the server's words)."""


@dataclass(frozen=True)
class NewAccount:
    host: str
    port: int | None = None
    tls_mode: str = "implicit"
    username: str = ""
    password: str | None = None
    access_token: str | None = None
    folders: tuple[str, ...] | None = None
    include_trash: bool = False
    include_junk: bool = False
    remote_delete: str = "tombstone"
    allow_plaintext: bool = False
    sync_interval_seconds: int | None = None


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check(new: NewAccount) -> None:
    host = new.host.strip()
    if not host or len(host) > 253 or any(c.isspace() or c in "/@" for c in host):
        raise InvalidInput("host must be a host name or an IP address", field="host")
    if new.tls_mode not in ("implicit", "starttls", "none"):
        raise InvalidInput("tls_mode must be implicit, starttls or none", field="tls_mode")
    if new.tls_mode == "none" and not (new.allow_plaintext and _is_loopback(host)):
        raise InvalidInput(
            "plaintext IMAP is allowed only to a loopback host with allow_plaintext: true",
            code="plaintext_refused",
            field="tls_mode",
        )
    if new.port is not None and not 1 <= new.port <= 65535:
        raise InvalidInput("port must be 1-65535", field="port")
    if not new.username or len(new.username) > 320 or not new.username.isprintable():
        raise InvalidInput("username is required (printable, at most 320)", field="username")
    if (new.password is None) == (new.access_token is None):
        raise InvalidInput("give exactly one of password and access_token", field="password")
    secret = new.password if new.password is not None else new.access_token
    if not secret or len(secret) > 8192 or "\x00" in secret:
        raise InvalidInput("the credential must be 1-8192 characters", field="password")
    if new.remote_delete not in ("tombstone", "erase"):
        raise InvalidInput("remote_delete must be tombstone or erase", field="remote_delete")
    if new.folders is not None and (
        not new.folders
        or len(new.folders) > 200
        or any(not f or len(f) > 512 or not f.isprintable() for f in new.folders)
    ):
        raise InvalidInput("folders must name 1-200 folders", field="folders")


def default_port(tls_mode: str) -> int:
    return 993 if tls_mode == "implicit" else 143


def connect(app: App, host: str, port: int, tls_mode: str) -> ImapClient:
    return ImapClient(
        host,
        port,
        tls=tls_mode,  # type: ignore[arg-type]
        timeout=app.settings.imap_timeout_seconds,
        ca_file=str(app.settings.imap_ca_file) if app.settings.imap_ca_file else None,
        max_literal=app.settings.imap_max_message_bytes + 65536,
    )


def login(client: ImapClient, username: str, auth_kind: str, secret: str) -> None:
    if auth_kind == "xoauth2":
        client.authenticate_xoauth2(username, secret)
    else:
        client.login(username, secret)


def _failure(exc: ImapError) -> ImapConnectionFailed:
    if isinstance(exc, ImapAuthError):
        return ImapConnectionFailed(
            "the IMAP server refused the credentials", code="imap_auth_failed", field="password"
        )
    if isinstance(exc, ImapTlsError):
        return ImapConnectionFailed(
            "TLS with the IMAP server failed (certificate or handshake)",
            code="imap_tls_failed",
            field="tls_mode",
        )
    if isinstance(exc, ImapUnreachable):
        return ImapConnectionFailed(
            "the IMAP server could not be reached", code="imap_unreachable", field="host"
        )
    if isinstance(exc, ImapThrottled):
        return ImapConnectionFailed(
            "the IMAP server refused the connection for now (too many connections or"
            " requests); try again later",
            code="imap_throttled",
            field="host",
        )
    if isinstance(exc, ImapNoSuchFolder):
        return ImapConnectionFailed(
            "a folder to mirror does not exist on the server",
            code="imap_folder_missing",
            field="folders",
        )
    return ImapConnectionFailed(
        f"the IMAP server answered unexpectedly ({exc.code})", code="imap_error", field="host"
    )


def test_connection(app: App, new: NewAccount) -> None:
    """Connect, log in and check the folders; raise ImapConnectionFailed naming how."""
    port = new.port or default_port(new.tls_mode)
    secret = new.password if new.password is not None else new.access_token
    assert secret is not None
    try:
        with connect(app, new.host.strip(), port, new.tls_mode) as client:
            login(client, new.username, "xoauth2" if new.access_token else "password", secret)
            if new.folders is not None:
                present = {f.name for f in client.list_folders()}
                for folder in new.folders:
                    if folder not in present:
                        raise ImapNoSuchFolder("folder_missing", f"no folder {folder!r}")
    except ImapError as exc:
        raise _failure(exc) from None
    except OSError:
        raise ImapConnectionFailed(
            "the IMAP server could not be reached", code="imap_unreachable", field="host"
        ) from None


def create_account(
    app: App, identity_id: str, new: NewAccount, *, test: bool = True
) -> rows.Account:
    _check(new)
    with app.db.read() as tx:
        identity = directory.get_identity(tx, identity_id)
        if identity is None or identity.status in ("deleting", "deleted"):
            raise NotFound(f"no inbox {identity_id}", code="identity_not_found")
        if len(rows.accounts_of(tx, identity_id)) >= MAX_ACCOUNTS_PER_IDENTITY:
            raise Conflict(
                f"an inbox mirrors at most {MAX_ACCOUNTS_PER_IDENTITY} IMAP accounts",
                code="too_many_imap_accounts",
            )
    if test:
        test_connection(app, new)
    now = app.clock.now_ms()
    account_id = new_id("imp")
    secret = new.password if new.password is not None else new.access_token
    assert secret is not None
    sealed = app.keys().seal(secret.encode(), SEALED_TABLE, SEALED_COLUMN, account_id)
    account = rows.Account(
        id=account_id,
        tenant_id=identity.tenant_id,
        identity_id=identity_id,
        host=new.host.strip().lower(),
        port=new.port or default_port(new.tls_mode),
        tls_mode=new.tls_mode,
        username=new.username,
        auth_kind="xoauth2" if new.access_token is not None else "password",
        secret_sealed=sealed,
        folders_json=None if new.folders is None else json.dumps(list(new.folders)),
        include_trash=int(new.include_trash),
        include_junk=int(new.include_junk),
        remote_delete=new.remote_delete,
        max_message_bytes=app.settings.imap_max_message_bytes,
        status="pending",
        status_reason=None,
        status_changed_at=now,
        consecutive_failures=0,
        last_synced_at=None,
        next_sync_at=now,
        sync_interval_seconds=new.sync_interval_seconds or app.settings.imap_sync_interval_seconds,
        paused=0,
        created_at=now,
        updated_at=now,
    )
    from postroom.sync.engine import SYNC_JOB

    with app.db.write() as tx:
        rows.insert_account(tx, account)
        app.queue.enqueue_in(
            tx,
            SYNC_JOB,
            f"{account_id}:{now}",
            {"account_id": account_id},
            tenant_id=account.tenant_id,
            identity_id=identity_id,
        )
    return account


def secret_of(app: App, account: rows.Account) -> str:
    return app.keys().open(account.secret_sealed, SEALED_TABLE, SEALED_COLUMN, account.id).decode()


def get_account(app: App, account_id: str) -> rows.Account:
    with app.db.read() as tx:
        found = rows.get_account(tx, account_id)
    if found is None:
        raise NotFound(f"no IMAP account {account_id[:80]!r}", code="imap_account_not_found")
    return found


def update_account(app: App, account_id: str, changes: dict[str, Any]) -> rows.Account:
    """Change what is mirrored or how: folders, include_trash/junk, remote_delete, paused,
    sync_interval_seconds, or the credential (tested before it is stored)."""
    account = get_account(app, account_id)
    # null means "leave as it is" for every field but folders (null: every folder).
    changes = {k: v for k, v in changes.items() if v is not None or k == "folders"}
    columns: dict[str, Any] = {}
    for key in ("include_trash", "include_junk", "paused"):
        if key in changes:
            columns[key] = int(bool(changes[key]))
    if "folders" in changes:
        folders = changes["folders"]
        columns["folders_json"] = None if folders is None else json.dumps(list(folders))
    if "remote_delete" in changes:
        if changes["remote_delete"] not in ("tombstone", "erase"):
            raise InvalidInput("remote_delete must be tombstone or erase", field="remote_delete")
        columns["remote_delete"] = changes["remote_delete"]
    if "sync_interval_seconds" in changes:
        columns["sync_interval_seconds"] = int(changes["sync_interval_seconds"])
    password, token = changes.get("password"), changes.get("access_token")
    if password is not None or token is not None:
        new = NewAccount(
            host=account.host,
            port=account.port,
            tls_mode=account.tls_mode,
            username=account.username,
            password=password,
            access_token=token,
            allow_plaintext=True,
        )
        _check(new)
        test_connection(app, new)
        secret = password if password is not None else token
        assert secret is not None
        columns["secret_sealed"] = app.keys().seal(
            secret.encode(), SEALED_TABLE, SEALED_COLUMN, account.id
        )
        columns["auth_kind"] = "xoauth2" if token is not None else "password"
        columns["next_sync_at"] = app.clock.now_ms()
    with app.db.write() as tx:
        rows.update_account(tx, account.id, columns, app.clock.now_ms())
    return get_account(app, account.id)


def delete_account(app: App, account_id: str) -> None:
    """Stop mirroring; the mail already synced stays in the inbox."""
    with app.db.write() as tx:
        if not rows.delete_account(tx, account_id):
            raise NotFound(f"no IMAP account {account_id[:80]!r}", code="imap_account_not_found")


def request_sync(app: App, account_id: str) -> None:
    account = get_account(app, account_id)
    from postroom.sync.engine import SYNC_JOB

    now = app.clock.now_ms()
    with app.db.write() as tx:
        rows.schedule_next(tx, account.id, now)
        app.queue.enqueue_in(
            tx,
            SYNC_JOB,
            f"{account.id}:{now}",
            {"account_id": account.id},
            tenant_id=account.tenant_id,
            identity_id=account.identity_id,
        )

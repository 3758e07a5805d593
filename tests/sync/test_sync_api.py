"""IMAP accounts over HTTP and IDLE, against a real Dovecot (both engines)."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from postroom.sync.engine import sync_account
from postroom.testing.dovecot import PASSWORD, USER
from postroom.testing.mail import make_message


def test_an_account_is_created_checked_and_synced_over_http(api: Any, dovecot: Any) -> None:
    server = dovecot()
    server.deliver(USER, make_message(subject="From the old mailbox"))
    inbox, _address = api.identity("mirrored")
    body = {
        "host": "127.0.0.1",
        "port": server.port,
        "tls_mode": "none",
        "allow_plaintext": True,
        "username": USER,
        "password": "wrong",
    }
    url = f"/v1/identities/{inbox}/imap-accounts"
    refused = api.client.post(url, json=body, headers=api.headers())
    assert refused.status_code == 422 and refused.json()["code"] == "imap_auth_failed"
    plain = api.client.post(url, json={**body, "host": "imap.example.com"}, headers=api.headers())
    assert plain.status_code == 422 and plain.json()["code"] == "plaintext_refused"
    made = api.client.post(url, json={**body, "password": PASSWORD}, headers=api.headers())
    assert made.status_code == 201, made.text
    account = made.json()
    assert account["status"] == "pending" and "password" not in account
    assert PASSWORD not in made.text
    assert sync_account(api.app, account["id"]).status == "ok"
    shown = api.client.get(f"/v1/imap-accounts/{account['id']}", headers=api.headers()).json()
    assert shown["status"] == "ok" and shown["last_synced_at"]
    listed = api.client.get(f"/v1/identities/{inbox}/messages", headers=api.headers()).json()
    assert [m["subject"] for m in listed["data"]] == ["From the old mailbox"]
    paused = api.client.patch(
        f"/v1/imap-accounts/{account['id']}", json={"paused": True}, headers=api.headers()
    )
    assert paused.status_code == 200 and paused.json()["paused"] is True
    gone = api.client.delete(f"/v1/imap-accounts/{account['id']}", headers=api.headers())
    assert gone.status_code == 204
    # The mail stays in the inbox.
    again = api.client.get(f"/v1/identities/{inbox}/messages", headers=api.headers()).json()
    assert len(again["data"]) == 1


def test_idle_brings_new_mail_in_during_the_sync(ready_app: Any, dovecot: Any) -> None:
    from postroom.sync import accounts
    from postroom.tenancy.service import create_identity

    server = dovecot()
    server.deliver(USER, make_message(subject="Before"))
    ready_app.settings = dataclasses.replace(ready_app.settings, imap_idle_seconds=20)
    identity = create_identity(ready_app, "idler")
    account = accounts.create_account(
        ready_app,
        identity.identity.id,
        accounts.NewAccount(
            host=server.host,
            port=server.port,
            tls_mode="none",
            allow_plaintext=True,
            username=USER,
            password=PASSWORD,
        ),
    )
    results: list[Any] = []
    started = time.monotonic()
    runner = threading.Thread(target=lambda: results.append(sync_account(ready_app, account.id)))
    runner.start()

    def stored() -> int:
        with ready_app.db.read() as tx:
            return int(
                tx.fetchval(
                    "SELECT count(*) FROM messages WHERE identity_id = %s",
                    (identity.identity.id,),
                )
            )

    deadline = time.monotonic() + 15
    while stored() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # into IDLE
    server.deliver(USER, make_message(subject="During idle"))
    runner.join(30)
    assert results and results[0].status == "ok"
    assert stored() == 2
    assert time.monotonic() - started < 15  # woken by the server, not by the 20 s timeout

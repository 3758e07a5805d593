"""`postroom imap add|list|sync|remove` through the real entry point against Dovecot."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from click.testing import CliRunner

from postroom.cli import main
from postroom.testing.dovecot import PASSWORD, USER
from postroom.testing.mail import make_message


def _run(app: Any, *args: str, stdin: str = "") -> tuple[int, str, str]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(app.settings.data_dir),
        POSTROOM_DATABASE_URL=app.settings.database_url,
        COLUMNS="200",
    )
    logger = logging.getLogger("postroom")
    handlers = list(logger.handlers)
    runner = CliRunner()
    with runner.isolation(input=stdin, env=env) as (out, err, _mixed):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            for handler in logger.handlers[:]:
                if handler not in handlers:
                    logger.removeHandler(handler)
        return code, out.getvalue().decode(), err.getvalue().decode()


def test_add_sync_list_and_remove_an_account(ready_app: Any, dovecot: Any) -> None:
    from postroom.tenancy.service import create_identity

    server = dovecot()
    server.deliver(USER, make_message(subject="Old mail"))
    identity = create_identity(ready_app, "clisync")
    base = [
        "imap",
        "add",
        identity.address.address,
        "--host",
        "127.0.0.1",
        "--port",
        str(server.port),
        "--tls",
        "none",
        "--allow-plaintext",
        "--username",
        USER,
    ]
    code, _out, err = _run(ready_app, *base, "--password-stdin", stdin="nope\n")
    assert code == 1 and err.count("\n") == 1 and "refused the credentials" in err
    code, out, err = _run(ready_app, *base, "--password-stdin", "--json", stdin=f"{PASSWORD}\n")
    assert code == 0, err
    account = json.loads(out)
    assert account["status"] == "pending" and PASSWORD not in out
    code, out, err = _run(ready_app, "imap", "sync", account["id"], "--wait", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["status"] == "ok"
    assert {f["path"]: f["stored"] for f in summary["folders"]}["INBOX"] == 1
    code, out, _err = _run(ready_app, "imap", "list", "--json")
    assert [a["status"] for a in json.loads(out)["accounts"]] == ["ok"]
    code, _out, err = _run(ready_app, *base, "--password-stdin", "--token-stdin")
    assert code == 2 and "exactly one" in err
    code, out, _err = _run(ready_app, "imap", "remove", account["id"], "--json")
    assert code == 0 and json.loads(out)["removed"] is True
    code, _out, err = _run(ready_app, "imap", "remove", account["id"])
    assert code == 1 and "no IMAP account" in err

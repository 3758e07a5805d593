"""`postroom send|outbox|suppression|domain dkim-key` through the real entry point
(``postroom.cli.main``, with click's CliRunner isolation), on both engines."""

from __future__ import annotations

import base64
import email
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import Message
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from postroom.cli import main
from postroom.clock import to_rfc3339
from postroom.store import outbox as outbox_rows
from postroom.tenancy.domains import create_domain, dkim_private_key


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str


class Cli:
    """Invokes ``postroom`` in-process against the test App's data folder and database."""

    def __init__(self, data_dir: str, database_url: str) -> None:
        self.env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("POSTROOM_")}
        self.env.update(
            {
                "POSTROOM_DATA_DIR": data_dir,
                "POSTROOM_DATABASE_URL": database_url,
                "COLUMNS": "200",
            }
        )

    def run(self, *args: str) -> Done:
        logger = logging.getLogger("postroom")
        handlers = list(logger.handlers)
        runner = CliRunner()
        with runner.isolation(env=self.env) as (out, err, _mixed):
            try:
                main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                # The CLI logs to the stderr it found; that stream closes with the isolation.
                for handler in logger.handlers[:]:
                    if handler not in handlers:
                        logger.removeHandler(handler)
            return Done(code, out.getvalue().decode(), err.getvalue().decode())

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.code == 0, done
        return done.stdout

    def json(self, *args: str) -> Any:
        lines = self.ok(*args, "--json").strip().splitlines()
        assert len(lines) == 1, lines  # exactly one JSON object
        return json.loads(lines[0])

    def fails(self, *args: str) -> str:
        """A command that must fail cleanly: exit 1 and one line on stderr."""
        done = self.run(*args)
        assert done.code == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("postroom: ")
        return lines[0]


@pytest.fixture
def cli(ready_app: Any) -> Cli:
    runner = Cli(str(ready_app.settings.data_dir), ready_app.settings.database_url)
    runner.json("identity", "create", "support")
    return runner


def _mime(app: Any, outbox_id: str) -> Message:
    with app.db.read() as tx:
        return email.message_from_bytes(outbox_rows.mime(tx, outbox_id))


def test_send_is_queued_and_listed(cli: Cli, ready_app: Any, tmp_path: Path) -> None:
    html = tmp_path / "body.html"
    html.write_text("<p>Hello <b>Bob</b></p>", encoding="utf-8")
    report = tmp_path / "report.csv"
    report.write_bytes(b"a,b\n1,2\n")
    sent = cli.json(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "Bob <Bob@Example.com>",
        "--cc",
        "carol@example.org",
        "--bcc",
        "dave@example.net",
        "--subject",
        "Quarterly report",
        "--text",
        "Hello Bob",
        "--html-file",
        str(html),
        "--attach",
        str(report),
    )
    assert sent["id"].startswith("out_")
    assert (sent["state"], sent["stage"], sent["operation"]) == ("queued", "recorded", "send")
    assert [(r["address"], r["role"], r["status"]) for r in sent["recipients"]] == [
        ("bob@example.com", "to", "pending"),
        ("carol@example.org", "cc", "pending"),
        ("dave@example.net", "bcc", "pending"),
    ]

    mime = _mime(ready_app, sent["id"])
    assert mime["Subject"] == "Quarterly report"
    assert "Bob" in mime["To"] and "bob@" in mime["To"].lower()
    assert mime["Bcc"] is None
    parts = {p.get_content_type(): p for p in mime.walk()}
    assert "Hello Bob" in parts["text/plain"].get_payload(decode=True).decode()
    assert "<b>Bob</b>" in parts["text/html"].get_payload(decode=True).decode()
    assert [p.get_filename() for p in mime.walk() if p.get_filename()] == ["report.csv"]

    listed = cli.json("outbox", "list", "--identity", "support@localhost")
    assert [e["id"] for e in listed["outbox"]] == [sent["id"]]
    assert listed["outbox"][0]["state"] == "queued"
    assert cli.json("outbox", "list", "--stage", "sent")["outbox"] == []

    shown = cli.json("outbox", "show", sent["id"])
    assert shown["id"] == sent["id"]
    assert shown["recipients"] == sent["recipients"]

    table = cli.ok("outbox", "list", "--tenant", "default", "--outstanding")
    assert sent["id"] in table and "queued" in table
    text = cli.ok("outbox", "show", sent["id"])
    assert "carol@example.org" in text and "pending" in text


def test_cancel_a_scheduled_send(cli: Cli, ready_app: Any) -> None:
    later = to_rfc3339(ready_app.clock.now_ms() + 86_400_000)
    assert later is not None
    scheduled = cli.json(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "bob@example.com",
        "--subject",
        "Later",
        "--text",
        "x",
        "--send-at",
        later,
    )
    assert scheduled["state"] == "scheduled"
    assert scheduled["due_at"] == later

    cancelled = cli.json("outbox", "cancel", scheduled["id"])
    assert (cancelled["state"], cancelled["stage"]) == ("cancelled", "cancelled")
    assert cli.json("outbox", "list", "--outstanding")["outbox"] == []

    again = cli.fails("outbox", "cancel", scheduled["id"])
    assert "cancelled" in again and "can no longer be cancelled" in again
    assert cli.json("outbox", "show", scheduled["id"])["stage"] == "cancelled"
    assert "no outbox entry" in cli.fails("outbox", "cancel", "out_nothing")


def test_send_at_local_time_in_a_zone(cli: Cli, ready_app: Any) -> None:
    london = ZoneInfo("Europe/London")
    in_two_days = datetime.fromtimestamp(ready_app.clock.now_ms() / 1000, UTC) + timedelta(days=2)
    local = in_two_days.astimezone(london).replace(hour=9, minute=0, second=0, microsecond=0)
    scheduled = cli.json(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "bob@example.com",
        "--subject",
        "Nine o'clock",
        "--text",
        "x",
        "--send-at",
        local.replace(tzinfo=None).isoformat(),
        "--zone",
        "Europe/London",
    )
    assert scheduled["due_zone"] == "Europe/London"
    assert scheduled["due_at"] == to_rfc3339(int(local.timestamp() * 1000))
    assert "IANA" in cli.fails(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "bob@example.com",
        "--subject",
        "x",
        "--text",
        "x",
        "--send-at",
        "2027-01-01T09:00:00",
        "--zone",
        "Mars/Olympus",
    )


def test_resolve_only_an_uncertain_send(cli: Cli, ready_app: Any) -> None:
    sent = cli.json(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "bob@example.com",
        "--subject",
        "s",
        "--text",
        "t",
    )
    line = cli.fails("outbox", "resolve", sent["id"], "--delivered")
    assert "queued, not uncertain" in line
    assert cli.json("outbox", "show", sent["id"])["resolution"] is None

    # An attempt that broke after DATA leaves the send uncertain (28011).
    now = ready_app.clock.now_ms()
    with ready_app.db.write() as tx:
        assert outbox_rows.claim(tx, sent["id"], "test-worker", now, 60_000) is not None
        assert outbox_rows.begin_transmission(tx, sent["id"], "test-worker", now)
        assert outbox_rows.mark_uncertain(tx, sent["id"], now, "test-worker")
    assert cli.json("outbox", "show", sent["id"])["state"] == "uncertain"

    resolved = cli.json("outbox", "resolve", sent["id"], "--not-delivered")
    assert (resolved["resolution"], resolved["stage"]) == ("not_delivered", "refused")
    assert "not uncertain" in cli.fails("outbox", "resolve", sent["id"], "--delivered")
    assert cli.run("outbox", "resolve", sent["id"]).code == 2  # neither flag: usage error


def test_suppression_round_trip(cli: Cli) -> None:
    assert cli.json("suppression", "check", "bob@example.com") == {
        "suppressed": False,
        "suppression": None,
    }
    added = cli.json(
        "suppression", "add", "Bob@Example.COM", "--reason", "complaint", "--note", "by phone"
    )
    assert (added["address_hint"], added["reason"], added["note"]) == (
        "b***@example.com",
        "complaint",
        "by phone",
    )
    checked = cli.json("suppression", "check", "bob@example.com", "--tenant", "default")
    assert checked["suppressed"] is True
    assert checked["suppression"]["id"] == added["id"]
    assert "complaint" in cli.ok("suppression", "check", "bob@example.com")

    listed = cli.json("suppression", "list")
    assert [s["id"] for s in listed["suppressions"]] == [added["id"]]
    assert cli.json("suppression", "list", "--reason", "manual")["suppressions"] == []
    assert "b***@example.com" in cli.ok("suppression", "list")

    # A send to the suppressed address records it suppressed and is refused outright.
    refused = cli.json(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "bob@example.com",
        "--subject",
        "s",
        "--text",
        "t",
    )
    assert refused["state"] == "refused"
    assert refused["recipients"][0]["status"] == "suppressed"

    assert "removed" in cli.ok("suppression", "remove", "bob@example.com")
    assert cli.json("suppression", "check", "bob@example.com")["suppressed"] is False
    assert cli.json("suppression", "list")["suppressions"] == []
    assert "not suppressed" in cli.fails("suppression", "remove", "bob@example.com")
    assert "no tenant" in cli.fails("suppression", "list", "--tenant", "nobody")
    assert "not an email address" in cli.fails("suppression", "add", "not-an-address")


def test_dkim_key_generate_replaces_the_key(cli: Cli, ready_app: Any) -> None:
    domain = create_domain(ready_app, "example.com", "send_only", tenant="default")
    before = dkim_private_key(ready_app, domain.domain.id)
    assert before is not None and before[0] == "pr1"

    changed = cli.json("domain", "dkim-key", "generate", "Example.COM")
    assert (changed["domain"], changed["selector"], changed["previous_selector"]) == (
        "example.com",
        "pr2",
        "pr1",
    )
    record = changed["record"]
    assert (record["type"], record["name"]) == ("TXT", "pr2._domainkey.example.com")
    assert record["value"].startswith("v=DKIM1; k=rsa; p=")

    after = dkim_private_key(ready_app, domain.domain.id)
    assert after is not None
    selector, pem = after
    assert selector == "pr2" and pem != before[1]
    # The published public key is the new private key's.
    key = serialization.load_pem_private_key(pem, password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert record["value"].endswith(base64.b64encode(public).decode())

    text = cli.ok("domain", "dkim-key", "generate", "example.com")
    assert "selector pr3 (was pr2)" in text
    assert "pr3._domainkey.example.com  TXT  v=DKIM1; k=rsa; p=" in text
    assert "no domain" in cli.fails("domain", "dkim-key", "generate", "nowhere.example")
    assert "not a valid domain" in cli.fails("domain", "dkim-key", "generate", "bad..name")


def test_bad_input_is_one_line(cli: Cli, tmp_path: Path) -> None:
    base = ("--subject", "s", "--text", "t")
    line = cli.fails("send", "--from", "support@localhost", "--to", "nope", *base)
    assert "'nope' is not an email address" in line
    line = cli.fails("send", "--from", "ghost@localhost", "--to", "bob@example.com", *base)
    assert "no identity 'ghost@localhost'" in line
    line = cli.fails("send", "--from", "idn_nothing", "--to", "bob@example.com", *base)
    assert "no identity" in line
    assert "recipient" in cli.fails("send", "--from", "support@localhost", *base)
    assert "send_at" in cli.fails(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "bob@example.com",
        *base,
        "--send-at",
        "next tuesday",
    )
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    assert "not UTF-8" in cli.fails(
        "send",
        "--from",
        "support@localhost",
        "--to",
        "bob@example.com",
        "--subject",
        "s",
        "--text-file",
        str(latin),
    )
    # Both body options, or a missing file, are usage errors (exit 2).
    assert (
        cli.run(
            "send",
            "--from",
            "support@localhost",
            "--to",
            "b@x.org",
            *base,
            "--text-file",
            str(latin),
        ).code
        == 2
    )
    assert (
        cli.run(
            "send",
            "--from",
            "support@localhost",
            "--to",
            "b@x.org",
            *base,
            "--attach",
            str(tmp_path / "missing"),
        ).code
        == 2
    )
    assert "no outbox entry" in cli.fails("outbox", "show", "out_missing")
    assert cli.json("outbox", "list")["outbox"] == []

"""`postroom tenant|identity|key` run as the real console script, on both engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


class Cli:
    """Runs ``python -m postroom`` against one data folder and database."""

    def __init__(self, data_dir: Path, database_url: str, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
        self.env.update(
            {
                "POSTROOM_DATA_DIR": str(data_dir),
                "POSTROOM_DATABASE_URL": database_url,
                "COLUMNS": "200",
            }
        )

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "postroom", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done

    def json(self, *args: str) -> Any:
        done = self.ok(*args, "--json")
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1, done.stdout  # exactly one JSON object
        return json.loads(lines[0])

    def fails(self, *args: str) -> str:
        """Run a command that must fail cleanly; returns its one line of stderr."""
        done = self.run(*args)
        assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("postroom: ")
        return lines[0]


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Cli:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    runner = Cli(data, database_url, tmp_path)
    init = runner.json("init")
    assert init["initialized"] is True
    assert init["api_key"].startswith("pr_live_")
    return runner


def test_tenant_and_identity_commands(cli: Cli) -> None:
    tenant = cli.json("tenant", "create", "acme", "--name", "Acme Inc", "--mode", "test")
    assert tenant["id"].startswith("ten_")
    assert (tenant["slug"], tenant["name"], tenant["mode"]) == ("acme", "Acme Inc", "test")
    assert tenant["address_suffix"] == ".acme"

    listed = cli.json("tenant", "list")
    assert [t["slug"] for t in listed["tenants"]] == ["default", "acme"]
    assert listed["tenants"][0]["is_default"] is True

    alice = cli.json("identity", "create", "alice", "--display-name", "Alice")
    assert alice["id"].startswith("idn_")
    assert alice["address"] == "alice@localhost"
    assert alice["tenant_id"] == listed["tenants"][0]["id"]
    assert alice["display_name"] == "Alice"

    bot = cli.json("identity", "create", "bot", "--tenant", "acme")
    assert bot["address"] == "bot.acme@localhost"
    assert bot["tenant_id"] == tenant["id"]

    everyone = cli.json("identity", "list")
    assert [i["address"] for i in everyone["identities"]] == [
        "alice@localhost",
        "bot.acme@localhost",
    ]
    in_acme = cli.json("identity", "list", "--tenant", tenant["id"])
    assert [i["id"] for i in in_acme["identities"]] == [bot["id"]]

    text = cli.ok("identity", "list", "--tenant", "acme").stdout
    assert bot["id"] in text and "bot.acme@localhost" in text and "alice@" not in text


def test_bad_input_prints_one_line_and_exits_1(cli: Cli) -> None:
    assert "username" in cli.fails("identity", "create", "Bad Name!")
    cli.ok("identity", "create", "alice")
    assert "taken" in cli.fails("identity", "create", "alice", "--json")
    assert "slug" in cli.fails("tenant", "create", "Not A Slug")
    assert "no tenant" in cli.fails("identity", "create", "bob", "--tenant", "nope")
    assert "tenants:write" in cli.fails(
        "key",
        "create",
        "--level",
        "identity",
        "--identity",
        "alice",
        "--permission",
        "tenants:write",
    )
    assert "no API key" in cli.fails("key", "revoke", "key_01J9Z3K8V4QW7X2M5N6P8R0T1Y")


def test_key_commands(cli: Cli) -> None:
    cli.json("tenant", "create", "acme")
    bot = cli.json("identity", "create", "bot", "--tenant", "acme")

    tenant_key = cli.json("key", "create", "--level", "tenant", "--tenant", "acme", "--name", "ci")
    assert tenant_key["id"].startswith("key_")
    assert tenant_key["secret"].startswith(tenant_key["prefix"] + "_")
    assert (tenant_key["level"], tenant_key["name"], tenant_key["mode"]) == ("tenant", "ci", "live")

    identity_key = cli.json(
        "key",
        "create",
        "--level",
        "identity",
        "--identity",
        bot["id"],
        "--permission",
        "messages:read",
        "--expires-in-days",
        "7",
    )
    assert identity_key["identity_id"] == bot["id"]
    assert identity_key["permissions"] == ["messages:read"]
    assert identity_key["expires_at"] is not None

    listed = cli.json("key", "list")
    assert [k["name"] for k in listed["keys"]] == ["bootstrap", "ci", "identity key"]
    assert all("secret" not in k and "hash" not in k for k in listed["keys"])
    assert tenant_key["secret"] not in json.dumps(listed)
    only_acme = cli.json("key", "list", "--tenant", "acme")
    assert {k["id"] for k in only_acme["keys"]} == {tenant_key["id"], identity_key["id"]}

    revoked = cli.json("key", "revoke", tenant_key["id"])
    assert revoked["id"] == tenant_key["id"] and revoked["revoked_at"] is not None
    states = {k["id"]: k["state"] for k in cli.json("key", "list")["keys"]}
    assert states[tenant_key["id"]] == "revoked"
    assert states[identity_key["id"]] == "active"

    rotated = cli.json("key", "rotate", identity_key["id"], "--overlap-hours", "1")
    assert rotated["secret"] != identity_key["secret"]
    assert rotated["previous_secret_until"] is not None


def test_key_create_text_mode_shows_the_secret_once(cli: Cli) -> None:
    done = cli.ok("key", "create", "--level", "platform", "--name", "ops")
    secrets = [word for word in done.stdout.split() if word.startswith("pr_live_")]
    assert len(secrets) == 1
    listed = cli.ok("key", "list").stdout
    assert secrets[0] not in listed


def test_init_again_reports_nothing_changed(cli: Cli) -> None:
    again = cli.json("init")
    assert again["initialized"] is False
    assert "api_key" not in again
    assert len(cli.json("tenant", "list")["tenants"]) == 1

"""`postroom search` run as the real console script over the fixture mailbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def run(mailbox: Any, *args: str) -> subprocess.CompletedProcess[str]:
    settings = mailbox.app.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        COLUMNS="200",
    )
    return subprocess.run(
        [sys.executable, "-m", "postroom", "search", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_search_prints_a_table_json_and_clear_errors(mailbox: Any) -> None:
    table = run(mailbox, "invoice -late", "--identity", "box@localhost")
    assert table.returncode == 0, table.stderr
    assert "2 hit(s)" in table.stdout and mailbox.ids["invoice"] in table.stdout
    done = run(mailbox, "jonahtan", "--identity", mailbox.identity_id, "--json", "--sort", "date")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["fuzzy"] is True and body["total"] == 1
    assert [h["message_id"] for h in body["hits"]] == [mailbox.ids["harvest"]]
    assert "**Jonathan**" in body["hits"][0]["snippet"]
    tenant = json.loads(run(mailbox, "subject:invoice", "--json", "--thread").stdout)
    assert tenant["total"] == 2  # the box's thread and the other inbox's message
    assert {h["thread_hits"] for h in tenant["hits"]} == {1, 2}
    bad = run(mailbox, "invoice (late")
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == ["postroom: '(' is not closed (at position 8)"]
    unknown = run(mailbox, "x", "--identity", "nobody@localhost")
    assert unknown.returncode == 1 and "no identity" in unknown.stderr

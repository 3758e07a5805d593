"""The bounded ranking window, and rebuilding the index (``postroom search reindex``), on
both engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from postroom.mailbox.search import search
from postroom.search.reindex import reindex
from postroom.store import search_index
from postroom.store.search_index import SearchScope


def run(mailbox: Any, q: str, **kw: Any) -> Any:
    kw.setdefault("offset", 0)
    kw.setdefault("limit", 50)
    with mailbox.app.db.read() as tx:
        return search(
            tx, q, SearchScope(identity_id=mailbox.identity_id), now_ms=mailbox.app.clock.now_ms(),
            **kw,
        )  # fmt: skip


def names(mailbox: Any, result: Any) -> list[str]:
    back = {v: k for k, v in mailbox.ids.items()}
    return [back[h.message_id] for h in result.hits]


def test_only_the_window_is_ranked_and_the_rest_follows_newest_first(
    mailbox: Any, monkeypatch: Any
) -> None:
    # "invoice" is in three messages, stored invoice, reply, reminder: a window of two
    # ranks reply and reminder; invoice follows, unranked.
    monkeypatch.setattr(search_index, "FEW_MATCHES", 0)
    monkeypatch.setattr(search_index, "RANK_WINDOW", 2)
    whole = run(mailbox, "invoice")
    assert whole.total == 3 and not whole.fuzzy
    assert sorted(names(mailbox, whole)[:2]) == ["reminder", "reply"]
    assert names(mailbox, whole)[2] == "invoice"
    assert all(h.score > 0 for h in whole.hits[:2]) and whole.hits[2].score == 0
    # Pages past the window come from the statement over every hit, in the same order.
    paged = [names(mailbox, run(mailbox, "invoice", offset=i, limit=1)) for i in range(3)]
    assert [p[0] for p in paged] == names(mailbox, whole)
    grouped = run(mailbox, "invoice", group="thread")
    assert grouped.total == 2 and {h.thread_hits for h in grouped.hits} == {1, 2}
    # With the window wider than the hits, the ranking is exact: the subject wins.
    monkeypatch.setattr(search_index, "RANK_WINDOW", 250)
    assert names(mailbox, run(mailbox, "quarterly OR apples"))[0] == "report"


def test_reindex_rebuilds_missing_index_rows(mailbox: Any) -> None:
    app = mailbox.app
    with app.db.write() as tx:
        rowid = int(
            tx.fetchval("SELECT rowid FROM messages WHERE id = %s", (mailbox.ids["harvest"],))
        )
        search_index.unindex_message(tx, rowid)
    assert run(mailbox, "orchard").hits == []
    started: list[int] = []
    done: list[int] = []
    summary = reindex(app, batch=5, on_start=started.append, progress=done.append)
    with app.db.read() as tx:
        stored = int(tx.fetchval("SELECT count(*) AS n FROM messages"))
    assert started == [stored] and summary.messages == stored == sum(done)
    assert summary.batches == len(done) == -(-stored // 5)
    found = run(mailbox, "orchard")
    assert names(mailbox, found) == ["harvest"] and found.hits[0].score > 0
    # Running it again changes no hit and no order (FTS5's bm25 statistics keep the
    # sizes of deleted rows, so SQLite's scores may shift; PostgreSQL's do not).
    before = run(mailbox, "invoice OR orchard")
    reindex(app)
    after = run(mailbox, "invoice OR orchard")
    assert names(mailbox, after) == names(mailbox, before) and after.total == before.total


def test_reindex_command_and_a_query_named_like_it(mailbox: Any) -> None:
    settings = mailbox.app.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir), POSTROOM_DATABASE_URL=settings.database_url
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "postroom", "search", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = cli("reindex", "--json", "--batch", "4")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reindexed"] == len(mailbox.ids)
    query = cli("--json", "--identity", mailbox.identity_id, "--", "reindex")
    assert query.returncode == 0, query.stderr
    assert set(json.loads(query.stdout)) == {"total", "fuzzy", "hits"}  # a search ran
    bad = cli("reindex", "--batch", "0")
    assert bad.returncode == 2 and "--batch" in bad.stderr

"""The outbox drained by several real ``postroom worker`` processes, on both engines.

1,000 sends recorded in the test process while four worker processes relay them to one
SMTP peer on loopback: every message reaches the peer exactly once (counted by
Message-ID), every record ends ``sent``, and every send job succeeded on its first
attempt.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from postroom.tenancy.service import create_identity
from postroom.testing.outbox import (
    WorkerProcesses,
    arrivals,
    record_many,
    relay_settings,
    stage_counts,
    wait_for,
    worker_env,
)

MESSAGES = 1000


def test_a_thousand_sends_four_processes_each_delivered_once(
    ready_app: Any, smtp_peer: Any, tmp_path: Path
) -> None:
    peer = smtp_peer()
    relay_settings(ready_app, peer)
    sender = create_identity(ready_app, "sender").identity.id
    logs = tmp_path / "logs"
    logs.mkdir()
    workers = WorkerProcesses(worker_env(ready_app.settings, peer), logs)
    started = time.monotonic()
    try:
        for _ in range(4):
            workers.start("--concurrency", "2", "--type", "outbound.send")
        # Recorded while the workers start and drain: sends and attempts interleave.
        made = record_many(ready_app, sender, [[f"r{n}@example.com"] for n in range(MESSAGES)])
        wait_for(
            lambda: stage_counts(ready_app)["sent"] == MESSAGES,
            120,
            f"{MESSAGES} records at sent (now {dict(stage_counts(ready_app))})",
            workers.logs(),
        )
    finally:
        workers.stop_all()
    elapsed = time.monotonic() - started
    assert all(p.returncode == 0 for p in workers.procs), workers.logs()

    expected = {(m.id, f"r{n}@example.com") for n, m in enumerate(made)}
    with ready_app.db.read() as tx:
        by_record = {
            r["id"]: r["rfc_message_id"]
            for r in tx.fetchall("SELECT id, rfc_message_id FROM outgoing_emails")
        }
    got = arrivals(peer)
    assert sum(got.values()) == MESSAGES
    assert max(got.values()) == 1, "a recipient received a message twice"
    assert set(got) == {(by_record[record_id], address) for record_id, address in expected}
    assert stage_counts(ready_app) == Counter(sent=MESSAGES)
    with ready_app.db.read() as tx:
        jobs = tx.fetchall(
            "SELECT state, count(*) AS n, max(attempt_count) AS attempts FROM jobs"
            " WHERE job_type = 'outbound.send' GROUP BY state"
        )
        outstanding = tx.fetchval(
            "SELECT count(*) FROM outgoing_emails"
            " WHERE stage <> 'sent' OR lease_owner IS NOT NULL OR attempt_count <> 1"
        )
        accepted = tx.fetchval(
            "SELECT count(*) FROM outgoing_email_recipients WHERE status = 'accepted'"
        )
    assert [(j["state"], j["n"], j["attempts"]) for j in jobs] == [("succeeded", MESSAGES, 1)]
    assert outstanding == 0
    assert accepted == MESSAGES
    # The work was shared: more than one worker process spoke to the peer.
    assert len({t.connection for t in peer.received()}) >= 4
    assert elapsed < 120

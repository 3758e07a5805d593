"""kill -9 of a `postroom worker` in the middle of deliveries: every event still reaches
the receiver at least once (both engines).

The events are fanned out in the test process; a real worker process delivers them to a
slow receiver on loopback and is killed with SIGKILL once some deliveries are done and
others are in flight. A second worker takes over the lost jobs when their leases (2 s)
run out.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from webhook_receiver import Receiver

from postroom.tenancy.service import create_identity
from postroom.webhooks.dispatch import dispatch_pending
from postroom.webhooks.endpoints import DELIVER_JOB, PLATFORM, NewEndpoint, create

EVENTS = 24


@pytest.fixture
def settings(settings: Any) -> Any:
    return dataclasses.replace(settings, webhooks_allow_insecure=True, webhooks_allow_loopback=True)


def _start(settings: Any, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        POSTROOM_WEBHOOKS_ALLOW_INSECURE="true",
        POSTROOM_WEBHOOKS_ALLOW_LOOPBACK="true",
        POSTROOM_WEBHOOKS_RETRY_SCHEDULE="0.05",
        POSTROOM_JOBS_LEASE_SECONDS="2",
        POSTROOM_WORKER_POLL_INTERVAL_MS="50",
        POSTROOM_LOG_LEVEL="warning",
    )
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "postroom", "worker", "--concurrency", "4"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill_9_mid_delivery_loses_no_event(ready_app: Any, tmp_path: Path) -> None:
    app = ready_app
    with Receiver(lambda n: ("slow", 0.15, 200)) as receiver:
        create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        for n in range(EVENTS):
            create_identity(app, f"crash{n}")
        with app.db.read() as tx:
            events = {
                r["id"]
                for r in tx.fetchall("SELECT id FROM events WHERE type = 'identity.created'")
            }
        assert dispatch_pending(app) >= EVENTS
        log = tmp_path / "workers.log"
        first = _start(app.settings, log)
        procs = [first]
        try:
            _wait(lambda: len(receiver.requests) >= 6, 60, "the first deliveries")
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            delivered_before = set(receiver.ids())
            assert delivered_before < events, "killed too late: nothing was left to take over"
            procs.append(_start(app.settings, log))

            def all_done() -> bool:
                with app.db.read() as tx:
                    left = tx.fetchval(
                        "SELECT COUNT(*) FROM jobs WHERE job_type = %s AND state <> 'succeeded'",
                        (DELIVER_JOB,),
                    )
                return int(left) == 0

            _wait(all_done, 90, "every delivery job to succeed")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        received = receiver.ids()
    assert events <= set(received), log.read_text()[-3000:]
    # At least once: a delivery in flight at the kill may have been made twice, never lost.
    assert len(received) >= len(events)
    with app.db.read() as tx:
        succeeded = {
            r["event_id"]
            for r in tx.fetchall(
                "SELECT event_id FROM webhook_deliveries WHERE status = 'succeeded'"
            )
        }
    assert succeeded == events

"""Real `postroom worker` processes sharing one queue, on both engines.

* 1,000 jobs, 4 worker processes: each job completed exactly once.
* A worker killed with SIGKILL mid-job: the job is reclaimed once its lease runs out,
  as attempt 2, and a late completion from the lost lease changes nothing.
* SIGTERM: the running job is released and the process exits cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from postroom.store import jobs as job_rows


def _env(settings: Any, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        POSTROOM_WORKER_HANDLER_MODULES="postroom.testing.jobs",
        POSTROOM_WORKER_POLL_INTERVAL_MS="50",
        POSTROOM_LOG_LEVEL="warning",
    )
    env.update(extra)
    return env


class Workers:
    def __init__(self, settings: Any, tmp_path: Path) -> None:
        self.settings = settings
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        with (self.tmp_path / f"worker-{len(self.procs)}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "postroom", "worker", *args],
                env=_env(self.settings, **env),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.tmp_path.glob("worker-*.log")))


@pytest.fixture
def workers(settings: Any, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(settings, tmp_path)
    yield group
    group.stop_all()


def _wait_for(predicate: Any, timeout: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}\n{workers.logs()}")


def _counts(app: Any) -> dict[str, int]:
    with app.db.read() as tx:
        rows = tx.fetchall("SELECT state, count(*) AS n FROM jobs GROUP BY state")
    return {r["state"]: int(r["n"]) for r in rows}


def test_a_thousand_jobs_four_processes_each_completed_once(
    app: Any, workers: Workers, tmp_path: Path
) -> None:
    out = tmp_path / "effects.txt"
    with app.db.write() as tx:
        for n in range(1000):
            app.queue.enqueue_in(tx, "test.record", f"job-{n}", {"file": str(out)})
    for _ in range(4):
        workers.start("--concurrency", "2", "--type", "test.record")
    _wait_for(lambda: _counts(app).get("succeeded", 0) == 1000, 240, "1,000 completions", workers)
    workers.stop_all()
    assert all(proc.returncode == 0 for proc in workers.procs), workers.logs()
    lines = out.read_text().splitlines()
    ids = Counter(line.split()[0] for line in lines)
    assert len(ids) == 1000
    assert max(ids.values()) == 1, "a job ran twice"
    assert {line.split()[1] for line in lines} == {"1"}
    assert len({line.split()[2] for line in lines}) >= 2, "the work was not shared"
    with app.db.read() as tx:
        assert tx.fetchval("SELECT max(attempt_count) FROM jobs") == 1
    assert "database is locked" not in workers.logs()


def test_a_killed_worker_loses_its_job_to_another_after_the_lease(
    app: Any, workers: Workers, tmp_path: Path
) -> None:
    marker = tmp_path / "attempts.txt"
    job = app.queue.enqueue(
        "test.sleep", "long", {"file": str(marker), "seconds": 60, "only_attempt": 1}
    )
    victim = workers.start("--type", "test.sleep", POSTROOM_JOBS_LEASE_SECONDS="2")
    _wait_for(lambda: marker.exists(), 30, "the first attempt to start", workers)
    with app.db.read() as tx:
        lost = job_rows.get(tx, job.id)
    assert lost is not None and lost.state == "claimed" and lost.attempt_count == 1
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    killed_at = time.monotonic()

    workers.start("--type", "test.sleep", POSTROOM_JOBS_LEASE_SECONDS="2")
    _wait_for(
        lambda: app.queue.get(job.id).state == "succeeded", 30, "the reclaimed attempt", workers
    )
    # Not before the lease the dead worker held had run out.
    assert time.monotonic() - killed_at >= 1.0
    done = app.queue.get(job.id)
    assert done.attempt_count == 2
    assert [line.split()[1] for line in marker.read_text().splitlines()] == ["1", "2"]

    # The killed attempt's owner completing late writes nothing.
    assert lost.lease_owner is not None
    with app.db.write() as tx:
        assert not job_rows.complete(tx, job.id, lost.lease_owner, app.clock.now_ms())
        assert not job_rows.retry(
            tx, job.id, lost.lease_owner, app.clock.now_ms(), 0, "transient", "X:y"
        )
    after = app.queue.get(job.id)
    assert after == done


def test_sigterm_releases_the_running_job(app: Any, workers: Workers, tmp_path: Path) -> None:
    marker = tmp_path / "attempts.txt"
    job = app.queue.enqueue(
        "test.sleep", "long", {"file": str(marker), "seconds": 60, "release_on_stop": True}
    )
    proc = workers.start("--type", "test.sleep")
    _wait_for(lambda: marker.exists(), 30, "the attempt to start", workers)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, workers.logs()
    row = app.queue.get(job.id)
    assert (row.state, row.attempt_count, row.lease_owner) == ("pending", 0, None)

"""The worker in-process: handlers run, failures are classified, shutdown releases."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from postroom.jobs.builtin import default_registry, run_maintenance
from postroom.jobs.handlers import HandlerRegistry, JobContext, TransientFailure, classify
from postroom.jobs.queue import JobQueue, QueuePolicy
from postroom.jobs.worker import Worker
from postroom.testing import jobs as test_jobs


@pytest.fixture
def registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    test_jobs.register(registry)
    return registry


def _state(app: Any, job_id: str) -> dict[str, Any]:
    with app.db.read() as tx:
        row = tx.fetchone("SELECT * FROM jobs WHERE id = %s", (job_id,))
    assert row is not None
    return row


def test_run_once_completes_a_job(app: Any, registry: HandlerRegistry, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    job = app.queue.enqueue("test.record", "one", {"file": str(out)})
    worker = Worker(app, registry)
    assert worker.run_once()
    assert not worker.run_once()  # nothing left
    assert _state(app, job.id)["state"] == "succeeded"
    assert out.read_text().split()[0] == job.id
    assert worker.stats.completed == 1


def test_failures_are_classified_and_never_store_the_message(
    app: Any, registry: HandlerRegistry
) -> None:
    transient = app.queue.enqueue("test.fail", "t", {"mode": "transient", "code": "smtp_421"})
    permanent = app.queue.enqueue("test.fail", "p", {"mode": "permanent", "code": "bad_auth"})
    worker = Worker(app, registry)
    assert worker.run_once() and worker.run_once()
    t = _state(app, transient.id)
    p = _state(app, permanent.id)
    assert (t["state"], t["last_failure_reason"]) == ("pending", "TransientFailure:smtp_421")
    assert (p["state"], p["last_failure_reason"]) == ("dead_lettered", "PermanentFailure:bad_auth")
    with app.db.read() as tx:
        rows = tx.fetchall("SELECT * FROM jobs")
    assert "secret text" not in repr(rows)


def _pg_error(sqlstate: str) -> Exception:
    """A real psycopg exception class for the SQLSTATE, as a server would raise it."""
    import psycopg.errors

    return psycopg.errors.lookup(sqlstate)("from the server")


@pytest.mark.parametrize(
    ("exc", "transient", "reason"),
    [
        (TimeoutError(), True, "TimeoutError:none"),
        (ConnectionRefusedError(111, "refused"), True, "ConnectionRefusedError:ECONNREFUSED"),
        (TransientFailure("rate_limited", "text"), True, "TransientFailure:rate_limited"),
        (ValueError("Subject: hello bob@example.com"), False, "ValueError:unclassified"),
        (KeyError("x"), False, "KeyError:unclassified"),
        (_pg_error("40P01"), True, "DeadlockDetected:40P01"),
        (_pg_error("40001"), True, "SerializationFailure:40001"),
        (_pg_error("23505"), False, "UniqueViolation:unclassified"),
    ],
)
def test_classify(exc: BaseException, transient: bool, reason: str) -> None:
    assert classify(exc) == (transient, reason)


@pytest.mark.engines("sqlite")
def test_stop_releases_jobs_still_running_after_the_grace_period(
    app: Any, registry: HandlerRegistry, tmp_path: Path
) -> None:
    out = tmp_path / "marker"
    job = app.queue.enqueue("test.sleep", "s", {"file": str(out), "seconds": 5})
    worker = Worker(app, registry, concurrency=1, poll_interval_s=0.02)
    worker.start()
    _wait_for(lambda: out.exists())
    assert _state(app, job.id)["state"] == "claimed"
    released = worker.stop(grace_s=0.2)
    assert released == 1
    row = _state(app, job.id)
    assert (row["state"], row["attempt_count"], row["lease_owner"]) == ("pending", 0, None)


@pytest.mark.engines("sqlite")
def test_a_handler_that_sees_the_stop_gives_its_job_back(
    app: Any, registry: HandlerRegistry, tmp_path: Path
) -> None:
    out = tmp_path / "marker"
    job = app.queue.enqueue(
        "test.sleep", "s", {"file": str(out), "seconds": 30, "release_on_stop": True}
    )
    worker = Worker(app, registry, concurrency=1, poll_interval_s=0.02)
    worker.start()
    _wait_for(lambda: out.exists())
    started = time.monotonic()
    worker.stop(grace_s=10)
    assert time.monotonic() - started < 5
    row = _state(app, job.id)
    assert (row["state"], row["attempt_count"]) == ("pending", 0)
    assert worker.stats.released == 1


@pytest.mark.engines("sqlite")
def test_lease_renewal_keeps_a_job_that_outlives_its_lease(
    app: Any, registry: HandlerRegistry, tmp_path: Path
) -> None:
    # Renewal runs every third of the lease: a 1 s lease survives a 600 ms stall of the
    # renewer on a loaded machine (300 ms did not leave enough room).
    app.queue = JobQueue(app.db, app.clock, QueuePolicy(lease_ms=1000))
    out = tmp_path / "marker"
    job = app.queue.enqueue("test.sleep", "s", {"file": str(out), "seconds": 2.6})
    worker = Worker(app, registry, concurrency=1, poll_interval_s=0.02)
    worker.start()
    try:
        _wait_for(lambda: out.exists())
        time.sleep(2.0)  # twice the lease: only renewal keeps it
        assert app.queue.claim(["test.sleep"], "thief") is None
        _wait_for(lambda: _state(app, job.id)["state"] == "succeeded")
    finally:
        worker.stop(grace_s=1)
    assert _state(app, job.id)["attempt_count"] == 1
    assert len(out.read_text().splitlines()) == 1


def test_unknown_job_types_are_refused_at_start(app: Any, registry: HandlerRegistry) -> None:
    with pytest.raises(ValueError, match="no handler"):
        Worker(app, registry, job_types=["nope.job"])


def test_plugin_modules_add_handlers(app: Any) -> None:
    from dataclasses import replace

    from postroom.errors import ConfigError

    settings = replace(app.settings, worker_handler_modules=("postroom.testing.jobs",))
    assert "test.record" in default_registry(settings).job_types
    bad = replace(app.settings, worker_handler_modules=("postroom.no_such_module",))
    with pytest.raises(ConfigError, match="worker.handler_modules"):
        default_registry(bad)


def test_maintenance_purges_expired_rows(app: Any) -> None:
    now = app.clock.now_ms()
    with app.db.write() as tx:
        for key, expires in (("old", now - 1), ("live", now + 60_000)):
            tx.execute(
                "INSERT INTO idempotency_records (scope, key_id, idem_key, method, path,"
                " fingerprint, status, created_at, expires_at)"
                " VALUES ('platform', 'key_x', %s, 'POST', '/v1/x', 'f', 'completed', %s, %s)",
                (key, now, expires),
            )
    job = app.queue.enqueue("maintenance.run", "now")
    claimed = app.queue.claim(["maintenance.run"], "w")
    assert claimed is not None and claimed.id == job.id
    run_maintenance(JobContext(app, claimed, "w", threading.Event()))
    with app.db.read() as tx:
        keys = [r["idem_key"] for r in tx.fetchall("SELECT idem_key FROM idempotency_records")]
    assert keys == ["live"]


def _wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")

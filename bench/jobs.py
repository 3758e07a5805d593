"""Job queue throughput on SQLite and PostgreSQL.

For each engine: enqueue N jobs (one transaction each, and in batches of 500), then drain
them with a no-op handler through an in-process Worker of 1 and 4 threads and through 4
`postroom worker` processes. Prints a table and writes bench/results/jobs.json.

    .venv/bin/python bench/jobs.py [--jobs 2000] [--pg postgresql://postgres@127.0.0.1/postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from postroom.app import build_app
from postroom.config import load_settings
from postroom.jobs.handlers import HandlerRegistry, JobContext
from postroom.jobs.worker import Worker
from postroom.keyring import create_key_files
from postroom.store import apply_migrations

RESULTS = Path(__file__).parent / "results"


def noop(ctx: JobContext) -> None:
    return None


def _settings(data: Path, url: str) -> Any:
    settings = load_settings(
        env={},
        overrides={"data_dir": str(data), "database_url": url, "jobs.max_queue_depth": 10**7},
        cwd=data,
    )
    create_key_files(settings)
    return settings


def _drain_in_process(app: Any, job_type: str, threads: int, total: int) -> float:
    registry = HandlerRegistry()
    registry.register(job_type, noop)
    worker = Worker(app, registry, concurrency=threads, poll_interval_s=0.01)
    started = time.perf_counter()
    worker.start()
    while worker.stats.completed < total:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    worker.stop(grace_s=1)
    return elapsed


def _drain_processes(settings: Any, processes: int, total: int, app: Any) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        POSTROOM_WORKER_HANDLER_MODULES="postroom.testing.jobs",
        POSTROOM_WORKER_POLL_INTERVAL_MS="10",
        POSTROOM_WORKER_CONCURRENCY="2",
        POSTROOM_LOG_LEVEL="error",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "postroom", "worker", "--type", "test.record"], env=env
        )
        for _ in range(processes)
    ]
    started = time.perf_counter()
    try:
        while True:
            with app.db.read() as tx:
                done = tx.fetchval(
                    "SELECT count(*) FROM jobs WHERE job_type = 'test.record'"
                    " AND state = 'succeeded'"
                )
            if done >= total:
                break
            time.sleep(0.02)
        return time.perf_counter() - started
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def bench_engine(name: str, url: str, data: Path, total: int) -> dict[str, Any]:
    apply_migrations(url, now_ms=0)
    settings = _settings(data, url)
    app = build_app(settings)
    out: dict[str, Any] = {"engine": name, "jobs": total}
    try:
        started = time.perf_counter()
        for n in range(total):
            app.queue.enqueue(f"bench.noop{1 if n % 2 else 4}", f"single-{n}")
        out["enqueue_single_per_s"] = total / (time.perf_counter() - started)

        started = time.perf_counter()
        for batch in range(0, total, 500):
            with app.db.write() as tx:
                for n in range(batch, min(batch + 500, total)):
                    app.queue.enqueue_in(tx, "bench.batch", f"batch-{n}")
        out["enqueue_batched_per_s"] = total / (time.perf_counter() - started)

        half = total // 2
        out["drain_1_thread_per_s"] = half / _drain_in_process(app, "bench.noop1", 1, half)
        out["drain_4_threads_per_s"] = (total - half) / _drain_in_process(
            app, "bench.noop4", 4, total - half
        )

        effects = data / "effects.txt"
        with app.db.write() as tx:
            for n in range(total):
                app.queue.enqueue_in(tx, "test.record", f"p-{n}", {"file": str(effects)})
        out["drain_4_processes_per_s"] = total / _drain_processes(settings, 4, total, app)
    finally:
        app.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument(
        "--pg",
        default=os.environ.get("POSTROOM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_dir = Path(tmp) / "sqlite"
        sqlite_dir.mkdir()
        results.append(
            bench_engine("sqlite", f"sqlite:///{sqlite_dir / 'postroom.db'}", sqlite_dir, args.jobs)
        )
        try:
            admin = psycopg.connect(args.pg, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            print(f"PostgreSQL not reachable ({exc}); SQLite only", file=sys.stderr)
        else:
            name = f"postroom_bench_{secrets.token_hex(4)}"
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                pg_dir = Path(tmp) / "pg"
                pg_dir.mkdir()
                url = args.pg.rsplit("/", 1)[0] + "/" + name
                results.append(bench_engine("postgresql", url, pg_dir, args.jobs))
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.close()

    columns = [
        "enqueue_single_per_s",
        "enqueue_batched_per_s",
        "drain_1_thread_per_s",
        "drain_4_threads_per_s",
        "drain_4_processes_per_s",
    ]
    print(f"{'engine':<12}" + "".join(f"{c:>26}" for c in columns))
    for row in results:
        print(f"{row['engine']:<12}" + "".join(f"{row[c]:>26.0f}" for c in columns))
    RESULTS.mkdir(exist_ok=True)
    report = {
        "benchmark": "jobs",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "results": results,
    }
    (RESULTS / "jobs.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS / 'jobs.json'}")


if __name__ == "__main__":
    main()

"""Send throughput through the outbox: record, then drain with 1 and 4 worker processes.

For each engine (SQLite, and PostgreSQL when reachable) and each worker count: a fresh
database, N sends recorded through the service (one recipient each, timed on their own),
then W `postroom worker --type outbound.send` processes relaying them to a local sink (an
SmtpPeer accepting everything, TLS none, in this process). A send counts once its
recipient is durably settled (``outgoing_email_recipients.status = 'accepted'``, read
back from the database). Reported per run:

* ``record_per_s`` — sends recorded per second by ``record_send`` (one thread);
* ``drain_per_s`` — steady rate: (N - 1) / (last settle - first settle), both read from
  the recipients' ``answered_at``;
* ``wall_per_s`` — N / seconds from starting the workers to the last settle (process
  start-up included).

Two ceilings are measured in the same run, so the figures can be read against what this
machine allows at all:

* **the sink** — a bare smtplib client (no database) sending N messages of the same
  size to a fresh SmtpPeer, NOOP + MAIL + RCPT + DATA each as the relay transport does,
  over one connection per thread, with 1 and 4 threads;
* **the commit** — one-row write transactions per second on a SQLite file in the same
  folder with the settings Postroom uses (WAL, ``synchronous = FULL``); a send costs
  five of them (job claim, outbox claim, ``transmission_begun``, settle, job complete).

Prints a table and writes bench/results/send.json.

    .venv/bin/python bench/send.py [--messages 1000] [--workers 1,4] [--concurrency 4]
        [--engines sqlite,postgresql] [--pg postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import smtplib
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from postroom.app import build_app
from postroom.config import load_settings
from postroom.keyring import create_key_files
from postroom.store import apply_migrations
from postroom.tenancy.bootstrap import initialize
from postroom.tenancy.service import create_identity
from postroom.testing.outbox import WorkerProcesses, arrivals, record_many, worker_env
from postroom.testing.smtp_peer import SmtpPeer

RESULTS = Path(__file__).parent / "results"
DEFAULT_PG = os.environ.get("POSTROOM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _settings(data: Path, url: str, peer: SmtpPeer) -> Any:
    settings = load_settings(
        env={},
        overrides={
            "data_dir": str(data),
            "database_url": url,
            "jobs.max_queue_depth": 10**7,
            "outbound.transport": "smtp_relay",
            "outbound.relay_host": "127.0.0.1",
            "outbound.relay_port": peer.port,
            "outbound.relay_tls": "none",
            "outbound.daily_cap_identity": 0,
            "outbound.daily_cap_tenant": 0,
        },
        cwd=data,
    )
    create_key_files(settings)
    return settings


def _settled(app: Any) -> int:
    with app.db.read() as tx:
        return int(
            tx.fetchval("SELECT count(*) FROM outgoing_email_recipients WHERE status = 'accepted'")
        )


def run_once(
    engine: str, url: str, data: Path, messages: int, workers: int, concurrency: int
) -> dict[str, Any]:
    data.mkdir(parents=True)
    apply_migrations(url, now_ms=0)
    with SmtpPeer() as peer:
        settings = _settings(data, url, peer)
        app = build_app(settings)
        try:
            initialize(app)
            sender = create_identity(app, "bench").identity.id
            started = time.perf_counter()
            record_many(app, sender, [[f"r{n}@example.com"] for n in range(messages)])
            record_s = time.perf_counter() - started
            with app.db.read() as tx:
                mime_bytes = int(
                    tx.fetchval("SELECT avg(length(mime)) FROM outgoing_email_contents")
                )

            env = worker_env(
                settings,
                peer,
                POSTROOM_WORKER_POLL_INTERVAL_MS="10",
                POSTROOM_WORKER_CONCURRENCY=str(concurrency),
                POSTROOM_LOG_LEVEL="error",
                POSTROOM_OUTBOUND_DAILY_CAP_IDENTITY="0",
                POSTROOM_OUTBOUND_DAILY_CAP_TENANT="0",
            )
            procs = WorkerProcesses(env, data)
            started = time.perf_counter()
            try:
                for _ in range(workers):
                    procs.start("--type", "outbound.send")
                deadline = time.monotonic() + max(120.0, messages / 5)
                while _settled(app) < messages:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{engine}: not drained in time\n{procs.logs()[-4000:]}")
                    time.sleep(0.02)
                wall_s = time.perf_counter() - started
            finally:
                procs.stop_all()
            with app.db.read() as tx:
                first, last = tx.fetchone(
                    "SELECT min(answered_at) AS a, max(answered_at) AS b"
                    " FROM outgoing_email_recipients"
                ).values()
            copies = arrivals(peer)
            if sum(copies.values()) != messages or max(copies.values()) != 1:
                raise SystemExit(f"{engine}: the peer did not receive each message exactly once")
        finally:
            app.close()
    span_s = max((last - first) / 1000, 0.001)
    return {
        "engine": engine,
        "messages": messages,
        "workers": workers,
        "concurrency": concurrency,
        "record_per_s": messages / record_s,
        "drain_per_s": (messages - 1) / span_s,
        "wall_per_s": messages / wall_s,
        "mime_bytes": mime_bytes,
    }


def sink_ceiling(messages: int, threads: int, size: int) -> float:
    """Messages/s a bare smtplib client gets through a fresh SmtpPeer (no database)."""
    line = b"The quick brown fox jumps over the lazy dog, again and again.\r\n"
    body = line * max(1, size // len(line))
    per_thread = max(1, messages // threads)
    failures: list[BaseException] = []

    def client(host: str, port: int, n: int) -> None:
        try:
            with smtplib.SMTP(host, port, timeout=30) as smtp:
                for i in range(per_thread):
                    smtp.noop()
                    head = f"From: bench@example.com\r\nTo: r{n}-{i}@example.com\r\n\r\n"
                    smtp.sendmail(
                        "bench@example.com", [f"r{n}-{i}@example.com"], head.encode() + body
                    )
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    with SmtpPeer() as peer:
        workers = [
            threading.Thread(target=client, args=(peer.host, peer.port, n)) for n in range(threads)
        ]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"the bare client failed: {failures[0]!r}")
    return per_thread * threads / elapsed


def commit_ceiling(folder: Path, commits: int = 1000) -> float:
    """One-row write transactions/s on SQLite as Postroom opens it (WAL, full fsync)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(folder / "commits.db", isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE t (n INTEGER)")
        started = time.perf_counter()
        for n in range(commits):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO t VALUES (?)", (n,))
            db.execute("COMMIT")
        return commits / (time.perf_counter() - started)
    finally:
        db.close()


def _pg_database(admin_url: str) -> tuple[Any, str, str] | None:
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        print(f"PostgreSQL not reachable ({exc}); SQLite only", file=sys.stderr)
        return None
    name = f"postroom_bench_{secrets.token_hex(4)}"
    admin.execute(f'CREATE DATABASE "{name}"')
    return admin, name, admin_url.rsplit("/", 1)[0] + "/" + name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--workers", default="1,4", help="worker process counts, e.g. 1,4")
    parser.add_argument("--concurrency", type=int, default=4, help="threads per worker")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in counts:
            if "sqlite" in engines:
                data = Path(tmp) / f"sqlite-{workers}"
                url = f"sqlite:///{data / 'postroom.db'}"
                results.append(
                    run_once("sqlite", url, data, args.messages, workers, args.concurrency)
                )
                print(results[-1], file=sys.stderr)
            if "postgresql" in engines:
                made = _pg_database(args.pg)
                if made is None:
                    continue
                admin, name, url = made
                try:
                    data = Path(tmp) / f"pg-{workers}"
                    results.append(
                        run_once("postgresql", url, data, args.messages, workers, args.concurrency)
                    )
                    print(results[-1], file=sys.stderr)
                finally:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    admin.close()

        size = max((r["mime_bytes"] for r in results), default=1000)
        ceilings = {
            "sink_1_thread_per_s": sink_ceiling(args.messages, 1, size),
            "sink_4_threads_per_s": sink_ceiling(args.messages, 4, size),
            "sqlite_commits_per_s": commit_ceiling(Path(tmp) / "commits"),
        }
        print(ceilings, file=sys.stderr)

    columns = ["record_per_s", "drain_per_s", "wall_per_s"]
    print(f"{'engine':<12}{'workers':>8}{'threads':>8}" + "".join(f"{c:>16}" for c in columns))
    for row in results:
        print(
            f"{row['engine']:<12}{row['workers']:>8}{row['concurrency']:>8}"
            + "".join(f"{row[c]:>16.0f}" for c in columns)
        )
    print(
        f"ceilings on this machine, same run: a bare smtplib client gets"
        f" {ceilings['sink_1_thread_per_s']:.0f}/s (1 thread) and"
        f" {ceilings['sink_4_threads_per_s']:.0f}/s (4 threads) through the same sink;"
        f" SQLite commits {ceilings['sqlite_commits_per_s']:.0f}/s"
        f" (a send costs 5: at most {ceilings['sqlite_commits_per_s'] / 5:.0f} sends/s)"
    )
    RESULTS.mkdir(exist_ok=True)
    report = {
        "benchmark": "send",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "target": "1,000 sends/s with 4 workers on SQLite (issue 6)",
        "results": results,
        "ceilings": ceilings,
    }
    (RESULTS / "send.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS / 'send.json'}")


if __name__ == "__main__":
    main()

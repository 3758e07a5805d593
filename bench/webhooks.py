"""Webhook delivery: events/s and commit-to-2xx latency, with 1 and 4 worker processes.

For each engine (SQLite; PostgreSQL when reachable) and each worker count, a fresh
installation gets one endpoint pointing at a local HTTP receiver on loopback, then real
`postroom worker` processes (4 threads each) deliver:

* **latency**: events committed one per transaction at a steady rate (default 100/s) for
  a few seconds; latency = the receiver's 2xx minus the event's commit, p50/p95/p99;
* **throughput**: a burst of events committed at once; events/s = burst / time until
  the receiver has answered them all.

Target: p95 < 250 ms at 100 events/s. The workers run with worker.poll_interval_ms and
webhooks.dispatch_poll_ms at 20 ms. Prints the figures and writes
bench/results/webhooks.json.

    .venv/bin/python bench/webhooks.py [--rate 100] [--seconds 8] [--burst 2000]
        [--workers 1,4] [--engine sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
DEFAULT_PG = os.environ.get("POSTROOM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
POLL_MS = "20"


class Receiver:
    """Records when it answered 2xx to each webhook-id (first answer only)."""

    def __init__(self) -> None:
        self.answered: dict[str, float] = {}
        self.requests = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                now = time.time()
                with owner.lock:
                    owner.requests += 1
                    owner.answered.setdefault(self.headers["webhook-id"], now)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _env(data: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(data),
        POSTROOM_DATABASE_URL=url,
        POSTROOM_LOG_LEVEL="error",
        POSTROOM_WEBHOOKS_ALLOW_INSECURE="true",
        POSTROOM_WEBHOOKS_ALLOW_LOOPBACK="true",
        POSTROOM_WORKER_POLL_INTERVAL_MS=POLL_MS,
        POSTROOM_WEBHOOKS_DISPATCH_POLL_MS=POLL_MS,
    )
    return env


def _install(data: Path, url: str) -> Any:
    from postroom.app import build_app
    from postroom.config import load_settings
    from postroom.keyring import create_key_files
    from postroom.tenancy.bootstrap import initialize

    data.mkdir(parents=True, exist_ok=True)
    settings = load_settings(env=_env(data, url), cwd=data.parent)
    create_key_files(settings)
    app = build_app(settings, apply_migrations=True, create_database=True)
    initialize(app)
    return app


def _commit_events(app: Any, count: int, rate: float | None) -> dict[str, float]:
    """Commit ``count`` events, one transaction each, at ``rate``/s (None: at once)."""
    from postroom.store.events import insert_event

    committed: dict[str, float] = {}
    started = time.perf_counter()
    for n in range(count):
        if rate is not None:
            delay = started + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        with app.db.write() as tx:
            event = insert_event(
                tx,
                event_type="bench.tick",
                tenant_id=None,
                identity_id=None,
                data={"n": n},
                now=app.clock.now_ms(),
            )
        committed[event.id] = time.time()
    return committed


def _wait_all(receiver: Receiver, ids: set[str], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with receiver.lock:
            if ids <= receiver.answered.keys():
                return True
        time.sleep(0.01)
    return False


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(
    engine: str, url: str, workers: int, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    from postroom.webhooks.dispatch import DISPATCH_JOB, SCHEDULE_ID
    from postroom.webhooks.endpoints import PLATFORM, NewEndpoint, create

    data = work / f"data-{engine}-{workers}"
    app = _install(data, url)
    receiver = Receiver()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        create(app, PLATFORM, NewEndpoint(url=f"http://127.0.0.1:{receiver.port}/hook"))
        # A dispatcher window now; the schedule takes over from its first occasion.
        app.queue.enqueue(DISPATCH_JOB, f"{SCHEDULE_ID}@bench", {"occasion": app.clock.now_ms()})
        env = _env(data, url)
        for _ in range(workers):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "postroom", "worker", "--concurrency", "4"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        warm = _commit_events(app, 20, None)
        if not _wait_all(receiver, set(warm), 60):
            raise RuntimeError("the workers did not start delivering")

        steady = _commit_events(app, int(args.rate * args.seconds), args.rate)
        complete = _wait_all(receiver, set(steady), 120)
        with receiver.lock:
            latencies = [
                (receiver.answered[e] - t) * 1000
                for e, t in steady.items()
                if e in receiver.answered
            ]

        started = time.time()
        burst = _commit_events(app, args.burst, None)
        committed_s = time.time() - started
        burst_ok = _wait_all(receiver, set(burst), 300)
        with receiver.lock:
            last = max(receiver.answered.get(e, time.time()) for e in burst)
        elapsed = last - started
        return {
            "engine": engine,
            "worker_processes": workers,
            "threads_per_worker": 4,
            "rate_events_per_s": args.rate,
            "latency_events": len(steady),
            "latency_all_delivered": complete,
            "p50_ms": round(statistics.median(latencies), 1),
            "p95_ms": round(_percentile(latencies, 0.95), 1),
            "p99_ms": round(_percentile(latencies, 0.99), 1),
            "max_ms": round(max(latencies), 1),
            "burst_events": args.burst,
            "burst_all_delivered": burst_ok,
            "burst_commit_s": round(committed_s, 2),
            "delivered_per_s": round(args.burst / elapsed, 1),
            "requests": receiver.requests,
        }
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        receiver.close()
        app.close()


def _pg_database(admin_url: str) -> tuple[str, Any] | None:
    try:
        import psycopg

        conn = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
    except Exception as exc:  # noqa: BLE001 - any failure means: skip PostgreSQL
        print(f"PostgreSQL not reachable at {admin_url}: {exc}; skipped", file=sys.stderr)
        return None
    name = f"postroom_bench_{secrets.token_hex(4)}"
    conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + "/" + name, (conn, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="events/s of the latency run")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of the latency run")
    parser.add_argument("--burst", type=int, default=2000, help="events of the throughput run")
    parser.add_argument("--workers", default="1,4", help="worker process counts")
    parser.add_argument("--engine", default="sqlite,postgresql", help="engines to run")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="postroom-bench-webhooks-") as tmp:
        work = Path(tmp)
        for engine in args.engine.split(","):
            for workers in (int(w) for w in args.workers.split(",")):
                cleanup = None
                if engine == "sqlite":
                    url = f"sqlite:///{work / f'{engine}-{workers}.db'}"
                else:
                    made = _pg_database(DEFAULT_PG)
                    if made is None:
                        continue
                    url, cleanup = made
                try:
                    result = run(engine, url, workers, args, work)
                finally:
                    if cleanup is not None:
                        conn, name = cleanup
                        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                        conn.close()
                results.append(result)
                print(
                    f"{engine:10} {workers} worker(s): p50 {result['p50_ms']} ms, "
                    f"p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms at "
                    f"{args.rate:g} events/s; burst {result['delivered_per_s']} events/s "
                    f"delivered"
                )
    RESULTS.mkdir(exist_ok=True)
    out = {
        "benchmark": "webhooks",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "target": "p95 < 250 ms at 100 events/s",
        "results": results,
    }
    (RESULTS / "webhooks.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS / 'webhooks.json'}")


if __name__ == "__main__":
    main()

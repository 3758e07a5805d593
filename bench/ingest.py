"""Import throughput against notmuch and mu, in the same run.

Imports ../shared/corpora/lore-bluetooth-10k (a real 10,000-message Maildir) into a fresh
SQLite database and a fresh PostgreSQL database with `postroom import`, then indexes the
same Maildir with `notmuch new` and `mu index` (Debian packages notmuch, maildir-utils;
skipped with a message when missing). Prints messages/s, MB/s, peak RSS and database
bytes per message, with the ratios to the peers, and writes bench/results/ingest.json.

    .venv/bin/python bench/ingest.py [--limit N] [--corpus PATH.tar.xz]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from postroom.testing.corpora import corpus_path

RESULTS = Path(__file__).parent / "results"
DEFAULT_CORPUS = corpus_path("lore-bluetooth-10k.maildir.tar.xz")
DEFAULT_PG = os.environ.get("POSTROOM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _maildir(corpus: Path, work: Path, limit: int | None) -> tuple[Path, int, int]:
    """Extract the corpus (once per run) and keep the first ``limit`` messages."""
    target = work / "corpus"
    with tarfile.open(corpus) as tar:
        tar.extractall(target, filter="data")
    root = next(p.parent for p in target.rglob("cur") if p.is_dir())
    files = sorted((root / "cur").iterdir())
    for extra in files[limit:] if limit else []:
        extra.unlink()
    files = sorted((root / "cur").iterdir())
    return root, len(files), sum(f.stat().st_size for f in files)


def _timed(args: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise RuntimeError(f"{args[0]} failed: {err[-2000:]}")
    return elapsed, usage.ru_maxrss


def _postroom_env(data: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(POSTROOM_DATA_DIR=str(data), POSTROOM_DATABASE_URL=url, POSTROOM_LOG_LEVEL="error")
    return env


def bench_postroom(
    engine: str, url: str, maildir: Path, work: Path, count: int, size: int
) -> dict[str, Any]:
    data = work / f"data-{engine}"
    env = _postroom_env(data, url)
    postroom = [sys.executable, "-m", "postroom"]
    subprocess.run([*postroom, "init"], env=env, check=True, capture_output=True)
    subprocess.run(
        [*postroom, "identity", "create", "bench"], env=env, check=True, capture_output=True
    )
    seconds, rss = _timed(
        [*postroom, "import", str(maildir), "--to", "bench@localhost", "--json"], env
    )
    out: dict[str, Any] = {
        "tool": f"postroom ({engine})",
        "messages": count,
        "seconds": round(seconds, 2),
        "messages_per_s": round(count / seconds, 1),
        "mb_per_s": round(size / seconds / 1e6, 2),
        "peak_rss_mb": round(rss / 1024, 1),
    }
    if engine == "sqlite":
        db = data / "postroom.db"
        checkpoint = (
            f"import sqlean; c = sqlean.connect({str(db)!r});"
            " c.execute('PRAGMA wal_checkpoint(TRUNCATE)')"
        )
        subprocess.run([sys.executable, "-c", checkpoint], check=True)
        out["db_bytes_per_message"] = round(db.stat().st_size / count)
    else:
        import psycopg

        with psycopg.connect(url) as conn:
            total = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        out["db_bytes_per_message"] = round(total / count)
    blobs = sum(f.stat().st_size for f in (data / "blobs").rglob("*") if f.is_file())
    out["blob_bytes_per_message"] = round(blobs / count)
    return out


def bench_notmuch(maildir: Path, work: Path, count: int, size: int) -> dict[str, Any] | None:
    if shutil.which("notmuch") is None:
        print("notmuch not installed (Debian package notmuch); skipped", file=sys.stderr)
        return None
    copy = work / "notmuch-mail"
    shutil.copytree(maildir, copy, copy_function=os.link)
    config = work / "notmuch-config"
    config.write_text(
        f"[database]\npath={copy}\n[new]\ntags=unread;inbox;\n[user]\nname=b\nprimary_email=b@x\n"
    )
    env = {**os.environ, "NOTMUCH_CONFIG": str(config)}
    seconds, rss = _timed(["notmuch", "new", "--quiet"], env)
    db_size = sum(f.stat().st_size for f in (copy / ".notmuch").rglob("*") if f.is_file())
    return {
        "tool": "notmuch new",
        "messages": count,
        "seconds": round(seconds, 2),
        "messages_per_s": round(count / seconds, 1),
        "mb_per_s": round(size / seconds / 1e6, 2),
        "peak_rss_mb": round(rss / 1024, 1),
        "db_bytes_per_message": round(db_size / count),
    }


def bench_mu(maildir: Path, work: Path, count: int, size: int) -> dict[str, Any] | None:
    if shutil.which("mu") is None:
        print("mu not installed (Debian package maildir-utils); skipped", file=sys.stderr)
        return None
    home = work / "mu-home"
    subprocess.run(
        ["mu", "init", f"--muhome={home}", f"--maildir={maildir}"], check=True, capture_output=True
    )
    seconds, rss = _timed(["mu", "index", f"--muhome={home}", "--quiet"])
    db_size = sum(f.stat().st_size for f in home.rglob("*") if f.is_file())
    return {
        "tool": "mu index",
        "messages": count,
        "seconds": round(seconds, 2),
        "messages_per_s": round(count / seconds, 1),
        "mb_per_s": round(size / seconds / 1e6, 2),
        "peak_rss_mb": round(rss / 1024, 1),
        "db_bytes_per_message": round(db_size / count),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="Import only the first N messages.")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    if not args.corpus.exists():
        sys.exit(f"corpus {args.corpus} not found")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        maildir, count, size = _maildir(args.corpus, work, args.limit)
        print(f"{count} messages, {size / 1e6:.1f} MB", file=sys.stderr)
        results.append(
            bench_postroom(
                "sqlite",
                f"sqlite:///{work / 'data-sqlite' / 'postroom.db'}",
                maildir,
                work,
                count,
                size,
            )
        )
        try:
            import psycopg

            admin = psycopg.connect(args.pg, autocommit=True, connect_timeout=5)
        except Exception as exc:  # noqa: BLE001 - any failure means: no PostgreSQL half
            print(f"PostgreSQL not reachable ({exc}); skipped", file=sys.stderr)
        else:
            name = f"postroom_bench_{secrets.token_hex(4)}"
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                url = args.pg.rsplit("/", 1)[0] + "/" + name
                results.append(bench_postroom("postgresql", url, maildir, work, count, size))
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.close()
        for peer in (
            bench_notmuch(maildir, work, count, size),
            bench_mu(maildir, work, count, size),
        ):
            if peer:
                results.append(peer)

    peers = {
        r["tool"]: r["messages_per_s"] for r in results if not r["tool"].startswith("postroom")
    }
    print(f"{'tool':<22}{'msg/s':>10}{'MB/s':>8}{'peak RSS MB':>13}{'DB B/msg':>10}  ratios")
    for row in results:
        ratios = "  ".join(
            f"{row['messages_per_s'] / rate:.2f}x {tool}"
            for tool, rate in peers.items()
            if row["tool"].startswith("postroom")
        )
        print(
            f"{row['tool']:<22}{row['messages_per_s']:>10.1f}{row['mb_per_s']:>8.2f}"
            f"{row['peak_rss_mb']:>13.1f}{row['db_bytes_per_message']:>10}  {ratios}"
        )
    RESULTS.mkdir(exist_ok=True)
    report = {
        "benchmark": "ingest",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "results": results,
    }
    (RESULTS / "ingest.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS / 'ingest.json'}")


if __name__ == "__main__":
    main()

"""Search latency against notmuch, in the same run.

Imports ../shared/corpora/lore-bluetooth-10k (a real 10,000-message Maildir) into a fresh
SQLite database (and PostgreSQL with --pg) with the importer, then runs a fixed list of
queries in-process through the search service (page of 20 with snippets and the bounded
total): p50/p95 latency and hit count per query. On PostgreSQL the import is followed
by ``VACUUM ANALYZE``, as docs/search.md advises after a bulk import. In the same run
it indexes the same Maildir with `notmuch new` and times the equivalent notmuch queries
in-process through its Python bindings (Debian notmuch + python3-notmuch2, run under
/usr/bin/python3 in a subprocess that times its own loop: count + the first 20
messages, sorted newest first) and prints ours/notmuch per query. Writes bench/results/search.json.

    .venv/bin/python bench/search.py [--limit N] [--runs N] [--pg]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from postroom.testing.corpora import corpus_path

RESULTS = Path(__file__).parent / "results"
DEFAULT_CORPUS = corpus_path("lore-bluetooth-10k.maildir.tar.xz")
DEFAULT_PG = os.environ.get("POSTROOM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
PAGE = 20

# (name, postroom query, notmuch query); {sender}, {mid}, {tid}, the month {after} ..
# {before} ({last} its last day) and {typo} (the frequent sender's name, two letters
# swapped) are filled from the data.
QUERIES: list[tuple[str, str, str]] = [
    ("common word", "bluetooth", "bluetooth"),
    ("rare word", "coredump", "coredump"),
    ("phrase", '"signed off by"', '"signed off by"'),
    ("from: frequent sender", "from:{sender}", "from:{sender}"),
    ("subject: word", "subject:mesh", "subject:mesh"),
    ("date range", "after:{after} before:{before}", "date:{after}..{last}"),
    ("two words ANDed", "mesh provisioning", "mesh and provisioning"),
    ("has:attachment", "has:attachment", "tag:attachment"),
    ("prefix", "provision*", "provision*"),
    ("negation", "bluetooth -patch", "bluetooth and not patch"),
    ("thread", "thread:{tid}", "thread:{{id:{mid}}}"),
    ("fuzzy typo", "{typo}", "{typo}"),
]

NOTMUCH_SCRIPT = r"""
import json, statistics, sys, time
import notmuch2
path, runs, page = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
queries = json.loads(sys.stdin.read())
db = notmuch2.Database(path, mode=notmuch2.Database.MODE.READ_ONLY,
                       config=notmuch2.Database.CONFIG.EMPTY)
out = []
for name, q in queries:
    def once():
        n = db.count_messages(q)
        ids = []
        for m in db.messages(q, sort=notmuch2.Database.SORT.NEWEST_FIRST):
            ids.append((m.messageid, m.date))
            if len(ids) >= page:
                break
        return n
    for _ in range(3):
        once()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        hits = once()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    out.append({"name": name, "query": q, "hits": hits,
                "p50_ms": statistics.median(times),
                "p95_ms": times[min(len(times) - 1, int(len(times) * 0.95))]})
print(json.dumps(out))
"""


def _maildir(corpus: Path, work: Path, limit: int | None) -> Path:
    subprocess.run(["tar", "-xJf", str(corpus), "-C", str(work)], check=True)
    root = next(p.parent for p in work.rglob("cur") if p.is_dir())
    for extra in sorted((root / "cur").iterdir())[limit:] if limit else []:
        extra.unlink()
    return root


def _postroom_app(work: Path, url: str | None, engine: str) -> Any:
    from postroom.app import build_app
    from postroom.config import load_settings
    from postroom.keyring import create_key_files
    from postroom.store import apply_migrations
    from postroom.tenancy.bootstrap import initialize
    from postroom.tenancy.service import create_identity

    data = work / f"data-{engine}"
    data.mkdir()
    database_url = url or f"sqlite:///{data / 'postroom.db'}"
    settings = load_settings(
        env={}, overrides={"data_dir": str(data), "database_url": database_url}, cwd=work
    )
    create_key_files(settings)
    apply_migrations(database_url, now_ms=int(time.time() * 1000))
    app = build_app(settings, apply_migrations=True)
    initialize(app)
    create_identity(app, "bench")
    return app


def _fill(app: Any) -> dict[str, str]:
    """The frequent sender, the biggest thread (its first message's Message-ID), the
    middle month of the corpus and a typo of the sender's name."""
    from datetime import UTC, datetime, timedelta

    with app.db.read() as tx:
        top = tx.fetchone(
            "SELECT from_address, max(from_name) AS name FROM messages GROUP BY from_address"
            " ORDER BY count(*) DESC LIMIT 1"
        )
        sender, name = top["from_address"], top["name"]
        middle = tx.fetchval(
            "SELECT received_at FROM messages ORDER BY received_at"
            " LIMIT 1 OFFSET (SELECT count(*) / 2 FROM messages)"
        )
        thread = tx.fetchval(
            "SELECT thread_id FROM messages GROUP BY thread_id ORDER BY count(*) DESC LIMIT 1"
        )
        mid = tx.fetchval(
            "SELECT rfc_message_id FROM messages WHERE thread_id = %s ORDER BY received_at LIMIT 1",
            (thread,),
        )
    day = datetime.fromtimestamp(int(middle) / 1000, tz=UTC).replace(day=1)
    following = (day + timedelta(days=32)).replace(day=1)
    word = max(str(name or sender).split(), key=len).lower()
    typo = word[0] + word[2] + word[1] + word[3:] if len(word) > 3 else word
    return {
        "sender": str(sender),
        "tid": str(thread),
        "mid": str(mid),
        "after": f"{day:%Y-%m-%d}",
        "before": f"{following:%Y-%m-%d}",
        "last": f"{following - timedelta(days=1):%Y-%m-%d}",
        "typo": typo,
    }


def bench_postroom(app: Any, fill: dict[str, str], runs: int) -> list[dict[str, Any]]:
    from postroom.mailbox.search import search
    from postroom.store.search_index import SearchScope

    with app.db.read() as tx:
        identity = tx.fetchval("SELECT id FROM identities WHERE username = 'bench'")
    scope = SearchScope(identity_id=str(identity))
    out = []
    for name, query, _ in QUERIES:
        q = query.format(**fill)
        times: list[float] = []
        result = None
        for i in range(runs + 3):
            started = time.perf_counter()
            with app.db.read() as tx:
                result = search(tx, q, scope, offset=0, limit=PAGE, now_ms=app.clock.now_ms())
            if i >= 3:
                times.append((time.perf_counter() - started) * 1000)
        assert result is not None
        times.sort()
        out.append(
            {
                "name": name,
                "query": q,
                "hits": result.total if result.total_exact else f"{result.total}+",
                "fuzzy": result.fuzzy,
                "p50_ms": statistics.median(times),
                "p95_ms": times[min(len(times) - 1, int(len(times) * 0.95))],
            }
        )
    return out


def bench_notmuch(maildir: Path, work: Path, fill: dict[str, str], runs: int) -> Any:
    if shutil.which("notmuch") is None:
        print("notmuch: skipped (Debian packages notmuch and python3-notmuch2 are missing)")
        return None
    config = work / "notmuch-config"
    config.write_text(f"[database]\npath={maildir}\n[new]\ntags=\n[search]\nexclude_tags=\n")
    env = {**os.environ, "NOTMUCH_CONFIG": str(config)}
    started = time.perf_counter()
    subprocess.run(["notmuch", "new", "--quiet"], env=env, check=True)
    print(f"notmuch new: {time.perf_counter() - started:.1f} s")
    queries = [(name, nm.format(**fill)) for name, _, nm in QUERIES]
    done = subprocess.run(
        ["/usr/bin/python3", "-c", NOTMUCH_SCRIPT, str(maildir), str(runs), str(PAGE)],
        input=json.dumps(queries),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--pg", action="store_true", help="Also PostgreSQL (POSTROOM_TEST_PG).")
    args = parser.parse_args()
    from postroom.inbound.importer import run_import

    work = Path(tempfile.mkdtemp(prefix="postroom-bench-search-"))
    report: dict[str, Any] = {"machine": platform.platform(), "runs": args.runs, "page": PAGE}
    name = f"postroom_bench_search_{os.getpid()}"
    if args.pg:
        import psycopg
    try:
        maildir = _maildir(args.corpus, work, args.limit)
        engines: list[tuple[str, str | None]] = [("sqlite", None)]
        if args.pg:
            with psycopg.connect(DEFAULT_PG, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            engines.append(("postgresql", DEFAULT_PG.rsplit("/", 1)[0] + "/" + name))
        fill: dict[str, str] = {}
        for engine, url in engines:
            app = _postroom_app(work, url, engine)
            started = time.perf_counter()
            summary = run_import(app, maildir, "bench@localhost")
            print(f"import ({engine}): {summary.imported} messages, "
                  f"{time.perf_counter() - started:.1f} s")  # fmt: skip
            if engine == "postgresql":
                # What docs/search.md tells an operator after a bulk import: autovacuum
                # gets there on its own, later; until then the planner has no statistics
                # and the visibility map is empty (no index-only scans).
                with psycopg.connect(str(url), autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE")
            # Thread IDs are each database's own; the rest is the same data.
            fill = _fill(app)
            report[engine] = bench_postroom(app, fill, args.runs)
            app.close()
        report["fill"] = fill
        report["notmuch"] = bench_notmuch(maildir, work, fill, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.pg:
            with psycopg.connect(DEFAULT_PG, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    theirs = {r["name"]: r for r in report["notmuch"] or []}
    for engine, _ in engines:
        print(f"\n{engine}: query, hits, p50 ms, p95 ms | notmuch hits, p50, p95 | p50 ratio")
        for row in report[engine]:
            nm = theirs.get(row["name"])
            ratio = row["p50_ms"] / nm["p50_ms"] if nm and nm["p50_ms"] else None
            row["ratio_p50"] = ratio
            line = (
                f"  {row['name']:<22} {row['hits']!s:>6} {row['p50_ms']:8.2f} {row['p95_ms']:8.2f}"
            )
            if nm:
                line += (
                    f" | {nm['hits']:>6} {nm['p50_ms']:8.2f} {nm['p95_ms']:8.2f} | {ratio:6.2f}x"
                )
            print(line + (" (fuzzy)" if row["fuzzy"] else ""))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "search.json").write_text(json.dumps(report, indent=2))
    print(f"\nwrote {RESULTS / 'search.json'}")


if __name__ == "__main__":
    main()

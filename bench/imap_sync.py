"""IMAP initial sync throughput against mbsync, in the same run (issue 8 §7).

A private Dovecot (``postroom.testing.dovecot``) serves the first N messages of
../shared/corpora/lore-bluetooth-10k as its user's INBOX. The corpus is loaded fast: the
files are copied straight into the user's Maildir ``cur/`` (owned by the mail user) and
one ``SELECT`` lets Dovecot index them and assign UIDs; the message count is checked.
Then, against that same folder:

* **mbsync** (Debian isync, ``/usr/bin/mbsync``) pulls INBOX into an empty Maildir with a
  throwaway config (plaintext LOGIN to loopback, its defaults otherwise, fsync included).
  It runs before and after Postroom, each time into a fresh Maildir; the faster of the
  two is the reference (so the target is never judged against a cold server).
* **Postroom**, per engine: a fresh database, an inbox and an IMAP account mirroring INBOX
  (``tls_mode none``, ``allow_plaintext``, loopback), then ``sync_account`` in-process —
  fetching, parsing, threading, the search index, events. messages/s = stored / wall.

Target (issue 8): at least mbsync's rate, parsing and indexing included. Then, unless
``--profile-messages 0``, a smaller run (SQLite, or ``--profile-engine``) under
pyinstrument splits Postroom's time into fetch (the IMAP client), parse (``derive``) and
store (``_store_batch``: blobs, SQL, index), the rest being set-up, waiting and the
flags/expunge passes; the profile's text is written beside the report.

Prints a table and writes bench/results/imap_sync.json (and imap_sync_profile.txt).

    .venv/bin/python bench/imap_sync.py [--messages 10000] [--engine sqlite|postgresql|both]
        [--profile-messages 1000] [--profile-engine sqlite]
        [--pg postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import imaplib
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from postroom.testing.corpora import corpus_path
from postroom.testing.dovecot import PASSWORD, USER, Dovecot

RESULTS = Path(__file__).parent / "results"
DEFAULT_CORPUS = corpus_path("lore-bluetooth-10k.maildir.tar.xz")
DEFAULT_PG = os.environ.get("POSTROOM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
MBSYNC = shutil.which("mbsync") or "/usr/bin/mbsync"

# pyinstrument frames whose time is one phase; the first match going down a stack wins.
PHASES = {
    "fetch_messages": "fetch",
    "fetch_headers": "fetch",
    "derive": "parse",
    "_store_batch": "store",
}


def extract(corpus: Path, work: Path) -> list[Path]:
    """The corpus's messages, sorted by file name (their delivery order)."""
    if not corpus.is_file():
        raise SystemExit(f"corpus not found: {corpus}")
    subprocess.run(["tar", "-xJf", str(corpus), "-C", str(work)], check=True)
    root = next(p.parent for p in work.rglob("cur") if p.is_dir())
    return sorted(p for p in (root / "cur").iterdir() if p.is_file())


def load_dovecot(server: Dovecot, files: list[Path]) -> float:
    """Copy ``files`` into the user's Maildir/cur and have Dovecot index them; seconds."""
    maildir = server.maildir(USER)
    owner = server.home.stat()
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True, exist_ok=True)
    for path in (maildir, *(maildir / s for s in ("cur", "new", "tmp"))):
        os.chown(path, owner.st_uid, owner.st_gid)
    for path in files:
        target = maildir / "cur" / path.name
        shutil.copy2(path, target)
        os.chown(target, owner.st_uid, owner.st_gid)
    started = time.perf_counter()
    conn = imaplib.IMAP4(server.host, server.port, timeout=600)
    try:
        conn.login(USER, PASSWORD)
        typ, data = conn.select("INBOX", readonly=True)
        exists = int(data[0] or b"0") if typ == "OK" else -1
        typ, uids = conn.uid("SEARCH", "ALL")
        count = len((uids[0] or b"").split()) if typ == "OK" else -1
    finally:
        conn.logout()
    if exists != len(files) or count != len(files):
        raise SystemExit(f"Dovecot serves {exists} messages ({count} UIDs), expected {len(files)}")
    return time.perf_counter() - started


def run_mbsync(server: Dovecot, work: Path, label: str, expected: int) -> dict[str, Any]:
    """One ``mbsync -a`` pulling INBOX into an empty Maildir; its rate."""
    base = work / f"mbsync-{label}"
    store = base / "mail"
    store.mkdir(parents=True)
    config = base / "mbsyncrc"
    config.write_text(
        "IMAPAccount far\n"
        f"Host {server.host}\nPort {server.port}\nUser {USER}\nPass {PASSWORD}\n"
        "SSLType None\nAuthMechs LOGIN\n\n"
        "IMAPStore far\nAccount far\n\n"
        f"MaildirStore near\nPath {store}/\nInbox {store}/INBOX\n\n"
        "Channel bench\nFar :far:INBOX\nNear :near:INBOX\n"
        f"Sync Pull\nCreate Near\nSyncState {base}/state/\n"
    )
    (base / "state").mkdir()
    started = time.perf_counter()
    done = subprocess.run(
        [MBSYNC, "-q", "-c", str(config), "-a"], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mbsync failed ({done.returncode}): {done.stderr[-2000:]}")
    pulled = sum(1 for sub in ("cur", "new") for _ in (store / "INBOX" / sub).iterdir())
    if pulled != expected:
        raise SystemExit(f"mbsync pulled {pulled} messages, expected {expected}")
    shutil.rmtree(base, ignore_errors=True)
    return {
        "tool": "mbsync",
        "run": label,
        "messages": pulled,
        "wall_s": wall,
        "per_s": pulled / wall,
    }


@contextmanager
def database(engine: str, work: Path, admin_url: str) -> Iterator[str]:
    """A fresh database URL for ``engine``, dropped afterwards (PostgreSQL)."""
    if engine == "sqlite":
        data = work / f"sqlite-{secrets.token_hex(3)}"
        data.mkdir()
        yield f"sqlite:///{data / 'postroom.db'}"
        return
    import psycopg

    name = f"postroom_bench_imap_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postroom_app(work: Path, url: str) -> Any:
    from postroom.app import build_app
    from postroom.config import load_settings
    from postroom.keyring import create_key_files
    from postroom.store import apply_migrations
    from postroom.tenancy.bootstrap import initialize

    data = work / f"data-{secrets.token_hex(3)}"
    data.mkdir()
    settings = load_settings(
        env={}, overrides={"data_dir": str(data), "database_url": url}, cwd=work
    )
    create_key_files(settings)
    apply_migrations(url, now_ms=int(time.time() * 1000))
    app = build_app(settings, apply_migrations=True)
    initialize(app)
    return app


def run_postroom(
    server: Dovecot, work: Path, engine: str, url: str, expected: int, profile: bool = False
) -> tuple[dict[str, Any], Any]:
    """One initial sync of INBOX into a fresh inbox; its rate (and the profiler session)."""
    from postroom.sync import accounts
    from postroom.sync.engine import sync_account
    from postroom.tenancy.service import create_identity

    app = postroom_app(work, url)
    try:
        identity = create_identity(app, "mirror")
        account = accounts.create_account(
            app,
            identity.identity.id,
            accounts.NewAccount(
                host=server.host,
                port=server.port,
                tls_mode="none",
                allow_plaintext=True,
                username=USER,
                password=PASSWORD,
                folders=("INBOX",),
            ),
        )
        session = None
        started = time.perf_counter()
        if profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.001)
            with profiler:
                result = sync_account(app, account.id)
            session = profiler
        else:
            result = sync_account(app, account.id)
        wall = time.perf_counter() - started
        with app.db.read() as tx:
            rows = int(
                tx.fetchval(
                    "SELECT count(*) FROM messages WHERE identity_id = %s", (identity.identity.id,)
                )
            )
    finally:
        app.close()
    if result.status != "ok" or result.stored != expected or rows != expected:
        raise SystemExit(
            f"postroom ({engine}): status {result.status}, stored {result.stored}, "
            f"{rows} rows; expected {expected}"
        )
    return {
        "tool": "postroom",
        "engine": engine,
        "messages": result.stored,
        "wall_s": wall,
        "per_s": result.stored / wall,
        "batch_size": app.settings.imap_batch_size,
    }, session


def split(profiler: Any) -> dict[str, float]:
    """Seconds per phase from a pyinstrument session (the rest: set-up, flags, expunges)."""
    totals = {"fetch": 0.0, "parse": 0.0, "store": 0.0}
    root = profiler.last_session.root_frame()

    def walk(frame: Any) -> None:
        phase = PHASES.get(frame.function)
        if phase is not None:
            totals[phase] += frame.time
            return
        for child in frame.children:
            walk(child)

    walk(root)
    totals["total"] = root.time
    totals["other"] = max(0.0, root.time - totals["fetch"] - totals["parse"] - totals["store"])
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000, help="messages served (≤ 10000)")
    parser.add_argument("--engine", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--profile-messages", type=int, default=1000, help="0: no profile")
    parser.add_argument("--profile-engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL admin URL")
    args = parser.parse_args()
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if not os.path.exists(MBSYNC):
        raise SystemExit("mbsync is not installed (Debian package isync)")
    engines = ["sqlite", "postgresql"] if args.engine == "both" else [args.engine]
    work = Path(tempfile.mkdtemp(prefix="postroom-bench-imap-"))
    report: dict[str, Any] = {
        "benchmark": "imap_sync",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "target": "initial sync at least mbsync's rate, parsing and indexing included (issue 8)",
    }
    runs: list[dict[str, Any]] = []
    profile_text = ""
    try:
        corpus = extract(args.corpus, work)
        files = corpus[: args.messages]
        if len(files) < args.messages:
            print(f"the corpus holds {len(files)} messages; serving those", file=sys.stderr)
        with Dovecot() as server:
            report["dovecot_index_s"] = load_dovecot(server, files)
            report["messages"] = len(files)
            report["corpus_bytes"] = sum(p.stat().st_size for p in files)
            print(f"Dovecot indexed {len(files)} messages in {report['dovecot_index_s']:.1f} s")
            runs.append(run_mbsync(server, work, "before", len(files)))
            print(runs[-1], file=sys.stderr)
            for engine in engines:
                with database(engine, work, args.pg) as url:
                    runs.append(run_postroom(server, work, engine, url, len(files))[0])
                print(runs[-1], file=sys.stderr)
            runs.append(run_mbsync(server, work, "after", len(files)))
            print(runs[-1], file=sys.stderr)
        if args.profile_messages > 0:
            small = corpus[: args.profile_messages]
            with Dovecot() as server:
                load_dovecot(server, small)
                with database(args.profile_engine, work, args.pg) as url:
                    _row, profiler = run_postroom(
                        server, work, args.profile_engine, url, len(small), True
                    )
            phases = split(profiler)
            report["profile"] = {
                "engine": args.profile_engine,
                "messages": len(small),
                "seconds": phases,
            }
            profile_text = profiler.output_text(unicode=False, color=False, show_all=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    reference = max(r["per_s"] for r in runs if r["tool"] == "mbsync")
    for row in runs:
        row["ratio_to_mbsync"] = row["per_s"] / reference
    report["runs"] = runs
    report["mbsync_reference_per_s"] = reference
    print(f"\n{report['messages']} messages from Dovecot INBOX (reference: best mbsync run)")
    print(f"{'tool':<10}{'engine/run':<12}{'messages':>10}{'wall s':>10}{'msg/s':>10}{'ratio':>8}")
    for row in runs:
        print(
            f"{row['tool']:<10}{row.get('engine', row.get('run')):<12}{row['messages']:>10}"
            f"{row['wall_s']:>10.1f}{row['per_s']:>10.0f}{row['ratio_to_mbsync']:>7.2f}x"
        )
    if "profile" in report:
        seconds = report["profile"]["seconds"]
        total = seconds["total"] or 1.0
        print(
            f"\nPostroom profile ({report['profile']['engine']},"
            f" {report['profile']['messages']} messages, pyinstrument):"
        )
        for phase in ("fetch", "parse", "store", "other"):
            print(f"  {phase:<6}{seconds[phase]:>8.2f} s {100 * seconds[phase] / total:>5.0f}%")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "imap_sync.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS / 'imap_sync.json'}")
    if profile_text:
        (RESULTS / "imap_sync_profile.txt").write_text(profile_text)
        print(f"wrote {RESULTS / 'imap_sync_profile.txt'}")


if __name__ == "__main__":
    main()

"""Importing existing mail: a Maildir, an mbox file, one .eml file or a folder of them.

Every message goes through the same pipeline as SMTP mail (``inbound.ingest``): the raw
bytes are written to the blob store exactly as they are in the file, parsing runs in a
process pool (both cores), and batches of messages are stored in one transaction each.

Idempotent and resumable: a message whose raw SHA-256 the inbox already holds is a
duplicate and is skipped, so importing the same source again adds nothing, and an import
stopped with Ctrl-C continues where it stopped when run again (committed batches stay).

Maildir flags become state: ``S`` read, ``F`` label ``starred``, ``R`` ``answered``,
``D`` ``draft``, ``T`` ``trashed``, ``P`` ``passed``; messages in ``new/`` are unread.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from postroom.errors import InvalidInput, NotFound
from postroom.ids import new_id
from postroom.inbound.directory import Refusal, route_recipient
from postroom.inbound.ingest import Arrival, Derived, derive, store_arrival
from postroom.store import maintenance
from postroom.store import messages as message_rows
from postroom.store.blobs import message_raw_key

if TYPE_CHECKING:
    from postroom.app import App

BATCH = 200
MAILDIR_FLAG_LABELS = {"F": "starred", "R": "answered", "D": "draft", "T": "trashed", "P": "passed"}
_MAILDIR_TIME = re.compile(r"^(\d{9,11})\.")


@dataclass(frozen=True)
class SourceItem:
    """One message of the source, before its bytes are read."""

    location: str  # path, or "mbox-file#n"
    read: bool
    labels: tuple[str, ...]
    received_at: int | None  # delivery time the source knows (Maildir file name, mtime)
    load: Callable[[], bytes]


@dataclass
class ImportSummary:
    source: str
    kind: str
    total: int = 0
    imported: int = 0
    duplicates: int = 0
    degraded: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)  # (location, reason)
    interrupted: bool = False

    def as_json(self) -> dict[str, object]:
        reasons: dict[str, int] = {}
        for _location, reason in self.refused:
            reasons[reason] = reasons.get(reason, 0) + 1
        return {
            "source": self.source,
            "kind": self.kind,
            "total": self.total,
            "imported": self.imported,
            "duplicates": self.duplicates,
            "degraded": self.degraded,
            "refused": len(self.refused),
            "refused_reasons": reasons,
            "refused_examples": [
                {"location": loc, "reason": why} for loc, why in self.refused[:20]
            ],
            "interrupted": self.interrupted,
        }


# --- sources ---------------------------------------------------------------------------


def _read_file(path: Path) -> Callable[[], bytes]:
    return path.read_bytes


def _maildir_items(root: Path) -> Iterator[SourceItem]:
    for sub in ("cur", "new"):
        folder = root / sub
        if not folder.is_dir():
            continue
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if not entry.is_file() or entry.name.startswith("."):
                continue
            name = entry.name
            flags = name.rpartition(":2,")[2] if ":2," in name else ""
            labels = tuple(MAILDIR_FLAG_LABELS[f] for f in flags if f in MAILDIR_FLAG_LABELS)
            when = _MAILDIR_TIME.match(name)
            received = int(when.group(1)) * 1000 if when else int(entry.stat().st_mtime * 1000)
            yield SourceItem(
                entry.path,
                sub == "cur" and "S" in flags,
                labels,
                received,
                _read_file(Path(entry.path)),
            )


def _eml_items(paths: list[Path]) -> Iterator[SourceItem]:
    for path in paths:
        yield SourceItem(str(path), False, (), int(path.stat().st_mtime * 1000), _read_file(path))


def _mbox_offsets(path: Path) -> list[tuple[int, int]]:
    """(start, end) byte ranges of the messages of an mbox, From_ lines excluded.

    A message starts after a line beginning with ``From `` (as Python's ``mailbox``
    reads it); the blank line before the next separator belongs to the format, not the
    message. One pass, nothing kept open.
    """
    ranges: list[tuple[int, int]] = []
    start: int | None = None
    offset = 0
    previous_blank = False
    with path.open("rb") as fh:
        for line in fh:
            if line.startswith(b"From "):
                if start is not None:
                    end = offset - (1 if previous_blank else 0)
                    ranges.append((start, max(start, end)))
                start = offset + len(line)
            previous_blank = line in (b"\n", b"\r\n")
            offset += len(line)
    if start is not None:
        ranges.append((start, offset))
    return ranges


def _read_range(path: Path, start: int, end: int) -> Callable[[], bytes]:
    def load() -> bytes:
        with path.open("rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    return load


def _mbox_items(path: Path) -> Iterator[SourceItem]:
    for n, (start, end) in enumerate(_mbox_offsets(path), start=1):
        yield SourceItem(f"{path}#{n}", False, (), None, _read_range(path, start, end))


def open_source(path: Path) -> tuple[str, list[SourceItem]]:
    """(kind, items) for a path; InvalidInput when it is none of the known shapes."""
    if not path.exists():
        raise NotFound(f"{path} does not exist", code="source_not_found")
    if path.is_dir():
        if (path / "cur").is_dir() or (path / "new").is_dir():
            return "maildir", list(_maildir_items(path))
        emls = sorted(p for p in path.rglob("*.eml") if p.is_file())
        if not emls:
            raise InvalidInput(
                f"{path} is neither a Maildir (cur/, new/) nor a folder of .eml files",
                code="unknown_source",
            )
        return "eml-folder", list(_eml_items(emls))
    with path.open("rb") as fh:
        head = fh.read(5)
    if head == b"From ":
        return "mbox", list(_mbox_items(path))
    return "eml", list(_eml_items([path]))


# --- the import --------------------------------------------------------------------------


def _parser_pool(workers: int | None) -> ProcessPoolExecutor:
    """Parser processes. Not forked from this (threaded) process: forkserver where the
    platform has it, else spawn."""
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    return ProcessPoolExecutor(
        max_workers=workers or os.cpu_count() or 1,
        mp_context=context,
        initializer=_ignore_sigint,
    )


def _ignore_sigint() -> None:
    # Ctrl-C in a terminal reaches the whole process group; the parent decides when to
    # stop, a parser process dying mid-batch would only break the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Interrupt:
    """A first SIGINT asks the import to stop after the batch being stored; a second
    one stops it at once (the open transaction rolls back)."""

    def __init__(self) -> None:
        self.requested = False

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextmanager
def _deferred_interrupt() -> Iterator[_Interrupt]:
    state = _Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: object) -> None:
        if state.requested:
            raise KeyboardInterrupt
        state.requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


def _resolve_inbox(app: App, address: str) -> tuple[str, str]:
    with app.db.read() as tx:
        decision = route_recipient(tx, app.keys(), address)
    if isinstance(decision, Refusal):
        raise NotFound(f"no inbox receives mail for {address}", code="identity_not_found")
    return decision.identity_id, decision.tenant_id


def run_import(
    app: App,
    path: Path,
    to_address: str,
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    executor: Executor | None = None,
) -> ImportSummary:
    """Import every message of ``path`` into the inbox receiving ``to_address``."""
    identity_id, tenant_id = _resolve_inbox(app, to_address)
    kind, items = open_source(path)
    summary = ImportSummary(str(path), kind, total=len(items))
    if on_start:
        on_start(len(items))
    with app.db.read() as tx:
        known = set(
            r["raw_sha256"]
            for r in tx.fetchall(
                "SELECT raw_sha256 FROM messages WHERE identity_id = %s", (identity_id,)
            )
        )
    own_pool = executor is None
    pool = executor or _parser_pool(workers)
    try:
        with _deferred_interrupt() as interrupt:
            _import_batches(
                app, items, pool, known, identity_id, tenant_id, summary, progress, interrupt
            )
    except KeyboardInterrupt:
        # Committed batches stay; running the import again skips them as duplicates.
        summary.interrupted = True
    finally:
        if own_pool:
            pool.shutdown(wait=False, cancel_futures=True)
    if summary.imported and not summary.interrupted:
        with app.db.write() as tx:
            maintenance.analyze_after_bulk_load(tx)
    return summary


def _import_batches(
    app: App,
    items: list[SourceItem],
    pool: Executor,
    known: set[str],
    identity_id: str,
    tenant_id: str,
    summary: ImportSummary,
    progress: Callable[[int], None] | None,
    interrupt: _Interrupt,
) -> None:
    max_size = app.settings.smtp_max_message_bytes
    # Parsing (the pool) and storing (this process) overlap: while batch k is stored,
    # the pool already parses batch k + 1.
    pending: tuple[list[tuple[SourceItem, bytes, str]], Iterator[Derived], int] | None = None
    for start in range(0, len(items), BATCH):
        interrupt.check()
        batch: list[tuple[SourceItem, bytes, str]] = []
        for item in items[start : start + BATCH]:
            try:
                raw = item.load()
            except OSError as exc:
                summary.refused.append((item.location, f"unreadable: {exc.strerror}"))
                continue
            if not raw.strip():
                summary.refused.append((item.location, "empty"))
                continue
            if len(raw) > max_size:
                summary.refused.append((item.location, "larger than smtp.max_message_bytes"))
                continue
            digest = hashlib.sha256(raw).hexdigest()
            if digest in known:
                summary.duplicates += 1
                continue
            known.add(digest)
            batch.append((item, raw, digest))
        parsing = pool.map(derive, [raw for _item, raw, _digest in batch], chunksize=8)
        if pending is not None:
            _finish(app, pending, identity_id, tenant_id, summary, progress)
            interrupt.check()
        pending = (batch, parsing, min(BATCH, len(items) - start))
    if pending is not None:
        _finish(app, pending, identity_id, tenant_id, summary, progress)


def _finish(
    app: App,
    pending: tuple[list[tuple[SourceItem, bytes, str]], Iterator[Derived], int],
    identity_id: str,
    tenant_id: str,
    summary: ImportSummary,
    progress: Callable[[int], None] | None,
) -> None:
    batch, parsing, seen = pending
    _store_batch(app, batch, list(parsing), identity_id, tenant_id, summary)
    if progress:
        progress(seen)


def _store_batch(
    app: App,
    batch: list[tuple[SourceItem, bytes, str]],
    derived: list[Derived],
    identity_id: str,
    tenant_id: str,
    summary: ImportSummary,
) -> None:
    arrivals: list[tuple[Arrival, Derived]] = []
    now = app.clock.now_ms()
    for (item, raw, digest), result in zip(batch, derived, strict=True):
        message_id = new_id("msg")
        key = message_raw_key(tenant_id, identity_id, message_id)
        app.blobs.put_unsynced(key, raw)
        received = item.received_at or result.parsed.sent_at or now
        arrivals.append(
            (
                Arrival(
                    message_id=message_id,
                    tenant_id=tenant_id,
                    identity_id=identity_id,
                    raw_blob_key=key,
                    raw_sha256=digest,
                    raw_size=len(raw),
                    source="import",
                    envelope=None,
                    delivered_to=None,
                    labels=item.labels,
                    is_primary_recipient=True,
                    received_at=received,
                    read=item.read,
                ),
                result,
            )
        )
    # One flush for the whole batch before it is committed.
    app.blobs.sync(arrival.raw_blob_key for arrival, _result in arrivals)
    unused: list[str] = []
    imported = degraded = 0
    with app.db.write() as tx:
        for arrival, result in arrivals:
            # Another import of the same source may have stored it meanwhile.
            if message_rows.find_by_raw_sha256(tx, identity_id, arrival.raw_sha256):
                unused.append(arrival.raw_blob_key)
                continue
            store_arrival(tx, arrival, result, now)
            imported += 1
            if "parse_degraded" in result.parsed.flags:
                degraded += 1
    # Counted once committed: a transaction rolled back by an interrupt counts nothing.
    summary.imported += imported
    summary.degraded += degraded
    summary.duplicates += len(unused)
    for key in unused:
        app.blobs.delete(key)

"""Synchronising an IMAP account into its inbox (seed 003 IMAP synchronisation).

One run (:func:`sync_account`, the ``imap.sync`` job):

1. connect and log in; list the folders and bind the ones mirrored (every selectable
   folder by default, Trash and Junk only when asked); a folder gone from the server is
   marked removed;
2. per folder, ``SELECT`` read-only (``EXAMINE``: nothing here can change the server);
   a new UIDVALIDITY starts the folder over, and messages of the old generation that come
   back (same Message-ID and raw SHA-256) are re-bound instead of stored twice;
3. new UIDs above the checkpoint are fetched in batches with ``BODY.PEEK[]`` (never
   sets \\Seen) and stored through the inbound pipeline (parsing, threading, index,
   ``message.received`` with ``source: imap``); each batch commits with its occurrence rows
   and the checkpoint, so a crash resumes after the last committed batch; a message over
   ``imap.max_message_bytes`` is stored from its headers only
   (``content_availability: exceeded_size_limit``);
4. flags and expunges: with QRESYNC, ``CHANGEDSINCE`` + ``VANISHED``; with CONDSTORE,
   ``CHANGEDSINCE`` and a UID comparison; otherwise a bounded reconciliation window
   (never-observed first, then oldest observation) and a UID comparison. The flag
   snapshot is an observation (one writer: this pass); \\Seen is mirrored into the
   message's read state. A message expunged on the server becomes a tombstone
   (``remote_expunge_observed_at``) or, when the account says ``erase``, is removed here;
   \\Deleted is a flag, not a deletion.

The account's status (``ok``, ``auth_failed``, ``tls_failed``, ``unreachable``,
``throttled``, ``error``) is written after each run, with an
``imap_account.status_changed`` event when it changes; failures back off exponentially up
to the account's interval × 8.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from postroom.events.catalogue import ImapAccountStatusChanged
from postroom.events.emit import emit
from postroom.ids import new_id
from postroom.inbound.ingest import Arrival, Derived, derive, store_arrival
from postroom.jobs.handlers import JobContext
from postroom.store import imap as rows
from postroom.store import maintenance, search_index
from postroom.store import threads as thread_rows
from postroom.store.blobs import message_raw_key
from postroom.store.db import Tx
from postroom.sync.accounts import connect, login, secret_of
from postroom.sync.imap_client import (
    FetchedMessage,
    FolderInfo,
    ImapAuthError,
    ImapClient,
    ImapError,
    ImapThrottled,
    ImapTlsError,
    ImapUnreachable,
)

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.sync")

SYNC_JOB = "imap.sync"
DISPATCH_JOB = "imap.dispatch"
DISPATCH_SCHEDULE = "imap.dispatch"
DISPATCH_INTERVAL_MS = 10_000
HEADER_ONLY_NOTE = b"X-Postroom-Content: exceeded_size_limit\r\n"


@dataclass
class FolderResult:
    path: str
    stored: int = 0
    rebound: int = 0
    flags_changed: int = 0
    expunged: int = 0
    reset: bool = False


@dataclass
class SyncResult:
    account_id: str
    status: str
    folders: list[FolderResult] = field(default_factory=list)

    @property
    def stored(self) -> int:
        return sum(f.stored for f in self.folders)


def _chunks(items: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def mirrored(account: rows.Account, remote: Sequence[FolderInfo]) -> list[FolderInfo]:
    """The folders this account mirrors, in the server's order."""
    named = account.folders
    chosen = []
    for folder in remote:
        if not folder.selectable:
            continue
        if named is not None:
            if folder.name in named:
                chosen.append(folder)
            continue
        if folder.special_use == "\\Trash" and not account.include_trash:
            continue
        if folder.special_use == "\\Junk" and not account.include_junk:
            continue
        chosen.append(folder)
    return chosen


def _raw_of(message: FetchedMessage, headers: bytes | None) -> tuple[bytes, str]:
    if message.raw is not None:
        return message.raw, "stored"
    head = (headers or b"").rstrip(b"\r\n")
    return HEADER_ONLY_NOTE + head + b"\r\n\r\n", "exceeded_size_limit"


def _store_batch(
    app: App,
    account: rows.Account,
    folder: rows.Folder,
    uidvalidity: int,
    fetched: list[tuple[FetchedMessage, bytes, str, Derived]],
    last_uid: int,
    stale: dict[tuple[str | None, str], int],
    result: FolderResult,
) -> None:
    now = app.clock.now_ms()
    keys: dict[int, str] = {}
    ids: dict[int, str] = {}
    for message, raw, availability, _derived in fetched:
        if availability == "stored" or raw:
            ids[message.uid] = new_id("msg")
            keys[message.uid] = message_raw_key(
                account.tenant_id, account.identity_id, ids[message.uid]
            )
            app.blobs.put_unsynced(keys[message.uid], raw)
    app.blobs.sync(keys.values())
    outbound = folder.special_use == "\\Sent"
    with app.db.write() as tx:
        existing = rows.occurrences_by_uid(tx, folder.id, uidvalidity, [m.uid for m, *_ in fetched])
        for message, raw, availability, derived in fetched:
            if message.uid in existing:
                continue
            sha = hashlib.sha256(raw).hexdigest()
            again = stale.pop((derived.parsed.rfc_message_id, sha), None)
            if again is not None:
                rows.rebind(tx, again, uidvalidity, message.uid)
                rows.observe_flags(
                    tx, folder.id, uidvalidity, message.uid, message.flags, message.modseq, now
                )
                result.rebound += 1
                continue
            seen = "\\SEEN" in {f.upper() for f in message.flags}
            stored = store_arrival(
                tx,
                Arrival(
                    message_id=ids[message.uid],
                    tenant_id=account.tenant_id,
                    identity_id=account.identity_id,
                    raw_blob_key=keys[message.uid],
                    raw_sha256=sha,
                    raw_size=len(raw),
                    source="imap",
                    envelope=None,
                    delivered_to=None,
                    labels=(),
                    is_primary_recipient=True,
                    received_at=message.internaldate_ms or now,
                    read=seen or outbound,
                    direction="outbound" if outbound else "inbound",
                    status="delivered" if outbound else "received",
                ),
                derived,
                now,
            )
            rows.insert_occurrence(
                tx,
                rows.Occurrence(
                    message_rowid=stored.rowid,
                    folder_id=folder.id,
                    uidvalidity=uidvalidity,
                    uid=message.uid,
                    size_octets=message.size,
                    content_availability=availability,
                    remote_flags_observed_at=now,
                    modseq=message.modseq,
                    remote_expunge_observed_at=None,
                    **rows.flag_columns(message.flags),
                ),
            )
            result.stored += 1
        rows.set_folder_checkpoint(tx, folder.id, now=now, last_uid=last_uid)


def _mirror_seen(tx: Tx, rowids: Sequence[int], now: int) -> None:
    """\\Seen observed on the server is the message's read state here."""
    threads: set[str] = set()
    for rowid in rowids:
        row = tx.fetchone(
            "SELECT o.is_seen, m.thread_id FROM message_occurrences o"
            " JOIN messages m ON m.rowid = o.message_rowid WHERE o.message_rowid = %s",
            (rowid,),
        )
        if row is None:
            continue
        tx.execute("UPDATE messages SET read = %s WHERE rowid = %s", (row["is_seen"], rowid))
        threads.add(str(row["thread_id"]))
    for thread_id in sorted(threads):
        thread_rows.recount_unread(tx, thread_id, now)


def erase_local(app: App, tx: Tx, rowids: Sequence[int], now: int) -> list[str]:
    """Remove local copies (account setting ``erase``); returns blob keys to delete."""
    keys = []
    for rowid in rowids:
        row = tx.fetchone("SELECT thread_id, raw_blob_key FROM messages WHERE rowid = %s", (rowid,))
        if row is None:
            continue
        search_index.unindex_message(tx, rowid)
        tx.execute("DELETE FROM messages WHERE rowid = %s", (rowid,))
        thread_id = str(row["thread_id"])
        tx.execute(
            "UPDATE threads SET message_count = (SELECT count(*) FROM messages WHERE"
            " thread_id = %s), updated_at = %s WHERE id = %s",
            (thread_id, now, thread_id),
        )
        thread_rows.recount_unread(tx, thread_id, now)
        if row["raw_blob_key"]:
            keys.append(str(row["raw_blob_key"]))
    return keys


def _expunged(
    app: App, account: rows.Account, folder: rows.Folder, uidvalidity: int, uids: Sequence[int]
) -> int:
    if not uids:
        return 0
    now = app.clock.now_ms()
    blobs: list[str] = []
    with app.db.write() as tx:
        rowids = rows.tombstone(tx, folder.id, uidvalidity, uids, now)
        if account.remote_delete == "erase":
            blobs = erase_local(app, tx, rowids, now)
    for key in blobs:
        try:
            app.blobs.delete(key)
        except Exception:  # noqa: BLE001 - an orphan blob loses nothing
            log.warning("could not remove blob %s", key)
    return len(rowids)


def _apply_flags(app: App, folder: rows.Folder, uidvalidity: int, updates: Sequence[object]) -> int:
    now = app.clock.now_ms()
    changed: list[int] = []
    with app.db.write() as tx:
        for update in updates:
            rowid = rows.observe_flags(
                tx,
                folder.id,
                uidvalidity,
                update.uid,  # type: ignore[attr-defined]
                update.flags,  # type: ignore[attr-defined]
                update.modseq,  # type: ignore[attr-defined]
                now,
            )
            if rowid is not None:
                changed.append(rowid)
        _mirror_seen(tx, changed, now)
    return len(changed)


ANALYZE_AFTER = 100  # messages stored in one run before the first ANALYZE (PostgreSQL)


def sync_folder(
    app: App,
    client: ImapClient,
    account: rows.Account,
    folder: rows.Folder,
    *,
    qresync: bool,
) -> FolderResult:
    result = FolderResult(folder.path)
    condstore = "CONDSTORE" in client.capabilities or qresync
    status = client.select(folder.path, readonly=True, condstore=condstore)
    uidvalidity = status.uidvalidity
    now = app.clock.now_ms()
    stale: dict[tuple[str | None, str], int] = {}
    with app.db.write() as tx:
        if folder.uidvalidity is None:
            rows.set_folder_checkpoint(tx, folder.id, now=now, uidvalidity=uidvalidity)
        elif folder.uidvalidity != uidvalidity:
            rows.set_folder_checkpoint(tx, folder.id, now=now, uidvalidity=uidvalidity, reset=True)
            result.reset = True
        current = rows.get_folder(tx, folder.id)
        assert current is not None
        folder = current
        if result.reset or folder.last_uid == 0:
            for row in rows.stale_generation(tx, folder.id, uidvalidity):
                stale[(row["rfc_message_id"], str(row["raw_sha256"]))] = int(row["message_rowid"])
    # New messages above the checkpoint, in committed batches.
    new_uids = [u for u in client.uids_from(folder.last_uid + 1) if u > folder.last_uid]
    analyze_at = ANALYZE_AFTER
    for batch in _chunks(sorted(new_uids), app.settings.imap_batch_size):
        fetched = list(client.fetch_messages(batch, max_size=account.max_message_bytes))
        oversized = [m.uid for m in fetched if m.raw is None]
        headers = client.fetch_headers(oversized) if oversized else {}
        prepared = []
        for message in fetched:
            raw, availability = _raw_of(message, headers.get(message.uid))
            prepared.append((message, raw, availability, derive(raw)))
        _store_batch(app, account, folder, uidvalidity, prepared, max(batch), stale, result)
        if result.stored >= analyze_at:
            # A first sync is a bulk load: without fresh statistics PostgreSQL goes on
            # planning the threading and search statements for the empty tables it saw
            # (65 instead of 41 messages/s over 10,000). Doubling keeps it to a few.
            with app.db.write() as tx:
                maintenance.analyze_after_bulk_load(tx)
            analyze_at = result.stored * 2
    # A reset: what did not come back under the new UIDVALIDITY is gone.
    if stale:
        gone = list(stale.values())
        now = app.clock.now_ms()
        blobs: list[str] = []
        with app.db.write() as tx:
            for rowid in gone:
                tx.execute(
                    "UPDATE message_occurrences SET remote_expunge_observed_at = %s"
                    " WHERE message_rowid = %s AND remote_expunge_observed_at IS NULL",
                    (now, rowid),
                )
            if account.remote_delete == "erase":
                blobs = erase_local(app, tx, gone, now)
        for key in blobs:
            app.blobs.delete(key)
        result.expunged += len(gone)
    # Flags and expunges.
    with app.db.read() as tx:
        refreshed = rows.get_folder(tx, folder.id)
    assert refreshed is not None
    since = refreshed.highest_modseq
    vanished: list[int] = []
    if condstore and since is not None and status.highestmodseq is not None:
        if status.highestmodseq != since:
            updates, vanished = client.fetch_flags(
                f"1:{max(refreshed.last_uid, 1)}", changedsince=since, vanished=qresync
            )
            result.flags_changed += _apply_flags(app, refreshed, uidvalidity, updates)
    else:
        with app.db.read() as tx:
            window = rows.reconciliation_window(
                tx, folder.id, uidvalidity, app.settings.imap_reconcile_window
            )
        if window:
            updates, _ = client.fetch_flags(",".join(str(u) for u in window))
            result.flags_changed += _apply_flags(app, refreshed, uidvalidity, updates)
    if not qresync or since is None:
        on_server = set(client.uid_search_all())
        with app.db.read() as tx:
            known = rows.live_uids(tx, folder.id, uidvalidity)
        vanished = [u for u in known if u not in on_server and u <= refreshed.last_uid]
    else:
        with app.db.read() as tx:
            known_set = set(rows.live_uids(tx, folder.id, uidvalidity))
        vanished = [u for u in vanished if u in known_set]
    result.expunged += _expunged(app, account, refreshed, uidvalidity, vanished)
    if status.highestmodseq is not None:
        with app.db.write() as tx:
            rows.set_folder_checkpoint(
                tx, folder.id, now=app.clock.now_ms(), highest_modseq=status.highestmodseq
            )
    return result


def _bind_folders(
    app: App, account: rows.Account, remote: Sequence[FolderInfo]
) -> list[rows.Folder]:
    now = app.clock.now_ms()
    chosen = mirrored(account, remote)
    names = {f.name for f in remote}
    with app.db.write() as tx:
        bound = [
            rows.upsert_folder(tx, new_id("fld"), account.id, f.name, f.special_use, now)
            for f in chosen
        ]
        for folder in rows.folders(tx, account.id):
            if folder.path not in names:
                rows.mark_folder_removed(tx, folder.id, now)
    return bound


def _record_status(app: App, account: rows.Account, status: str, reason: str | None) -> None:
    now = app.clock.now_ms()
    failed = status != "ok"
    interval_ms = account.sync_interval_seconds * 1000
    with app.db.write() as tx:
        previous = rows.set_status(tx, account.id, status, reason, now, failed=failed)
        current = rows.get_account(tx, account.id)
        if current is None:
            return
        backoff = min(
            interval_ms * 8, interval_ms * (2 ** max(0, current.consecutive_failures - 1))
        )
        rows.schedule_next(tx, account.id, now + (backoff if failed else interval_ms))
        if previous is not None:
            emit(
                tx,
                ImapAccountStatusChanged(
                    account_id=account.id,
                    status=status,  # type: ignore[arg-type]
                    previous_status=previous,  # type: ignore[arg-type]
                    reason=reason,
                ),
                tenant_id=account.tenant_id,
                identity_id=account.identity_id,
                now=now,
            )


def sync_account(app: App, account_id: str) -> SyncResult:
    """One synchronisation of every mirrored folder; records the account's status."""
    with app.db.read() as tx:
        account = rows.get_account(tx, account_id)
    if account is None:
        return SyncResult(account_id, "deleted")
    result = SyncResult(account.id, "ok")
    try:
        with connect(app, account.host, account.port, account.tls_mode) as client:
            login(client, account.username, account.auth_kind, secret_of(app, account))
            qresync = "QRESYNC" in client.capabilities and client.enable_qresync()
            bound = _bind_folders(app, account, client.list_folders())
            for folder in bound:
                result.folders.append(sync_folder(app, client, account, folder, qresync=qresync))
            if app.settings.imap_idle_seconds and "IDLE" in client.capabilities:
                # sync_folder re-reads the binding's checkpoint, so the row from above serves.
                inbox = next((f for f in bound if f.path.upper() == "INBOX"), None)
                if inbox is not None:
                    client.select(inbox.path, readonly=True)
                    if client.idle(app.settings.imap_idle_seconds):
                        result.folders.append(
                            sync_folder(app, client, account, inbox, qresync=qresync)
                        )
    except ImapAuthError:
        result.status = "auth_failed"
        _record_status(app, account, "auth_failed", "auth_failed")
        return result
    except ImapThrottled:
        result.status = "throttled"
        _record_status(app, account, "throttled", "throttled")
        return result
    except ImapTlsError:
        result.status = "tls_failed"
        _record_status(app, account, "tls_failed", "tls_failed")
        return result
    except (ImapUnreachable, OSError):
        result.status = "unreachable"
        _record_status(app, account, "unreachable", "unreachable")
        return result
    except ImapError as exc:
        result.status = "error"
        _record_status(app, account, "error", exc.code[:64])
        return result
    _record_status(app, account, "ok", None)
    return result


def handle_sync(ctx: JobContext) -> None:
    """The ``imap.sync`` job: payload ``{"account_id": "imp_..."}``."""
    result = sync_account(ctx.app, str(ctx.payload["account_id"]))
    log.info("imap sync %s: %s, %d stored", result.account_id, result.status, result.stored)


def dispatch(app: App, limit: int = 200) -> int:
    """Enqueue a sync for every due account (the ``imap.dispatch`` schedule)."""
    now = app.clock.now_ms()
    count = 0
    with app.db.write() as tx:
        for account in rows.due_accounts(tx, now, limit):
            app.queue.enqueue_in(
                tx,
                SYNC_JOB,
                f"{account.id}:{account.next_sync_at}",
                {"account_id": account.id},
                tenant_id=account.tenant_id,
                identity_id=account.identity_id,
            )
            # Not due again until this sync reschedules it (or the interval passes).
            rows.schedule_next(tx, account.id, now + account.sync_interval_seconds * 1000)
            count += 1
    return count


def handle_dispatch(ctx: JobContext) -> None:
    from postroom.sync.mutations import stranded

    dispatch(ctx.app)
    stranded(ctx.app)


__all__ = ["DISPATCH_JOB", "SYNC_JOB", "SyncResult", "dispatch", "sync_account"]

"""Changes Postroom makes on the IMAP server (seed 003 mailbox_mutations).

A change to a synced message — read/unread, star, keywords, move, copy, delete — is
written down before the first IMAP command and advanced through stages, each written
durably before the step it allows:

``recorded`` → (move, copy) ``placement_issued`` → ``placement_confirmed`` →
(move without MOVE, delete) ``source_flagged_deleted`` → ``completed`` | ``abandoned``

* Flag and keyword changes are idempotent on the wire: they go from ``recorded`` to
  ``completed`` and are simply retried.
* ``placement_issued`` is written before COPY/MOVE goes out, together with
  ``requires_source_removal`` (MOVE removes the source, COPY does not). A mutation
  found there after its attempt died is an **unknown outcome**: a second COPY would be a
  second message, so it is stamped ``25002`` and never retried automatically.
  A placement the server *refused* (a tagged NO or BAD: a refused COPY or MOVE
  places nothing) goes back to ``recorded``: retried later when the refusal is
  transient (``throttled``), abandoned otherwise (a destination that does not exist).
* A relocation found at ``placement_confirmed`` removes its source without copying
  again; a delete found at ``source_flagged_deleted`` reissues only the expunge.
* Attempts are counted before each attempt (by the claim); after
  ``imap.mutation_max_attempts`` the mutation is abandoned. Every ending writes one
  ``mailbox_mutation_audit_entries`` row.

After a completed move the local message follows: its occurrence is re-bound to the
destination folder and the new UID the server named (COPYUID), so the next sync neither
stores it again nor tombstones it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.ids import new_id
from postroom.jobs.handlers import JobContext
from postroom.store import imap as rows
from postroom.store.db import Row, Tx
from postroom.sync.accounts import connect, login, secret_of
from postroom.sync.imap_client import ImapClient, ImapError

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.sync")

MUTATE_JOB = "imap.mutate"
ACTIONS = (
    "seen",
    "unseen",
    "flag",
    "unflag",
    "keywords_add",
    "keywords_remove",
    "keywords_replace",
    "move",
    "copy",
    "delete",
)
UNKNOWN = rows.UNKNOWN_MUTATION_OUTCOME
LEASE_MS = 120_000
MAX_ATTEMPTS = 8


@dataclass(frozen=True)
class Mutation:
    id: str
    account_id: str
    identity_id: str
    message_rowid: int
    folder_id: str
    uidvalidity: int
    uid: int
    requester_origin: str
    requester_identity: str
    mutation: str
    arguments_json: str
    destination_path: str | None
    stage: str
    requires_source_removal: int
    placement_uidvalidity: int | None
    placement_uid: int | None
    attempt_count: int
    available_at: int
    lease_owner: str | None
    lease_expires_at: int | None
    last_failure_code: str | None
    recorded_at: int
    stage_changed_at: int

    @classmethod
    def from_row(cls, row: Row) -> Mutation:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    @property
    def keywords(self) -> list[str]:
        return list(json.loads(self.arguments_json).get("keywords", []))


def _get(tx: Tx, mutation_id: str) -> Mutation | None:
    row = tx.fetchone("SELECT * FROM mailbox_mutations WHERE id = %s", (mutation_id,))
    return None if row is None else Mutation.from_row(row)


def get(app: App, mutation_id: str) -> Mutation:
    with app.db.read() as tx:
        found = _get(tx, mutation_id)
    if found is None:
        raise NotFound(f"no mailbox change {mutation_id[:80]!r}", code="mutation_not_found")
    return found


def _check_keywords(keywords: list[str]) -> list[str]:
    if len(keywords) > 64:
        raise InvalidInput("at most 64 keywords", field="keywords")
    for k in keywords:
        if (
            not k
            or len(k) > 64
            or k.startswith("\\")
            or any(c in k for c in '(){ %*"]\\')
            or not k.isprintable()
            or not k.isascii()
        ):
            raise InvalidInput(f"{k[:64]!r} is not an IMAP keyword", field="keywords")
    return keywords


def record(
    app: App,
    message_id: str,
    action: str,
    *,
    keywords: list[str] | None = None,
    folder: str | None = None,
    requester_origin: str = "api",
    requester_identity: str | None = None,
) -> Mutation:
    """Write the intent to change a synced message on its server; a job carries it out.
    The same requester asking the same change twice is one change."""
    if action not in ACTIONS:
        raise InvalidInput(f"action must be one of {', '.join(ACTIONS)}", field="action")
    arguments: dict[str, Any] = {}
    if action.startswith("keywords_"):
        arguments["keywords"] = _check_keywords(list(keywords or []))
        if action != "keywords_replace" and not arguments["keywords"]:
            raise InvalidInput("name the keywords", field="keywords")
    if action in ("move", "copy") and (not folder or len(folder) > 512 or not folder.isprintable()):
        raise InvalidInput("name the destination folder", field="folder")
    now = app.clock.now_ms()
    with app.db.write() as tx:
        message = tx.fetchone("SELECT rowid FROM messages WHERE id = %s", (message_id,))
        if message is None:
            raise NotFound(f"no message {message_id[:80]!r}", code="message_not_found")
        occurrence = rows.occurrence_of(tx, int(message["rowid"]))
        if occurrence is None or occurrence.remote_expunge_observed_at is not None:
            raise Conflict(
                "this message is not on an IMAP server (not synced, or expunged there)",
                code="not_synced",
            )
        folder_row = rows.get_folder(tx, occurrence.folder_id)
        assert folder_row is not None
        if folder is not None and folder == folder_row.path and action == "move":
            raise InvalidInput("the message is in that folder already", field="folder")
        identity = requester_identity or new_id("mut")
        existing = tx.fetchone(
            "SELECT * FROM mailbox_mutations WHERE folder_id = %s AND uidvalidity = %s"
            " AND uid = %s AND requester_origin = %s AND requester_identity = %s"
            " AND mutation = %s",
            (
                occurrence.folder_id,
                occurrence.uidvalidity,
                occurrence.uid,
                requester_origin,
                identity,
                action,
            ),
        )
        if existing is not None:
            return Mutation.from_row(existing)
        mutation_id = new_id("mut")
        tx.execute(
            "INSERT INTO mailbox_mutations (id, account_id, identity_id, message_rowid,"
            " folder_id, uidvalidity, uid, requester_origin, requester_identity, mutation,"
            " arguments_json, destination_path, stage, available_at, recorded_at,"
            " stage_changed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " 'recorded', %s, %s, %s)",
            (
                mutation_id,
                folder_row.account_id,
                _identity_of(tx, folder_row.account_id),
                occurrence.message_rowid,
                occurrence.folder_id,
                occurrence.uidvalidity,
                occurrence.uid,
                requester_origin,
                identity,
                action,
                json.dumps(arguments),
                folder,
                now,
                now,
                now,
            ),
        )
        app.queue.enqueue_in(tx, MUTATE_JOB, mutation_id, {"mutation_id": mutation_id})
        found = _get(tx, mutation_id)
    assert found is not None
    return found


def record_if_synced(
    app: App, message_id: str, action: str, *, requester_identity: str | None = None
) -> Mutation | None:
    """Record ``action`` when the message is a live IMAP occurrence; else nothing."""
    with app.db.read() as tx:
        row = tx.fetchone(
            "SELECT o.message_rowid FROM message_occurrences o JOIN messages m"
            " ON m.rowid = o.message_rowid WHERE m.id = %s"
            " AND o.remote_expunge_observed_at IS NULL",
            (message_id,),
        )
    if row is None:
        return None
    return record(app, message_id, action, requester_identity=requester_identity)


def _identity_of(tx: Tx, account_id: str) -> str:
    return str(tx.fetchval("SELECT identity_id FROM imap_accounts WHERE id = %s", (account_id,)))


# --- carrying a mutation out ---------------------------------------------------------


def _claim(tx: Tx, mutation_id: str, owner: str, now: int) -> Mutation | None:
    row = tx.fetchone(
        "UPDATE mailbox_mutations SET lease_owner = %s, lease_expires_at = %s,"
        " attempt_count = attempt_count + 1"
        " WHERE id = %s AND stage IN ('recorded', 'placement_confirmed',"
        " 'source_flagged_deleted') AND available_at <= %s"
        " AND (lease_owner IS NULL OR lease_expires_at <= %s) RETURNING *",
        (owner, now + LEASE_MS, mutation_id, now, now),
    )
    return None if row is None else Mutation.from_row(row)


def _advance(app: App, m: Mutation, owner: str, stage: str, **columns: Any) -> None:
    now = app.clock.now_ms()
    sets = "".join(f", {k} = %s" for k in columns)
    with app.db.write() as tx:
        changed = tx.execute(
            f"UPDATE mailbox_mutations SET stage = %s, stage_changed_at = %s{sets}"
            " WHERE id = %s AND lease_owner = %s",
            (stage, now, *columns.values(), m.id, owner),
        )
    if changed != 1:
        raise ImapError("lease_lost", "the mutation's lease was taken over")


def _finish(
    app: App, m: Mutation, owner: str | None, outcome: str, failure: str | None = None
) -> None:
    now = app.clock.now_ms()
    with app.db.write() as tx:
        guard = " AND lease_owner = %s" if owner is not None else ""
        params: tuple[Any, ...] = (outcome, now, failure, m.id) + ((owner,) if owner else ())
        if (
            tx.execute(
                "UPDATE mailbox_mutations SET stage = %s, stage_changed_at = %s,"
                " last_failure_code = %s, lease_owner = NULL, lease_expires_at = NULL"
                f" WHERE id = %s{guard}",
                params,
            )
            != 1
        ):
            return
        message_id = tx.fetchval("SELECT id FROM messages WHERE rowid = %s", (m.message_rowid,))
        tx.execute(
            "INSERT INTO mailbox_mutation_audit_entries (id, mutation_id, account_id,"
            " identity_id, mutation, outcome, message_id, requester_origin, completed_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (mutation_id) DO NOTHING",
            (
                new_id("aud"),
                m.id,
                m.account_id,
                m.identity_id,
                m.mutation,
                outcome,
                message_id,
                m.requester_origin,
                now,
            ),
        )


def _rebind_after_move(app: App, m: Mutation, uidvalidity: int | None, uid: int | None) -> None:
    """The local message follows a completed move to its destination folder binding."""
    if uid is None or uidvalidity is None or m.destination_path is None:
        return
    with app.db.write() as tx:
        dest = tx.fetchone(
            "SELECT id FROM mail_folders WHERE account_id = %s AND path = %s",
            (m.account_id, m.destination_path),
        )
        if dest is None:
            return
        tx.execute(
            "UPDATE message_occurrences SET folder_id = %s, uidvalidity = %s, uid = %s,"
            " remote_flags_observed_at = NULL WHERE message_rowid = %s AND folder_id = %s"
            " AND uid = %s",
            (dest["id"], uidvalidity, uid, m.message_rowid, m.folder_id, m.uid),
        )


def _store(client: ImapClient, m: Mutation) -> None:
    uid, action = m.uid, m.mutation
    if action == "seen":
        client.store_flags(uid, "+", ["\\Seen"])
    elif action == "unseen":
        client.store_flags(uid, "-", ["\\Seen"])
    elif action == "flag":
        client.store_flags(uid, "+", ["\\Flagged"])
    elif action == "unflag":
        client.store_flags(uid, "-", ["\\Flagged"])
    elif action == "keywords_add":
        client.store_flags(uid, "+", m.keywords)
    elif action == "keywords_remove":
        client.store_flags(uid, "-", m.keywords)
    elif action == "keywords_replace":
        # Replace the keywords only: keep the system flags the message carries.
        updates, _ = client.fetch_flags(str(uid))
        system = [f for f in (updates[0].flags if updates else ()) if f.startswith("\\")]
        client.store_flags(uid, "=", [*system, *m.keywords])


def _carry(app: App, client: ImapClient, m: Mutation, owner: str) -> None:
    status = client.select(_path(app, m), readonly=False)
    if status.uidvalidity != m.uidvalidity:
        _finish(app, m, owner, "abandoned", "uidvalidity_changed")
        return
    if m.mutation in ("seen", "unseen", "flag", "unflag") or m.mutation.startswith("keywords_"):
        _store(client, m)
        _finish(app, m, owner, "completed")
        return
    stage = m.stage
    remove = bool(m.requires_source_removal)
    if m.mutation in ("move", "copy") and stage == "recorded":
        assert m.destination_path is not None
        use_move = (
            m.mutation == "move" and "MOVE" in client.capabilities and app.settings.imap_use_move
        )
        remove = m.mutation == "move" and not use_move
        _advance(app, m, owner, "placement_issued", requires_source_removal=int(remove))
        try:
            if use_move:
                new_uid = client.move(m.uid, m.destination_path)
            else:
                new_uid = client.copy(m.uid, m.destination_path)
        except ImapError as exc:
            if exc.answered:
                # A tagged NO or BAD is an answer. A refused COPY leaves the destination
                # as it was (RFC 3501 §6.4.7); a refused MOVE leaves the message moved or
                # unaffected, never in both (RFC 6851 §3.3), and a retry of a message
                # that did move finds its source UID gone and places nothing. So no
                # second copy can come of trying again: this is no unknown outcome.
                _advance(app, m, owner, "recorded", requires_source_removal=0)
            raise
        dest_validity = _dest_validity(app, m) if new_uid else None
        _advance(
            app,
            m,
            owner,
            "placement_confirmed",
            placement_uid=new_uid,
            placement_uidvalidity=dest_validity,
        )
        m = get(app, m.id)
        stage = "placement_confirmed"
    if m.mutation == "copy":
        _finish(app, m, owner, "completed")
        return
    if m.mutation == "move" and stage == "placement_confirmed" and not remove:
        _rebind_after_move(app, m, m.placement_uidvalidity, m.placement_uid)
        _finish(app, m, owner, "completed")
        return
    if stage in ("recorded", "placement_confirmed"):  # delete, or a move over COPY
        client.store_flags(m.uid, "+", ["\\Deleted"])
        _advance(app, m, owner, "source_flagged_deleted")
        stage = "source_flagged_deleted"
    if stage == "source_flagged_deleted":
        client.expunge_uid(m.uid)
        if m.mutation == "move":
            _rebind_after_move(app, m, m.placement_uidvalidity, m.placement_uid)
        _finish(app, m, owner, "completed")


def _path(app: App, m: Mutation) -> str:
    with app.db.read() as tx:
        folder = rows.get_folder(tx, m.folder_id)
    if folder is None:
        raise ImapError("folder_gone", "the source folder binding is gone")
    return folder.path


def _dest_validity(app: App, m: Mutation) -> int | None:
    """The destination's UIDVALIDITY as its binding knows it (a mirrored folder), for the
    placement the server named (COPYUID)."""
    with app.db.read() as tx:
        value = tx.fetchval(
            "SELECT uidvalidity FROM mail_folders WHERE account_id = %s AND path = %s",
            (m.account_id, m.destination_path),
        )
    return None if value is None else int(value)


def stranded(app: App) -> int:
    """Mutations left at ``placement_issued`` by an attempt that died: unknown outcome."""
    now = app.clock.now_ms()
    count = 0
    with app.db.write() as tx:
        found = tx.fetchall(
            "SELECT * FROM mailbox_mutations WHERE stage = 'placement_issued'"
            " AND last_failure_code IS NULL AND lease_expires_at <= %s",
            (now,),
        )
        for row in found:
            count += tx.execute(
                "UPDATE mailbox_mutations SET last_failure_code = %s, lease_owner = NULL,"
                " lease_expires_at = NULL, stage_changed_at = %s WHERE id = %s"
                " AND stage = 'placement_issued' AND last_failure_code IS NULL",
                (UNKNOWN, now, row["id"]),
            )
    return count


def attempt(app: App, mutation_id: str, owner: str) -> str | None:
    """Carry one mutation as far as it goes; returns its stage afterwards."""
    stranded(app)
    now = app.clock.now_ms()
    with app.db.write() as tx:
        m = _claim(tx, mutation_id, owner, now)
    if m is None:
        return None
    if m.attempt_count > app.settings.imap_mutation_max_attempts:
        _finish(app, m, owner, "abandoned", "attempts_spent")
        return "abandoned"
    with app.db.read() as tx:
        account = rows.get_account(tx, m.account_id)
    if account is None:
        _finish(app, m, owner, "abandoned", "account_gone")
        return "abandoned"
    try:
        with connect(app, account.host, account.port, account.tls_mode) as client:
            login(client, account.username, account.auth_kind, secret_of(app, account))
            _carry(app, client, m, owner)
    except ImapError as exc:
        current = get(app, m.id)
        if current.stage == "placement_issued":
            # The placement went out and its answer was never read: unknown outcome.
            with app.db.write() as tx:
                tx.execute(
                    "UPDATE mailbox_mutations SET last_failure_code = %s, lease_owner = NULL,"
                    " lease_expires_at = NULL WHERE id = %s AND lease_owner = %s",
                    (UNKNOWN, m.id, owner),
                )
            return "placement_issued"
        if not exc.transient and exc.code not in ("lease_lost",):
            _finish(app, m, owner, "abandoned", exc.code[:64])
            return "abandoned"
        with app.db.write() as tx:
            tx.execute(
                "UPDATE mailbox_mutations SET lease_owner = NULL, lease_expires_at = NULL,"
                " last_failure_code = %s, available_at = %s WHERE id = %s AND lease_owner = %s",
                (exc.code[:64], app.clock.now_ms() + 30_000 * m.attempt_count, m.id, owner),
            )
        raise
    return get(app, m.id).stage


def handle_mutate(ctx: JobContext) -> None:
    """The ``imap.mutate`` job: payload ``{"mutation_id": "mut_..."}``."""
    attempt(ctx.app, str(ctx.payload["mutation_id"]), ctx.owner)

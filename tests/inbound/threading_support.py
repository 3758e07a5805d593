"""Test-side stand-ins for what threading tests need from the rest of the pipeline.

* :func:`parse_headers` is the real parser (``postroom.mail.parse``), so the corpus
  expectations check parsing and threading together.
* :class:`Mailbox` does what ingest does around threading: ``place_message``, a minimal
  ``messages`` row with the placement's thread and parent, ``record_in_thread`` — one
  transaction per message — and reads the result back by RFC Message-ID.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from postroom.ids import new_id
from postroom.inbound.threading import ThreadPlacement, place_message, record_in_thread
from postroom.mail.message import Mailbox as Address
from postroom.mail.message import ParsedMessage
from postroom.mail.parse import parse_message
from postroom.store import threads as thread_rows
from postroom.store.db import Database
from postroom.testing.corpora import corpus_path

NOTMUCH = corpus_path("threading-notmuch", "test", "corpora")

DAY_MS = 24 * 3_600_000


def corpus(*parts: str) -> Path:
    path = NOTMUCH.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"corpus not found at {path}")
    return path


def parsed(
    message_id: str,
    *,
    in_reply_to: str | None = None,
    references: tuple[str, ...] = (),
    subject: str | None = None,
    from_: str | None = None,
    sent_at: int | None = None,
    synthetic: bool = False,
) -> ParsedMessage:
    """A ParsedMessage with only the threading fields set."""
    return ParsedMessage.bare(
        message_id,
        message_id_synthetic=synthetic,
        in_reply_to=in_reply_to,
        references=references,
        subject=subject,
        from_=Address(from_) if from_ else None,
        sent_at=sent_at,
    )


def parse_headers(raw: bytes) -> ParsedMessage:
    """The message as ingestion sees it: the real parser."""
    return parse_message(raw)


def parse_file(path: Path) -> ParsedMessage:
    return parse_headers(path.read_bytes())


@dataclass(frozen=True)
class Delivered:
    rowid: int
    message_id: str
    placement: ThreadPlacement


class Mailbox:
    """One identity's mailbox with just enough of ingest to exercise threading."""

    def __init__(self, db: Database, username: str = "alice") -> None:
        self.db = db
        self.tenant_id = new_id("ten")
        self.identity_id = new_id("idn")
        self.clock = 1_700_000_000_000
        with db.write() as tx:
            tx.execute(
                "INSERT INTO tenants (id, slug, name, mode, address_suffix, created_at,"
                " updated_at) VALUES (%s, %s, %s, 'live', %s, 0, 0)",
                (self.tenant_id, f"t-{username}", username, f".{username}"),
            )
            tx.execute(
                "INSERT INTO identities (id, tenant_id, username, display_name, created_at,"
                " updated_at) VALUES (%s, %s, %s, %s, 0, 0)",
                (self.identity_id, self.tenant_id, username, username),
            )

    def deliver(
        self,
        message: ParsedMessage,
        *,
        received_at: int | None = None,
        read: bool = False,
        direction: str = "inbound",
        subject_window_ms: int | None = None,
    ) -> Delivered:
        """Place, insert and record one message in its own transaction, as ingest does."""
        self.clock += 1_000
        at = self.clock if received_at is None else received_at
        extra = {} if subject_window_ms is None else {"subject_window_ms": subject_window_ms}
        with self.db.write() as tx:
            placement = place_message(
                tx,
                identity_id=self.identity_id,
                tenant_id=self.tenant_id,
                parsed=message,
                received_at=at,
                now=self.clock,
                **extra,
            )
            message_id = new_id("msg")
            rowid = tx.fetchval(
                "INSERT INTO messages (id, identity_id, tenant_id, thread_id, parent_rowid,"
                " direction, status, source, rfc_message_id, message_id_synthetic,"
                " in_reply_to, references_json, from_address, subject, received_at, kind,"
                " read, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, 'import', %s, %s, %s, %s, %s, %s, %s,"
                " 'normal', %s, %s) RETURNING rowid",
                (
                    message_id,
                    self.identity_id,
                    self.tenant_id,
                    placement.thread_id,
                    placement.parent_rowid,
                    direction,
                    "received" if direction == "inbound" else "delivered",
                    message.rfc_message_id,
                    int(message.message_id_synthetic),
                    message.in_reply_to,
                    json.dumps(list(message.references)),
                    message.from_.address if message.from_ else None,
                    message.subject,
                    at,
                    int(read),
                    self.clock,
                ),
            )
            participants = [m for m in (message.from_, *message.to, *message.cc) if m]
            record_in_thread(
                tx,
                placement,
                message_rowid=int(rowid),
                direction=direction,
                read=read,
                received_at=at,
                participants=participants,
                now=self.clock,
            )
        return Delivered(int(rowid), message_id, placement)

    # --- reading back -----------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        with self.db.read() as tx:
            return tx.fetchall(
                "SELECT m.rowid, m.rfc_message_id, m.thread_id, m.parent_rowid,"
                " p.rfc_message_id AS parent_id FROM messages AS m"
                " LEFT JOIN messages AS p ON p.rowid = m.parent_rowid"
                " WHERE m.identity_id = %s ORDER BY m.rowid",
                (self.identity_id,),
            )

    def thread_of(self, rfc_message_id: str) -> str:
        threads: set[str] = {
            r["thread_id"] for r in self.rows() if r["rfc_message_id"] == rfc_message_id
        }
        assert len(threads) == 1, f"{rfc_message_id} is in {threads}"
        return threads.pop()

    def parent_of(self, rfc_message_id: str) -> str | None:
        parents: set[str | None] = {
            r["parent_id"] for r in self.rows() if r["rfc_message_id"] == rfc_message_id
        }
        assert len(parents) == 1, f"copies of {rfc_message_id} have parents {parents}"
        return parents.pop()

    def parents(self) -> dict[str, str | None]:
        """RFC Message-ID → the RFC Message-ID of its parent (first copy wins)."""
        found: dict[str, str | None] = {}
        for r in self.rows():
            found.setdefault(r["rfc_message_id"], r["parent_id"])
        return found

    def groups(self) -> set[frozenset[str]]:
        """The conversations as sets of RFC Message-IDs."""
        by_thread: dict[str, set[str]] = defaultdict(set)
        for r in self.rows():
            by_thread[r["thread_id"]].add(r["rfc_message_id"])
        return {frozenset(s) for s in by_thread.values()}

    def thread(self, thread_id: str) -> thread_rows.Thread:
        with self.db.read() as tx:
            found = thread_rows.get(tx, thread_id)
        assert found is not None
        return found

    def live_threads(self) -> list[thread_rows.Thread]:
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT * FROM threads WHERE identity_id = %s AND merged_into_thread_id IS NULL"
                " ORDER BY assembled_at, id",
                (self.identity_id,),
            )
        return [thread_rows.Thread.from_row(r) for r in rows]

    def assert_consistent(self) -> None:
        """Invariants every test ends with: counters match the rows, no message is its own
        ancestor, every message sits in a live conversation of this identity."""
        rows = self.rows()
        by_rowid = {r["rowid"]: r for r in rows}
        counts: dict[str, int] = defaultdict(int)
        for r in rows:
            counts[r["thread_id"]] += 1
            seen = {r["rowid"]}
            parent = r["parent_rowid"]
            while parent is not None:
                assert parent not in seen, f"cycle through {r['rfc_message_id']}"
                seen.add(parent)
                assert by_rowid[parent]["thread_id"] == r["thread_id"], "parent in another thread"
                parent = by_rowid[parent]["parent_rowid"]
        live = {t.id: t for t in self.live_threads()}
        for thread_id, n in counts.items():
            assert thread_id in live, f"{thread_id} is folded but still holds messages"
            assert live[thread_id].message_count == n
        for thread_id, thread in live.items():
            assert thread.message_count == counts.get(thread_id, 0)

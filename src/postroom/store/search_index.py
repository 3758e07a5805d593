"""The lexical index, written in the transaction that stores a message.

SQLite: two contentless FTS5 tables keyed by ``messages.rowid`` — ``fts`` (six weighted
columns, ``unicode61 remove_diacritics 2``) and ``fts_tri`` (trigram, short fields only).
PostgreSQL: one ``message_search`` row with a tsvector weighted A subject, B participants,
C new text, D full text + attachment names + refs (PostgreSQL has four weights; the search
issue documents the consequence), and the short fields for ``pg_trgm``.

What goes into the index is bounded: a tsvector cannot exceed 1 MB, and nobody searches
for the 300th kilobyte of a message.
"""

from __future__ import annotations

from dataclasses import dataclass

from postroom.store.db import Engine, Tx

MAX_SUBJECT_CHARS = 2_000
MAX_PARTICIPANTS = 64
MAX_BODY_CHARS = 200_000
MAX_SHORT_CHARS = 8_000


@dataclass(frozen=True)
class SearchDocument:
    subject: str
    participants: str
    body_new: str
    body_full: str
    attachments: str
    refs: str

    @classmethod
    def build(
        cls,
        *,
        subject: str | None,
        participants: list[tuple[str | None, str]],
        body_new: str | None,
        body_full: str | None,
        attachment_names: list[str],
        refs: list[str],
    ) -> SearchDocument:
        people = " ".join(
            f"{name} {address}" if name else address
            for name, address in participants[:MAX_PARTICIPANTS]
        )
        return cls(
            subject=(subject or "")[:MAX_SUBJECT_CHARS],
            participants=people,
            body_new=(body_new or "")[:MAX_BODY_CHARS],
            body_full=(body_full or "")[:MAX_BODY_CHARS],
            attachments=" ".join(attachment_names)[:MAX_SUBJECT_CHARS],
            refs=" ".join(refs)[:MAX_SUBJECT_CHARS],
        )

    @property
    def short_text(self) -> str:
        return " ".join((self.subject, self.participants, self.refs))[:MAX_SHORT_CHARS]


def index_message(tx: Tx, message_rowid: int, identity_id: str, doc: SearchDocument) -> None:
    if tx.engine is Engine.SQLITE:
        tx.execute(
            "INSERT INTO fts (rowid, subject, participants, body_new, body_full, attachments,"
            " refs) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                message_rowid,
                doc.subject,
                doc.participants,
                doc.body_new,
                doc.body_full,
                doc.attachments,
                doc.refs,
            ),
        )
        tx.execute(
            "INSERT INTO fts_tri (rowid, subject, participants, refs) VALUES (%s, %s, %s, %s)",
            (message_rowid, doc.subject, doc.participants, doc.refs),
        )
        return
    tx.execute(
        "INSERT INTO message_search (message_rowid, identity_id, document, short_text)"
        " VALUES (%s, %s,"
        " setweight(to_tsvector('postroom', %s), 'A')"
        " || setweight(to_tsvector('postroom', %s), 'B')"
        " || setweight(to_tsvector('postroom', %s), 'C')"
        " || setweight(to_tsvector('postroom', %s), 'D'),"
        " %s)",
        (
            message_rowid,
            identity_id,
            doc.subject,
            doc.participants,
            doc.body_new,
            " ".join((doc.body_full, doc.attachments, doc.refs)),
            doc.short_text,
        ),
    )


def unindex_message(tx: Tx, message_rowid: int) -> None:
    """Remove a message's index rows (erasure); PostgreSQL's row also cascades."""
    if tx.engine is Engine.SQLITE:
        tx.execute("DELETE FROM fts WHERE rowid = %s", (message_rowid,))
        tx.execute("DELETE FROM fts_tri WHERE rowid = %s", (message_rowid,))
    else:
        tx.execute("DELETE FROM message_search WHERE message_rowid = %s", (message_rowid,))


def match_words(tx: Tx, identity_id: str, words: str, limit: int = 50) -> list[str]:
    """Message ids of one identity whose indexed text contains every word (AND), best
    first. The full query language arrives with the search capability."""
    terms = [w for w in "".join(c if c.isalnum() else " " for c in words).split() if w]
    if not terms:
        return []
    if tx.engine is Engine.SQLITE:
        query = " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = tx.fetchall(
            "SELECT m.id FROM fts JOIN messages m ON m.rowid = fts.rowid"
            " WHERE fts MATCH %s AND m.identity_id = %s ORDER BY bm25(fts) LIMIT %s",
            (query, identity_id, limit),
        )
    else:
        rows = tx.fetchall(
            "SELECT m.id FROM message_search s JOIN messages m ON m.rowid = s.message_rowid"
            " WHERE s.identity_id = %s AND s.document @@ plainto_tsquery('postroom', %s)"
            " ORDER BY ts_rank_cd(s.document, plainto_tsquery('postroom', %s)) DESC LIMIT %s",
            (identity_id, " ".join(terms), " ".join(terms), limit),
        )
    return [str(r["id"]) for r in rows]

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


# --- ranked search for the API (mailbox services) --------------------------------------

# FTS5 bm25 column weights: subject, participants, body_new, body_full, attachments, refs.
BM25_WEIGHTS = (10.0, 5.0, 3.0, 1.0, 2.0, 2.0)


@dataclass(frozen=True)
class SearchScope:
    """Whose mail a search reads: one identity, or every live, non-system identity of a
    tenant."""

    identity_id: str | None = None
    tenant_id: str | None = None


def fts5_query(terms: list[str]) -> str:
    """Every term as a quoted FTS5 string, ANDed: user text is never FTS5 syntax."""
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)


def ranked_matches(
    tx: Tx, terms: list[str], scope: SearchScope, *, offset: int, limit: int
) -> list[tuple[int, float]]:
    """(message rowid, score) of messages whose indexed text holds every term, best
    first (higher score is better; ties newest rowid first).

    SQLite ranks with FTS5 ``bm25`` (weighted per column, negated so higher is better);
    PostgreSQL with ``ts_rank_cd`` over the weighted tsvector.
    """
    if not terms:
        return []
    if scope.identity_id is not None:
        where = "m.identity_id = %s"
        scope_params: list[object] = [scope.identity_id]
    elif scope.tenant_id is not None:
        where = (
            "m.tenant_id = %s AND m.identity_id IN (SELECT id FROM identities"
            " WHERE tenant_id = %s AND is_system = 0 AND status <> 'deleted')"
        )
        scope_params = [scope.tenant_id, scope.tenant_id]
    else:
        raise ValueError("a search needs an identity or a tenant")
    if tx.engine is Engine.SQLITE:
        weights = ", ".join(str(w) for w in BM25_WEIGHTS)
        rows = tx.fetchall(
            f"SELECT m.rowid AS rowid, bm25(fts, {weights}) AS rank"
            " FROM fts JOIN messages AS m ON m.rowid = fts.rowid"
            f" WHERE fts MATCH %s AND {where}"
            " ORDER BY rank, m.rowid DESC LIMIT %s OFFSET %s",
            (fts5_query(terms), *scope_params, limit, offset),
        )
        return [(int(r["rowid"]), -float(r["rank"])) for r in rows]
    rows = tx.fetchall(
        "SELECT m.rowid AS rowid, ts_rank_cd(s.document, q.query) AS rank"
        " FROM plainto_tsquery('postroom', %s) AS q(query), message_search AS s"
        " JOIN messages AS m ON m.rowid = s.message_rowid"
        f" WHERE s.document @@ q.query AND {where}"
        " ORDER BY rank DESC, m.rowid DESC LIMIT %s OFFSET %s",
        (" ".join(terms), *scope_params, limit, offset),
    )
    return [(int(r["rowid"]), float(r["rank"])) for r in rows]

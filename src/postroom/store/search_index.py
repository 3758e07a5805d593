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

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from postroom.search.compiler import Compiled, Sql, fuzzy_candidates
from postroom.store.db import Engine, Row, Tx, member_of

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


_WORD = re.compile(r"[^\W_]+")


def words_only(text: str) -> str:
    """The runs of letters and digits of ``text``, one space between them."""
    return " ".join(_WORD.findall(text))


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
    # PostgreSQL's parser keeps e-mail addresses, host names and paths whole
    # (``ann@example.com`` is one lexeme); FTS5's unicode61 splits them into words. Text
    # goes to to_tsvector as its runs of letters and digits, so both engines index the
    # same words and a query means the same thing on either.
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
            words_only(doc.subject),
            words_only(doc.participants),
            words_only(doc.body_new),
            words_only(" ".join((doc.body_full, doc.attachments, doc.refs))),
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


# --- the query language's statements (postroom.search.compiler builds their parts) -----

# FTS5 bm25 column weights: subject, participants, body_new, body_full, attachments, refs.
BM25_WEIGHTS = (10.0, 5.0, 3.0, 1.0, 2.0, 1.5)
# ts_rank_cd weights in PostgreSQL's order {D, C, B, A}: D full text + attachment names +
# refs, C new text, B participants, A subject.
TS_WEIGHTS = "{0.1, 0.3, 0.5, 1.0}"
COUNT_BOUND = 10_000
FUZZY_CANDIDATES = 1_000


@dataclass(frozen=True)
class SearchScope:
    """Whose mail a search reads: one identity, or every live, non-system identity of a
    tenant."""

    identity_id: str | None = None
    tenant_id: str | None = None

    def sql(self) -> Sql:
        if self.identity_id is not None:
            return Sql("m.identity_id = %s", (self.identity_id,))
        if self.tenant_id is not None:
            return Sql(
                "m.tenant_id = %s AND m.identity_id IN (SELECT id FROM identities"
                " WHERE tenant_id = %s AND is_system = 0 AND status <> 'deleted')",
                (self.tenant_id, self.tenant_id),
            )
        raise ValueError("a search needs an identity or a tenant")


# SQLite keeps ``received_at`` after the message's text in the row, so reading it from
# the table walks the row's overflow pages: statements read it (and ``thread_id``) from
# the ``messages_search`` index instead (0005), and the text match is a rowid list.
_SQLITE_COLUMNS = "SELECT m.rowid AS rowid, m.thread_id AS thread_id, m.received_at AS received_at"
_SQLITE_MESSAGES = " FROM messages AS m INDEXED BY messages_search"


# Up to this many text matches, each is looked up in messages by row ID (a few overflow
# reads cost less than reading the identity's whole index range).
FEW_MATCHES = 200


def _sqlite_matches(tx: Tx, plan: Compiled) -> int | None:
    """How many documents the text match finds on SQLite (FTS5 counts from its doclists,
    without ranking), or None when nothing drives the statement."""
    if plan.engine is not Engine.SQLITE or plan.drive is None:
        return None
    return int(tx.fetchval("SELECT count(*) AS n FROM fts WHERE fts MATCH %s", (plan.drive,)))


def _sqlite_source(plan: Compiled, where: Sql, *, ranked: bool, few: bool) -> Sql:
    weights = ", ".join(str(w) for w in BM25_WEIGHTS)
    if plan.drive is not None and few:
        bm25 = f"-bm25(fts, {weights})" if ranked else "0"
        head = Sql(
            f"{_SQLITE_COLUMNS}, {bm25} AS score"
            " FROM fts JOIN messages AS m ON m.rowid = fts.rowid WHERE fts MATCH %s AND ",
            (plan.drive,),
        )
        return head + where + Sql(" AND ") + plan.where
    if plan.drive is not None and ranked:
        # The bm25 of every match is computed once, into a table the covering index
        # joins against (a join driven from FTS5 would look each row up in messages).
        head = Sql(
            f"WITH f AS MATERIALIZED (SELECT rowid, bm25(fts, {weights}) AS r FROM fts"
            f" WHERE fts MATCH %s) {_SQLITE_COLUMNS}, -f.r AS score{_SQLITE_MESSAGES}"
            " JOIN f ON f.rowid = m.rowid WHERE ",
            (plan.drive,),
        )
        return head + where + Sql(" AND ") + plan.where
    if plan.drive is not None:
        head = Sql(
            f"{_SQLITE_COLUMNS}, 0 AS score{_SQLITE_MESSAGES}"
            " WHERE m.rowid IN (SELECT rowid FROM fts WHERE fts MATCH %s) AND ",
            (plan.drive,),
        )
        return head + where + Sql(" AND ") + plan.where
    if plan.rank is not None and ranked:
        head = Sql(
            f"WITH rk AS MATERIALIZED (SELECT rowid, bm25(fts, {weights}) AS r FROM fts"
            f" WHERE fts MATCH %s) {_SQLITE_COLUMNS}, coalesce(-rk.r, 0) AS score"
            " FROM messages AS m LEFT JOIN rk ON rk.rowid = m.rowid WHERE ",
            (plan.rank,),
        )
    else:
        head = Sql(f"{_SQLITE_COLUMNS}, 0 AS score FROM messages AS m WHERE ")
    return head + where + Sql(" AND ") + plan.where


def _source(plan: Compiled, scope: SearchScope, *, ranked: bool, few: bool = False) -> Sql:
    """``FROM ... WHERE ...`` of a plan, and the ``score`` column when ``ranked``; with
    ``few`` (SQLite) the text match drives the statement row by row."""
    where = scope.sql()
    if plan.engine is Engine.SQLITE:
        return _sqlite_source(plan, where, ranked=ranked, few=few)
    if plan.drive is not None:
        # to_tsquery of a constant is folded when the statement is planned, so the GIN
        # index answers the match (a to_tsquery in FROM hides it from the planner).
        query = Sql("to_tsquery('postroom', %s)", (plan.drive,))
        score = (
            Sql(f"ts_rank_cd('{TS_WEIGHTS}', s.document, ") + query + Sql(")")
            if ranked
            else Sql("0")
        )
        head = (
            Sql("SELECT m.rowid AS rowid, m.thread_id AS thread_id, m.received_at AS received_at, ")
            + score
            + Sql(
                " AS score FROM message_search AS s JOIN messages AS m"
                " ON m.rowid = s.message_rowid WHERE s.document @@ "
            )
            + query
            + Sql(" AND ")
        )
        return head + where + Sql(" AND ") + plan.where
    score_sql = Sql("0")
    if plan.rank is not None and ranked:
        score_sql = Sql(
            f"coalesce(ts_rank_cd('{TS_WEIGHTS}', s.document, to_tsquery('postroom', %s)), 0)",
            (plan.rank,),
        )
    head = (
        Sql("SELECT m.rowid AS rowid, m.thread_id AS thread_id, m.received_at AS received_at, ")
        + score_sql
        + Sql(
            " AS score FROM messages AS m"
            " LEFT JOIN message_search AS s ON s.message_rowid = m.rowid WHERE "
        )
    )
    return head + where + Sql(" AND ") + plan.where


_BY_RANK = " ORDER BY score DESC, received_at DESC, rowid DESC"
_BY_DATE = " ORDER BY received_at DESC, rowid DESC"


@dataclass(frozen=True)
class RankedRow:
    rowid: int
    score: float
    thread_hits: int


def _rows(rows: list[Row]) -> list[RankedRow]:
    return [
        RankedRow(int(r["rowid"]), float(r["score"] or 0), int(r.get("thread_hits") or 1))
        for r in rows
    ]


@contextmanager
def _text_index_first(tx: Tx, plan: Compiled) -> Iterator[None]:
    """On PostgreSQL, with a text match driving the statement, the GIN index finds the
    matches even when most documents match: the planner's sequential scan would
    decompress every document's tsvector to test it (its cost model ignores TOAST), and
    the index answers without reading one. The setting is put back afterwards (after a
    failed statement the transaction is rolled back, and the setting with it)."""
    if plan.engine is not Engine.POSTGRESQL or plan.drive is None:
        yield
        return
    previous = tx.fetchval("SELECT current_setting('enable_seqscan') AS v")
    tx.fetchval("SELECT set_config('enable_seqscan', 'off', true) AS v")
    yield
    tx.fetchval("SELECT set_config('enable_seqscan', %s, true) AS v", (previous,))


def ranked_page(
    tx: Tx,
    plan: Compiled,
    scope: SearchScope,
    *,
    by_date: bool,
    group_threads: bool,
    offset: int,
    limit: int,
) -> list[RankedRow]:
    """One page of hits, best first (or newest first ``by_date``); with
    ``group_threads`` one row per thread — its best message — and how many of the
    thread's messages match."""
    matches = _sqlite_matches(tx, plan)
    if matches == 0:
        return []
    few = matches is not None and matches <= FEW_MATCHES
    inner = _source(plan, scope, ranked=not by_date, few=few)
    # Without text to rank by, every score is 0 and relevance order is date order, which
    # the index gives without sorting every hit.
    unranked = plan.drive is None and plan.rank is None
    order = _BY_DATE if by_date or unranked else _BY_RANK
    if not group_threads:
        stmt = Sql("SELECT * FROM (") + inner + Sql(f") AS x{order} LIMIT %s OFFSET %s")
    else:
        within = "x.received_at DESC, x.rowid DESC"
        if not by_date:
            within = "x.score DESC, " + within
        stmt = (
            Sql(
                "SELECT * FROM (SELECT x.*, row_number() OVER (PARTITION BY x.thread_id"
                f" ORDER BY {within}) AS rn,"
                " count(*) OVER (PARTITION BY x.thread_id) AS thread_hits FROM ("
            )
            + inner
            + Sql(f") AS x) AS y WHERE y.rn = 1{order} LIMIT %s OFFSET %s")
        )
    with _text_index_first(tx, plan):
        rows = tx.fetchall(stmt.text, (*stmt.params, limit, offset))
    return _rows(rows)


def bounded_count(tx: Tx, plan: Compiled, scope: SearchScope, *, group_threads: bool) -> int:
    """How many hits (or threads), counted up to ``COUNT_BOUND + 1``."""
    matches = _sqlite_matches(tx, plan)
    if matches == 0:
        return 0
    inner = _source(plan, scope, ranked=False, few=matches is not None and matches <= FEW_MATCHES)
    if group_threads:
        stmt = (
            Sql("SELECT count(*) AS n FROM (SELECT DISTINCT x.thread_id FROM (")
            + inner
            + Sql(") AS x LIMIT %s) AS c")
        )
    else:
        stmt = Sql("SELECT count(*) AS n FROM (") + inner + Sql(" LIMIT %s) AS c")
    with _text_index_first(tx, plan):
        return int(tx.fetchval(stmt.text, (*stmt.params, COUNT_BOUND + 1)))


def fuzzy_rows(tx: Tx, plan: Compiled, scope: SearchScope) -> list[Row]:
    """Candidates for the trigram fallback, newest first: rows sharing a trigram with a
    fuzzy word in subject, participants or refs, that pass the query's other conditions;
    with the short fields to check them against."""
    if not plan.fuzzy_words:
        return []
    candidates = fuzzy_candidates(plan.engine, plan.fuzzy_words)
    join = ""
    if plan.engine is Engine.POSTGRESQL:
        join = " LEFT JOIN message_search AS s ON s.message_rowid = m.rowid"
    stmt = (
        Sql(
            "SELECT m.rowid AS rowid, m.thread_id AS thread_id, m.received_at AS received_at,"
            " m.subject AS subject, m.from_address AS from_address, m.from_name AS from_name,"
            " m.to_json AS to_json, m.cc_json AS cc_json FROM messages AS m"
            f"{join} WHERE "
        )
        + scope.sql()
        + Sql(" AND ")
        + candidates
        + Sql(" AND ")
        + plan.fuzzy_where
        + Sql(" ORDER BY m.received_at DESC, m.rowid DESC LIMIT %s")
    )
    rows = tx.fetchall(stmt.text, (*stmt.params, FUZZY_CANDIDATES))
    if rows:
        refs = _ref_values(tx, [int(r["rowid"]) for r in rows])
        rows = [{**r, "refs": refs.get(int(r["rowid"]), [])} for r in rows]
    return rows


def _ref_values(tx: Tx, rowids: list[int]) -> dict[int, list[str]]:
    among, params = member_of(tx, "message_rowid", rowids)
    found: dict[int, list[str]] = {}
    for r in tx.fetchall(f"SELECT message_rowid, value FROM refs WHERE {among}", params):
        found.setdefault(int(r["message_rowid"]), []).append(str(r["value"]))
    return found

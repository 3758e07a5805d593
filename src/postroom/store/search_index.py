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

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from postroom.search.compiler import TRUE, Compiled, Sql, fuzzy_candidates
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
    tx.execute(_PG_INDEX, _pg_index_values(message_rowid, identity_id, doc))


# The ranking vector (0007) is the document's A, B and C parts, the new text bounded:
# positions past the first few thousand characters barely move a score.
RANK_BODY_CHARS = 4_000
_PG_VECTORS = (
    " setweight(to_tsvector('postroom', %s), 'A')"
    " || setweight(to_tsvector('postroom', %s), 'B')"
    " || setweight(to_tsvector('postroom', %s), 'C')"
)
_PG_INDEX = (
    "INSERT INTO message_search (message_rowid, identity_id, document, rank_document,"
    f" short_text) VALUES (%s, %s,{_PG_VECTORS} || setweight(to_tsvector('postroom', %s),"
    f" 'D'),{_PG_VECTORS}, %s) ON CONFLICT (message_rowid) DO UPDATE SET"
    " identity_id = excluded.identity_id, document = excluded.document,"
    " rank_document = excluded.rank_document, short_text = excluded.short_text"
)


def _pg_index_values(
    message_rowid: int, identity_id: str, doc: SearchDocument
) -> tuple[object, ...]:
    subject, people = words_only(doc.subject), words_only(doc.participants)
    return (
        message_rowid,
        identity_id,
        subject,
        people,
        words_only(doc.body_new),
        words_only(" ".join((doc.body_full, doc.attachments, doc.refs))),
        subject,
        people,
        words_only(doc.body_new[:RANK_BODY_CHARS]),
        doc.short_text,
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
# A text match with more hits than this is ranked over its RANK_WINDOW most recently
# stored hits in the scope; the others follow them, newest first (docs/search.md).
RANK_WINDOW = 250
# With at most this many messages outside an inbox, its total is counted by FTS5 alone.
FEW_OUTSIDE = 64


def text_matches(tx: Tx, plan: Compiled) -> int | None:
    """How many documents the text match finds on SQLite, in every inbox (FTS5 counts
    from its doclists, without ranking), or None when nothing drives the statement (or
    on PostgreSQL). One search asks once and hands the figure to the statements."""
    if plan.engine is not Engine.SQLITE or plan.drive is None:
        return None
    return int(tx.fetchval("SELECT count(*) AS n FROM fts WHERE fts MATCH %s", (plan.drive,)))


def _sqlite_window(plan: Compiled, where: Sql) -> Sql:
    """The ranked window: the RANK_WINDOW most recently stored text matches that pass
    the scope and the filters, each with its bm25. FTS5 hands the matches out newest
    row ID first, so the statement stops after the window."""
    weights = ", ".join(str(w) for w in BM25_WEIGHTS)
    return (
        Sql(
            f"WITH w AS MATERIALIZED (SELECT fts.rowid AS rowid, bm25(fts, {weights}) AS r"
            " FROM fts JOIN messages AS m ON m.rowid = fts.rowid WHERE fts MATCH %s AND ",
            (plan.drive,),
        )
        + where
        + Sql(" AND ")
        + plan.where
        + Sql(f" ORDER BY fts.rowid DESC LIMIT {RANK_WINDOW}) ")
    )


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
    if plan.drive is not None:
        # Every match, from the covering index (the text match is a row ID list); with
        # ``ranked`` the window's bm25 is the score, and the rest score NULL and follow.
        window = _sqlite_window(plan, where) if ranked else Sql("")
        score = "-w.r" if ranked else "0"
        join = " LEFT JOIN w ON w.rowid = m.rowid" if ranked else ""
        head = window + Sql(
            f"{_SQLITE_COLUMNS}, {score} AS score{_SQLITE_MESSAGES}{join}"
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


def _sqlite_count(tx: Tx, plan: Compiled, scope: SearchScope, matches: int) -> int | None:
    """The total of a text-only search of an inbox holding all but a few of the
    database's messages (a one-inbox installation): the FTS5 count less the matches
    among the few others; None when it does not apply."""
    if plan.where != TRUE or scope.identity_id is None:
        return None
    others = [
        int(r["rowid"])
        for bound in ("<", ">")
        for r in tx.fetchall(
            "SELECT rowid FROM messages INDEXED BY messages_identity_time"
            f" WHERE identity_id {bound} %s LIMIT %s",
            (scope.identity_id, FEW_OUTSIDE + 1),
        )
    ]
    if len(others) > FEW_OUTSIDE:
        return None
    if not others:
        return matches
    among, params = member_of(tx, "rowid", others)
    elsewhere = tx.fetchval(
        f"SELECT count(*) AS n FROM fts WHERE fts MATCH %s AND {among}", (plan.drive, *params)
    )
    return matches - int(elsewhere)


def _pg_query(plan: Compiled) -> Sql:
    # to_tsquery of a constant is folded when the statement is planned, so the GIN
    # index answers the match (a to_tsquery in FROM hides it from the planner).
    return Sql("to_tsquery('postroom', %s)", (plan.drive,))


def _pg_rank(query: Sql) -> Sql:
    """ts_rank_cd over the small ranking vector (0007), not the whole document: the
    document's TOASTed tsvector would be decompressed for every hit ranked."""
    return Sql(f"ts_rank_cd('{TS_WEIGHTS}', s.rank_document, ") + query + Sql(")")


def _pg_window(plan: Compiled, where: Sql) -> Sql:
    """The ranked window on PostgreSQL: the RANK_WINDOW most recently stored text
    matches that pass the scope and the filters (their row IDs)."""
    return (
        Sql(
            "WITH w AS MATERIALIZED (SELECT s.message_rowid AS rowid FROM message_search AS s"
            " JOIN messages AS m ON m.rowid = s.message_rowid WHERE s.document @@ "
        )
        + _pg_query(plan)
        + Sql(" AND ")
        + where
        + Sql(" AND ")
        + plan.where
        + Sql(f" ORDER BY s.message_rowid DESC LIMIT {RANK_WINDOW}) ")
    )


def _window_page(plan: Compiled, scope: SearchScope) -> Sql:
    """A page served from the ranked window alone (the window holds it)."""
    if plan.engine is Engine.SQLITE:
        return _sqlite_window(plan, scope.sql()) + Sql(
            "SELECT w.rowid AS rowid, m.thread_id AS thread_id, m.received_at AS received_at,"
            " -w.r AS score FROM w JOIN messages AS m ON m.rowid = w.rowid"
        )
    return (
        _pg_window(plan, scope.sql())
        + Sql("SELECT m.rowid AS rowid, m.thread_id AS thread_id, m.received_at AS received_at, ")
        + _pg_rank(_pg_query(plan))
        + Sql(
            " AS score FROM w JOIN messages AS m ON m.rowid = w.rowid"
            " JOIN message_search AS s ON s.message_rowid = w.rowid"
        )
    )


def _source(plan: Compiled, scope: SearchScope, *, ranked: bool, few: bool = False) -> Sql:
    """``FROM ... WHERE ...`` of a plan, and the ``score`` column when ``ranked``; with
    ``few`` (SQLite) the text match drives the statement row by row. A ranked text
    match scores the ranked window; the other hits score NULL and follow it."""
    where = scope.sql()
    if plan.engine is Engine.SQLITE:
        return _sqlite_source(plan, where, ranked=ranked, few=few)
    if plan.drive is not None:
        query = _pg_query(plan)
        window, join, score = Sql(""), "", Sql("0")
        if ranked:
            window, join = _pg_window(plan, where), " LEFT JOIN w ON w.rowid = m.rowid"
            score = Sql("CASE WHEN w.rowid IS NOT NULL THEN ") + _pg_rank(query) + Sql(" END")
        head = (
            window
            + Sql(
                "SELECT m.rowid AS rowid, m.thread_id AS thread_id, m.received_at AS received_at, "
            )
            + score
            + Sql(
                " AS score FROM message_search AS s JOIN messages AS m"
                f" ON m.rowid = s.message_rowid{join} WHERE s.document @@ "
            )
            + query
            + Sql(" AND ")
        )
        return head + where + Sql(" AND ") + plan.where
    score_sql = Sql("0")
    if plan.rank is not None and ranked:
        score_sql = Sql(
            f"coalesce(ts_rank_cd('{TS_WEIGHTS}', s.rank_document, to_tsquery('postroom', %s)), 0)",
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


_BY_RANK = " ORDER BY score DESC NULLS LAST, received_at DESC, rowid DESC"
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
    matches: int | None,
) -> list[RankedRow]:
    """One page of hits, best first (or newest first ``by_date``); with
    ``group_threads`` one row per thread — its best message — and how many of the
    thread's messages match. ``matches`` is :func:`text_matches` of the plan."""
    if matches == 0:
        return []
    few = matches is not None and matches <= FEW_MATCHES
    ranked = not by_date
    # Without text to rank by, every score is 0 and relevance order is date order, which
    # the index gives without sorting every hit.
    unranked = plan.drive is None and plan.rank is None
    order = _BY_DATE if by_date or unranked else _BY_RANK
    if plan.drive is not None and not few and ranked:
        inner = _source(plan, scope, ranked=True)
        if not group_threads and offset + limit <= RANK_WINDOW:
            inner = _window_page(plan, scope)
    else:
        inner = _source(plan, scope, ranked=ranked, few=few)
    if not group_threads:
        stmt = Sql("SELECT * FROM (") + inner + Sql(f") AS x{order} LIMIT %s OFFSET %s")
    else:
        within = "x.received_at DESC, x.rowid DESC"
        if not by_date:
            within = "x.score DESC NULLS LAST, " + within
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


def bounded_count(
    tx: Tx, plan: Compiled, scope: SearchScope, *, group_threads: bool, matches: int | None
) -> int:
    """How many hits (or threads), counted up to ``COUNT_BOUND + 1``. ``matches`` is
    :func:`text_matches` of the plan."""
    if matches == 0:
        return 0
    if matches is not None and not group_threads:
        counted = _sqlite_count(tx, plan, scope, matches)
        if counted is not None:
            return min(counted, COUNT_BOUND + 1)
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


# --- rebuilding the index from the stored messages (postroom search reindex) ----------


def reindex_total(tx: Tx) -> int:
    """How many messages a rebuild of the index goes through."""
    return int(tx.fetchval("SELECT count(*) AS n FROM messages"))


def _people(value: object) -> list[tuple[str | None, str]]:
    try:
        people = json.loads(str(value or "[]"))
    except ValueError:
        return []
    if not isinstance(people, list):
        return []
    return [
        (p.get("name") or None, str(p["address"]))
        for p in people
        if isinstance(p, dict) and p.get("address")
    ]


def reindex_batch(tx: Tx, after_rowid: int, size: int) -> tuple[int, int]:
    """Rebuild the index rows of the next ``size`` messages after ``after_rowid`` (row
    ID order) from what is stored: the same document a new message gets. Returns the
    last row ID done and how many were done (0 at the end)."""
    rows = tx.fetchall(
        "SELECT rowid, identity_id, subject, from_address, from_name, to_json, cc_json,"
        " extracted_text, text FROM messages WHERE rowid > %s ORDER BY rowid LIMIT %s",
        (after_rowid, size),
    )
    if not rows:
        return after_rowid, 0
    rowids = [int(r["rowid"]) for r in rows]
    among, params = member_of(tx, "message_rowid", rowids)
    names: dict[int, list[str]] = {}
    for a in tx.fetchall(
        f"SELECT message_rowid, filename FROM attachments WHERE {among}"
        " AND filename IS NOT NULL ORDER BY message_rowid, part_path, id",
        params,
    ):
        names.setdefault(int(a["message_rowid"]), []).append(str(a["filename"]))
    refs = _ref_values(tx, rowids)
    for r in rows:
        rowid = int(r["rowid"])
        sender = [(r["from_name"] or None, str(r["from_address"]))] if r["from_address"] else []
        doc = SearchDocument.build(
            subject=r["subject"],
            participants=[*sender, *_people(r["to_json"]), *_people(r["cc_json"])],
            body_new=r["extracted_text"],
            body_full=r["text"],
            attachment_names=names.get(rowid, []),
            refs=refs.get(rowid, []),
        )
        if tx.engine is Engine.SQLITE:
            unindex_message(tx, rowid)
        index_message(tx, rowid, str(r["identity_id"]), doc)
    return rowids[-1], len(rows)

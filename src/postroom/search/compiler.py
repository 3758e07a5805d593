"""A parsed query compiled to SQL for one engine: the text to match, filters, ranking.

The statements themselves are assembled and run by :mod:`postroom.store.search_index`;
this module turns a syntax tree into their parts, so both engines are compiled side by
side from one tree:

* **drive** — the text conjuncts of the query as one index expression that drives the
  statement and ranks it: an FTS5 ``MATCH`` string on SQLite (ranked with ``bm25``), a
  ``to_tsquery`` string on PostgreSQL (ranked with ``ts_rank_cd``). Present when the
  query's top level has at least one positive text conjunct.
* **where** — everything else as one SQL boolean over ``m`` (messages) and, on
  PostgreSQL, ``s`` (message_search); a text part that cannot be the drive (under an
  ``OR`` with a filter, a lone negation) becomes an index sub-select or ``@@`` there.
* **rank** — without a drive, the positive terms ORed, to rank the filtered rows.
* **fuzzy** — the positive words of the top level and the conjuncts that stay when the
  trigram fallback replaces them.

User words only ever reach an index as letters and digits inside quotes (FTS5) or as
bare lexemes (tsquery), and every value is a bound parameter.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field

from postroom.search.query import And, Filter, Node, Not, Or, Term
from postroom.store.db import Engine

__all__ = ["TRUE", "Compiled", "Sql", "compile_query", "positive_terms", "trigrams"]

# Scripts written without spaces: a substring of three or more of their characters is
# also looked up in the trigram index (subject, participants, refs).
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
MAX_TRIGRAMS = 48


@dataclass(frozen=True)
class Sql:
    text: str
    params: tuple[object, ...] = ()

    def __add__(self, other: Sql) -> Sql:
        return Sql(self.text + other.text, self.params + other.params)


TRUE = Sql("1 = 1")


def _join(parts: list[Sql], op: str) -> Sql:
    if not parts:
        return TRUE
    if len(parts) == 1:
        return parts[0]
    return Sql(
        "(" + f" {op} ".join(p.text for p in parts) + ")",
        tuple(x for p in parts for x in p.params),
    )


@dataclass(frozen=True)
class Compiled:
    engine: Engine
    drive: str | None
    where: Sql
    rank: str | None
    fuzzy_words: tuple[str, ...] = ()
    fuzzy_where: Sql = field(default=TRUE)


def _is_cjk(term: Term) -> bool:
    joined = "".join(term.words)
    return len(joined) >= 3 and _CJK.search(joined) is not None


def _is_text(node: Node) -> bool:
    if isinstance(node, Term):
        return not _is_cjk(node)
    if isinstance(node, Not):
        return _is_text(node.child)
    if isinstance(node, (And, Or)):
        return all(_is_text(c) for c in node.children)
    return False


def positive_terms(node: Node) -> list[Term]:
    """The terms a hit can contain (not under a negation), in query order."""
    if isinstance(node, Term):
        return [node]
    if isinstance(node, (And, Or)):
        return [t for c in node.children for t in positive_terms(c)]
    return []


def _conjuncts(node: Node) -> tuple[Node, ...]:
    return node.children if isinstance(node, And) else (node,)


# --- SQLite FTS5 ---------------------------------------------------------------------


def _fts_term(term: Term) -> str:
    text = '"' + " ".join(term.words) + '"' + (" *" if term.prefix else "")
    return f"{{subject}} : ({text})" if term.field == "subject" else text


def _fts(node: Node) -> str | None:
    """The FTS5 expression of a text node, or None when FTS5 cannot say it (a lone or
    ORed negation)."""
    if isinstance(node, Term):
        return _fts_term(node)
    if isinstance(node, Or):
        parts = [_fts(c) for c in node.children]
        if any(p is None for p in parts):
            return None
        return "(" + " OR ".join(f"({p})" for p in parts) + ")"
    if isinstance(node, And):
        positives = [_fts(c) for c in node.children if not isinstance(c, Not)]
        negatives = [_fts(c.child) for c in node.children if isinstance(c, Not)]
        if not positives or any(p is None for p in (*positives, *negatives)):
            return None
        expr = "(" + " AND ".join(f"({p})" for p in positives) + ")"
        for n in negatives:
            expr = f"({expr} NOT ({n}))"
        return expr
    return None


# --- PostgreSQL tsquery --------------------------------------------------------------


def _tsq_term(term: Term) -> str:
    weight = "A" if term.field == "subject" else ""
    lexemes = []
    for i, word in enumerate(term.words):
        star = "*" if term.prefix and i == len(term.words) - 1 else ""
        suffix = f":{star}{weight}" if star or weight else ""
        lexemes.append(word + suffix)
    return "(" + " <-> ".join(lexemes) + ")"


def _tsq(node: Node) -> str:
    if isinstance(node, Term):
        return _tsq_term(node)
    if isinstance(node, Not):
        return f"!{_tsq(node.child)}"
    if isinstance(node, And):
        return "(" + " & ".join(_tsq(c) for c in node.children) + ")"
    assert isinstance(node, Or)
    return "(" + " | ".join(_tsq(c) for c in node.children) + ")"


# --- filters -------------------------------------------------------------------------


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _contains(column: str, value: str) -> Sql:
    return Sql(f"lower(coalesce({column}, '')) LIKE %s ESCAPE '\\'", (f"%{_like(value)}%",))


def _people(engine: Engine, column: str, value: str) -> Sql:
    pattern = f"%{_like(value)}%"
    if engine is Engine.SQLITE:
        address = "json_extract(j.value, '$.address')"
        name = "json_extract(j.value, '$.name')"
        source = f"json_each(m.{column}) AS j"
    else:
        address, name = "j.value->>'address'", "j.value->>'name'"
        source = f"jsonb_array_elements(m.{column}::jsonb) AS j(value)"
    return Sql(
        f"EXISTS (SELECT 1 FROM {source} WHERE lower(coalesce({address}, '')) LIKE %s"
        f" ESCAPE '\\' OR lower(coalesce({name}, '')) LIKE %s ESCAPE '\\')",
        (pattern, pattern),
    )


def _sender(value: str) -> Sql:
    return _join([_contains("m.from_address", value), _contains("m.from_name", value)], "OR")


_IN = {
    "inbox": "(m.direction = 'inbound' AND m.archived = 0 AND m.status = 'received')",
    "archive": "m.archived = 1",
    "sent": "m.direction = 'outbound'",
    "spam": "m.quarantine_reason = 'spam'",
    "quarantine": "m.status = 'quarantined'",
}
_LABEL = "EXISTS (SELECT 1 FROM labels AS l WHERE l.message_rowid = m.rowid AND l.label = %s)"
_ATTACHMENT = "EXISTS (SELECT 1 FROM attachments AS a WHERE a.message_rowid = m.rowid"


def _filter(engine: Engine, f: Filter, now_ms: int) -> Sql:
    name, value = f.name, f.value
    if name == "from":
        return _sender(str(value))
    if name in ("to", "cc"):
        return _people(engine, f"{name}_json", str(value))
    if name == "participant":
        parts = [_sender(str(value)), _people(engine, "to_json", str(value))]
        return _join([*parts, _people(engine, "cc_json", str(value))], "OR")
    if name == "label":
        return Sql(_LABEL, (value,))
    if name == "thread":
        return Sql("m.thread_id = %s", (value,))
    if name == "in":
        return Sql(_IN[str(value)])
    if name == "is":
        if value == "starred":
            return Sql(_LABEL, ("starred",))
        return Sql("m.read = %s", (1 if value == "read" else 0,))
    if name == "has":
        return Sql(_ATTACHMENT + ")")
    if name == "filename":
        inner = _contains("a.filename", str(value))
        return Sql(_ATTACHMENT + " AND " + inner.text + ")", inner.params)
    if name == "larger":
        return Sql("m.raw_size > %s", (value,))
    if name == "smaller":
        return Sql("m.raw_size < %s", (value,))
    if name == "before":
        return Sql("m.received_at < %s", (value,))
    if name == "after":
        return Sql("m.received_at >= %s", (value,))
    if name in ("older_than", "newer_than"):
        assert isinstance(value, int)
        op = "<" if name == "older_than" else ">="
        return Sql(f"m.received_at {op} %s", (now_ms - value,))
    if name == "domain":
        domain = str(value).lstrip("@")
        return Sql(
            "(lower(coalesce(m.sender_domain, '')) = %s"
            " OR lower(coalesce(m.from_address, '')) LIKE %s ESCAPE '\\'"
            " OR lower(coalesce(m.from_address, '')) LIKE %s ESCAPE '\\')",
            (domain, f"%@{_like(domain)}", f"%.{_like(domain)}"),
        )
    if name == "ref":
        assert isinstance(value, tuple)
        kind, ref_value = value
        sql = "EXISTS (SELECT 1 FROM refs AS r WHERE r.message_rowid = m.rowid"
        if kind:
            return Sql(sql + " AND r.kind = %s AND lower(r.value) = %s)", (kind, ref_value.lower()))
        return Sql(sql + " AND lower(r.value) = %s)", (ref_value.lower(),))
    if name == "direction":
        return Sql("m.direction = %s", (value,))
    assert name == "kind"
    return Sql("m.kind = %s", (value,))


# --- the tree as SQL -----------------------------------------------------------------


def _text_sql(engine: Engine, node: Node) -> Sql:
    if engine is Engine.SQLITE:
        expr = _fts(node)
        if expr is None:
            return _sql(engine, node, 0, structural=True)
        return Sql("m.rowid IN (SELECT rowid FROM fts WHERE fts MATCH %s)", (expr,))
    return Sql("coalesce(s.document @@ to_tsquery('postroom', %s), false)", (_tsq(node),))


def _cjk_sql(engine: Engine, term: Term) -> Sql:
    """A CJK term: the whole word in the text index, or a substring of the short fields."""
    exact = _text_sql(engine, Term(term.words, term.prefix, term.field, term.position))
    joined = " ".join(term.words)
    if engine is Engine.SQLITE:
        column = "{subject} : " if term.field == "subject" else ""
        tri = Sql(
            "m.rowid IN (SELECT rowid FROM fts_tri WHERE fts_tri MATCH %s)",
            (f'{column}"{joined}"',),
        )
    else:
        tri = Sql("coalesce(s.short_text ILIKE %s, false)", (f"%{_like(joined)}%",))
    return Sql(f"({exact.text} OR {tri.text})", exact.params + tri.params)


def _sql(engine: Engine, node: Node, now_ms: int, *, structural: bool = False) -> Sql:
    if not structural and _is_text(node):
        return _text_sql(engine, node)
    if isinstance(node, Term):
        return _cjk_sql(engine, node)
    if isinstance(node, Filter):
        return _filter(engine, node, now_ms)
    if isinstance(node, Not):
        inner = _sql(engine, node.child, now_ms)
        return Sql(f"NOT ({inner.text})", inner.params)
    if isinstance(node, And):
        return _join([_sql(engine, c, now_ms) for c in node.children], "AND")
    assert isinstance(node, Or)
    return _join([_sql(engine, c, now_ms) for c in node.children], "OR")


def trigrams(word: str) -> list[str]:
    """The three-character substrings of a folded word (what FTS5's trigram tokenizer
    and an ``ILIKE`` over pg_trgm can look up)."""
    return [word[i : i + 3] for i in range(len(word) - 2)]


@functools.lru_cache(maxsize=65_536)
def fold(word: str) -> str:
    """Case and diacritics folded, as ``unicode61 remove_diacritics 2`` and
    ``unaccent`` + ``simple`` compare words (cached: mail repeats its words)."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def compile_query(engine: Engine, node: Node, now_ms: int) -> Compiled:
    """The parts of the statements for ``node`` on ``engine``."""
    conjuncts = _conjuncts(node)
    text = [c for c in conjuncts if _is_text(c)]
    rest = [c for c in conjuncts if not _is_text(c)]
    has_positive = any(not isinstance(c, Not) for c in text)
    drive: str | None = None
    if has_positive:
        together: Node = text[0] if len(text) == 1 else And(tuple(text))
        drive = _fts(together) if engine is Engine.SQLITE else _tsq(together)
    where = _join([_sql(engine, c, now_ms) for c in (rest if drive else conjuncts)], "AND")
    rank: str | None = None
    positives = positive_terms(node)
    if drive is None and positives:
        ranked: Node = positives[0] if len(positives) == 1 else Or(tuple(positives))
        rank = _fts(ranked) if engine is Engine.SQLITE else _tsq(ranked)
    fuzzy_terms = [c for c in conjuncts if isinstance(c, Term)]
    words = tuple(dict.fromkeys(fold(w) for t in fuzzy_terms for w in t.words if len(w) >= 3))
    kept = [c for c in conjuncts if not isinstance(c, Term)]
    fuzzy_where = _join([_sql(engine, c, now_ms) for c in kept], "AND")
    return Compiled(engine, drive, where, rank, words, fuzzy_where)


def fuzzy_candidates(engine: Engine, words: tuple[str, ...]) -> Sql:
    """Rows sharing at least one trigram with a fuzzy word, in subject, participants or
    refs."""
    grams = list(dict.fromkeys(g for w in words for g in trigrams(w)))[:MAX_TRIGRAMS]
    if engine is Engine.SQLITE:
        expr = " OR ".join(f'"{g}"' for g in grams)
        # "+" keeps the planner from driving the statement by the trigram matches (with
        # statistics it would look up and sort thousands of rows: 46 instead of 4 ms on
        # the benchmark); the newest rows of the inbox are read in order instead and
        # tested against the matches, stopping at the candidate limit.
        return Sql("+m.rowid IN (SELECT rowid FROM fts_tri WHERE fts_tri MATCH %s)", (expr,))
    return _join([Sql("s.short_text ILIKE %s", (f"%{_like(g)}%",)) for g in grams], "OR")

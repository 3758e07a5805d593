"""Keyword search over the lexical index: the query as words, ranked hits, snippets.

The query language (``from:``, ``label:``, phrases, ...) comes later; today ``q`` is
words. A word is a run of letters and digits; everything else separates words, so no
character a user types can reach the index as syntax (FTS5 operators, quotes,
parentheses, ``NEAR``, ``*``, NUL bytes): each word is matched as itself and every word
must occur (AND). Matching folds case and diacritics, like both indexes do.

The FTS5 tables are contentless and PostgreSQL's ``ts_headline`` would re-parse whole
bodies, so snippets are cut here, from the first characters of the message's text: a
window around the first matched word, HTML-escaped, each matched word in ``<mark>``.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass

from postroom.errors import InvalidInput
from postroom.mailbox.messages import Person
from postroom.store import messages as message_rows
from postroom.store import search_index
from postroom.store.db import Tx
from postroom.store.search_index import SearchScope

__all__ = [
    "MAX_TERMS",
    "SearchHit",
    "fold",
    "highlight",
    "query_terms",
    "search",
]

MAX_TERMS = 16
MAX_TERM_CHARS = 64
MAX_OFFSET = 10_000
# How much of a message's text a snippet is looked for in.
SNIPPET_SCAN_CHARS = 20_000
SNIPPET_CHARS = 200
_SNIPPET_LEAD = 60

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class SearchHit:
    message_id: str
    thread_id: str
    identity_id: str
    subject: str | None
    sender: Person | None
    received_at: int
    score: float
    snippet: str


def fold(word: str) -> str:
    """Case and diacritics folded, as ``unicode61 remove_diacritics 2`` and
    ``unaccent`` + ``simple`` compare words."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def query_terms(q: str) -> list[str]:
    """The words of a query, in order, without repeats; InvalidInput ``invalid_query``
    when there is none."""
    words = _WORD.findall(unicodedata.normalize("NFC", q))
    terms: list[str] = []
    for word in words:
        word = word[:MAX_TERM_CHARS]
        if word.casefold() not in (t.casefold() for t in terms):
            terms.append(word)
    if not terms:
        raise InvalidInput("the query has no words to search for", code="invalid_query")
    if len(terms) > MAX_TERMS:
        raise InvalidInput(f"a query has at most {MAX_TERMS} words", code="invalid_query")
    return terms


def highlight(text: str | None, terms: list[str], width: int = SNIPPET_CHARS) -> str | None:
    """A window of ``text`` around the first word matching a term: HTML-escaped, every
    matching word wrapped in ``<mark>``; None when no word matches."""
    if not text:
        return None
    wanted = {fold(t) for t in terms}
    flat = " ".join(unicodedata.normalize("NFC", text).split())
    first = next((m for m in _WORD.finditer(flat) if fold(m.group()) in wanted), None)
    if first is None:
        return None
    start = max(0, first.start() - _SNIPPET_LEAD)
    if start > 0:
        space = flat.find(" ", start, first.start())
        start = space + 1 if space != -1 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", first.end(), end)
        end = space if space != -1 else end
    window = flat[start:end]
    parts: list[str] = []
    pos = 0
    for m in _WORD.finditer(window):
        if fold(m.group()) in wanted:
            parts.append(html.escape(window[pos : m.start()]))
            parts.append(f"<mark>{html.escape(m.group())}</mark>")
            pos = m.end()
    parts.append(html.escape(window[pos:]))
    return ("…" if start > 0 else "") + "".join(parts) + ("…" if end < len(flat) else "")


def search(tx: Tx, q: str, scope: SearchScope, *, offset: int, limit: int) -> list[SearchHit]:
    """Ranked hits ``offset`` .. ``offset + limit`` of the query in the scope."""
    terms = query_terms(q)
    if offset > MAX_OFFSET:
        return []
    ranked = search_index.ranked_matches(tx, terms, scope, offset=offset, limit=limit)
    rows = {
        int(r["rowid"]): r
        for r in message_rows.search_rows(tx, [rowid for rowid, _ in ranked], SNIPPET_SCAN_CHARS)
    }
    hits = []
    for rowid, score in ranked:
        row = rows.get(rowid)
        if row is None:
            continue
        sender = Person(row["from_address"], row["from_name"]) if row.get("from_address") else None
        candidates = (
            row.get("extracted_head"),
            row.get("text_head"),
            row.get("subject"),
            " ".join(x for x in (row.get("from_name"), row.get("from_address")) if x),
        )
        snippet = next(
            (s for s in (highlight(c, terms) for c in candidates) if s is not None),
            html.escape(row.get("snippet") or ""),
        )
        hits.append(
            SearchHit(
                message_id=row["id"],
                thread_id=row["thread_id"],
                identity_id=row["identity_id"],
                subject=row.get("subject"),
                sender=sender,
                received_at=int(row["received_at"]),
                score=round(score, 6),
                snippet=snippet,
            )
        )
    return hits

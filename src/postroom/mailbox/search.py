"""Keyword search: a query in the language of docs/search.md, ranked hits, snippets.

One search: the query is parsed (:func:`postroom.search.query.parse`; a malformed one
raises ``QueryError``, code ``invalid_query``, with the position) and compiled for the
engine; one statement returns the page, ranked (FTS5 ``bm25`` / ``ts_rank_cd``, ties
newest first) or newest first (``sort="date"``), one hit per thread with
``group="thread"``. The total is counted up to 10,000 (``total_exact`` is False past
it). When the exact query finds nothing, the trigram fallback looks for the query's
words with typos in subjects, participants and refs (``fuzzy=True``).

The FTS5 tables are contentless and PostgreSQL's ``ts_headline`` would re-parse whole
bodies, so snippets are cut here from the first characters of the message's text: the
window holding the most distinct matched words, in two forms — HTML-escaped with each
match in ``<mark>``, and plain text with each match between ``**``.
"""

from __future__ import annotations

import functools
import html
import itertools
import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from postroom.errors import NotFound
from postroom.mailbox.messages import Person
from postroom.search.compiler import Compiled, compile_query, fold, positive_terms
from postroom.search.query import QueryError, parse
from postroom.store import messages as message_rows
from postroom.store import search_index
from postroom.store import tenancy as directory
from postroom.store.db import Row, Tx
from postroom.store.search_index import SearchScope

__all__ = [
    "MAX_OFFSET",
    "QueryError",
    "SearchHit",
    "SearchResult",
    "fold",
    "highlight",
    "scope_for",
    "search",
    "similarity",
]

MAX_OFFSET = 10_000
# How much of a message's text a snippet is looked for in.
SNIPPET_SCAN_CHARS = 20_000
SNIPPET_CHARS = 200
_SNIPPET_LEAD = 60
FUZZY_MIN_SIMILARITY = 0.3

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


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
    snippet_text: str
    thread_hits: int | None = None


@dataclass(frozen=True)
class SearchResult:
    hits: list[SearchHit]
    total: int
    total_exact: bool
    fuzzy: bool


Matcher = Callable[[str], bool]


class _WordMatcher:
    """Whether a word of the text matches one of ``(folded word, is prefix)``; with
    ``ascii``, one regular expression finding those words in ASCII text (where folding
    is lower-casing), so a long text is not walked word by word in Python."""

    def __init__(self, words: Iterable[tuple[str, bool]]) -> None:
        pairs = list(words)
        self.exact = {w for w, prefix in pairs if not prefix and not _CJK.search(w)}
        self.prefixes = tuple(w for w, prefix in pairs if prefix)
        self.inside = tuple(w for w, prefix in pairs if not prefix and _CJK.search(w))
        self.matches: Matcher = functools.lru_cache(maxsize=16_384)(self._matches)
        # An ASCII word folds to itself lower-cased, so only ASCII query words can match
        # in ASCII text, and a regex over word boundaries finds exactly those tokens.
        alternatives = sorted(
            [re.escape(w) for w in self.exact if w.isascii()]
            + [re.escape(w) + r"[^\W_]*" for w in self.prefixes if w.isascii()],
            key=len,
            reverse=True,
        )
        body = "|".join(alternatives) if alternatives else r"(?!x)x"
        # Group 1: a whole ASCII token that matches (ASCII-only case folding); group 2:
        # a token with a non-ASCII character, for the word-by-word check.
        self.mixed = re.compile(
            rf"(?<![^\W_])(?:((?ai:{body}))|(?=[^\W_]*[^\x00-\x7f])([^\W_]+))(?![^\W_])"
        )
        # Searched in lower-cased ASCII text: no look-behind, so a single word is found
        # by re's fast literal search; the word start is checked in _found.
        self.ascii = re.compile(rf"(?:{body})(?![^\W_])")

    def _matches(self, token: str) -> bool:
        folded = fold(token)
        return (
            folded in self.exact
            or (bool(self.prefixes) and folded.startswith(self.prefixes))
            or any(w in folded for w in self.inside)
        )

    def __call__(self, token: str) -> bool:
        return bool(self.matches(token))


def _matcher(words: Iterable[tuple[str, bool]]) -> Matcher:
    """Whether a word of the text matches one of ``(folded word, is prefix)``."""
    return _WordMatcher(words)


class _Span:
    """A matching word of ASCII text, found in its lower-cased copy."""

    __slots__ = ("_end", "_start", "_text")

    def __init__(self, text: str, start: int, end: int) -> None:
        self._text, self._start, self._end = text, start, end

    def start(self) -> int:
        return self._start

    def end(self) -> int:
        return self._end

    def group(self) -> str:
        return self._text[self._start : self._end]


class _Found(Protocol):
    def start(self) -> int: ...
    def end(self) -> int: ...
    def group(self) -> str: ...


def _found(flat: str, matches: Matcher) -> list[_Found]:
    """The first 200 matching words of ``flat``."""
    if isinstance(matches, _WordMatcher) and flat.isascii():
        lowered = flat.lower()
        spans = (
            _Span(flat, m.start(), m.end())
            for m in matches.ascii.finditer(lowered)
            if not m.start() or not lowered[m.start() - 1].isalnum()
        )
        return list(itertools.islice(spans, 200))
    if isinstance(matches, _WordMatcher):
        check = matches.matches
        hits = (m for m in matches.mixed.finditer(flat) if m.group(1) or check(m.group(2)))
        return list(itertools.islice(hits, 200))
    return list(itertools.islice((m for m in _WORD.finditer(flat) if matches(m.group())), 200))


def _best(found: list[_Found], width: int) -> _Found:
    """The first match of the window (``width`` less the lead) holding the most distinct
    matching words."""
    best, best_count = found[0], 0
    counts: dict[str, int] = {}
    end = 0
    for i, first in enumerate(found):
        end = max(end, i)
        limit = first.start() + width - _SNIPPET_LEAD
        while end < len(found) and found[end].end() <= limit:
            word = fold(found[end].group())
            counts[word] = counts.get(word, 0) + 1
            end += 1
        if len(counts) > best_count:
            best, best_count = first, len(counts)
        if i < end:
            word = fold(first.group())
            counts[word] -= 1
            if not counts[word]:
                del counts[word]
    return best


def highlight(
    text: str | None, matches: Matcher, width: int = SNIPPET_CHARS
) -> tuple[str, str] | None:
    """The window of ``text`` holding the most distinct matching words, as (HTML with
    ``<mark>``, plain text with ``**``); None when no word matches."""
    if not text:
        return None
    flat = " ".join((text if text.isascii() else unicodedata.normalize("NFC", text)).split())
    found = _found(flat, matches)
    if not found:
        return None
    best = _best(found, width)
    start = max(0, best.start() - _SNIPPET_LEAD)
    if start > 0:
        space = flat.find(" ", start, best.start())
        start = space + 1 if space != -1 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", best.end(), end)
        end = space if space != -1 else end
    window = flat[start:end]
    marked: list[str] = []
    plain: list[str] = []
    pos = 0
    for m in _found(window, matches):
        marked.append(html.escape(window[pos : m.start()]))
        marked.append(f"<mark>{html.escape(m.group())}</mark>")
        plain.append(window[pos : m.start()] + f"**{m.group()}**")
        pos = m.end()
    marked.append(html.escape(window[pos:]))
    plain.append(window[pos:])
    lead = "…" if start > 0 else ""
    tail = "…" if end < len(flat) else ""
    return lead + "".join(marked) + tail, lead + "".join(plain) + tail


# --- fuzzy matching ------------------------------------------------------------------


def _grams(word: str) -> set[str]:
    padded = f"  {word} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


def _edits(a: str, b: str, bound: int) -> int:
    """Optimal string alignment distance (a swap of neighbours is one edit), stopping
    past ``bound``."""
    if abs(len(a) - len(b)) > bound:
        return bound + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


@functools.lru_cache(maxsize=65_536)
def similarity(word: str, token: str) -> float:
    """How alike two folded words are: pg_trgm's trigram similarity, raised to 0.5 for a
    word one edit away (two for words of eight letters or more)."""
    a, b = _grams(word), _grams(token)
    score = len(a & b) / len(a | b)
    bound = 2 if len(word) >= 8 else 1
    if score < 0.5 and len(word) >= 4 and _edits(word, token, bound) <= bound:
        score = 0.5
    return score


def _short_words(row: Row) -> set[str]:
    people: list[str] = [row.get("from_address") or "", row.get("from_name") or ""]
    for column in ("to_json", "cc_json"):
        for person in _json_list(row.get(column)):
            if isinstance(person, dict):
                people.extend(str(person.get(k) or "") for k in ("address", "name"))
    text = " ".join([row.get("subject") or "", *people, *row.get("refs", [])])
    return {fold(w) for w in _WORD.findall(text)}


def _json_list(text: Any) -> list[Any]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _fuzzy(rows: list[Row], words: tuple[str, ...]) -> list[tuple[Row, float, set[str]]]:
    """The rows where every word has a near match, with the mean best similarity and
    the words of the row that matched."""
    kept = []
    for row in rows:
        tokens = _short_words(row)
        if not tokens:
            continue
        scores, matched = [], set()
        for word in words:
            best, hit = max(((similarity(word, t), t) for t in sorted(tokens)), default=(0.0, ""))
            if best < FUZZY_MIN_SIMILARITY:
                break
            scores.append(best)
            matched.add(hit)
        else:
            kept.append((row, sum(scores) / len(scores), matched))
    return kept


# --- the search ----------------------------------------------------------------------


def _hit(row: Row, score: float, matches: Matcher | None, thread_hits: int | None) -> SearchHit:
    sender = Person(row["from_address"], row["from_name"]) if row.get("from_address") else None
    candidates = (
        row.get("extracted_head"),
        row.get("text_head"),
        row.get("subject"),
        " ".join(x for x in (row.get("from_name"), row.get("from_address")) if x),
    )
    snippet = None
    if matches is not None:
        marked = (highlight(c, matches) for c in candidates)
        snippet = next((s for s in marked if s is not None), None)
    if snippet is None:
        plain = row.get("snippet") or ""
        snippet = (html.escape(plain), plain)
    return SearchHit(
        message_id=row["id"],
        thread_id=row["thread_id"],
        identity_id=row["identity_id"],
        subject=row.get("subject"),
        sender=sender,
        received_at=int(row["received_at"]),
        score=round(score, 6),
        snippet=snippet[0],
        snippet_text=snippet[1],
        thread_hits=thread_hits,
    )


def _hits(
    tx: Tx, ranked: list[tuple[int, float, int | None]], matches: Matcher | None
) -> list[SearchHit]:
    rows = {
        int(r["rowid"]): r
        for r in message_rows.search_rows(tx, [r[0] for r in ranked], SNIPPET_SCAN_CHARS)
    }
    return [
        _hit(rows[rowid], score, matches, count) for rowid, score, count in ranked if rowid in rows
    ]


def search(
    tx: Tx,
    q: str,
    scope: SearchScope,
    *,
    offset: int,
    limit: int,
    now_ms: int,
    sort: str = "relevance",
    group: str | None = None,
) -> SearchResult:
    """Hits ``offset`` .. ``offset + limit`` of the query in the scope."""
    node = parse(q)
    plan = compile_query(tx.engine, node, now_ms)
    by_date, threads = sort == "date", group == "thread"
    if offset > MAX_OFFSET:
        return SearchResult([], 0, True, False)
    words = [
        (fold(w), t.prefix and i == len(t.words) - 1)
        for t in positive_terms(node)
        for i, w in enumerate(t.words)
    ]
    page = search_index.ranked_page(
        tx, plan, scope, by_date=by_date, group_threads=threads, offset=offset, limit=limit
    )
    if page and len(page) < limit:
        total = offset + len(page)
    elif page or offset > 0:
        total = search_index.bounded_count(tx, plan, scope, group_threads=threads)
    else:
        total = 0
    if total == 0:
        fuzzy = _fuzzy_search(tx, plan, scope, by_date, threads, offset, limit)
        if fuzzy is not None:
            return fuzzy
    ranked = [(r.rowid, r.score, r.thread_hits if threads else None) for r in page]
    return SearchResult(
        _hits(tx, ranked, _matcher(words) if words else None),
        min(total, search_index.COUNT_BOUND),
        total <= search_index.COUNT_BOUND,
        False,
    )


def _fuzzy_search(
    tx: Tx,
    plan: Compiled,
    scope: SearchScope,
    by_date: bool,
    threads: bool,
    offset: int,
    limit: int,
) -> SearchResult | None:
    """The trigram fallback; None when the query has no word for it or it finds
    nothing."""
    if not plan.fuzzy_words:
        return None
    kept = _fuzzy(search_index.fuzzy_rows(tx, plan, scope), plan.fuzzy_words)
    if not kept:
        return None
    if by_date:
        kept.sort(key=lambda k: (-int(k[0]["received_at"]), -int(k[0]["rowid"])))
    else:
        kept.sort(key=lambda k: (-k[1], -int(k[0]["received_at"]), -int(k[0]["rowid"])))
    counts: dict[str, int] = {}
    for row, _, _ in kept:
        counts[row["thread_id"]] = counts.get(row["thread_id"], 0) + 1
    if threads:
        seen: set[str] = set()
        unique = []
        for item in kept:
            if item[0]["thread_id"] not in seen:
                seen.add(item[0]["thread_id"])
                unique.append(item)
        kept = unique
    matched = {w for _, _, words in kept for w in words}
    ranked = [
        (int(row["rowid"]), score, counts[row["thread_id"]] if threads else None)
        for row, score, _ in kept[offset : offset + limit]
    ]
    hits = _hits(tx, ranked, _matcher((w, False) for w in matched))
    return SearchResult(hits, len(kept), True, True)


def scope_for(tx: Tx, identity: str | None, tenant: str | None) -> SearchScope:
    """The scope the CLI names: an identity by ID or address, else a tenant by ID or
    slug, else the default tenant. NotFound when it names nothing live."""
    if identity is not None:
        found = directory.get_identity(tx, identity) if identity.startswith("idn_") else None
        if found is None and "@" in identity:
            route = directory.lookup_address(tx, identity.strip().lower())
            found = directory.get_identity(tx, route.identity_id) if route else None
        if found is None or found.is_system or found.status == "deleted":
            raise NotFound(f"no identity {identity[:80]!r}", code="identity_not_found")
        return SearchScope(identity_id=found.id)
    if tenant is not None:
        named = directory.get_tenant(tx, tenant) or directory.get_tenant_by_slug(tx, tenant)
        if named is None:
            raise NotFound(f"no tenant {tenant[:80]!r}", code="tenant_not_found")
        return SearchScope(tenant_id=named.id)
    default = directory.get_default_tenant(tx)
    if default is None:
        raise NotFound("no default tenant: run postroom init", code="tenant_not_found")
    return SearchScope(tenant_id=default.id)

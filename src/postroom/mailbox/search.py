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
from collections.abc import Callable, Iterable, Iterator
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
# The head of a text searched first for a snippet.
_SNIPPET_HEAD_CHARS = 4_000
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


def _found(flat: str, matches: Matcher) -> Iterator[_Found]:
    """The matching words of ``flat``, in order (at most 200 are ever looked at)."""
    if isinstance(matches, _WordMatcher) and flat.isascii():
        lowered = flat.lower()
        spans: Iterator[_Found] = (
            _Span(flat, m.start(), m.end())
            for m in matches.ascii.finditer(lowered)
            if not m.start() or not lowered[m.start() - 1].isalnum()
        )
    elif isinstance(matches, _WordMatcher):
        check = matches.matches
        spans = (m for m in matches.mixed.finditer(flat) if m.group(1) or check(m.group(2)))
    else:
        spans = (m for m in _WORD.finditer(flat) if matches(m.group()))
    return itertools.islice(spans, 200)


def _most_distinct(matches: Matcher) -> int | None:
    """How many distinct words can match at most (None: no bound, e.g. a prefix)."""
    if isinstance(matches, _WordMatcher) and not matches.prefixes and not matches.inside:
        return len(matches.exact)
    return None


def _best(found: Iterator[_Found], width: int, most: int | None) -> tuple[_Found | None, int]:
    """The first match of the window (``width`` less the lead) holding the most distinct
    matching words, and how many it holds; None when nothing matches. Matches are read
    only as far as needed: once a window holds ``most`` distinct words, no later one can
    hold more."""
    seen: list[_Found] = []

    def at(i: int) -> _Found | None:
        while len(seen) <= i:
            following = next(found, None)
            if following is None:
                return None
            seen.append(following)
        return seen[i]

    first = at(0)
    if first is None:
        return None, 0
    best, best_count = first, 0
    counts: dict[str, int] = {}
    end = 0
    i = 0
    while (first := at(i)) is not None:
        end = max(end, i)
        limit = first.start() + width - _SNIPPET_LEAD
        while (following := at(end)) is not None and following.end() <= limit:
            word = fold(following.group())
            counts[word] = counts.get(word, 0) + 1
            end += 1
        if len(counts) > best_count:
            best, best_count = first, len(counts)
            if most is not None and best_count >= most:
                break
        if i < end:
            word = fold(first.group())
            counts[word] -= 1
            if not counts[word]:
                del counts[word]
        i += 1
    return best, best_count


def highlight(
    text: str | None, matches: Matcher, width: int = SNIPPET_CHARS
) -> tuple[str, str] | None:
    """The window of ``text`` holding the most distinct matching words, as (HTML with
    ``<mark>``, plain text with ``**``); None when no word matches."""
    if not text:
        return None
    text = text if text.isascii() else unicodedata.normalize("NFC", text)
    # Whitespace does not change where words start and end, so a text without a match
    # is turned down before it is flattened.
    if next(_found(text, matches), None) is None:
        return None
    most = _most_distinct(matches)
    flat = ""
    best = None
    # Most snippets are found in the first lines: the text's head is flattened and
    # searched first, and the whole text only when the head cannot settle the window.
    for head in (_SNIPPET_HEAD_CHARS, None):
        whole = head is None or len(text) <= head
        flat = " ".join((text if whole else text[:head]).split())
        best, held = _best(_found(flat, matches), width, most)
        # The head settles it when its window holds every word that can match (no later
        # window holds more) and ends well before the head is cut.
        settled = most is not None and held >= most
        if whole or (best is not None and settled and best.start() + width < len(flat) - 99):
            break
    if best is None:
        return None
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
    # One edit changes at most four of a word's trigrams (a swap of neighbours), so a
    # word missing more of them is too far for the alignment to be worth computing.
    near = score < 0.5 and len(word) >= 4 and len(a - b) <= 4 * bound
    if near and _edits(word, token, bound) <= bound:
        score = 0.5
    return score


@functools.lru_cache(maxsize=16_384)
def _words_of(text: str) -> frozenset[str]:
    """The folded words of a short field (cached: senders and subjects repeat)."""
    return frozenset(fold(w) for w in _WORD.findall(text))


@functools.lru_cache(maxsize=4_096)
def _people_words(people_json: str) -> frozenset[str]:
    """The folded words of the addresses and names of a To or Cc list."""
    parts = [
        str(person.get(k) or "")
        for person in _json_list(people_json)
        if isinstance(person, dict)
        for k in ("address", "name")
    ]
    return _words_of(" ".join(parts))


def _short_words(row: Row) -> frozenset[str]:
    fields = (row.get("subject"), row.get("from_address"), row.get("from_name"))
    words = [_words_of(f) for f in fields if f]
    words.extend(_people_words(row[c]) for c in ("to_json", "cc_json") if row.get(c))
    words.extend(_words_of(ref) for ref in row.get("refs", ()))
    return frozenset().union(*words)


def _json_list(text: Any) -> list[Any]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _fuzzy(rows: list[Row], words: tuple[str, ...]) -> list[tuple[Row, float, set[str]]]:
    """The rows where every word has a near match, with the mean best similarity and
    the words of the row that matched."""
    tokens = [_short_words(row) for row in rows]
    # Each distinct word of the candidates is compared with each query word once; a
    # row then only looks up which of its words are near.
    vocabulary = frozenset().union(*tokens)
    near = [
        {t: score for t in vocabulary if (score := similarity(word, t)) >= FUZZY_MIN_SIMILARITY}
        for word in words
    ]
    kept = []
    for row, own in zip(rows, tokens, strict=True):
        scores, matched = [], set()
        for close in near:
            common = own & close.keys()
            if not common:
                break
            best, hit = max((close[t], t) for t in common)
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
    matches = search_index.text_matches(tx, plan)
    page = search_index.ranked_page(
        tx,
        plan,
        scope,
        by_date=by_date,
        group_threads=threads,
        offset=offset,
        limit=limit,
        matches=matches,
    )
    if page and len(page) < limit:
        total = offset + len(page)
    elif page or offset > 0:
        total = search_index.bounded_count(tx, plan, scope, group_threads=threads, matches=matches)
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

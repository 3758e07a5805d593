"""The search query language: tokens, grammar, syntax tree, errors that name the position.

What a user types (docs/search.md has the whole reference)::

    invoice "late fee" -draft (march OR april) repo*
    from:alice subject:"weekly report" label:finance is:unread has:attachment
    larger:2M before:2024-03-01 newer_than:2w ref:order:1234 in:inbox

The grammar (``OR`` binds looser than the implicit ``AND``; ``AND`` may be written)::

    query    := or_expr EOF
    or_expr  := and_expr ("OR" and_expr)*
    and_expr := unary (["AND"] unary)*
    unary    := ("-" | "NOT") unary | primary
    primary  := "(" or_expr ")" | FIELD ":" value | PHRASE | WORD

A word is matched as the runs of letters and digits it holds (``foo-bar`` is the phrase
``foo bar``), so nothing a user types reaches an index as syntax. ``name:value`` with a
name that is not a field is text. Anything malformed raises :class:`QueryError` with
the 0-based character position of the fault.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime

from postroom.errors import InvalidInput

__all__ = [
    "FIELDS",
    "MAX_DEPTH",
    "MAX_TERMS",
    "And",
    "Filter",
    "Node",
    "Not",
    "Or",
    "QueryError",
    "Term",
    "Token",
    "parse",
    "text_words",
    "tokenize",
]

MAX_QUERY_CHARS = 1_000
MAX_TERMS = 32
MAX_DEPTH = 16
MAX_WORD_CHARS = 64

_WORD = re.compile(r"[^\W_]+")


class QueryError(InvalidInput):
    """A query that cannot be parsed; ``position`` is the 0-based offset of the fault."""

    code = "invalid_query"

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at position {position})", code="invalid_query")
        self.position = position
        self.reason = message


# --- syntax tree --------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """Text to find: one word, or a phrase of words in order; ``prefix`` makes the last
    word a prefix; ``field`` is None (every text field) or ``"subject"``."""

    words: tuple[str, ...]
    prefix: bool = False
    field: str | None = None
    position: int = 0


@dataclass(frozen=True)
class Filter:
    """A field that is not ranked text: ``name`` and its checked ``value``."""

    name: str
    value: str | int | tuple[str, str]
    position: int = 0


@dataclass(frozen=True)
class Not:
    child: Node


@dataclass(frozen=True)
class And:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Node, ...]


Node = Term | Filter | Not | And | Or


# --- fields -------------------------------------------------------------------------

IN_VALUES = ("inbox", "archive", "sent", "spam", "quarantine")
IS_VALUES = ("unread", "read", "starred")
HAS_VALUES = ("attachment",)
DIRECTIONS = ("inbound", "outbound")
KINDS = (
    "normal",
    "automated",
    "dsn",
    "list",
    "calendar",
    "mdn",
    "transactional",
    "marketing",
    "auto_reply",
)
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3}
_AGES = {"h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000, "m": 30 * 86_400_000}
_AGES["y"] = 365 * 86_400_000

FIELDS = (
    "from",
    "to",
    "cc",
    "participant",
    "subject",
    "label",
    "thread",
    "in",
    "is",
    "has",
    "filename",
    "larger",
    "smaller",
    "before",
    "after",
    "older_than",
    "newer_than",
    "domain",
    "ref",
    "direction",
    "kind",
)


def _choice(name: str, value: str, allowed: tuple[str, ...], position: int) -> str:
    folded = value.lower()
    if folded not in allowed:
        raise QueryError(f"{name}: takes one of {', '.join(allowed)}", position)
    return folded


def _size(name: str, value: str, position: int) -> int:
    m = re.fullmatch(r"(\d{1,12})([a-z]*)", value.lower())
    if m is None or m.group(2) not in _UNITS:
        raise QueryError(f"{name}: takes a size such as 500, 10K or 2M", position)
    return int(m.group(1)) * _UNITS[m.group(2)]


def _date(name: str, value: str, position: int) -> int:
    m = re.fullmatch(r"(\d{4})[-/](\d{1,2})[-/](\d{1,2})", value)
    try:
        if m is None:
            raise ValueError(value)
        day = datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=UTC)
    except ValueError:
        raise QueryError(f"{name}: takes a date such as 2024-03-01", position) from None
    return int(day.timestamp() * 1000)


def _age(name: str, value: str, position: int) -> int:
    m = re.fullmatch(r"(\d{1,6})([hdwmy])", value.lower())
    if m is None:
        raise QueryError(f"{name}: takes an age such as 12h, 7d, 2w, 3m or 1y", position)
    return int(m.group(1)) * _AGES[m.group(2)]


def _field(name: str, value: str, quoted: bool, position: int, value_at: int) -> Node:
    """The node of ``name:value``; ``position`` is where the field starts."""
    if name == "subject":
        words = text_words(value)
        if not words:
            raise QueryError("subject: needs a word to find", value_at)
        prefix = not quoted and value.endswith("*")
        return Term(tuple(words), prefix=prefix, field="subject", position=position)
    if name in ("from", "to", "cc", "participant", "filename", "domain", "label"):
        text = value.strip().lower()
        if not text:
            raise QueryError(f"{name}: needs a value", value_at)
        return Filter(name, text[:320], position)
    if name == "thread":
        return Filter(name, value.strip()[:64], position)
    if name == "in":
        return Filter(name, _choice(name, value, IN_VALUES, value_at), position)
    if name == "is":
        return Filter(name, _choice(name, value, IS_VALUES, value_at), position)
    if name == "has":
        return Filter(name, _choice(name, value, HAS_VALUES, value_at), position)
    if name == "direction":
        return Filter(name, _choice(name, value, DIRECTIONS, value_at), position)
    if name == "kind":
        return Filter(name, _choice(name, value, KINDS, value_at), position)
    if name in ("larger", "smaller"):
        return Filter(name, _size(name, value, value_at), position)
    if name in ("before", "after"):
        return Filter(name, _date(name, value, value_at), position)
    if name in ("older_than", "newer_than"):
        return Filter(name, _age(name, value, value_at), position)
    assert name == "ref"
    kind, sep, ref_value = value.strip().partition(":")
    if sep and kind and ref_value:
        return Filter(name, (kind.lower(), ref_value[:200]), position)
    return Filter(name, ("", value.strip()[:200]), position)


def text_words(text: str) -> list[str]:
    """The words of free text: runs of letters and digits, NFC, at most 64 characters."""
    return [w[:MAX_WORD_CHARS] for w in _WORD.findall(unicodedata.normalize("NFC", text))]


# --- tokens -------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    """``kind`` is one of ``( ) OR AND NOT - PHRASE WORD FIELD``; ``name`` is the field
    name of a FIELD; ``quoted`` says the value was a quoted string."""

    kind: str
    text: str
    position: int
    name: str = ""
    quoted: bool = False
    value_at: int = 0


_BREAK = frozenset(' \t\r\n\f\v()"')


def _quoted(q: str, start: int) -> tuple[str, int]:
    """The text of the quoted string opening at ``start`` and the index after it."""
    end = q.find('"', start + 1)
    if end == -1:
        raise QueryError("a quoted phrase is not closed", start)
    return q[start + 1 : end], end + 1


def tokenize(q: str) -> list[Token]:
    """The tokens of a query, in order."""
    if "\x00" in q:
        raise QueryError("the query holds a NUL character", q.index("\x00"))
    tokens: list[Token] = []
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c.isspace():
            i += 1
        elif c in "()":
            tokens.append(Token(c, c, i))
            i += 1
        elif c == '"':
            text, i2 = _quoted(q, i)
            tokens.append(Token("PHRASE", text, i, quoted=True))
            i = i2
        elif c == "-" and i + 1 < n and not q[i + 1].isspace() and q[i + 1] != ")":
            tokens.append(Token("-", c, i))
            i += 1
        else:
            start = i
            while i < n and q[i] not in _BREAK:
                i += 1
            word = q[start:i]
            name, sep, value = word.partition(":")
            if sep and name.lower() in FIELDS:
                value_at = start + len(name) + 1
                if value == "" and i < n and q[i] == '"':
                    value, i = _quoted(q, i)
                    tokens.append(
                        Token("FIELD", value, start, name.lower(), quoted=True, value_at=value_at)
                    )
                    continue
                if value == "":
                    raise QueryError(f"{name.lower()}: needs a value", value_at)
                tokens.append(Token("FIELD", value, start, name.lower(), value_at=value_at))
            elif word in ("OR", "AND", "NOT"):
                tokens.append(Token(word, word, start))
            elif word == "-":
                raise QueryError("a '-' must be followed by what to leave out", start)
            else:
                tokens.append(Token("WORD", word, start))
    return tokens


# --- grammar ------------------------------------------------------------------------


class _Parser:
    def __init__(self, q: str) -> None:
        self.q = q
        self.tokens = tokenize(q)
        self.i = 0
        self.terms = 0

    def peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def end(self) -> int:
        return len(self.q)

    def parse(self) -> Node | None:
        if not self.tokens:
            return None
        node = self.or_expr(0)
        token = self.peek()
        if token is not None:
            raise QueryError("unexpected ')' without a matching '('", token.position)
        return node

    def or_expr(self, depth: int) -> Node | None:
        parts: list[Node] = []
        node = self.and_expr(depth)
        if node is not None:
            parts.append(node)
        while (token := self.peek()) is not None and token.kind == "OR":
            self.i += 1
            if node is None:
                raise QueryError("OR needs something on its left", token.position)
            node = self.and_expr(depth)
            if node is None:
                raise QueryError("OR needs something on its right", token.position)
            parts.append(node)
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        flat: list[Node] = []
        for part in parts:
            flat.extend(part.children if isinstance(part, Or) else (part,))
        return Or(tuple(flat))

    def and_expr(self, depth: int) -> Node | None:
        parts: list[Node] = []
        while (token := self.peek()) is not None and token.kind not in ("OR", ")"):
            if token.kind == "AND":
                self.i += 1
                following = self.peek()
                if not parts or following is None or following.kind in ("OR", ")", "AND"):
                    raise QueryError("AND needs something on both sides", token.position)
                continue
            node = self.unary(depth)
            if node is not None:
                parts.append(node)
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        flat: list[Node] = []
        for part in parts:
            flat.extend(part.children if isinstance(part, And) else (part,))
        return And(tuple(flat))

    def unary(self, depth: int) -> Node | None:
        token = self.peek()
        assert token is not None
        if token.kind in ("-", "NOT"):
            self.i += 1
            following = self.peek()
            if following is None or following.kind in ("OR", "AND", ")"):
                raise QueryError(
                    f"{token.text!r} must be followed by what to leave out", token.position
                )
            if depth >= MAX_DEPTH:
                raise QueryError(f"the query nests deeper than {MAX_DEPTH} levels", token.position)
            child = self.unary(depth + 1)
            if child is None:
                raise QueryError("there is nothing to leave out", token.position)
            return child.child if isinstance(child, Not) else Not(child)
        return self.primary(depth)

    def primary(self, depth: int) -> Node | None:
        token = self.peek()
        assert token is not None
        self.i += 1
        if token.kind == "(":
            if depth >= MAX_DEPTH:
                raise QueryError(f"the query nests deeper than {MAX_DEPTH} levels", token.position)
            node = self.or_expr(depth + 1)
            closing = self.peek()
            if closing is None or closing.kind != ")":
                raise QueryError("'(' is not closed", token.position)
            self.i += 1
            if node is None:
                raise QueryError("the parentheses hold nothing to find", token.position)
            return node
        if token.kind == "FIELD":
            self.count(token.position)
            return _field(token.name, token.text, token.quoted, token.position, token.value_at)
        words = text_words(token.text)
        if not words:
            # Punctuation alone ("...", "&") finds nothing and is not an error.
            return None
        self.count(token.position)
        prefix = token.kind == "WORD" and token.text.endswith("*")
        return Term(tuple(words), prefix=prefix, position=token.position)

    def count(self, position: int) -> None:
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise QueryError(f"a query has at most {MAX_TERMS} terms", position)


def parse(q: str) -> Node:
    """The syntax tree of a query; :class:`QueryError` when it is malformed or holds
    nothing to search for."""
    if len(q) > MAX_QUERY_CHARS:
        raise QueryError(f"a query has at most {MAX_QUERY_CHARS} characters", MAX_QUERY_CHARS)
    node = _Parser(q).parse()
    if node is None:
        raise QueryError("the query has nothing to search for", 0)
    return node

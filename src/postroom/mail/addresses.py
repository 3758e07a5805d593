"""Address lists as real mail writes them, read into :class:`Mailbox` values.

The standard library's ``policy.default`` raises on groups such as
``To: unlisted-recipients:;`` (FIELD-NOTES §8), and compat32's ``getaddresses`` splits
``Doe, John <john@example.com>`` into two. This reader tokenises once with a regular
expression and then assembles mailboxes, accepting: groups (their members are kept,
an empty group gives nothing), comments (a comment is the display name when there is no
phrase), display names with unquoted commas, encoded words in names, routes, and missing
closing brackets.

Normalisation: the local part is lower-cased (Postroom treats addresses as case-blind, as
every mailbox provider does), the domain is lower-cased and written as its IDNA A-label.
Bounds (seed 003): an address over 320 octets is dropped, not truncated; a field keeps
its first 256 addresses in header order. A display name over 256 characters is dropped
(the address stays).
"""

from __future__ import annotations

import re
from functools import lru_cache

import idna

from postroom.mail.headers import decode_words, fold_whitespace
from postroom.mail.message import MAX_ADDRESS_OCTETS, MAX_RECIPIENTS, Mailbox

__all__ = [
    "AddressList",
    "clear_cache",
    "normalise_address",
    "parse_address_list",
    "parse_mailbox",
]

MAX_NAME_CHARS = 256

_TOKENS = re.compile(
    r"""
      (?P<quoted>"(?:[^"\\]|\\.)*(?:"|$))
    | (?P<angle><[^<>]*(?:>|$))
    | (?P<literal>\[[^\[\]]*(?:\]|$))
    | (?P<special>[,;:@])
    | (?P<open>\()
    | (?P<atom>[^\s"(),:;<>@\[\]]+)
    | (?P<space>\s+)
    | (?P<other>[\])>])
    """,
    re.VERBOSE | re.DOTALL,
)
_DOT_ATOM = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~\x80-\U0010ffff-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~\x80-\U0010ffff-]+)*$"
)
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_ESCAPE = re.compile(r"\\(.)")


class AddressList(tuple[Mailbox, ...]):
    """Mailboxes of one field; ``dropped`` says a bound or a bad address removed some."""

    dropped: bool = False


def _comment_end(text: str, start: int) -> int:
    """Index just past the comment opening at ``start`` (comments nest)."""
    depth = 0
    index = start
    length = len(text)
    while index < length:
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return length


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    length = len(text)
    while position < length:
        match = _TOKENS.match(text, position)
        if match is None:  # pragma: no cover - every character matches one branch
            position += 1
            continue
        kind = match.lastgroup or "other"
        if kind == "open":
            end = _comment_end(text, position)
            tokens.append(("comment", text[position + 1 : end - 1]))
            position = end
            continue
        if kind != "space" and kind != "other":
            tokens.append((kind, match.group()))
        elif kind == "space" and tokens and tokens[-1][0] != "space":
            tokens.append(("space", " "))
        position = match.end()
    return tokens


def _unquote(token: str) -> str:
    inner = token[1:-1] if token.endswith('"') and len(token) > 1 else token[1:]
    return _ESCAPE.sub(r"\1", inner) if "\\" in inner else inner


def _domain(domain: str) -> str | None:
    domain = domain.strip().rstrip(".").lower()
    if not domain:
        return None
    if domain.startswith("["):
        return domain if domain.endswith("]") and len(domain) > 2 else None
    if not domain.isascii():
        try:
            domain = idna.encode(domain, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            try:
                domain = domain.encode("idna").decode("ascii")
            except UnicodeError:
                return None
        domain = domain.lower()
    if len(domain) > 253:
        return None
    labels = domain.split(".")
    if not all(_LABEL.match(label) for label in labels):
        return None
    return domain


def normalise_address(local: str, domain: str) -> str | None:
    """``local@domain`` normalised, or None when it is not a usable address."""
    local = local.strip()
    if local.startswith('"'):
        local = _unquote(local)
    if not local or any(ord(char) < 32 or char == "\x7f" for char in local):
        return None
    local = local.lower()
    if not _DOT_ATOM.match(local):
        local = '"' + local.replace("\\", "\\\\").replace('"', '\\"') + '"'
    normalised_domain = _domain(domain)
    if normalised_domain is None:
        return None
    address = f"{local}@{normalised_domain}"
    if len(address.encode("utf-8", "surrogatepass")) > MAX_ADDRESS_OCTETS:
        return None
    return address


_COMMENT = re.compile(r"\((?:[^()\\]|\\.)*\)")


def _addr_spec(text: str) -> str | None:
    if "(" in text:
        for _ in range(8):
            text, count = _COMMENT.subn("", text)
            if not count:
                break
    text = text.strip()
    if text.lower().startswith("mailto:"):
        text = text[7:]
    if ":" in text and text.startswith("@"):
        # A source route (@relay1,@relay2:user@example.com): only the mailbox counts.
        text = text.rsplit(":", 1)[1]
    local, at, domain = text.rpartition("@")
    if not at:
        return None
    if not local.startswith('"'):
        local = "".join(local.split())
    return normalise_address(local, "".join(domain.split()))


def _name(parts: list[str]) -> str | None:
    name = fold_whitespace(decode_words(" ".join(parts)))
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'":
        name = name[1:-1].strip()
    if not name or len(name) > MAX_NAME_CHARS:
        return None
    return name


def _phrase_text(tokens: list[tuple[str, str]]) -> list[str]:
    """The words of a phrase; tokens not separated by whitespace stay one word."""
    words: list[str] = []
    glue = False
    for kind, value in tokens:
        if kind == "quoted":
            text = _unquote(value)
        elif kind in ("atom", "literal") or (kind == "special" and value == "@"):
            text = value
        else:
            glue = False
            continue
        if glue and words:
            words[-1] += text
        else:
            words.append(text)
        glue = True
    return words


def _mailbox(tokens: list[tuple[str, str]]) -> tuple[str | None, list[str], bool]:
    """Read one mailbox's tokens: (address, display-name words, had an angle-addr)."""
    for index, (kind, value) in enumerate(tokens):
        if kind == "angle":
            inner = value[1:-1] if value.endswith(">") else value[1:]
            phrase = _phrase_text(tokens[:index])
            if not phrase:
                phrase = [v for k, v in tokens if k == "comment"]
            return _addr_spec(inner), phrase, True
    # No angle brackets: the addr-spec is the run of tokens around the last "@".
    at_positions = [i for i, (k, v) in enumerate(tokens) if k == "special" and v == "@"]
    comments = [v for k, v in tokens if k == "comment"]
    if not at_positions:
        return None, _phrase_text(tokens) or comments, False
    at = at_positions[-1]
    start = at
    while start > 0 and tokens[start - 1][0] in ("atom", "quoted"):
        start -= 1
    end = at + 1
    while end < len(tokens) and tokens[end][0] == "space":
        end += 1
    while end < len(tokens) and tokens[end][0] in ("atom", "literal"):
        end += 1
    spec = "".join(v for k, v in tokens[start:end] if k != "space")
    leftover = _phrase_text(tokens[:start]) + _phrase_text(tokens[end:])
    return _addr_spec(spec), comments or leftover, False


# Mailing-list traffic repeats the same To/Cc values; a small cache of short values saves
# most of the work. Long values are never cached, so a flood of huge headers costs no memory.
_CACHED_CHARS = 1024


def parse_address_list(value: str | None, limit: int = MAX_RECIPIENTS) -> AddressList:
    """All mailboxes of an address-list field, bounded; never raises."""
    if not value:
        return AddressList()
    if len(value) <= _CACHED_CHARS:
        return _parse_cached(value, limit)
    return _parse(value, limit)


@lru_cache(maxsize=4096)
def _parse_cached(value: str, limit: int) -> AddressList:
    return _parse(value, limit)


def clear_cache() -> None:
    """Forget cached address lists (benchmarks start cold with it)."""
    _parse_cached.cache_clear()


def _parse(value: str, limit: int) -> AddressList:
    tokens = _tokens(value)
    mailboxes: list[Mailbox] = []
    dropped = False
    current: list[tuple[str, str]] = []
    carried_phrase: list[str] = []
    seen_angle = False

    def finish() -> None:
        nonlocal carried_phrase, dropped, seen_angle
        seen_angle = False
        meaningful = list(current)
        current.clear()
        if all(kind == "space" for kind, _ in meaningful):
            return
        address, phrase, angled = _mailbox(meaningful)
        if address is None:
            has_at = any(k == "special" and v == "@" for k, v in meaningful)
            if not angled and not has_at:
                # "Doe, John <john@example.com>": a phrase alone before a comma belongs
                # to the next mailbox's display name.
                carried_phrase = carried_phrase + phrase
                return
            carried_phrase = []
            dropped = True
            return
        if angled and carried_phrase:
            phrase = [" ".join(carried_phrase) + ",", *phrase]
        carried_phrase = []
        if len(mailboxes) >= limit:
            dropped = True
            return
        mailboxes.append(Mailbox(address=address, name=_name(phrase)))

    for kind, token in tokens:
        if len(mailboxes) >= limit:
            dropped = True
            break
        if kind == "special" and token == ",":
            finish()
        elif kind == "special" and token == ";":
            finish()
            carried_phrase = []
        elif kind == "special" and token == ":" and not seen_angle:
            # A group name ("Team: a@x, b@y;"); members follow and are kept.
            current.clear()
            carried_phrase = []
        else:
            if kind == "angle":
                seen_angle = True
            current.append((kind, token))
    else:
        finish()
    result = AddressList(mailboxes)
    result.dropped = dropped
    return result


def parse_mailbox(value: str | None) -> tuple[Mailbox | None, bool]:
    """The first mailbox of a single-address field (From, Sender) and a dropped flag."""
    found = parse_address_list(value)
    return (found[0] if found else None), found.dropped

"""Header sections, encoded words (RFC 2047) and parameters (RFC 2045/2231), tolerantly.

Everything here accepts what real mail sends: raw UTF-8 or cp1252 bytes in headers,
encoded words split in the middle of a character, encoded words inside quoted strings,
RFC 2231 continuations out of order, unquoted parameter values with spaces. Nothing
raises on bad input; the worst case is text that reads a little wrong.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator
from urllib.parse import unquote_to_bytes

from postroom.mail.charsets import decode_text

__all__ = [
    "Headers",
    "decode_base64_lenient",
    "decode_words",
    "fold_whitespace",
    "parse_content_type",
    "parse_header_block",
    "parse_params",
]


class Headers:
    """The fields of one header section, in order; names lower case, values unfolded."""

    __slots__ = ("_fields", "_index")

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self._fields = fields
        self._index: dict[str, list[str]] | None = None

    def _by_name(self) -> dict[str, list[str]]:
        if self._index is None:
            index: dict[str, list[str]] = {}
            for name, value in self._fields:
                index.setdefault(name, []).append(value)
            self._index = index
        return self._index

    def get(self, name: str) -> str | None:
        """The first field of that name (lower case), or None."""
        values = self._by_name().get(name)
        return values[0] if values else None

    def get_last(self, name: str) -> str | None:
        """The last field of that name (lower case), or None. The MIME fields of an entity
        are read this way: RFC 8621 gives a field's last instance as its value."""
        values = self._by_name().get(name)
        return values[-1] if values else None

    def get_all(self, name: str) -> list[str]:
        return self._by_name().get(name, [])

    def __contains__(self, name: object) -> bool:
        return name in self._by_name()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def _header_end(buf: bytes, start: int, end: int) -> tuple[int, int]:
    """Where the header section ends and the body starts (the blank line between)."""
    if buf.startswith(b"\n", start):
        return start, start + 1
    if buf.startswith(b"\r\n", start):
        return start, start + 2
    lf = buf.find(b"\n\n", start, end)
    crlf = buf.find(b"\n\r\n", start, end)
    if lf < 0 and crlf < 0:
        return end, end
    if crlf < 0 or (0 <= lf < crlf):
        return lf + 1, lf + 2
    return crlf + 1, crlf + 3


def _decode_block(block: bytes) -> list[str]:
    if block.isascii():
        return block.decode("ascii").split("\n")
    try:
        return block.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        # Mixed encodings happen (a UTF-8 Subject next to a cp1252 From): decode per line.
        return [decode_text(line) for line in block.split(b"\n")]


def parse_header_block(buf: bytes, start: int, end: int) -> tuple[Headers, int]:
    """Parse the header section at ``buf[start:end]``; returns it and the body offset.

    A line that is neither a field nor a continuation ends the section there, as in the
    standard library's compat32 parser: what follows is read as body, not lost.
    """
    block_end, body_start = _header_end(buf, start, end)
    lines = _decode_block(buf[start:block_end])
    fields: list[tuple[str, str]] = []
    name: str | None = None
    value_parts: list[str] = []
    for number, line in enumerate(lines):
        if line.endswith("\r"):
            line = line[:-1]
        if line[:1] in (" ", "\t"):
            if name is not None:
                value_parts.append(line)
            continue
        colon = line.find(":")
        field_name = line[:colon].rstrip(" \t") if colon > 0 else ""
        if not field_name or " " in field_name or "\t" in field_name:
            if number == 0 and line.startswith("From "):
                # An mbox separator line left in front of the message.
                continue
            if not line:
                continue
            if name is not None:
                fields.append((name, "".join(value_parts).strip()))
            # The body starts at this line; offsets are counted in decoded characters,
            # so find the line again in the bytes.
            return Headers(fields), _find_line_start(buf, start, block_end, number)
        if name is not None:
            fields.append((name, "".join(value_parts).strip()))
        name = field_name.lower()
        value_parts = [line[colon + 1 :]]
    if name is not None:
        fields.append((name, "".join(value_parts).strip()))
    return Headers(fields), body_start


def _find_line_start(buf: bytes, start: int, end: int, number: int) -> int:
    position = start
    for _ in range(number):
        newline = buf.find(b"\n", position, end)
        if newline < 0:
            return end
        position = newline + 1
    return position


_WHITESPACE = re.compile(r"\s+")


def fold_whitespace(text: str) -> str:
    """Runs of whitespace (line breaks included) become one space; ends stripped."""
    return _WHITESPACE.sub(" ", text).strip()


# Encoded words. The text part may hold spaces: broken encoders emit them, and decoders
# in the wild accept them.
_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([bBqQ])\?([^?]*)\?=")
_B64_JUNK = re.compile(rb"[^A-Za-z0-9+/]")


def decode_base64_lenient(data: bytes) -> bytes:
    """Base64 that tolerates missing padding, junk characters and a dangling symbol."""
    try:
        return binascii.a2b_base64(data)
    except (binascii.Error, ValueError):
        cleaned = _B64_JUNK.sub(b"", data)
        cleaned = cleaned[: len(cleaned) - (len(cleaned) % 4 == 1)]
        cleaned += b"=" * (-len(cleaned) % 4)
        try:
            return binascii.a2b_base64(cleaned)
        except (binascii.Error, ValueError):
            return b""


def _decode_word(encoding: str, payload: str) -> bytes:
    raw = payload.encode("utf-8", "surrogateescape")
    if encoding in "bB":
        return decode_base64_lenient(raw)
    return binascii.a2b_qp(raw, header=True)


def decode_words(text: str) -> str:
    """Decode RFC 2047 encoded words; whitespace between adjacent words is dropped.

    Adjacent words in the same charset are joined as bytes before decoding, because
    encoders split multi-byte characters across words.
    """
    if "=?" not in text:
        return text
    out: list[str] = []
    pending_charset: str | None = None
    pending = bytearray()
    position = 0
    for match in _ENCODED_WORD.finditer(text):
        between = text[position : match.start()]
        adjacent = pending_charset is not None and not between.strip()
        charset = match.group(1).split("*", 1)[0].lower()
        data = _decode_word(match.group(2), match.group(3))
        if not adjacent or charset != pending_charset:
            if pending_charset is not None:
                out.append(decode_text(bytes(pending), pending_charset))
                pending = bytearray()
            if not adjacent:
                out.append(between)
            pending_charset = charset
        pending += data
        position = match.end()
    if pending_charset is not None:
        out.append(decode_text(bytes(pending), pending_charset))
    out.append(text[position:])
    return "".join(out)


def _split_params(text: str) -> list[str]:
    if '"' not in text:
        return text.split(";")
    segments: list[str] = []
    current: list[str] = []
    quoted = False
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == ";" and not quoted:
            segments.append("".join(current))
            current = []
            continue
        current.append(char)
    segments.append("".join(current))
    return segments


# Only \\ and \" are unescaped in parameter values: Windows mailers send paths such as
# "C:\Documents\file.doc" in quotes without escaping, and a backslash before any other
# character is far more often a path separator than an escape (compat32 does the same).
_ESCAPE = re.compile(r'\\([\\"])')


def _unquote(value: str) -> str:
    value = value.strip()
    if value.startswith('"'):
        closing = value.endswith('"') and len(value) > 1
        value = value[1:-1] if closing else value[1:]
        if "\\" in value:
            value = _ESCAPE.sub(r"\1", value)
    return value


def parse_params(text: str) -> dict[str, str]:
    """Parameters after the value of a structured field, RFC 2231 assembled.

    The first occurrence of a plain name wins; an RFC 2231 value of the same name
    replaces a plain one, as RFC 2231 section 4.1 suggests for legacy fallbacks.
    """
    params: dict[str, str] = {}
    extended: dict[str, dict[int, tuple[bool, str]]] = {}
    for segment in _split_params(text):
        name, equals, value = segment.partition("=")
        name = name.strip().lower()
        if not equals or not name:
            continue
        if "*" not in name:
            params.setdefault(name, _unquote(value))
            continue
        base, _, rest = name.partition("*")
        if not base:
            continue
        encoded = rest.endswith("*") or rest == ""
        section_text = rest.rstrip("*")
        if section_text and not section_text.isdigit():
            continue
        section = int(section_text) if section_text and len(section_text) <= 4 else 0
        sections = extended.setdefault(base, {})
        if section not in sections and len(sections) < 1000:
            sections[section] = (encoded, _unquote(value))
    for base, sections in extended.items():
        charset: str | None = None
        data = bytearray()
        for position, index in enumerate(sorted(sections)):
            encoded, value = sections[index]
            if encoded:
                if position == 0 and value.count("'") >= 2:
                    charset, _, value = value.split("'", 2)
                    charset = charset or None
                data += unquote_to_bytes(value)
            else:
                data += value.encode("utf-8", "surrogateescape")
        params[base] = decode_text(bytes(data), charset)
    return params


_TOKEN = re.compile(r"^[a-z0-9!#$&.+^_-]+/[a-z0-9!#$&.+^_-]+$")


def parse_content_type(
    value: str | None, default: str = "text/plain"
) -> tuple[str, dict[str, str]]:
    """``type/subtype`` in lower case and its parameters; unreadable values give default."""
    if not value:
        return default, {}
    head, _, rest = value.partition(";")
    if "(" in head:
        head = re.sub(r"\([^)]*\)", " ", head)
    words = head.split(None, 1)
    main = words[0].lower() if words else ""
    if len(words) > 1:
        # "multipart/mixed boundary=x": the semicolon before the parameters is missing.
        rest = words[1] + (";" + rest if rest else "")
    if not _TOKEN.match(main):
        main = {"text": "text/plain", "multipart": "multipart/mixed"}.get(main, "")
        if not main:
            return default, parse_params(rest) if rest else {}
    return main, parse_params(rest) if rest else {}

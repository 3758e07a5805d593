"""The MIME tree of a message as offsets into its bytes, built with bounds.

Why not the standard library's parser: on hostile input it recurses once per nesting
level (``RecursionError`` on 1,000 nested multiparts), reads bodies line by
line into Python strings (570 MB more memory for a 100 MB base64 attachment) and builds an
object per part before any bound can apply. See docs/adr/0005-mime-parser.md.

This parser finds boundaries with ``bytes.find`` and keeps each part as ``(buffer,
header offset, body start, body end)``; bodies are decoded only when asked, and
attachments are decoded in chunks so that their size and digest never need the whole
decoded payload in memory. Bounds: :data:`MAX_DEPTH` levels of nesting and
:data:`MAX_PARTS` entities; what lies beyond is kept in the raw bytes but not walked,
and the tree says so (``degraded``).

Part paths follow IMAP section numbers (RFC 3501 §6.4.5): the children of the top-level
multipart are ``1``, ``2``...; a single-part message's body is ``1``; the parts of an
attached message are numbered under the attachment (``2.1``, ``2.2``).
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from postroom.mail.headers import (
    Headers,
    decode_base64_lenient,
    parse_content_type,
    parse_header_block,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_PARTS",
    "MimePart",
    "MimeTree",
    "decode_body",
    "iter_decoded",
    "parse_tree",
]

MAX_DEPTH = 32
MAX_PARTS = 500
# After this many lines that start like a delimiter but are not one ("--boundaryX"),
# stop looking: only a hostile message has them.
_MAX_FALSE_DELIMITERS = 10_000
_CHUNK = 1 << 20
# Characters that may continue a boundary (RFC 2046 bchars): a delimiter followed by one
# of them is a longer boundary, not this one.
_BCHARS = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=?")
_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# Everything but the alphabet and the padding character is removed before decoding.
_B64_DELETE = bytes(c for c in range(256) if c not in _B64_ALPHABET + b"=")
# What well-formed base64 contains: the alphabet, padding and line breaks.
_B64_WELL_FORMED = _B64_ALPHABET + b"=\r\n\t "
# How much of a text part is checked for characters base64 does not use.
_SAMPLE = 4 << 20


@dataclass(eq=False, slots=True)
class MimePart:
    """One entity: its headers and where its body lies in ``buf``."""

    buf: bytes
    path: str
    depth: int
    headers: Headers
    content_type: str
    params: dict[str, str]
    body_start: int
    body_end: int
    children: list[MimePart] = field(default_factory=list)
    # For message/rfc822 (and message/global): the attached message's top entity.
    embedded: MimePart | None = None
    # True when this entity is a container whose contents were not walked (a bound).
    unwalked: bool = False
    # True when no delimiter closes this part: the multipart around it was cut short or
    # never split. Its content is kept, as an attachment rather than as body text (the
    # reading of Stalwart's mail-parser: content of unknown extent is not the message).
    unterminated: bool = False

    @property
    def damaged(self) -> bool:
        """Content of unknown extent (no closing delimiter) or of a base64 text body
        with characters base64 never contains: not to be read as the message's text."""
        if self.unterminated:
            return True
        if self.transfer_encoding != "base64" or not self.content_type.startswith("text/"):
            return False
        sample = self.buf[self.body_start : min(self.body_end, self.body_start + _SAMPLE)]
        return bool(sample.translate(None, _B64_WELL_FORMED))

    @property
    def is_multipart(self) -> bool:
        return self.content_type.startswith("multipart/")

    @property
    def transfer_encoding(self) -> str:
        value = self.headers.get("content-transfer-encoding")
        return value.strip().lower() if value else "7bit"

    @property
    def disposition(self) -> str | None:
        value = self.headers.get("content-disposition")
        if not value:
            return None
        kind = value.split(";", 1)[0].strip().lower()
        return kind if kind in ("inline", "attachment") else None

    def walk(self) -> Iterator[MimePart]:
        """This entity and its descendants in order, not entering attached messages."""
        stack = [self]
        while stack:
            part = stack.pop()
            yield part
            stack.extend(reversed(part.children))

    def walk_all(self) -> Iterator[MimePart]:
        """Like :meth:`walk`, entering attached messages too."""
        stack = [self]
        while stack:
            part = stack.pop()
            yield part
            if part.embedded is not None:
                stack.append(part.embedded)
            stack.extend(reversed(part.children))


@dataclass(eq=False, slots=True)
class MimeTree:
    """The parsed tree and what the bounds cut."""

    root: MimePart
    part_count: int = 0
    degraded: bool = False
    reasons: list[str] = field(default_factory=list)

    def find(self, path: str) -> MimePart | None:
        """The entity at an IMAP section path; an attached message's part comes before
        the multipart inside it that shares its number."""
        for part in self.root.walk_all():
            if part.path == path:
                return part
        return None


class _Context:
    __slots__ = ("count", "degraded", "reasons")

    def __init__(self) -> None:
        self.count = 0
        self.degraded = False
        self.reasons: list[str] = []

    def degrade(self, reason: str) -> None:
        self.degraded = True
        if reason not in self.reasons:
            self.reasons.append(reason)


def _delimiters(
    buf: bytes, start: int, end: int, boundary: bytes, ctx: _Context
) -> tuple[list[tuple[int, int]], bool]:
    """Delimiter lines of ``boundary`` in ``buf[start:end]``: (line start, next line start).

    The second value says whether the close delimiter was found.
    """
    marker = b"\n--" + boundary
    found: list[tuple[int, int]] = []
    false_hits = 0
    # ``line_start`` is where a candidate delimiter line begins; the first line of the
    # body has no newline before it inside the range, so it is checked on its own.
    line_start = start if buf.startswith(marker[1:], start) else -1
    if line_start < 0:
        hit = buf.find(marker, start, end)
        line_start = hit + 1 if hit >= 0 else -1
    while line_start >= 0:
        after = line_start + len(marker) - 1
        if buf.startswith(b"--", after, end):
            found.append((line_start, end))
            return found, True
        if after < end and buf[after] in _BCHARS:
            false_hits += 1
            if false_hits > _MAX_FALSE_DELIMITERS:
                ctx.degrade("boundary_scan")
                return found, False
        else:
            newline = buf.find(b"\n", after, end)
            found.append((line_start, newline + 1 if newline >= 0 else end))
            if len(found) > MAX_PARTS + 1:
                return found, False
        hit = buf.find(marker, after, end)
        line_start = hit + 1 if hit >= 0 else -1
    # A close delimiter that lost its line break ("...text--boundary--" at the very end)
    # still closes: the alternative is to read the rest as a part of unknown extent.
    close = b"--" + boundary + b"--"
    tail = buf.rfind(close, found[-1][1] if found else start, end)
    if found and tail >= 0 and not buf[tail + len(close) : end].strip():
        found.append((tail, end))
        return found, True
    return found, False


def _trim_line_break(buf: bytes, start: int, end: int) -> int:
    """The CRLF before a delimiter belongs to the delimiter (RFC 2046 §5.1.1)."""
    if end > start and buf[end - 1] == 0x0A:
        end -= 1
        if end > start and buf[end - 1] == 0x0D:
            end -= 1
    return end


def _parse_entity(
    buf: bytes,
    start: int,
    end: int,
    depth: int,
    ctx: _Context,
    default_type: str = "text/plain",
    open_ended: bool = True,
) -> MimePart:
    """One entity; ``open_ended`` says no delimiter ends it (it runs to the end of the
    message), which is what makes an unclosed multipart's last part of unknown extent."""
    ctx.count += 1
    headers, body_start = parse_header_block(buf, start, end)
    content_type, params = parse_content_type(headers.get("content-type"), default_type)
    boundary = params.get("boundary", "")
    if content_type.startswith("multipart/") and not boundary:
        # A multipart without a boundary cannot be split; read it as text, as mail
        # clients do.
        content_type = "text/plain"
    part = MimePart(buf, "", depth, headers, content_type, params, body_start, end)
    if content_type.startswith("multipart/"):
        _split_multipart(part, boundary, ctx, open_ended)
    elif content_type in ("message/rfc822", "message/global"):
        _parse_embedded(part, ctx, open_ended)
    return part


def _split_multipart(part: MimePart, boundary: str, ctx: _Context, open_ended: bool) -> None:
    if part.depth >= MAX_DEPTH:
        part.unwalked = True
        ctx.degrade("mime_depth")
        return
    buf = part.buf
    delimiters, closed = _delimiters(
        buf, part.body_start, part.body_end, boundary.encode("utf-8", "surrogateescape"), ctx
    )
    if not delimiters:
        # No delimiter at all: a body with content is text that claims to be multipart;
        # an empty one is an empty container.
        if buf[part.body_start : part.body_end].strip():
            part.content_type = "text/plain"
            part.unterminated = True
            ctx.degrade("mime_unterminated")
        return
    child_type = "message/rfc822" if part.content_type == "multipart/digest" else "text/plain"
    count = len(delimiters) - 1 if closed else len(delimiters)
    for index in range(count):
        if ctx.count >= MAX_PARTS:
            part.unwalked = True
            ctx.degrade("mime_parts")
            return
        content_start = delimiters[index][1]
        last_open = index + 1 == len(delimiters)
        if not last_open:
            content_end = _trim_line_break(buf, content_start, delimiters[index + 1][0])
        else:
            content_end = part.body_end
            if not buf[content_start:content_end].strip():
                # Nothing after the last delimiter: no part, only a missing close.
                ctx.degrade("mime_unterminated")
                break
        child = _parse_entity(
            buf,
            content_start,
            content_end,
            part.depth + 1,
            ctx,
            child_type,
            open_ended and last_open,
        )
        if last_open:
            ctx.degrade("mime_unterminated")
            child.unterminated = open_ended
        part.children.append(child)


def _parse_embedded(part: MimePart, ctx: _Context, open_ended: bool) -> None:
    if part.depth >= MAX_DEPTH:
        part.unwalked = True
        ctx.degrade("mime_depth")
        return
    if ctx.count >= MAX_PARTS:
        part.unwalked = True
        ctx.degrade("mime_parts")
        return
    buf, start, end = part.buf, part.body_start, part.body_end
    if part.transfer_encoding in ("base64", "quoted-printable"):
        # Not allowed for message/rfc822 (RFC 2046 §5.2.1), but sent anyway.
        buf = decode_body(part, limit=None)[0]
        start, end = 0, len(buf)
    part.embedded = _parse_entity(buf, start, end, part.depth + 1, ctx, open_ended=open_ended)


def _assign_paths(part: MimePart, path: str) -> None:
    """IMAP section numbers; an attached message's multipart shares its attachment's."""
    part.path = path
    for index, child in enumerate(part.children, start=1):
        _assign_paths(child, f"{path}.{index}" if path else str(index))
    if part.embedded is not None:
        embedded_path = path if part.embedded.is_multipart else f"{path}.1"
        _assign_paths(part.embedded, embedded_path)


def parse_tree(raw: bytes) -> MimeTree:
    """The bounded MIME tree of a message; never raises on malformed input."""
    ctx = _Context()
    root = _parse_entity(raw, 0, len(raw), 0, ctx)
    _assign_paths(root, "" if root.is_multipart else "1")
    return MimeTree(root, ctx.count, ctx.degraded, ctx.reasons)


# Transfer decoding -----------------------------------------------------------------


def iter_decoded(part: MimePart, chunk_size: int = _CHUNK) -> Iterator[bytes]:
    """The decoded body of a part in chunks; memory stays near ``chunk_size``."""
    encoding = part.transfer_encoding
    if encoding == "base64":
        return _iter_base64(part.buf, part.body_start, part.body_end, chunk_size)
    if encoding == "quoted-printable":
        return _iter_quoted_printable(part.buf, part.body_start, part.body_end, chunk_size)
    return _iter_raw(part.buf, part.body_start, part.body_end, chunk_size)


def _iter_raw(buf: bytes, start: int, end: int, chunk_size: int) -> Iterator[bytes]:
    view = memoryview(buf)
    position = start
    while position < end:
        stop = min(end, position + chunk_size)
        yield bytes(view[position:stop])
        position = stop


def _iter_quoted_printable(buf: bytes, start: int, end: int, chunk_size: int) -> Iterator[bytes]:
    view = memoryview(buf)
    position = start
    while position < end:
        stop = min(end, position + chunk_size)
        if stop < end:
            # Cut at a line end so that no "=XX" escape or soft break is split.
            newline = buf.rfind(b"\n", position, stop)
            if newline > position:
                stop = newline + 1
        yield binascii.a2b_qp(bytes(view[position:stop]))
        position = stop


# What is left of a part after its base64 padding, below which the rest is judged as a
# whole: another padded block is decoded, anything else is trailing junk and ignored.
_B64_TAIL_JUDGED = 1024
# Padded blocks decoded in one part at most: some encoders pad every line, but a body of
# "A=A=A=..." must not cost a Python call per byte.
_MAX_B64_BLOCKS = 10_000
_NOT_PAD = re.compile(rb"[^=]")


def _iter_base64(buf: bytes, start: int, end: int, chunk_size: int) -> Iterator[bytes]:
    """Base64 in chunks: characters outside the alphabet are ignored (RFC 2045 §6.8);
    padding ends a block, after which a further padded block is decoded (some encoders
    write several) but trailing junk is not."""
    view = memoryview(buf)
    carry = b""
    position = start
    blocks = 0
    while position < end:
        stop = min(end, position + chunk_size)
        data = carry + bytes(view[position:stop]).translate(None, _B64_DELETE)
        position = stop
        cursor = 0
        while True:
            pad = data.find(b"=", cursor)
            if pad < 0:
                break
            yield decode_base64_lenient(data[cursor:pad])
            after = _NOT_PAD.search(data, pad)
            cursor = after.start() if after else len(data)
            blocks += 1
            if blocks >= _MAX_B64_BLOCKS:
                return
            if len(data) - cursor + (end - position) < _B64_TAIL_JUDGED:
                rest = data[cursor:] + bytes(view[position:end]).translate(None, _B64_DELETE)
                yield from _base64_tail(rest)
                return
        data = data[cursor:]
        usable = len(data) - len(data) % 4
        if usable:
            yield _b64(data[:usable])
        carry = data[usable:]
    if carry:
        yield decode_base64_lenient(carry)


def _base64_tail(rest: bytes) -> Iterator[bytes]:
    """Padded blocks after the first; stops at the first piece that is not one."""
    while rest and len(rest) % 4 == 0:
        pad = rest.find(b"=")
        if pad < 0:
            yield _b64(rest)
            return
        yield decode_base64_lenient(rest[:pad])
        rest = rest[pad:].lstrip(b"=")


def _b64(data: bytes) -> bytes:
    try:
        return binascii.a2b_base64(data)
    except (binascii.Error, ValueError):
        return decode_base64_lenient(data)


def decode_body(part: MimePart, limit: int | None) -> tuple[bytes, bool]:
    """The decoded body, cut at ``limit`` bytes; returns it and whether it was cut."""
    out = bytearray()
    for chunk in iter_decoded(part):
        out += chunk
        if limit is not None and len(out) > limit:
            del out[limit:]
            return bytes(out), True
    return bytes(out), False

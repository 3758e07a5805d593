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
from typing import NamedTuple

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
        value = self.headers.get_last("content-transfer-encoding")
        return value.strip().lower() if value else "7bit"

    @property
    def disposition(self) -> str | None:
        value = self.headers.get_last("content-disposition")
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


class _Line(NamedTuple):
    """A delimiter line: where it starts, the open multipart it belongs to (its level in
    the stack of open multiparts), whether it is that multipart's close, and where the
    next line starts."""

    start: int
    level: int
    close: bool
    after: int


class _Scan:
    """The delimiter lines of the multiparts open in one buffer, innermost first.

    A line belongs to the innermost open multipart whose delimiter it is: a line that is
    a delimiter of both an inner and an enclosing multipart (nested multiparts with the
    same boundary, or boundaries ``b`` and ``b--``) is the inner one's, which then reads
    on until its own close. A line that is only an enclosing multipart's delimiter ends
    the inner ones, as in compat32. The next occurrence of each open boundary is
    remembered, so that each is searched for once per stretch of the buffer.
    """

    __slots__ = (
        "_dashes",
        "_false",
        "_from",
        "_hit",
        "_markers",
        "buf",
        "ctx",
        "end",
        "open_ended",
        "stopped",
    )

    def __init__(self, buf: bytes, end: int, open_ended: bool, ctx: _Context) -> None:
        self.buf = buf
        self.end = end
        # Whether reaching ``end`` means the message was cut short (False inside a part
        # that a delimiter closes, decoded into a buffer of its own).
        self.open_ended = open_ended
        self.ctx = ctx
        self.stopped = False
        self._dashes: list[bytes] = []
        self._markers: list[bytes] = []
        self._from: list[int] = []
        self._hit: list[int] = []
        self._false: list[int] = []

    def push(self, boundary: bytes) -> int:
        self._dashes.append(b"--" + boundary)
        self._markers.append(b"\n--" + boundary)
        self._from.append(-1)
        self._hit.append(-1)
        self._false.append(0)
        return len(self._dashes) - 1

    def pop(self) -> None:
        self._dashes.pop()
        self._markers.pop()
        self._from.pop()
        self._hit.pop()
        self._false.pop()

    def _classify(self, start: int) -> _Line | None:
        buf, end = self.buf, self.end
        for level in range(len(self._dashes) - 1, -1, -1):
            dashes = self._dashes[level]
            if not buf.startswith(dashes, start):
                continue
            after = start + len(dashes)
            close = buf.startswith(b"--", after, end)
            if not close and after < end and buf[after] in _BCHARS:
                continue  # a longer boundary, not this one
            newline = buf.find(b"\n", after, end)
            return _Line(start, level, close, newline + 1 if newline >= 0 else end)
        return None

    def next_line(self, position: int, limit: int) -> _Line | None:
        """The first delimiter line of an open multipart that starts in ``[position,
        limit)``; ``position`` is the start of a line."""
        levels = len(self._markers)
        if not levels or self.stopped or position >= limit:
            return None
        buf = self.buf
        if position > 0 and buf[position - 1] == 0x0A:
            search = position - 1
        else:
            # No line break before the first line of the range: look at it on its own.
            line = self._classify(position)
            if line is not None:
                return line
            search = position
        markers, searched, hits, end = self._markers, self._from, self._hit, self.end
        while True:
            hit = -1
            for level in range(levels):
                # The remembered occurrence holds while it lies at or after ``search``.
                found = hits[level]
                if not (0 <= searched[level] <= search and (found < 0 or found >= search)):
                    found = buf.find(markers[level], search, end)
                    searched[level] = search
                    hits[level] = found
                if found >= 0 and (hit < 0 or found < hit):
                    hit = found
            if hit < 0 or hit + 1 >= limit:
                return None
            line = self._classify(hit + 1)
            if line is not None:
                return line
            # Starts like a delimiter ("--boundaryX") but is none: only a hostile
            # message has many.
            self._false[-1] += 1
            if self._false[-1] > _MAX_FALSE_DELIMITERS:
                self.ctx.degrade("boundary_scan")
                self.stopped = True
                return None
            search = hit + 1


def _trim_line_break(buf: bytes, start: int, end: int) -> int:
    """The CRLF before a delimiter belongs to the delimiter (RFC 2046 §5.1.1)."""
    if end > start and buf[end - 1] == 0x0A:
        end -= 1
        if end > start and buf[end - 1] == 0x0D:
            end -= 1
    return end


def _parse_entity(
    scan: _Scan,
    start: int,
    limit: int,
    depth: int,
    default_type: str,
    first: _Line | None,
) -> tuple[MimePart, _Line | None]:
    """The entity at ``start``. ``first`` is the first delimiter line of an open multipart
    after ``start`` (None: none before ``limit``); it bounds the header section and ends
    the entity unless the entity is a multipart that claims it. Returns the entity and
    the delimiter line that ends it, None when it runs to ``limit``."""
    scan.ctx.count += 1
    buf = scan.buf
    end = _trim_line_break(buf, start, first.start) if first is not None else limit
    headers, body_start = parse_header_block(buf, start, end)
    # The last of two Content-Type fields counts (RFC 8621 reads a field's last instance).
    content_type, params = parse_content_type(headers.get_last("content-type"), default_type)
    boundary = params.get("boundary", "")
    if content_type.startswith("multipart/") and not boundary:
        # A multipart without a boundary cannot be split; read it as text, as mail
        # clients do.
        content_type = "text/plain"
    part = MimePart(buf, "", depth, headers, content_type, params, body_start, end)
    if content_type.startswith("multipart/"):
        encoded = boundary.encode("utf-8", "surrogateescape")
        ended = _split_multipart(scan, part, encoded, limit, first)
    elif content_type in ("message/rfc822", "message/global"):
        ended = _parse_embedded(scan, part, limit, first)
    else:
        return part, first
    part.body_end = _trim_line_break(buf, body_start, ended.start) if ended is not None else limit
    return part, ended


def _glued_close(buf: bytes, start: int, stop: int, boundary: bytes) -> int:
    """Where a close delimiter that lost its line break ("...text--boundary--" at the
    very end of ``buf[start:stop]``) starts, or -1. It still closes: the alternative is
    to read the rest as a part of unknown extent."""
    close = b"--" + boundary + b"--"
    tail = buf.rfind(close, start, stop)
    if tail >= 0 and not buf[tail + len(close) : stop].strip():
        return tail
    return -1


def _split_multipart(
    scan: _Scan, part: MimePart, boundary: bytes, limit: int, first: _Line | None
) -> _Line | None:
    """The parts of a multipart. Returns the delimiter line of an enclosing multipart
    that ends it (after its close, its epilogue runs to that line), or None when it runs
    to ``limit``."""
    ctx = scan.ctx
    if part.depth >= MAX_DEPTH:
        part.unwalked = True
        ctx.degrade("mime_depth")
        return first
    level = scan.push(boundary)
    try:
        ended = _read_parts(scan, part, boundary, level, limit)
    finally:
        scan.pop()
    if ended is not None and ended.level == level:
        # Closed: the epilogue runs to the next delimiter of an enclosing multipart.
        return scan.next_line(ended.after, limit)
    return ended


def _read_parts(
    scan: _Scan, part: MimePart, boundary: bytes, level: int, limit: int
) -> _Line | None:
    """The parts of the multipart at ``level`` of the scan. Returns the line that ends
    them: its close, or, when it is not closed, a delimiter of an enclosing multipart
    (None: ``limit``)."""
    ctx, buf = scan.ctx, scan.buf
    line = scan.next_line(part.body_start, limit)
    if line is None or line.level != level:
        # No delimiter at all: a body with content is text that claims to be multipart;
        # an empty one is an empty container.
        end = _trim_line_break(buf, part.body_start, line.start) if line is not None else limit
        if buf[part.body_start : end].strip():
            part.content_type = "text/plain"
            part.unterminated = True
            ctx.degrade("mime_unterminated")
        return line
    child_type = "message/rfc822" if part.content_type == "multipart/digest" else "text/plain"
    while not line.close:
        position = line.after
        if ctx.count >= MAX_PARTS:
            part.unwalked = True
            ctx.degrade("mime_parts")
            # Nothing more is walked anywhere: every enclosing multipart stops here too.
            scan.stopped = True
            return None
        following = scan.next_line(position, limit)
        if following is None or following.level != level:
            # No delimiter of this multipart follows: this is its last part.
            stop = following.start if following is not None else limit
            if not buf[position:stop].strip():
                # Nothing after the last delimiter: no part, only a missing close.
                ctx.degrade("mime_unterminated")
                return following
            tail = _glued_close(buf, position, stop, boundary)
            if tail >= 0:
                end = _trim_line_break(buf, position, tail)
                child, _ = _parse_entity(scan, position, end, part.depth + 1, child_type, None)
                part.children.append(child)
                return following
        child, ended = _parse_entity(scan, position, limit, part.depth + 1, child_type, following)
        part.children.append(child)
        if ended is None or ended.level != level:
            # Not closed: an enclosing multipart's delimiter ends it, or it runs to the
            # end; a last part that no delimiter ends is of unknown extent (a message cut
            # short).
            ctx.degrade("mime_unterminated")
            if ended is None and limit == scan.end:
                child.unterminated = scan.open_ended
            return ended
        line = ended
    return line


def _parse_embedded(scan: _Scan, part: MimePart, limit: int, first: _Line | None) -> _Line | None:
    ctx = scan.ctx
    if part.depth >= MAX_DEPTH:
        part.unwalked = True
        ctx.degrade("mime_depth")
        return first
    if ctx.count >= MAX_PARTS:
        part.unwalked = True
        ctx.degrade("mime_parts")
        return first
    if part.transfer_encoding in ("base64", "quoted-printable"):
        # Not allowed for message/rfc822 (RFC 2046 §5.2.1), but sent anyway.
        buf = decode_body(part, limit=None)[0]
        cut_short = scan.open_ended and first is None and limit == scan.end
        inner = _Scan(buf, len(buf), cut_short, ctx)
        part.embedded, _ = _parse_entity(inner, 0, len(buf), part.depth + 1, "text/plain", None)
        return first
    part.embedded, ended = _parse_entity(
        scan, part.body_start, limit, part.depth + 1, "text/plain", first
    )
    return ended


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
    scan = _Scan(raw, len(raw), True, ctx)
    root, _ = _parse_entity(scan, 0, len(raw), 0, "text/plain", None)
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

"""Hostile messages: each is parsed in under 5 s of CPU with under 256 MB of extra
memory, and comes back as a storable ParsedMessage, flagged as the bounds require.

The bounds catch work that grows out of proportion (a quadratic path takes minutes on
these inputs), not speed: the slowest case takes about 1 s. Time is CPU time of this
process, so other processes on a busy CI machine do not count; it is measured without
tracing, memory in a second run under tracemalloc (which sees
every Python allocation, the decoded chunks included). The input bytes themselves are
built before measuring: they are the stored raw message, not parser overhead.
"""

from __future__ import annotations

import base64
import hashlib
import time
import tracemalloc
from collections.abc import Callable

import pytest

from postroom.mail.message import ParsedMessage
from postroom.mail.mime import MAX_DEPTH, MAX_PARTS
from postroom.mail.parse import parse_message

SECONDS = 5.0  # of CPU
EXTRA_BYTES = 256 * 1024 * 1024
HEAD = b"From: a@example.com\r\nMessage-ID: <hostile@example.com>\r\n"


def _deep(levels: int) -> bytes:
    opening = b"".join(
        b'Content-Type: multipart/mixed; boundary="b%d"\r\n\r\n--b%d\r\n' % (i, i)
        for i in range(levels)
    )
    closing = b"".join(b"\r\n--b%d--" % i for i in reversed(range(levels)))
    return HEAD + opening + b"Content-Type: text/plain\r\n\r\nhello" + closing + b"\r\n"


def _many(parts: int) -> bytes:
    body = b"".join(b"--x\r\nContent-Type: text/plain\r\n\r\npart %d\r\n" % i for i in range(parts))
    return HEAD + b"Content-Type: multipart/mixed; boundary=x\r\n\r\n" + body + b"--x--\r\n"


def _zeros(size: int) -> bytes:
    return (
        HEAD
        + b"Content-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\n"
        + b"Content-Type: text/plain\r\n\r\nsee attached\r\n--x\r\n"
        + b"Content-Type: application/octet-stream\r\n"
        + b"Content-Disposition: attachment; filename=zeros.bin\r\n"
        + b"Content-Transfer-Encoding: base64\r\n\r\n"
        + base64.encodebytes(bytes(size))
        + b"\r\n--x--\r\n"
    )


def _long_header() -> bytes:
    return HEAD + b"Subject: " + b"x" * 1_000_000 + b"\r\n\r\nbody\r\n"


def _addresses(count: int) -> bytes:
    to = b", ".join(b"User %d <user%d@example.com>" % (i, i) for i in range(count))
    return HEAD + b"To: " + to + b"\r\n\r\nbody\r\n"


def _bad_names() -> bytes:
    names = [b"../../etc/passwd", b"/etc/shadow", b"C:\\Windows\\system32\\evil.exe", b"a\x00b.txt"]
    parts = b"".join(
        b"--x\r\nContent-Type: application/octet-stream\r\n"
        b'Content-Disposition: attachment; filename="' + name + b'"\r\n\r\ndata\r\n'
        for name in names
    )
    return HEAD + b"Content-Type: multipart/mixed; boundary=x\r\n\r\n" + parts + b"--x--\r\n"


def _measure(raw: bytes) -> tuple[ParsedMessage, float, int]:
    started = time.process_time()
    parsed = parse_message(raw)
    elapsed = time.process_time() - started
    tracemalloc.start()
    try:
        parse_message(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return parsed, elapsed, peak


CASES: list[tuple[str, Callable[[], bytes]]] = [
    ("1000-deep nesting", lambda: _deep(1000)),
    ("100000 parts", lambda: _many(100_000)),
    ("100 MB of base64 zeros", lambda: _zeros(100_000_000)),
    ("1 MB header line", _long_header),
    ("10000 addresses in To", lambda: _addresses(10_000)),
    ("hostile attachment names", _bad_names),
]


@pytest.mark.parametrize(("name", "build"), CASES, ids=[name for name, _ in CASES])
def test_hostile_input_is_bounded_in_time_and_memory(name: str, build: Callable[[], bytes]) -> None:
    raw = build()
    parsed, elapsed, peak = _measure(raw)
    assert isinstance(parsed, ParsedMessage)
    assert parsed.size == len(raw)
    assert parsed.rfc_message_id == "hostile@example.com"
    assert elapsed < SECONDS, f"{name}: {elapsed:.2f} s"
    assert peak < EXTRA_BYTES, f"{name}: {peak / 1e6:.0f} MB"


def test_deep_nesting_stops_at_the_depth_bound() -> None:
    parsed = parse_message(_deep(1000))
    assert "parse_degraded" in parsed.flags
    # The text sits below the bound and is not walked; the message is still stored.
    assert parsed.text is None
    shallow = parse_message(_deep(MAX_DEPTH - 2))
    assert shallow.text == "hello"
    assert "parse_degraded" not in shallow.flags


def test_part_count_stops_at_the_part_bound() -> None:
    parsed = parse_message(_many(100_000))
    assert "parse_degraded" in parsed.flags
    assert parsed.text is not None
    assert parsed.text.startswith("part 0\npart 1")
    assert parsed.text.count("part ") == MAX_PARTS - 1  # the root counts as an entity


def test_big_attachment_is_measured_exactly() -> None:
    parsed = parse_message(_zeros(100_000_000))
    (attachment,) = parsed.attachments
    assert attachment.size == 100_000_000
    assert attachment.sha256 == hashlib.sha256(bytes(100_000_000)).hexdigest()
    assert attachment.filename == "zeros.bin"
    assert parsed.text == "see attached"


def test_long_header_line_is_bounded() -> None:
    parsed = parse_message(_long_header())
    assert parsed.subject is not None
    assert len(parsed.subject) == 998
    assert "parse_degraded" in parsed.flags


def test_ten_thousand_addresses_keep_the_first_256() -> None:
    parsed = parse_message(_addresses(10_000))
    assert len(parsed.to) == 256
    assert parsed.to[0].address == "user0@example.com"
    assert parsed.to[-1].address == "user255@example.com"
    assert "parse_degraded" in parsed.flags


def test_hostile_names_lose_their_paths() -> None:
    parsed = parse_message(_bad_names())
    assert [a.filename for a in parsed.attachments] == ["passwd", "shadow", "evil.exe", "ab.txt"]
    assert parsed.attachments[2].risk == "executable"


def test_huge_text_body_is_truncated() -> None:
    raw = HEAD + b"Content-Type: text/plain\r\n\r\n" + b"word " * 1_000_000
    parsed = parse_message(raw)
    assert parsed.text is not None
    assert len(parsed.text) == 1_000_000
    assert "body_truncated" in parsed.flags
    assert parsed.snippet is not None
    assert len(parsed.snippet) <= 240


def test_deeply_nested_html_is_bounded() -> None:
    html = b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000
    raw = HEAD + b"Content-Type: text/html\r\n\r\n" + html
    started = time.process_time()
    parsed = parse_message(raw)
    assert time.process_time() - started < SECONDS
    assert parsed.html is not None


def test_base64_made_of_padding_is_bounded() -> None:
    raw = (
        HEAD
        + b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        + b"A=" * 5_000_000
    )
    started = time.process_time()
    parsed = parse_message(raw)
    assert time.process_time() - started < SECONDS
    assert len(parsed.attachments) == 1


def test_many_false_boundaries_are_bounded() -> None:
    raw = (
        HEAD
        + b"Content-Type: multipart/mixed; boundary=a\r\n\r\n"
        + b"--ab\r\n" * 2_000_000
        + b"--a--\r\n"
    )
    started = time.process_time()
    parsed = parse_message(raw)
    assert time.process_time() - started < SECONDS
    assert isinstance(parsed, ParsedMessage)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\r\n\r\n",
        b"garbage without headers",
        b"\x00\xff" * 1000,
        b"Content-Type: multipart/mixed; boundary=\r\n\r\n--\r\n",
        b"Content-Type: message/rfc822\r\n\r\n" * 100,
        b"Content-Transfer-Encoding: base64\r\n\r\n====",
        b"Subject: =?utf-8?B?????=\r\nFrom: <<<@@@>>>\r\nDate: Mon, 99 Foo 99999\r\n\r\n",
    ],
)
def test_junk_never_raises(raw: bytes) -> None:
    parsed = parse_message(raw)
    assert isinstance(parsed, ParsedMessage)
    assert parsed.rfc_message_id

"""Header decoding: encoded words, parameters, charsets, identifiers, dates and bounds."""

from __future__ import annotations

import hashlib

import pytest

from postroom.mail.charsets import decode_text, normalise_charset
from postroom.mail.fields import list_id, message_ids, references, sent_at_ms
from postroom.mail.headers import decode_words, parse_content_type, parse_header_block, parse_params
from postroom.mail.parse import parse_message


@pytest.mark.parametrize(
    ("encoded", "decoded"),
    [
        ("=?utf-8?q?caf=C3=A9?=", "café"),
        ("=?UTF-8?B?Y2Fmw6k=?=", "café"),
        ("=?iso-8859-1?q?caf=E9?=", "café"),
        ("=?utf-8?q?a?= =?utf-8?q?b?=", "ab"),  # whitespace between words goes
        ("=?utf-8?q?a?=\r\n =?utf-8?q?b?=", "ab"),
        ("=?utf-8?q?a?= plain =?utf-8?q?b?=", "a plain b"),
        ("=?utf-8?q?hello_world?=", "hello world"),
        ("=?utf-8?b?w6k=?==?utf-8?b?w6k=?=", "éé"),
        # A character split across two words is joined before decoding.
        ("=?utf-8?b?4oI=?= =?utf-8?b?rA==?=", "€"),
        ("=?utf-8*en?q?lang?=", "lang"),  # RFC 2231 language suffix
        ("=?utf-8?b?Y2Fmw6k?=", "café"),  # padding missing
        ("=?x-unknown?q?caf=C3=A9?=", "café"),  # unknown charset: fallback chain
        ("=?utf-8?q?caf=E9?=", "café"),  # declared utf-8, really latin-1
        ("=?gb2312?b?1tDOxA==?=", "中文"),
        ("=?iso-2022-jp?b?GyRCJEskWyRzGyhC?=", "にほん"),
        ("no encoded words", "no encoded words"),
        ("=?utf-8?q?unterminated", "=?utf-8?q?unterminated"),
        ("=?utf-8?q?with space?=", "with space"),  # invalid, but sent
    ],
)
def test_encoded_words(encoded: str, decoded: str) -> None:
    assert decode_words(encoded) == decoded


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ('; name="a b.pdf"', {"name": "a b.pdf"}),
        ("; filename*=utf-8''Rechnung%20M%C3%A4rz.pdf", {"filename": "Rechnung März.pdf"}),
        (
            "; filename*0*=utf-8''%E6%97%A5; filename*1*=%E6%9C%AC; filename*2=.txt",
            {"filename": "日本.txt"},
        ),
        # Sections out of order are put back in order.
        ("; filename*1=b.txt; filename*0=a", {"filename": "ab.txt"}),
        ("; filename*=iso-8859-1'de'M%E4rz.pdf", {"filename": "März.pdf"}),
        # A legacy plain value next to the RFC 2231 one: the 2231 value wins.
        ("; filename=fallback.pdf; filename*=utf-8''real.pdf", {"filename": "real.pdf"}),
        ("; boundary=abc; charset=us-ascii", {"boundary": "abc", "charset": "us-ascii"}),
        ('; a="x;y"; b=z', {"a": "x;y", "b": "z"}),
        ("; name=unquoted with spaces.doc", {"name": "unquoted with spaces.doc"}),
        ('; filename="C:\\Temp\\a.doc"', {"filename": "C:\\Temp\\a.doc"}),
        ('; filename="say \\"hi\\".txt"', {"filename": 'say "hi".txt'}),
        ("; novalue; x=1", {"x": "1"}),
    ],
)
def test_parameters(params: str, expected: dict[str, str]) -> None:
    assert parse_params(params) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("text/plain; charset=utf-8", ("text/plain", {"charset": "utf-8"})),
        ("TEXT/HTML", ("text/html", {})),
        ("multipart/mixed\tboundary=x", ("multipart/mixed", {"boundary": "x"})),
        ("text", ("text/plain", {})),
        ("garbage", ("text/plain", {})),
        (None, ("text/plain", {})),
        ("text/plain (plain text); charset=us-ascii", ("text/plain", {"charset": "us-ascii"})),
    ],
)
def test_content_type(value: str | None, expected: tuple[str, dict[str, str]]) -> None:
    assert parse_content_type(value) == expected


@pytest.mark.parametrize(
    ("data", "declared", "text"),
    [
        (b"plain ascii", "utf-8", "plain ascii"),
        ("café".encode(), "utf-8", "café"),
        ("café".encode("latin-1"), "utf-8", "café"),  # wrong declared charset
        ("café".encode(), "iso-8859-1", "café"),  # utf-8 labelled latin-1
        ("café".encode("latin-1"), "x-unknown", "café"),  # unknown charset
        ("café".encode("latin-1"), None, "café"),
        ("“quotes”".encode("cp1252"), "iso-8859-1", "“quotes”"),  # C1 range is cp1252
        ("привет".encode("koi8-r"), "koi8-r", "привет"),
        ("привет".encode("cp1251"), "windows-1251", "привет"),
        ("日本語".encode("shift_jis"), "shift_jis", "日本語"),
        ("日本語".encode("iso-2022-jp"), "iso-2022-jp", "日本語"),  # 7-bit: declared first
        ("hi".encode("utf-16"), "utf-16", "hi"),
        ("한국어".encode("cp949"), "ks_c_5601-1987", "한국어"),
        (b"\x81\x8d\x8f", "utf-8", "\x81\x8d\x8f"),  # bytes cp1252 lacks: latin-1 last
        ("\ufeffbom".encode(), "utf-8", "bom"),
        (b"abc", "base64", "abc"),  # not a text encoding: refused
    ],
)
def test_charset_fallbacks(data: bytes, declared: str | None, text: str) -> None:
    assert decode_text(data, declared) == text


def test_mixed_charsets_in_one_header_section() -> None:
    raw = "Subject: Grüße\r\n".encode() + "From: Jürgen <j@example.com>\r\n".encode("cp1252")
    headers, _ = parse_header_block(raw + b"\r\n", 0, len(raw) + 2)
    assert headers.get("subject") == "Grüße"
    assert headers.get("from") == "Jürgen <j@example.com>"


def test_truncated_multibyte_text_drops_the_split_character() -> None:
    data = "日本".encode()[:-1]
    assert decode_text(data, "utf-8", truncated=True) == "日"


def test_charset_names() -> None:
    assert normalise_charset("UTF8") == "utf-8"
    assert normalise_charset('"utf-8"') == "utf-8"
    assert normalise_charset("x-unknown") is None
    assert normalise_charset("gb2312") == "gb18030"
    assert normalise_charset("rot13") is None


def test_header_section_edges() -> None:
    raw = (
        b"From sender@example.com Mon Jan  1 00:00:00 2020\r\nSubject: a\r\n b\r\nX: 1\r\n\r\nbody"
    )
    headers, body = parse_header_block(raw, 0, len(raw))
    assert headers.get("subject") == "a b"
    assert raw[body:] == b"body"
    # A line that is not a field ends the header section; the rest is body.
    raw = b"Subject: a\r\nnot a header line\r\nFrom: x\r\n\r\nbody"
    headers, body = parse_header_block(raw, 0, len(raw))
    assert headers.get("from") is None
    assert raw[body:].startswith(b"not a header line")


def test_first_and_last_instance_of_a_field() -> None:
    raw = (
        b"Subject: one\r\nContent-Type: text/html\r\n"
        b"Subject: two\r\nContent-Type: text/plain\r\n\r\n"
    )
    headers, _ = parse_header_block(raw, 0, len(raw))
    assert (headers.get("subject"), headers.get_last("subject")) == ("one", "two")
    assert headers.get_last("content-type") == "text/plain"
    assert headers.get_last("content-id") is None


# Identifiers and bounds (seed 003) -------------------------------------------------------


def test_message_ids() -> None:
    assert message_ids("<a@b> <c@d>") == (["a@b", "c@d"], False)
    assert message_ids("a@b") == (["a@b"], False)  # no brackets
    assert message_ids("<a@b> (comment) <a@b>") == (["a@b"], False)  # duplicates
    assert message_ids("<a @ b>") == (["a@b"], False)
    assert message_ids("<" + "x" * 999 + ">") == ([], True)


def test_references_keep_the_64_nearest() -> None:
    value = " ".join(f"<ref{i}@example.com>" for i in range(100))
    kept, dropped = references(value)
    assert dropped
    assert len(kept) == 64
    assert kept[0] == "ref36@example.com"
    assert kept[-1] == "ref99@example.com"


def _message(headers: str, body: str = "body") -> bytes:
    return (headers.strip() + "\r\n\r\n" + body).encode()


def test_address_over_320_octets_is_dropped_not_truncated() -> None:
    long_address = "a" * 64 + "@" + ".".join(["b" * 60] * 5) + ".com"
    assert len(long_address) > 320
    parsed = parse_message(
        _message(f"From: x@example.com\r\nTo: ok@example.com, {long_address}, z@example.com")
    )
    assert [m.address for m in parsed.to] == ["ok@example.com", "z@example.com"]
    assert "parse_degraded" in parsed.flags


def test_300_recipients_keep_the_first_256() -> None:
    to = ", ".join(f"r{i}@example.com" for i in range(300))
    parsed = parse_message(_message(f"From: x@example.com\r\nTo: {to}"))
    assert len(parsed.to) == 256
    assert parsed.to[0].address == "r0@example.com"
    assert parsed.to[-1].address == "r255@example.com"


def test_100_references_keep_the_64_nearest() -> None:
    refs = " ".join(f"<r{i}@example.com>" for i in range(100))
    parsed = parse_message(_message(f"Message-ID: <m@example.com>\r\nReferences: {refs}"))
    assert len(parsed.references) == 64
    assert parsed.references[-1] == "r99@example.com"
    assert parsed.references[0] == "r36@example.com"


@pytest.mark.parametrize(
    "header", ["", "Message-ID: <>\r\n", "Message-ID: <" + "x" * 990 + "@example.com>\r\n"]
)
def test_missing_empty_or_over_bound_message_id_is_synthetic(header: str) -> None:
    raw = _message(header + "From: x@example.com")
    parsed = parse_message(raw)
    assert parsed.message_id_synthetic
    assert "message_id_synthetic" in parsed.flags
    assert parsed.rfc_message_id == f"sha256.{hashlib.sha256(raw).hexdigest()}@postroom.invalid"


def test_message_id_in_reply_to_and_references() -> None:
    parsed = parse_message(
        _message(
            "Message-ID:  <Abc.123@Example.com> \r\n"
            "In-Reply-To: <p1@example.com> <p2@example.com>\r\n"
            "References: <r1@example.com>\r\n <p1@example.com>"
        )
    )
    assert parsed.rfc_message_id == "Abc.123@Example.com"  # case kept: ids are opaque
    assert not parsed.message_id_synthetic
    assert parsed.in_reply_to == "p1@example.com"
    assert parsed.references == ("r1@example.com", "p1@example.com")
    assert parsed.thread_identifiers == ("Abc.123@Example.com", "r1@example.com", "p1@example.com")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Tue, 07 Jan 2020 09:15:00 +0100", 1578384900000),
        ("7 Jan 2020 08:15:00 GMT", 1578384900000),
        ("Tue, 07 Jan 2020 08:15:00 -0000", 1578384900000),  # no zone: UTC
        ("Tue, 7 Jan 20 08:15:00 +0000", 1578384900000),  # two-digit year
        ("Tue, 07 Jan 2020 08:15:00 +0000 (UTC)", 1578384900000),
        ("not a date", None),
        ("", None),
        ("Tue, 07 Jan 1601 08:15:00 +0000", None),  # absurd year
        ("Tue, 07 Jan 9999 08:15:00 +0000", None),
        ("Mon, 32 Jan 2020 08:15:00 +0000", None),
    ],
)
def test_dates(value: str, expected: int | None) -> None:
    assert sent_at_ms(value) == expected


def test_list_id() -> None:
    assert list_id("Example News <News.Example.COM>") == "news.example.com"
    assert list_id("<linux-bluetooth.vger.kernel.org>") == "linux-bluetooth.vger.kernel.org"
    assert list_id("x" * 300) is None
    assert list_id(None) is None


def test_subject_is_decoded_and_folded() -> None:
    parsed = parse_message(
        _message("Subject: =?utf-8?q?Re=3A_caf=C3=A9?=\r\n   menu\r\nFrom: a@example.com")
    )
    assert parsed.subject == "Re: café menu"

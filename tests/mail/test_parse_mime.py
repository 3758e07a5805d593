"""The bounded MIME tree: boundaries, part paths, transfer encodings, broken structure."""

from __future__ import annotations

import pytest

from postroom.mail.mime import decode_body, parse_tree
from postroom.mail.parse import parse_message


def _paths(raw: bytes) -> list[tuple[str, str]]:
    return [(p.path, p.content_type) for p in parse_tree(raw).root.walk_all()]


def test_single_part_body_is_section_1() -> None:
    assert _paths(b"Subject: x\r\n\r\nbody") == [("1", "text/plain")]


def test_nested_part_paths_follow_imap() -> None:
    raw = (
        b"Content-Type: multipart/mixed; boundary=A\r\n\r\npreamble\r\n"
        b"--A\r\nContent-Type: multipart/alternative; boundary=B\r\n\r\n"
        b"--B\r\nContent-Type: text/plain\r\n\r\nplain\r\n"
        b"--B\r\nContent-Type: text/html\r\n\r\n<p>html</p>\r\n--B--\r\n"
        b"--A\r\nContent-Type: image/png\r\n\r\npng\r\n"
        b"--A--\r\nepilogue\r\n"
    )
    assert _paths(raw) == [
        ("", "multipart/mixed"),
        ("1", "multipart/alternative"),
        ("1.1", "text/plain"),
        ("1.2", "text/html"),
        ("2", "image/png"),
    ]
    parsed = parse_message(raw)
    assert parsed.text == "plain"  # preamble and epilogue are not content
    assert parsed.html == "<p>html</p>"


def test_lf_and_crlf_give_the_same_reading() -> None:
    crlf = (
        b"Content-Type: multipart/mixed; boundary=A\r\n\r\n--A\r\n"
        b"Content-Type: text/plain\r\n\r\nline one\r\nline two\r\n--A--\r\n"
    )
    lf = crlf.replace(b"\r\n", b"\n")
    assert parse_message(crlf).text == parse_message(lf).text == "line one\nline two"


def test_digest_parts_default_to_messages() -> None:
    raw = (
        b"Content-Type: multipart/digest; boundary=D\r\n\r\n"
        b"--D\r\n\r\nSubject: one\r\n\r\nfirst\r\n"
        b"--D\r\n\r\nSubject: two\r\n\r\nsecond\r\n--D--\r\n"
    )
    assert _paths(raw) == [
        ("", "multipart/digest"),
        ("1", "message/rfc822"),
        ("1.1", "text/plain"),
        ("2", "message/rfc822"),
        ("2.1", "text/plain"),
    ]


def test_a_longer_boundary_is_not_this_one() -> None:
    raw = (
        b"Content-Type: multipart/mixed; boundary=a\r\n\r\n--a\r\n"
        b"Content-Type: text/plain\r\n\r\n--ab is not a delimiter\r\n--a--\r\n"
    )
    assert parse_message(raw).text == "--ab is not a delimiter"


def test_an_enclosing_delimiter_ends_an_unclosed_inner_multipart() -> None:
    raw = (
        b"Content-Type: multipart/mixed; boundary=1\r\n\r\n--1\r\n"
        b"Content-Type: multipart/mixed; boundary=2\r\n\r\n"
        b"--2\r\nContent-Type: text/plain\r\n\r\none\r\n"
        b"--1\r\nContent-Type: text/plain\r\n\r\ntwo\r\n--1--\r\n"
    )
    assert _paths(raw) == [
        ("", "multipart/mixed"),
        ("1", "multipart/mixed"),
        ("1.1", "text/plain"),
        ("2", "text/plain"),
    ]
    parsed = parse_message(raw)
    assert parsed.text == "one\ntwo"
    assert parsed.attachments == ()


def test_a_line_that_closes_the_outer_and_delimits_the_inner_is_the_inner_ones() -> None:
    # "--b----" is both the close of "b--" and of "b"; "--b--" both a delimiter of "b--"
    # and the close of "b". The innermost open multipart reads them first.
    raw = (
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n'
        b'Content-Type: multipart/alternative; boundary="b--"\r\n\r\n'
        b"--b--\r\nContent-Type: text/plain\r\n\r\nplain\r\n"
        b"--b--\r\nContent-Type: text/html\r\n\r\n<p>html</p>\r\n--b----\r\n"
        b"--b\r\nContent-Type: image/png\r\n\r\npng\r\n--b--\r\n"
    )
    assert _paths(raw) == [
        ("", "multipart/mixed"),
        ("1", "multipart/alternative"),
        ("1.1", "text/plain"),
        ("1.2", "text/html"),
        ("2", "image/png"),
    ]
    parsed = parse_message(raw)
    assert parsed.text == "plain"
    assert parsed.html == "<p>html</p>"
    assert [(a.part_path, a.content_type, a.size) for a in parsed.attachments] == [
        ("2", "image/png", 3)
    ]
    assert "parse_degraded" not in parsed.flags


def test_nested_multiparts_with_the_same_boundary_keep_their_structure() -> None:
    # Outlook Express for Mac did this (CPython's msg_15.txt): the inner multipart reads
    # the shared delimiter lines up to its own close, then the outer one reads on.
    raw = (
        b"Content-Type: multipart/mixed; boundary=S\r\n\r\n--S\r\n"
        b"Content-Type: multipart/alternative; boundary=S\r\n\r\n"
        b"--S\r\nContent-Type: text/plain\r\n\r\nplain\r\n"
        b"--S\r\nContent-Type: text/html\r\n\r\n<p>html</p>\r\n--S--\r\n"
        b"--S\r\nContent-Type: image/gif\r\nContent-Disposition: attachment; filename=a.gif\r\n"
        b"\r\nGIF89a\r\n--S--\r\n"
    )
    assert _paths(raw) == [
        ("", "multipart/mixed"),
        ("1", "multipart/alternative"),
        ("1.1", "text/plain"),
        ("1.2", "text/html"),
        ("2", "image/gif"),
    ]
    parsed = parse_message(raw)
    assert parsed.text == "plain"
    assert parsed.html == "<p>html</p>"
    assert [(a.part_path, a.filename, a.size) for a in parsed.attachments] == [("2", "a.gif", 6)]
    assert "parse_degraded" not in parsed.flags


def test_the_last_of_two_content_type_fields_counts() -> None:
    raw = (
        b"Content-Type: multipart/related; boundary=r\r\n\r\n--r\r\n"
        b"Content-Type: multipart/alternative; boundary=a\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n\r\n"
        b"caf\xc3\xa9\r\n\r\n--a\r\nContent-Type: text/html\r\n\r\n<p>x</p>\r\n--a--\r\n"
        b"--r--\r\n"
    )
    assert _paths(raw) == [("", "multipart/related"), ("1", "text/plain")]
    parsed = parse_message(raw)
    assert parsed.text == "café\n\n--a\nContent-Type: text/html\n\n<p>x</p>\n--a--"
    assert parsed.attachments == ()


def test_the_last_transfer_encoding_and_disposition_count() -> None:
    raw = (
        b"Content-Type: multipart/mixed; boundary=m\r\n\r\n"
        b"--m\r\nContent-Type: text/plain\r\n\r\nbody\r\n"
        b"--m\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Transfer-Encoding: 7bit\r\n"
        b"Content-Disposition: inline; filename=first.txt\r\n"
        b"Content-Transfer-Encoding: base64\r\n"
        b"Content-Disposition: attachment; filename=last.bin\r\n"
        b"\r\naGVsbG8=\r\n--m--\r\n"
    )
    parsed = parse_message(raw)
    assert parsed.text == "body"
    (attachment,) = parsed.attachments
    assert (attachment.filename, attachment.disposition, attachment.size) == (
        "last.bin",
        "attachment",
        5,
    )


def test_multipart_without_delimiter_ended_by_an_enclosing_one_is_kept() -> None:
    # Its content is not text whether the message runs on after it or not.
    raw = (
        b"Content-Type: multipart/mixed; boundary=a\r\n\r\n"
        b"--a\r\nContent-Type: text/plain\r\n\r\nbody\r\n"
        b"--a\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n"
        b"--b\r\nContent-Type: multipart/alternative; boundary=c\r\n\r\npreamble only\r\n"
        b"--a--\r\n"
    )
    parsed = parse_message(raw)
    assert parsed.text == "body"
    (attachment,) = parsed.attachments
    assert (attachment.part_path, attachment.content_type, attachment.size) == (
        "2.1",
        "text/plain",
        len(b"preamble only"),
    )


def test_missing_close_delimiter_keeps_the_content_as_an_attachment() -> None:
    raw = (
        b"Message-ID: <m@x>\r\nContent-Type: multipart/mixed; boundary=a\r\n\r\n"
        b"--a\r\nContent-Type: text/plain\r\n\r\nfirst\r\n"
        b"--a\r\nContent-Type: text/plain\r\n\r\ncut off in transit"
    )
    parsed = parse_message(raw)
    assert parsed.text == "first"
    (attachment,) = parsed.attachments
    assert attachment.part_path == "2"
    assert attachment.size == len(b"cut off in transit")
    assert "parse_degraded" in parsed.flags


def test_close_delimiter_without_its_line_break_still_closes() -> None:
    raw = (
        b"Content-Type: multipart/mixed; boundary=1\r\n\r\n--1\r\n"
        b"Content-Type: text/plain\r\n\r\ninvalid--1--"
    )
    parsed = parse_message(raw)
    assert parsed.text == "invalid"
    assert "parse_degraded" not in parsed.flags


def test_multipart_without_any_delimiter_is_kept() -> None:
    raw = b"Content-Type: multipart/mixed; boundary=zz\r\n\r\njust text\r\n"
    parsed = parse_message(raw)
    assert parsed.text is None
    (attachment,) = parsed.attachments
    assert attachment.size == len(b"just text\r\n")


def test_multipart_without_boundary_parameter_is_text() -> None:
    assert parse_message(b"Content-Type: multipart/mixed\r\n\r\nhello").text == "hello"


@pytest.mark.parametrize(
    ("encoded", "decoded"),
    [
        (b"aGVsbG8=", b"hello"),
        (b"aGVs\r\nbG8=\r\n", b"hello"),
        (b"aGVsbG8", b"hello"),  # padding missing
        (b"aGVsbG8=\r\nignored junk", b"hello"),  # junk after the end
        (b"YQ==YQ==", b"aa"),  # padded blocks one after another
        (b"a!G@V#s$b%G&8*=", b"hello"),  # characters outside the alphabet are ignored
        (b"", b""),
    ],
)
def test_base64_bodies(encoded: bytes, decoded: bytes) -> None:
    raw = b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n"
    tree = parse_tree(raw + encoded)
    assert decode_body(tree.root, limit=None) == (decoded, False)


@pytest.mark.parametrize(
    ("encoded", "decoded"),
    [
        (b"caf=C3=A9", "café".encode()),
        (b"soft=\r\nbreak", b"softbreak"),
        (b"a=3Db", b"a=b"),
        (b"bad=ZZescape", b"bad=ZZescape"),
    ],
)
def test_quoted_printable_bodies(encoded: bytes, decoded: bytes) -> None:
    raw = b"Content-Transfer-Encoding: quoted-printable\r\n\r\n" + encoded
    assert decode_body(parse_tree(raw).root, limit=None) == (decoded, False)


def test_base64_encoded_attached_message_is_read() -> None:
    import base64

    inner = b"Subject: inner\r\nContent-Type: text/plain\r\n\r\ninner body\r\n"
    raw = (
        b"Content-Type: multipart/mixed; boundary=O\r\n\r\n--O\r\n"
        b"Content-Type: message/rfc822\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        + base64.encodebytes(inner)
        + b"--O--\r\n"
    )
    tree = parse_tree(raw)
    part = tree.find("1")
    assert part is not None and part.embedded is not None
    assert part.embedded.headers.get("subject") == "inner"


def test_text_part_with_foreign_characters_in_base64_is_not_the_body() -> None:
    raw = (
        b"Content-Type: multipart/mixed; boundary=foo\r\n\r\n"
        b"--foo\r\nContent-Type: text/plain\r\n\r\nreadable\r\n"
        b"--foo\r\nContent-Transfer-Encoding: base64\r\nContent-Type: text/plain\r\n\r\n"
        b"?garbage\r\n"
        b"--foo--\r\n"
    )
    parsed = parse_message(raw)
    assert parsed.text == "readable"
    assert len(parsed.attachments) == 1


def test_encrypted_messages_are_flagged() -> None:
    pgp = (
        b'Content-Type: multipart/encrypted; protocol="application/pgp-encrypted"; boundary=E'
        b"\r\n\r\n--E\r\nContent-Type: application/pgp-encrypted\r\n\r\nVersion: 1\r\n"
        b"--E\r\nContent-Type: application/octet-stream\r\n\r\n-----BEGIN PGP MESSAGE-----\r\n"
        b"--E--\r\n"
    )
    assert "encrypted" in parse_message(pgp).flags
    inline = b"Content-Type: text/plain\r\n\r\n-----BEGIN PGP MESSAGE-----\r\nhQEMA...\r\n"
    assert "encrypted" in parse_message(inline).flags
    signed = b"Content-Type: application/pkcs7-mime; smime-type=signed-data\r\n\r\nMIAG"
    assert "encrypted" not in parse_message(signed).flags

"""Outbound composition: what is sent is what the inbound parser reads back; hostile
values are refused with the field named; reply and forward helpers (table-driven)."""

from __future__ import annotations

import dataclasses
import hashlib
import mimetypes
import re

import idna
import pytest

from postroom.errors import InvalidInput
from postroom.mail.headers import fold_whitespace
from postroom.mail.message import Mailbox, ParsedMessage
from postroom.mail.parse import parse_message
from postroom.outbound.compose import (
    Address,
    Composition,
    CompositionError,
    Original,
    OutgoingAttachment,
    compose,
    envelope_recipients,
    forward_subject,
    forward_text,
    new_message_id,
    quote_html,
    quote_text,
    reply_recipients,
    reply_subject,
    thread_headers,
    validate,
)

A = Address
DATE_MS = 1_700_000_000_000
MESSAGE_ID = "01HF0000000000000000000000@example.com"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PDF = b"%PDF-1.4\n" + b"stream \xff\xfe\x00 endstream\n" * 40
FORWARDED_7BIT = b"From: Zed <zed@example.org>\nSubject: old news\n\nThe body.\n"
FORWARDED_8BIT = "From: zed@example.org\nSubject: öld\n\nbödy\n".encode()
BASE = Composition(from_=A("alice@example.com", "Alice"), to=(A("bob@example.org", "Bob"),))


def _address(value: str) -> str:
    local, _, domain = value.rpartition("@")
    if not domain.isascii():
        domain = idna.encode(domain, uts46=True).decode("ascii")
    return f"{local.lower()}@{domain.lower()}"


def _mailboxes(addresses: tuple[Address, ...]) -> tuple[Mailbox, ...]:
    return tuple(
        Mailbox(_address(a.address), fold_whitespace(a.name) if a.name else None) for a in addresses
    )


def _crlf(raw: bytes) -> bytes:
    return re.sub(rb"\r?\n|\r", b"\r\n", raw)


def _expected_attachments(c: Composition) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = [
        (
            a.filename,
            a.content_type or mimetypes.guess_type(a.filename)[0],
            len(a.data),
            hashlib.sha256(a.data).hexdigest(),
            a.disposition,
            a.content_id,
        )
        for a in c.attachments
    ]
    if c.attached_message is not None:
        forwarded = _crlf(c.attached_message)
        rows.append(
            (
                "forwarded-message.eml",
                "message/rfc822",
                len(forwarded),
                hashlib.sha256(forwarded).hexdigest(),
                "attachment",
                None,
            )
        )
    return rows


def _check_wire_form(raw: bytes, c: Composition) -> None:
    assert raw.isascii()
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert b"\r" not in raw.replace(b"\r\n", b"")
    assert max(len(line) for line in raw.split(b"\r\n")) <= 998
    header = raw.split(b"\r\n\r\n", 1)[0]
    assert not re.search(rb"^bcc:", header, re.I | re.M)
    for hidden in c.bcc:
        assert hidden.address.lower().encode() not in raw.lower()
    # Composing again gives the same bytes (boundaries come from the message ID).
    assert compose(c, message_id=MESSAGE_ID, date_ms=DATE_MS) == raw


def _check_round_trip(parsed: ParsedMessage, c: Composition) -> None:
    assert parsed.flags == frozenset()
    assert parsed.rfc_message_id == MESSAGE_ID
    assert parsed.sent_at == DATE_MS
    assert parsed.subject == fold_whitespace(c.subject)
    assert parsed.from_ == _mailboxes((c.from_,))[0]
    assert parsed.to == _mailboxes(c.to)
    assert parsed.cc == _mailboxes(c.cc)
    assert parsed.bcc == ()
    assert parsed.reply_to == _mailboxes(c.reply_to)
    assert parsed.in_reply_to == c.in_reply_to
    assert parsed.references == c.references[-64:]
    if c.text is not None:
        assert parsed.text == c.text.replace("\r\n", "\n").rstrip()
    assert [
        (a.filename, a.content_type, a.size, a.sha256, a.disposition, a.content_id)
        for a in parsed.attachments
    ] == _expected_attachments(c)


ROUND_TRIPS: list[tuple[str, Composition]] = [
    ("plain_text", dataclasses.replace(BASE, subject="Hello", text="Hi Bob,\n\nSee you.\n")),
    (
        "unicode_subject_and_names",
        dataclasses.replace(
            BASE,
            from_=A("jorg@example.com", "Jörg Müller"),
            to=(A("li@example.cn", "李小龙"), A("e@example.org", "Zoë 🎉")),
            subject="Grüße aus Köln 🎉 — 你好",
            text="Grüße!\n",
        ),
    ),
    (
        "long_ascii_subject_folds",
        dataclasses.replace(
            BASE, subject="Quarterly report " + "with many words " * 12 + "end", text="x"
        ),
    ),
    (
        "long_unicode_subject_folds",
        dataclasses.replace(BASE, subject="Ünïcödé " * 40 + "done", text="x"),
    ),
    (
        "quotes_commas_and_specials_in_names",
        dataclasses.replace(
            BASE,
            from_=A("alice@example.com", 'Alice "Ace" Smith, Jr. (CEO) <boss>'),
            to=(A("bob@example.org", "Doe, John"), A("c@example.org", "back\\slash; semi:colon")),
            cc=(A("d@example.org", "a@b.c"),),
            subject="names",
            text="x",
        ),
    ),
    (
        "idn_domains",
        dataclasses.replace(
            BASE,
            from_=A("info@bücher.example", "Bücher"),
            to=(A("kontakt@münchen.example"),),
            subject="IDN",
            text="x",
        ),
    ),
    ("html_only", dataclasses.replace(BASE, subject="html", html="<p>Hello <b>world</b></p>")),
    (
        "text_and_html",
        dataclasses.replace(
            BASE, subject="both", text="Hello world", html="<p>Hello <b>world</b></p>"
        ),
    ),
    (
        "attachments_non_ascii_filenames",
        dataclasses.replace(
            BASE,
            subject="files",
            text="Attached.",
            attachments=(
                OutgoingAttachment("rapport d'été.pdf", "application/pdf", PDF),
                OutgoingAttachment(
                    "Ein sehr langer Dateiname mit Umlauten äöü und noch mehr Text "
                    "damit er umbricht.txt",
                    "text/plain",
                    "Grüße\n".encode(),
                ),
                OutgoingAttachment("quote\"and'apos.csv", "text/csv", b"a,b\r\n1,2\r\n"),
            ),
        ),
    ),
    (
        "inline_image_with_content_id",
        dataclasses.replace(
            BASE,
            subject="logo",
            text="See the logo",
            html='<p>Logo: <img src="cid:logo.1@example.com"></p>',
            attachments=(
                OutgoingAttachment("logo.png", "image/png", PNG, "inline", "logo.1@example.com"),
                OutgoingAttachment("terms.pdf", "application/pdf", PDF),
            ),
        ),
    ),
    (
        "reply_with_references",
        dataclasses.replace(
            BASE,
            subject="Re: thread",
            text="> quoted\n\nAnswer.",
            in_reply_to="parent.7@example.org",
            references=tuple(f"ancestor.{n}@example.org" for n in range(70))
            + ("parent.7@example.org",),
        ),
    ),
    (
        "forward_as_attachment",
        dataclasses.replace(
            BASE, subject="Fwd: old news", text="FYI", attached_message=FORWARDED_7BIT
        ),
    ),
    (
        "forward_eight_bit_original",
        dataclasses.replace(BASE, subject="Fwd: öld", text="FYI", attached_message=FORWARDED_8BIT),
    ),
    (
        "marketing_with_list_unsubscribe",
        dataclasses.replace(
            BASE,
            subject="Our news",
            text="News.",
            html="<p>News.</p>",
            kind="marketing",
            list_unsubscribe=(
                "https://example.com/unsubscribe?u=42&t=abc",
                "mailto:unsubscribe@example.com?subject=unsubscribe",
            ),
            headers=(("List-Id", "News <news.example.com>"), ("Feedback-ID", "c1:news:esp")),
        ),
    ),
    (
        "cc_bcc_reply_to",
        dataclasses.replace(
            BASE,
            cc=(A("carol@example.org", "Carol"), A("dave@example.net")),
            bcc=(A("hidden@example.net", "Hidden"),),
            reply_to=(A("support@example.com", "Support"), A("team@example.com")),
            subject="cc",
            text="x",
        ),
    ),
    (
        "literal_encoded_word_in_subject_and_name",
        dataclasses.replace(
            BASE,
            from_=A("alice@example.com", "=?utf-8?q?not_decoded?="),
            subject="Literal =?utf-8?q?hello?= stays literal",
            text="x",
        ),
    ),
    (
        "attachment_only_no_body",
        dataclasses.replace(
            BASE, subject="", attachments=(OutgoingAttachment("scan.pdf", "", PDF),)
        ),
    ),
    (
        "awkward_text_body",
        dataclasses.replace(
            BASE,
            subject="body",
            text="--=_pr boundary look-alike\nnul\x00char\n" + "long line " * 150 + "\r\nend",
        ),
    ),
    (
        "many_recipients_fold",
        dataclasses.replace(
            BASE,
            to=tuple(A(f"user{n}@example.org", f"User Number {n}") for n in range(60)),
            subject="all hands",
            text="x",
        ),
    ),
    (
        "auto_reply_extra_headers",
        dataclasses.replace(
            BASE,
            kind="auto_reply",
            subject="Out of office",
            text="Away.",
            headers=(("X-Campaign", "spring 🌸 sale"), ("Precedence", "bulk")),
        ),
    ),
]


@pytest.mark.parametrize("c", [case for _, case in ROUND_TRIPS], ids=[n for n, _ in ROUND_TRIPS])
def test_composed_message_round_trips_through_the_parser(c: Composition) -> None:
    raw = compose(c, message_id=MESSAGE_ID, date_ms=DATE_MS)
    _check_wire_form(raw, c)
    _check_round_trip(parse_message(raw), c)


def test_html_bodies_and_alternative_structure() -> None:
    both = dict(ROUND_TRIPS)["text_and_html"]
    raw = compose(both, message_id=MESSAGE_ID, date_ms=DATE_MS)
    assert re.search(rb"^Content-Type: multipart/alternative", raw, re.M)
    parsed = parse_message(raw)
    assert parsed.text == "Hello world"
    assert parsed.html is not None and "<b>world</b>" in parsed.html
    html_only = parse_message(
        compose(dict(ROUND_TRIPS)["html_only"], message_id=MESSAGE_ID, date_ms=DATE_MS)
    )
    assert html_only.html is not None and "<b>world</b>" in html_only.html
    assert html_only.text is not None and "Hello world" in html_only.text


def test_inline_image_sits_in_multipart_related_with_the_html() -> None:
    raw = compose(
        dict(ROUND_TRIPS)["inline_image_with_content_id"], message_id=MESSAGE_ID, date_ms=DATE_MS
    )
    related = raw.index(b"multipart/related")
    assert raw.index(b"text/html") > related
    assert raw.index(b"Content-ID: <logo.1@example.com>") > related


def test_marketing_and_auto_reply_headers() -> None:
    raw = compose(
        dict(ROUND_TRIPS)["marketing_with_list_unsubscribe"],
        message_id=MESSAGE_ID,
        date_ms=DATE_MS,
    )
    header = raw.split(b"\r\n\r\n", 1)[0].decode()
    assert (
        "List-Unsubscribe: <https://example.com/unsubscribe?u=42&t=abc>,\r\n"
        " <mailto:unsubscribe@example.com?subject=unsubscribe>\r\n" in header
    )
    assert "\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" in header
    assert parse_message(raw).list_id == "news.example.com"
    mailto_only = dataclasses.replace(
        BASE, kind="marketing", text="x", list_unsubscribe=("mailto:u@example.com",)
    )
    # RFC 8058 one-click needs an HTTPS URI; with mailto alone there is nothing to POST to.
    assert b"List-Unsubscribe-Post" not in compose(
        mailto_only, message_id=MESSAGE_ID, date_ms=DATE_MS
    )
    auto = compose(
        dict(ROUND_TRIPS)["auto_reply_extra_headers"], message_id=MESSAGE_ID, date_ms=DATE_MS
    )
    assert b"\r\nAuto-Submitted: auto-replied\r\n" in auto
    assert parse_message(auto).kind == "automated"
    assert b"\r\nAuto-Submitted" not in compose(
        dict(ROUND_TRIPS)["plain_text"], message_id=MESSAGE_ID, date_ms=DATE_MS
    )


def test_references_keep_the_last_64_and_drop_overlong_identifiers() -> None:
    overlong = "x" * 996 + "@example.org"
    refs = (*(f"r{n}@example.org" for n in range(100)), overlong, "r99@example.org")
    c = dataclasses.replace(BASE, text="x", references=refs)
    parsed = parse_message(compose(c, message_id=MESSAGE_ID, date_ms=DATE_MS))
    # Duplicates keep their last position; the over-long one is dropped, not truncated.
    assert parsed.references == tuple(f"r{n}@example.org" for n in range(36, 100))
    assert parsed.flags == frozenset()


# --- hostile values -----------------------------------------------------------------------

PAYLOADS = ["a\rb", "a\nb", "a\r\nBcc: evil@example.net", "=?utf-8?q?a=0D=0Ab?=", "a\x00b"]


def _att(**changes: object) -> OutgoingAttachment:
    return dataclasses.replace(OutgoingAttachment("f.txt", "text/plain", b"x"), **changes)


def _with(field: str, bad: str) -> tuple[Composition, str]:
    """BASE with ``bad`` put where ``field`` names; returns the composition and the
    message ID to compose with."""
    bad_address = f"x{bad}@example.com"
    c = dataclasses.replace(BASE, text="x")
    message_id = MESSAGE_ID
    if field == "subject":
        c = dataclasses.replace(c, subject=bad)
    elif field == "from.name":
        c = dataclasses.replace(c, from_=A("alice@example.com", bad))
    elif field == "from.address":
        c = dataclasses.replace(c, from_=A(bad_address))
    elif field == "to.1.name":
        c = dataclasses.replace(c, to=(A("b@example.org"), A("c@example.org", bad)))
    elif field == "to.0.address":
        c = dataclasses.replace(c, to=(A(bad_address),))
    elif field == "cc.0.name":
        c = dataclasses.replace(c, cc=(A("c@example.org", bad),))
    elif field == "bcc.0.address":
        c = dataclasses.replace(c, bcc=(A(bad_address),))
    elif field == "reply_to.0.name":
        c = dataclasses.replace(c, reply_to=(A("r@example.org", bad),))
    elif field == "headers.X-Campaign":
        c = dataclasses.replace(c, headers=(("X-Campaign", bad),))
    elif field == "headers.0":
        c = dataclasses.replace(c, headers=((f"X-{bad}", "v"),))
    elif field == "attachments.0.filename":
        c = dataclasses.replace(c, attachments=(_att(filename=f"f{bad}.txt"),))
    elif field == "attachments.0.content_type":
        c = dataclasses.replace(c, attachments=(_att(content_type=f"text/plain{bad}"),))
    elif field == "attachments.0.content_id":
        c = dataclasses.replace(c, attachments=(_att(content_id=f"id{bad}@example.com"),))
    elif field == "list_unsubscribe.0":
        c = dataclasses.replace(c, list_unsubscribe=(f"https://example.com/u?{bad}",))
    elif field == "in_reply_to":
        c = dataclasses.replace(c, in_reply_to=f"p{bad}@example.com")
    elif field == "references.1":
        c = dataclasses.replace(c, references=("ok@example.com", f"r{bad}@example.com"))
    elif field == "message_id":
        message_id = f"m{bad}@example.com"
    else:  # pragma: no cover - a typo in the table
        raise AssertionError(field)
    return c, message_id


INJECTION_FIELDS = [
    "subject",
    "from.name",
    "from.address",
    "to.1.name",
    "to.0.address",
    "cc.0.name",
    "bcc.0.address",
    "reply_to.0.name",
    "headers.X-Campaign",
    "headers.0",
    "attachments.0.filename",
    "attachments.0.content_type",
    "attachments.0.content_id",
    "list_unsubscribe.0",
    "in_reply_to",
    "references.1",
    "message_id",
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=["cr", "lf", "crlf", "encoded_word", "nul"])
@pytest.mark.parametrize("field", INJECTION_FIELDS)
def test_header_injection_is_refused_naming_the_field(field: str, payload: str) -> None:
    c, message_id = _with(field, payload)
    if field != "message_id":
        with pytest.raises(CompositionError) as checked:
            validate(c)
        assert checked.value.field == field
    with pytest.raises(CompositionError) as composed:
        compose(c, message_id=message_id, date_ms=DATE_MS)
    assert composed.value.field == field
    assert isinstance(composed.value, InvalidInput)
    assert field in str(composed.value)


def test_the_same_fields_pass_with_a_clean_value() -> None:
    # The injection table fails for the payload, not for the way it builds compositions.
    for field in INJECTION_FIELDS:
        c, message_id = _with(field, "ok")
        if field == "headers.X-Campaign":
            c = dataclasses.replace(c, headers=(("X-Campaign", "ok"),))
        compose(c, message_id=message_id, date_ms=DATE_MS)


INVALID: list[tuple[str, Composition, str, str]] = [
    (
        "not_an_address",
        dataclasses.replace(BASE, to=(A("bob"),)),
        "to.0.address",
        "invalid_address",
    ),
    (
        "angle_addr_in_address",
        dataclasses.replace(BASE, to=(A("Bob <bob@example.org>"),)),
        "to.0.address",
        "invalid_address",
    ),
    (
        "bad_domain",
        dataclasses.replace(BASE, cc=(A("a@exa mple.org"),)),
        "cc.0.address",
        "invalid_address",
    ),
    (
        "non_ascii_local_part",
        dataclasses.replace(BASE, to=(A("jörg@example.org"),)),
        "to.0.address",
        "smtputf8_unsupported",
    ),
    (
        "reserved_header",
        dataclasses.replace(BASE, headers=(("Received", "from x"),)),
        "headers.Received",
        "invalid_input",
    ),
    (
        "from_through_headers",
        dataclasses.replace(BASE, headers=(("from", "evil@example.net"),)),
        "headers.from",
        "invalid_input",
    ),
    (
        "auto_submitted_with_auto_reply",
        dataclasses.replace(BASE, kind="auto_reply", headers=(("Auto-Submitted", "no"),)),
        "headers.Auto-Submitted",
        "invalid_input",
    ),
    (
        "marketing_without_unsubscribe",
        dataclasses.replace(BASE, kind="marketing"),
        "list_unsubscribe",
        "invalid_input",
    ),
    (
        "unsubscribe_http",
        dataclasses.replace(BASE, list_unsubscribe=("http://example.com/u",)),
        "list_unsubscribe.0",
        "invalid_input",
    ),
    (
        "unsubscribe_javascript",
        dataclasses.replace(BASE, list_unsubscribe=("javascript:alert(1)",)),
        "list_unsubscribe.0",
        "invalid_input",
    ),
    (
        "content_type_not_a_media_type",
        dataclasses.replace(BASE, attachments=(_att(content_type="pdf"),)),
        "attachments.0.content_type",
        "invalid_input",
    ),
    (
        "multipart_attachment",
        dataclasses.replace(BASE, attachments=(_att(content_type="multipart/mixed"),)),
        "attachments.0.content_type",
        "invalid_input",
    ),
    (
        "filename_only_path",
        dataclasses.replace(BASE, attachments=(_att(filename="../"),)),
        "attachments.0.filename",
        "invalid_input",
    ),
    ("lone_surrogate", dataclasses.replace(BASE, subject="a\ud800b"), "subject", "invalid_input"),
    ("subject_too_long", dataclasses.replace(BASE, subject="s" * 999), "subject", "invalid_input"),
    (
        "name_too_long",
        dataclasses.replace(BASE, from_=A("a@example.com", "n" * 257)),
        "from.name",
        "invalid_input",
    ),
    ("bad_kind", dataclasses.replace(BASE, kind="spam"), "kind", "invalid_input"),  # type: ignore[arg-type]
    ("vertical_tab", dataclasses.replace(BASE, subject="a\x0bb"), "subject", "invalid_input"),
    ("line_separator", dataclasses.replace(BASE, subject="a\u2028b"), "subject", "invalid_input"),
    (
        "in_reply_to_not_an_id",
        dataclasses.replace(BASE, in_reply_to="no at sign"),
        "in_reply_to",
        "invalid_input",
    ),
]


@pytest.mark.parametrize(
    ("c", "field", "code"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
def test_invalid_compositions_are_refused_clearly(c: Composition, field: str, code: str) -> None:
    with pytest.raises(CompositionError) as caught:
        compose(c, message_id=MESSAGE_ID, date_ms=DATE_MS)
    assert caught.value.field == field
    assert caught.value.code == code
    assert str(caught.value).startswith(f"{field}: ")


def test_header_injection_errors_carry_their_own_code() -> None:
    with pytest.raises(CompositionError) as caught:
        validate(dataclasses.replace(BASE, subject="a\r\nBcc: x@example.net"))
    assert caught.value.code == "header_injection"


@pytest.mark.parametrize("date_ms", [-(10**15), 10**17])
def test_out_of_range_dates_are_refused(date_ms: int) -> None:
    with pytest.raises(CompositionError) as caught:
        compose(BASE, message_id=MESSAGE_ID, date_ms=date_ms)
    assert caught.value.field == "date_ms"


def test_envelope_recipients_include_bcc_once() -> None:
    c = dataclasses.replace(
        BASE,
        cc=(A("Bob@Example.org"), A("c@bücher.example")),
        bcc=(A("hidden@example.net"), A("bob@example.org")),
    )
    assert envelope_recipients(c) == (
        "bob@example.org",
        "c@xn--bcher-kva.example",
        "hidden@example.net",
    )


def test_new_message_id() -> None:
    first, second = new_message_id("bücher.example"), new_message_id("example.com")
    assert re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}@xn--bcher-kva\.example", first)
    assert second.endswith("@example.com") and second != new_message_id("example.com")
    for bad in ("", "exa mple.com", "a\r\nb.com", "[127.0.0.1]"):
        with pytest.raises(InvalidInput):
            new_message_id(bad)


# --- replies and forwards ----------------------------------------------------------------

ORIGINAL = Original(
    rfc_message_id="orig.1@example.org",
    references=("root@example.org", "mid@example.org"),
    from_=A("carol@example.org", "Carol"),
    reply_to=(),
    to=(A("me@example.com", "Me"), A("dave@example.org", "Dave")),
    cc=(A("Eve@Example.org"), A("ME@example.com"), A("dave@EXAMPLE.org")),
    subject="Lunch?",
    sent_at_ms=1_717_423_500_000,  # Mon, 3 Jun 2024 14:05 UTC
    text="Shall we meet at noon?  \n\n> earlier\nBye\n\n",
    html="<p>Shall we</p>",
)
OWN = frozenset({"me@example.com"})


@pytest.mark.parametrize(
    ("original", "reply_all", "to", "cc"),
    [
        (ORIGINAL, False, (A("carol@example.org", "Carol"),), ()),
        (
            ORIGINAL,
            True,
            (A("carol@example.org", "Carol"),),
            (A("dave@example.org", "Dave"), A("Eve@Example.org")),
        ),
        (
            dataclasses.replace(ORIGINAL, reply_to=(A("list@example.org"),)),
            False,
            (A("list@example.org"),),
            (),
        ),
        (
            # Replying to one's own message goes to its recipients.
            dataclasses.replace(ORIGINAL, from_=A("Me@Example.com")),
            True,
            (A("dave@example.org", "Dave"),),
            (A("Eve@Example.org"),),
        ),
        (
            dataclasses.replace(
                ORIGINAL, from_=A("me@example.com"), to=(A("me@example.com"),), cc=()
            ),
            False,
            (A("me@example.com"),),
            (),
        ),
    ],
    ids=["reply", "reply_all", "reply_to_wins", "own_message", "note_to_self"],
)
def test_reply_recipients(
    original: Original, reply_all: bool, to: tuple[Address, ...], cc: tuple[Address, ...]
) -> None:
    assert reply_recipients(original, own_addresses=OWN, reply_all=reply_all) == (to, cc)


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        (None, "Re:"),
        ("", "Re:"),
        ("Lunch?", "Re: Lunch?"),
        ("Re: Lunch?", "Re: Lunch?"),
        ("RE: Re: re[2]: Lunch?", "Re: Lunch?"),
        ("AW: Lunch?", "Re: Lunch?"),
        ("Fwd: Lunch?", "Re: Fwd: Lunch?"),
        ("Regarding lunch", "Re: Regarding lunch"),
    ],
)
def test_reply_subject(subject: str | None, expected: str) -> None:
    assert reply_subject(subject) == expected


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        (None, "Fwd:"),
        ("Lunch?", "Fwd: Lunch?"),
        ("Fwd: FW: Lunch?", "Fwd: Lunch?"),
        ("Re: x", "Fwd: Re: x"),
    ],
)
def test_forward_subject(subject: str | None, expected: str) -> None:
    assert forward_subject(subject) == expected


def test_thread_headers_cap_references_and_drop_overlong_identifiers() -> None:
    assert thread_headers(ORIGINAL) == (
        "orig.1@example.org",
        ("root@example.org", "mid@example.org", "orig.1@example.org"),
    )
    long_chain = dataclasses.replace(
        ORIGINAL,
        references=(*(f"a{n}@example.org" for n in range(80)), "y" * 996 + "@example.org"),
    )
    in_reply_to, references = thread_headers(long_chain)
    assert in_reply_to == "orig.1@example.org"
    assert references == (*(f"a{n}@example.org" for n in range(17, 80)), "orig.1@example.org")
    assert thread_headers(dataclasses.replace(ORIGINAL, rfc_message_id=None, references=())) == (
        None,
        (),
    )


def test_quote_text() -> None:
    assert quote_text(ORIGINAL) == (
        "On Mon, 3 Jun 2024 at 14:05 UTC, Carol <carol@example.org> wrote:\n"
        "> Shall we meet at noon?\n"
        ">\n"
        ">> earlier\n"
        "> Bye"
    )
    anonymous = dataclasses.replace(ORIGINAL, from_=None, sent_at_ms=None, text=None)
    assert quote_text(anonymous) == "an unknown sender wrote:"
    assert not any(line != line.rstrip() for line in quote_text(ORIGINAL).split("\n"))


def test_quote_html_escapes_the_original() -> None:
    hostile = dataclasses.replace(
        ORIGINAL, text="<script>alert(1)</script>\nline two", from_=A("x@example.org", "<b>X</b>")
    )
    quoted = quote_html(hostile)
    assert "<script>" not in quoted and "&lt;script&gt;alert(1)&lt;/script&gt;<br>" in quoted
    assert "&lt;b&gt;X&lt;/b&gt;" in quoted
    assert '<blockquote type="cite"' in quoted and quoted.endswith("</blockquote></div>")


def test_forward_text() -> None:
    assert forward_text(ORIGINAL) == (
        "---------- Forwarded message ---------\n"
        "From: Carol <carol@example.org>\n"
        "Date: Mon, 3 Jun 2024 at 14:05 UTC\n"
        "Subject: Lunch?\n"
        "To: Me <me@example.com>, Dave <dave@example.org>\n"
        "Cc: Eve@Example.org, ME@example.com, dave@EXAMPLE.org\n"
        "\n"
        "Shall we meet at noon?\n"
        "\n"
        "> earlier\n"
        "Bye"
    )


def test_reply_built_from_the_helpers_round_trips() -> None:
    to, cc = reply_recipients(ORIGINAL, own_addresses=OWN, reply_all=True)
    in_reply_to, references = thread_headers(ORIGINAL)
    c = Composition(
        from_=A("me@example.com", "Me"),
        to=to,
        cc=cc,
        subject=reply_subject(ORIGINAL.subject),
        text="Yes!\n\n" + quote_text(ORIGINAL),
        html="<p>Yes!</p>" + quote_html(ORIGINAL),
        in_reply_to=in_reply_to,
        references=references,
    )
    raw = compose(c, message_id=MESSAGE_ID, date_ms=DATE_MS)
    _check_wire_form(raw, c)
    parsed = parse_message(raw)
    _check_round_trip(parsed, c)
    assert parsed.extracted_text == "Yes!"

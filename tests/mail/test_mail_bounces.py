"""Bounce, delay/delivery notice and complaint parsing, and VERP return paths."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from postroom.mail.bounces import (
    MAX_DIAGNOSTIC_CHARS,
    MAX_REPORT_RECIPIENTS,
    MAX_SCAN_BYTES,
    bounce_type,
    envelope_recipient_token,
    parse_bounce,
    verp_address,
    verp_token,
)

DATA = Path(__file__).parents[1] / "data" / "bounces"
FIXTURES = sorted(DATA.glob("*.eml"))

# address, action, status, smtp_code, bounce_type
Rcpt = tuple[str, str, str | None, int | None, str | None]

CASES: list[tuple[str, str, str, str | None, str | None, list[Rcpt]]] = [
    # fixture, kind, format, original Message-ID, reporting MTA, recipients
    (
        "postfix_failed",
        "bounce",
        "rfc3464",
        "01HR3ABCDEF@postroom.test",
        "mx.example.org",
        [("nobody@example.org", "failed", "5.1.1", 550, "hard")],
    ),
    (
        "postfix_delayed",
        "delay",
        "rfc3464",
        "01HR5DELAYED@postroom.test",
        "relay.example.net",
        [("slow@example.com", "delayed", "4.4.1", None, "soft")],
    ),
    (
        "exim_failed",
        "bounce",
        "exim",
        "01HR7EXIMTEST@postroom.test",
        None,
        [
            ("gone@example.co.uk", "failed", "5.1.1", 550, "hard"),
            # "retry timeout exceeded": the address was never refused.
            ("other@example.co.uk", "failed", None, None, "soft"),
        ],
    ),
    (
        "exim_delayed",
        "delay",
        "exim",
        None,
        None,
        [("later@example.org", "delayed", "4.7.1", 451, "soft")],
    ),
    (
        "qmail_failed",
        "bounce",
        "qmail",
        "01HRAQMAIL@postroom.test",
        "mx.example.net",
        [
            ("nobody@example.net", "failed", "5.1.1", None, "hard"),
            ("remote@example.com", "failed", "5.7.1", 554, "hard"),
        ],
    ),
    (
        "exchange_failed",
        "bounce",
        "exchange",
        "01HRCEXCH@postroom.test",
        "dm6pr11mb1234.namprd11.prod.outlook.com",
        [("missing@contoso.com", "failed", "5.1.10", 550, "hard")],
    ),
    (
        "exchange_text_only_diagnostic",
        "bounce",
        "exchange",
        "01HRDSTATUS@postroom.test",
        "exch01.corp.example.com",
        [
            ("left@corp.example.com", "failed", "5.1.1", 550, "hard"),
            ("full@corp.example.com", "failed", "5.2.2", 552, "soft"),
        ],
    ),
    (
        "gmail_failed",
        "bounce",
        "rfc3464",
        "01HRFGMAIL@postroom.test",
        "googlemail.com",
        [("no.such.user@gmail.com", "failed", "5.1.1", 550, "hard")],
    ),
    (
        "sendmail_failed",
        "bounce",
        "rfc3464",
        "01HRGSENDMAIL@postroom.test",
        "mail.example.edu",
        [("student@example.edu", "failed", "5.1.1", 550, "hard")],
    ),
    (
        "sendmail_legacy",
        "delay",
        "sendmail",
        "01HRGLEGACY@postroom.test",
        None,
        # The address we sent to, not the one the alias expanded to.
        [("alias@old.example.edu", "delayed", None, None, "soft")],
    ),
    (
        "delivered_relayed",
        "delivered",
        "rfc3464",
        "01HRHDELIVERED@postroom.test",
        "mx.example.org",
        [
            ("carol@example.org", "delivered", "2.0.0", 250, None),
            ("dave@example.net", "relayed", "2.0.0", 250, None),
        ],
    ),
    (
        "arf_abuse",
        "complaint",
        "arf",
        "01HRJSALE@postroom.test",
        "mta1.arf.mail.yahoo.com",
        [("reader@example.com", "delivered", None, None, None)],
    ),
    (
        "arf_headers_only",
        "complaint",
        "arf",
        "01HRKNEWS@postroom.test",
        None,
        [("reader.two@hotmail.com", "delivered", None, None, None)],
    ),
    # Malformed reports: what can be read is, nothing raises.
    (
        "truncated_multipart",
        "bounce",
        "rfc3464",
        None,
        "mx.example.org",
        # Status was cut off; the human-readable part still names the reply.
        [("nobody@example.org", "failed", "5.1.1", 550, "hard")],
    ),
    (
        "missing_final_recipient",
        "bounce",
        "rfc3464",
        "01HRMMISSING@postroom.test",
        "mx.example.org",
        [("kept@example.org", "failed", "5.1.1", None, "hard")],
    ),
    (
        "no_recipient_fields",
        "bounce",
        "rfc3464",
        "01HRNNOREC@postroom.test",
        "mx.example.org",
        [("header.only@example.org", "failed", None, None, "hard")],
    ),
    (
        "garbage_status",
        "bounce",
        "rfc3464",
        None,
        "mx.example.org",
        [
            ("one@example.org", "failed", None, 550, "hard"),
            ("two@example.org", "delayed", "4.2.0", None, "soft"),
            ("three@example.org", "failed", None, None, "hard"),
        ],
    ),
]

NOT_REPORTS = ["auto_reply", "normal", "arf_auth_failure"]


def _read(name: str) -> bytes:
    return (DATA / f"{name}.eml").read_bytes()


def test_every_fixture_has_a_case() -> None:
    named = {case[0] for case in CASES} | set(NOT_REPORTS)
    assert {path.stem for path in FIXTURES} == named


@pytest.mark.parametrize(
    ("name", "kind", "format_", "original", "mta", "recipients"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_parse_bounce_fixture(
    name: str,
    kind: str,
    format_: str,
    original: str | None,
    mta: str | None,
    recipients: list[Rcpt],
) -> None:
    report = parse_bounce(_read(name))
    assert report is not None
    assert report.kind == kind
    assert report.format == format_
    assert report.original_message_id == original
    assert report.reporting_mta == mta
    assert report.verp_token is None
    got = [(r.address, r.action, r.status, r.smtp_code, r.bounce_type) for r in report.recipients]
    assert got == recipients
    for recipient in report.recipients:
        if recipient.diagnostic is not None:
            assert "\n" not in recipient.diagnostic
            assert len(recipient.diagnostic) <= MAX_DIAGNOSTIC_CHARS


@pytest.mark.parametrize("name", NOT_REPORTS)
def test_not_a_report(name: str) -> None:
    assert parse_bounce(_read(name)) is None


def test_complaint_fields() -> None:
    report = parse_bounce(_read("arf_abuse"))
    assert report is not None
    assert report.feedback_type == "abuse"
    bounce = parse_bounce(_read("postfix_failed"))
    assert bounce is not None
    assert bounce.feedback_type is None


def test_diagnostics_read_as_one_line() -> None:
    postfix = parse_bounce(_read("postfix_failed"))
    assert postfix is not None
    assert postfix.recipients[0].diagnostic == (
        "550 5.1.1 <nobody@example.org>: Recipient address rejected: User unknown in "
        "virtual mailbox table"
    )
    gmail = parse_bounce(_read("gmail_failed"))
    assert gmail is not None
    diagnostic = gmail.recipients[0].diagnostic
    assert diagnostic is not None
    # The repeated "550-5.1.1" of each reply line is dropped after the first.
    assert diagnostic.startswith("550-5.1.1 The email account that you tried to reach")
    assert diagnostic.count("5.1.1") == 1
    exchange = parse_bounce(_read("exchange_text_only_diagnostic"))
    assert exchange is not None
    assert exchange.recipients[1].diagnostic == "552 5.2.2 STOREDRV.Deliver; mailbox full"


def _dsn(records: str, *, content_type: str = "message/delivery-status") -> bytes:
    return (
        "From: MAILER-DAEMON@mx.example.org\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n'
        "\r\n--b\r\nContent-Type: text/plain\r\n\r\nFailed.\r\n"
        f"--b\r\nContent-Type: {content_type}\r\n\r\n"
        "Reporting-MTA: dns; mx.example.org\r\n\r\n"
        f"{records}\r\n--b--\r\n"
    ).encode()


def test_recipients_are_bounded() -> None:
    records = "\r\n".join(
        f"Final-Recipient: rfc822; user{n}@example.org\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        for n in range(MAX_REPORT_RECIPIENTS + 40)
    )
    report = parse_bounce(_dsn(records))
    assert report is not None
    assert len(report.recipients) == MAX_REPORT_RECIPIENTS
    assert report.recipients[-1].address == f"user{MAX_REPORT_RECIPIENTS - 1}@example.org"


def test_diagnostic_is_trimmed() -> None:
    long_reason = "word " * 2000
    report = parse_bounce(
        _dsn(
            "Final-Recipient: rfc822; a@example.org\r\nAction: failed\r\nStatus: 5.1.1\r\n"
            f"Diagnostic-Code: smtp; 550 5.1.1 {long_reason}\r\n  continued\r\n"
        )
    )
    assert report is not None
    diagnostic = report.recipients[0].diagnostic
    assert diagnostic is not None
    assert len(diagnostic) <= MAX_DIAGNOSTIC_CHARS
    assert diagnostic.startswith("550 5.1.1 word word")


def test_records_without_blank_lines_are_split() -> None:
    report = parse_bounce(
        _dsn(
            "Final-Recipient: rfc822; a@example.org\r\nAction: failed\r\nStatus: 5.1.1\r\n"
            "Final-Recipient: rfc822; b@example.org\r\nAction: delayed\r\nStatus: 4.2.2\r\n"
        )
    )
    assert report is not None
    assert [(r.address, r.action) for r in report.recipients] == [
        ("a@example.org", "failed"),
        ("b@example.org", "delayed"),
    ]
    assert report.kind == "bounce"


def test_original_recipient_wins_over_final() -> None:
    report = parse_bounce(
        _dsn(
            "Original-Recipient: rfc822; alias@example.org\r\n"
            "Final-Recipient: rfc822; real.person@example.org\r\n"
            "Action: failed\r\nStatus: 5.2.2\r\n"
        )
    )
    assert report is not None
    assert report.recipients[0].address == "alias@example.org"
    assert report.recipients[0].bounce_type == "soft"


def test_global_delivery_status_reads_utf8() -> None:
    report = parse_bounce(
        _dsn(
            "Final-Recipient: utf-8; jos\u00e9@exampl\u00e9.org\r\nAction: failed\r\n"
            "Status: 5.1.1\r\n",
            content_type="message/global-delivery-status",
        )
    )
    assert report is not None
    assert report.recipients[0].address == "jos\u00e9@xn--exampl-gva.org"


def test_report_beyond_the_scan_bound_is_not_read() -> None:
    filler = "x" * 76 + "\r\n"
    padding = filler * (MAX_SCAN_BYTES // len(filler) + 10)
    raw = (
        "From: someone@example.org\r\nSubject: report\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n'
        f"\r\n--b\r\nContent-Type: text/plain\r\n\r\n{padding}"
        "--b\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Final-Recipient: rfc822; a@example.org\r\nAction: failed\r\nStatus: 5.1.1\r\n--b--\r\n"
    ).encode()
    report = parse_bounce(raw)
    assert report is None or report.recipients == ()


@pytest.mark.parametrize(
    ("action", "status", "smtp_code", "diagnostic", "expected"),
    [
        ("failed", "5.1.1", 550, None, "hard"),
        ("failed", "5.7.1", 554, "relay access denied", "hard"),
        ("failed", "4.4.1", None, None, "soft"),
        ("failed", "5.2.2", 552, None, "soft"),
        ("failed", "5.3.4", 552, None, "soft"),
        ("failed", "5.0.0", 550, "mailbox is full", "soft"),
        ("failed", "5.1.1", 550, "user unknown, mailbox full", "hard"),
        ("failed", None, 452, None, "soft"),
        ("failed", None, 550, None, "hard"),
        ("failed", None, None, "retry timeout exceeded", "soft"),
        ("failed", None, None, None, "hard"),
        ("delayed", "4.2.0", None, None, "soft"),
        ("delivered", "2.0.0", 250, None, None),
        ("relayed", None, None, None, None),
        ("expanded", None, None, None, None),
    ],
)
def test_bounce_type_rules(
    action: str, status: str | None, smtp_code: int | None, diagnostic: str | None, expected: str
) -> None:
    assert bounce_type(action, status, smtp_code, diagnostic) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\r\n\r\n",
        b"\x00\xff" * 1000,
        b"Content-Type: multipart/report; report-type=delivery-status; boundary=x\r\n\r\n--x",
        b"Content-Type: multipart/report; report-type=feedback-report\r\n\r\n",
        b"Content-Type: message/delivery-status\r\n\r\nAction: failed\r\nStatus: 5.1.1",
        b"From: MAILER-DAEMON@x\r\nSubject: Undeliverable\r\n\r\n<@>:\r\n<a@>:\r\n<@b>:",
        b"From: a@b\r\nX-Failed-Recipients: ,,, <>, @@\r\n\r\n",
        b"Hi. This is the qmail-send program at \r\n<" + b"a" * 5000 + b"@x.org>:\r\n",
        b"This message was created automatically by mail delivery software\n"
        b"The following address(es) failed:\n" + b"  a@b.c\n" * 1000,
    ],
)
def test_hostile_input_never_raises(raw: bytes) -> None:
    report = parse_bounce(raw)
    if report is not None:
        assert len(report.recipients) <= MAX_REPORT_RECIPIENTS


def _mutations(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if not buf:
            break
        choice = rng.randrange(6)
        at = rng.randrange(len(buf))
        if choice == 0:
            buf[at] = rng.randrange(256)
        elif choice == 1:
            del buf[at : at + rng.randint(1, 200)]
        elif choice == 2:
            end = min(len(buf), at + rng.randint(1, 400))
            buf[at:at] = buf[at:end] * rng.randint(1, 4)
        elif choice == 3:
            del buf[at:]
        elif choice == 4:
            buf[at:at] = rng.choice(
                [b"\r\n\r\n", b"\n--", b":", b";", b"<", b">", b"@", b"\t", b"=?utf-8?b?", b"\x00"]
            )
        else:
            buf[at:at] = rng.choice(
                [
                    b"\nFinal-Recipient: rfc822; x@y.z\n",
                    b"\nAction: failed\n",
                    b"\nStatus: 5.9.999\n",
                    b"\nContent-Type: message/delivery-status\n\n",
                    b"\nContent-Transfer-Encoding: base64\n",
                    b"\n------ This is a copy of the message, including all the headers. --\n",
                ]
            )
    return bytes(buf)


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_mutated_fixtures_never_raise(path: Path) -> None:
    rng = random.Random(path.stem)
    data = path.read_bytes()
    for _ in range(150):
        report = parse_bounce(_mutations(data, rng))
        if report is not None:
            assert report.kind in ("bounce", "delay", "delivered", "complaint")
            assert len(report.recipients) <= MAX_REPORT_RECIPIENTS
            for recipient in report.recipients:
                assert "@" in recipient.address
                assert recipient.diagnostic is None or "\n" not in recipient.diagnostic


# VERP -------------------------------------------------------------------------------


def test_verp_round_trip() -> None:
    address = verp_address("bounces", "Mail.Postroom.TEST", "a1b2c3")
    assert address == "bounces+bnc-a1b2c3@mail.postroom.test"
    assert verp_token(address) == "a1b2c3"
    assert verp_token(address.upper()) == "a1b2c3"
    assert verp_token(f"<{address}>") == "a1b2c3"
    assert envelope_recipient_token(address) == "a1b2c3"


def test_verp_local_part_bound() -> None:
    token = "t" * 40
    # "+bnc-" and the token take 45 octets: 19 are left for the local part.
    assert verp_address("b" * 19, "example.org", token) == f"{'b' * 19}+bnc-{token}@example.org"
    assert verp_address("b" * 20, "example.org", token) is None
    assert verp_address('"quoted local"', "example.org", "abc") is None


@pytest.mark.parametrize("token", ["", "ABC", "a-b", "a" * 41, "tok en", "\u00e9"])
def test_verp_bad_token_is_an_error(token: str) -> None:
    with pytest.raises(ValueError, match="VERP token"):
        verp_address("bounces", "example.org", token)


def test_verp_bad_domain_is_an_error() -> None:
    with pytest.raises(ValueError, match="domain"):
        verp_address("bounces", " ", "abc")


@pytest.mark.parametrize(
    ("address", "token"),
    [
        ("bounces@example.org", None),
        ("bounces+bnc-@example.org", None),
        ("bounces+bnc-abc", None),
        ("bounces+bnc-ab_c@example.org", None),
        ("bounces+bnc-" + "a" * 41 + "@example.org", None),
        ("x+bnc-old+bnc-new1@example.org", "new1"),
        ("Someone+BNC-Tok3N@Example.org", "tok3n"),
        ("", None),
    ],
)
def test_verp_token_reads_only_tokens(address: str, token: str | None) -> None:
    assert verp_token(address) == token


def test_envelope_recipient_token_without_recipient() -> None:
    assert envelope_recipient_token(None) is None
    assert envelope_recipient_token("") is None

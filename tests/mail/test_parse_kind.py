"""Kind classification (seed 000 messages.kind) and its evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from postroom.mail.parse import parse_message

DATA = Path(__file__).parents[1] / "data" / "mail"


def _message(headers: str, content_type: str = "text/plain", body: str = "hello") -> bytes:
    return (
        f"Message-ID: <k@example.com>\r\n{headers}Content-Type: {content_type}\r\n\r\n{body}"
    ).encode()


REPORT = (
    "--R\r\nContent-Type: text/plain\r\n\r\nreport\r\n"
    "--R\r\nContent-Type: message/{kind}\r\n\r\nX: y\r\n--R--\r\n"
)


@pytest.mark.parametrize(
    ("raw", "kind", "evidence"),
    [
        (_message("From: a@example.com\r\n"), "normal", None),
        (
            _message("From: a@example.com\r\nAuto-Submitted: auto-replied\r\n"),
            "automated",
            {"auto_submitted": "auto-replied"},
        ),
        (_message("From: a@example.com\r\nAuto-Submitted: no\r\n"), "normal", None),
        (
            _message("From: a@example.com\r\nList-Id: Dev <dev.lists.example.org>\r\n"),
            "list",
            {"list_headers": ["list-id"]},
        ),
        (
            _message("From: a@example.com\r\nList-Unsubscribe: <mailto:u@example.com>\r\n"),
            "list",
            {"list_headers": ["list-unsubscribe"]},
        ),
        (_message("From: a@example.com\r\nPrecedence: list\r\n"), "list", {"precedence": "list"}),
        (
            _message("From: a@example.com\r\nPrecedence: bulk\r\n"),
            "automated",
            {"precedence": "bulk"},
        ),
        (
            _message("From: a@example.com\r\nPrecedence: junk\r\n"),
            "automated",
            {"precedence": "junk"},
        ),
        (
            _message("From: Shop <no-reply@shop.example>\r\n"),
            "automated",
            {"no_reply_sender": "no-reply@shop.example"},
        ),
        (
            _message("From: notifications@github.example\r\n"),
            "automated",
            {"no_reply_sender": "notifications@github.example"},
        ),
        (
            _message("From: a@example.com\r\nX-Autoreply: yes\r\n"),
            "automated",
            {"x_autoreply": "yes"},
        ),
        (
            _message(
                "From: MAILER-DAEMON@mx.example\r\n",
                'multipart/report; report-type=delivery-status; boundary="R"',
                REPORT.format(kind="delivery-status"),
            ),
            "dsn",
            None,
        ),
        (
            _message(
                "From: a@example.com\r\n",
                'multipart/report; report-type=disposition-notification; boundary="R"',
                REPORT.format(kind="disposition-notification"),
            ),
            "mdn",
            {"report_type": "disposition-notification"},
        ),
        (
            _message(
                "From: MAILER-DAEMON@mx.example\r\nSubject: failure notice\r\n",
            ),
            "dsn",
            None,
        ),
        (
            _message("From: a@example.com\r\n", "text/calendar; method=REQUEST", "BEGIN:VCALENDAR"),
            "calendar",
            {"calendar_method": "REQUEST"},
        ),
        # The more specific kind wins: a calendar invitation sent through a list.
        (
            _message(
                "From: a@example.com\r\nList-Id: <l.example.org>\r\n",
                "text/calendar; method=REQUEST",
                "BEGIN:VCALENDAR",
            ),
            "calendar",
            None,
        ),
        # An explicit Auto-Submitted beats list headers (bug trackers posting to a list).
        (
            _message(
                "From: bugzilla-daemon@example.org\r\nAuto-Submitted: auto-generated\r\n"
                "List-Id: <l.example.org>\r\n"
            ),
            "automated",
            None,
        ),
    ],
)
def test_kind(raw: bytes, kind: str, evidence: dict[str, object] | None) -> None:
    parsed = parse_message(raw)
    assert parsed.kind == kind
    if evidence is not None:
        assert parsed.automated is not None
        for key, value in evidence.items():
            assert parsed.automated[key] == value
    elif kind == "normal":
        assert parsed.automated is None


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("dsn.eml", "dsn"),
        ("calendar_invite.eml", "calendar"),
        ("newsletter_html_only.eml", "list"),
        ("outlook_reply.eml", "normal"),
    ],
)
def test_kind_of_fixtures(name: str, kind: str) -> None:
    assert parse_message((DATA / name).read_bytes()).kind == kind

"""The fixed fixture mailbox every search test reads: twelve messages of one identity
(attachments, labels, read state, refs, a thread, accented and CJK text, a quarantined
and a sent message) and one message of another identity that must never be found."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from postroom.clock import ManualClock
from postroom.store import messages as message_rows
from postroom.tenancy.service import create_identity
from postroom.testing.mail import deliver, make_message

NOW = int(datetime(2024, 6, 1, tzinfo=UTC).timestamp() * 1000)


def at(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)


def with_attachment(
    *, sender: str, to: str, subject: str, body: str, filename: str, size: int = 300, **kw: Any
) -> bytes:
    """A multipart/mixed message: a text part and one attachment of ``size`` bytes."""
    boundary = "b-" + uuid.uuid4().hex
    payload = base64.encodebytes(b"%PDF-1.4\n" + b"x" * size).decode()
    head = make_message(sender=sender, to=to, subject=subject, body="", **kw).split(b"\r\n\r\n")[0]
    head = head.replace(
        b"Content-Type: text/plain; charset=utf-8",
        f'Content-Type: multipart/mixed; boundary="{boundary}"'.encode(),
    )
    parts = (
        f"--{boundary}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
        f"--{boundary}\r\nContent-Type: application/octet-stream\r\n"
        f'Content-Disposition: attachment; filename="{filename}"\r\n'
        f"Content-Transfer-Encoding: base64\r\n\r\n{payload}\r\n--{boundary}--\r\n"
    )
    return head + b"\r\n\r\n" + parts.encode()


@dataclass
class Mailbox:
    app: Any
    identity_id: str
    other_identity_id: str
    ids: dict[str, str]

    def names(self, message_ids: list[str]) -> set[str]:
        back = {v: k for k, v in self.ids.items()}
        return {back.get(m, m) for m in message_ids}


@pytest.fixture
def mailbox(ready_app: Any) -> Mailbox:
    app = ready_app
    app.clock = ManualClock(NOW)
    made = create_identity(app, "box")
    box = made.address.address
    other = create_identity(app, "other")
    ids: dict[str, str] = {}

    def put(name: str, raw: bytes, day: str, to: str = box) -> str:
        app.clock.set(at(day))
        ids[name] = deliver(app, raw, to)[0]
        return ids[name]

    alice = "Alice Martin <alice@acme.example>"
    put(
        "invoice",
        with_attachment(
            sender=alice,
            to=box,
            subject="Invoice INV-2024-031 for March",
            body="Please find the invoice attached.\nYour order number: 1234 is on its way.",
            filename="invoice-march.pdf",
            message_id="invoice@acme.example",
            extra_headers={"Cc": "Carol <carol@partner.example>"},
        ),
        "2024-03-05",
    )
    put(
        "reply",
        make_message(
            sender="Bob Stone <bob@globex.example>",
            to=box,
            subject="Re: Invoice INV-2024-031 for March",
            body="Thanks Alice, paid today.\n\n> Please find the invoice attached.",
            in_reply_to="invoice@acme.example",
        ),
        "2024-03-06",
    )
    put(
        "reminder",
        make_message(
            sender="Billing Bot <billing@acme.example>",
            to=box,
            subject="Payment reminder",
            body="Your invoice INV-2024-031 is late. A late fee applies.",
        ),
        "2024-03-20",
    )
    put(
        "cafe",
        make_message(
            sender="Zoë Dupont <zoe@cafe.example>",
            to=box,
            subject="Café crème à Paris",
            body="Rendez-vous au café près de la gare. Élodie vient aussi.",
        ),
        "2024-04-01",
    )
    put(
        "cjk",
        make_message(
            sender="田中 太郎 <tanaka@example.jp>",
            to=box,
            subject="東京駅での会議について",
            body="明日の会議は東京駅の近くです。 meeting tomorrow",
        ),
        "2024-04-02",
    )
    put(
        "report",
        with_attachment(
            sender=alice,
            to=box,
            subject="Quarterly report draft",
            body="The quarterly reporting numbers are attached. Revenue grew.",
            filename="report-q1.xlsx",
            size=40_000,
        ),
        "2024-04-10",
    )
    put(
        "digest",
        make_message(
            sender="News <news@list.example>",
            to=box,
            subject="Weekly digest",
            body="Top stories this week: rust, python and databases.",
            extra_headers={
                "List-Id": "Weekly <weekly.list.example>",
                "List-Unsubscribe": "<mailto:leave@list.example>",
            },
        ),
        "2024-04-15",
    )
    put(
        "prize",
        make_message(
            sender="Prize <winner@spam.example>",
            to=box,
            subject="You won a prize",
            body="Claim your prize now.",
        ),
        "2024-04-16",
    )
    put(
        "lunch",
        make_message(
            sender=f"Box <{box}>",
            to="Dave <dave@globex.example>",
            subject="Lunch on Friday?",
            body="Shall we meet for lunch on Friday at noon?",
        ),
        "2024-04-20",
    )
    put(
        "shipped",
        make_message(
            sender="Shop <orders@shop.example>",
            to=box,
            subject="Order #5678 has shipped",
            body="Tracking number 1Z999AA10123456784 for your parcel.",
        ),
        "2024-05-01",
    )
    put(
        "harvest",
        make_message(
            sender="Jonathan Appleseed <jonathan@orchard.example>",
            to=box,
            subject="Orchard harvest schedule",
            body="Apples ready next week.",
        ),
        "2024-05-02",
    )
    put(
        "standup",
        make_message(
            sender="Dana <dana@globex.example>",
            to=box,
            subject="Standup notes",
            body="Notes from today's standup: invoices are done.",
        ),
        "2024-05-30",
    )
    app.clock.set(at("2024-03-07"))
    ids["elsewhere"] = deliver(
        app,
        make_message(subject="Invoice INV-2024-031 for March", body="the invoice", to="x"),
        other.address.address,
    )[0]
    app.clock.set(NOW)
    with app.db.write() as tx:
        rowid = {
            name: int(tx.fetchval("SELECT rowid FROM messages WHERE id = %s", (mid,)))
            for name, mid in ids.items()
        }
        for name in ("invoice", "reply", "cafe", "report", "lunch", "harvest"):
            message_rows.set_state(tx, rowid[name], read=True)
        message_rows.set_state(tx, rowid["report"], archived=True)
        message_rows.add_labels(tx, rowid["invoice"], ["finance"])
        message_rows.add_labels(tx, rowid["reminder"], ["finance"])
        message_rows.add_labels(tx, rowid["cafe"], ["starred"])
        tx.execute(
            "UPDATE messages SET status = 'quarantined', quarantine_reason = 'spam'"
            " WHERE rowid = %s",
            (rowid["prize"],),
        )
        # No outbound pipeline yet: the fixture turns one stored message into sent mail.
        tx.execute("UPDATE messages SET direction = 'outbound' WHERE rowid = %s", (rowid["lunch"],))
    return Mailbox(app, made.identity.id, other.identity.id, ids)

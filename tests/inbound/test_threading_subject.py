"""Joining by subject: only a message with no In-Reply-To and no References, with a reply
or forward prefix, from a participant, into a live conversation of the same identity and
normalised subject active within the window."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from threading_support import DAY_MS, Mailbox, parsed

from postroom.store.db import Database

T0 = 1_700_000_000_000


@dataclass(frozen=True)
class Case:
    name: str
    subject: str
    from_: str = "ann@example.com"
    delay_ms: int = DAY_MS  # after the original's arrival
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    joins: bool = False


CASES = [
    Case("re prefix inside the window", "Re: Quarterly numbers", joins=True),
    Case("fwd prefix inside the window", "Fwd: Quarterly numbers", joins=True),
    Case("localised prefix and counter", "AW: RE[2]: quarterly  NUMBERS", joins=True),
    Case("just inside the window", "Re: Quarterly numbers", delay_ms=30 * DAY_MS, joins=True),
    Case("outside the window", "Re: Quarterly numbers", delay_ms=30 * DAY_MS + 1),
    Case("different subject", "Re: Quarterly numbers (draft)"),
    Case("bare subject, no prefix", "Quarterly numbers"),
    Case("sender never took part", "Re: Quarterly numbers", from_="mallory@example.net"),
    Case(
        "has references to an unknown message",
        "Re: Quarterly numbers",
        references=("elsewhere@example.net",),
    ),
    Case(
        "has in-reply-to to an unknown message",
        "Re: Quarterly numbers",
        in_reply_to="elsewhere@example.net",
    ),
    Case("junk in-reply-to still counts as one", "Re: Quarterly numbers", in_reply_to="yes"),
    Case("prefix only, empty subject", "Re: "),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_subject_join(db: Database, case: Case) -> None:
    box = Mailbox(db)
    original = box.deliver(
        parsed("orig@example.com", subject="Quarterly numbers", from_="ann@example.com"),
        received_at=T0,
    )
    later = box.deliver(
        parsed(
            "later@example.com",
            subject=case.subject,
            from_=case.from_,
            in_reply_to=case.in_reply_to,
            references=case.references,
        ),
        received_at=T0 + case.delay_ms,
    )
    assert (later.placement.thread_id == original.placement.thread_id) is case.joins
    assert later.placement.subject_join is case.joins
    assert later.placement.parent_rowid is None
    box.assert_consistent()


def test_two_bare_hello_mails_never_merge(db: Database) -> None:
    box = Mailbox(db)
    a = box.deliver(parsed("a@x", subject="Hello", from_="ann@x"), received_at=T0)
    b = box.deliver(parsed("b@x", subject="Hello", from_="ann@x"), received_at=T0 + 1)
    assert a.placement.thread_id != b.placement.thread_id
    assert not b.placement.subject_join


def test_subject_join_picks_the_most_recently_active_thread(db: Database) -> None:
    box = Mailbox(db)
    older = box.deliver(parsed("o@x", subject="Status", from_="ann@x"), received_at=T0)
    newer = box.deliver(parsed("n@x", subject="Status", from_="ann@x"), received_at=T0 + 10)
    box.deliver(parsed("o2@x", in_reply_to="o@x", from_="ann@x"), received_at=T0 + 20)
    # "o" was active last (its reply came at T0 + 20), so the join goes there.
    joined = box.deliver(parsed("j@x", subject="Re: Status", from_="ann@x"), received_at=T0 + 30)
    assert joined.placement.thread_id == older.placement.thread_id != newer.placement.thread_id
    assert joined.placement.subject_join


def test_subject_join_never_reaches_another_identity(db: Database) -> None:
    alice, bob = Mailbox(db, "alice"), Mailbox(db, "bob")
    alice.deliver(parsed("a@x", subject="Invoice", from_="ann@x"), received_at=T0)
    mine = bob.deliver(parsed("b@x", subject="Re: Invoice", from_="ann@x"), received_at=T0 + 1)
    assert mine.placement.created and not mine.placement.subject_join


def test_subject_join_skips_a_thread_started_after_the_message(db: Database) -> None:
    # An import can deliver an old reply after a newer conversation of the same subject.
    box = Mailbox(db)
    box.deliver(parsed("new@x", subject="Minutes", from_="ann@x"), received_at=T0)
    old = box.deliver(parsed("old@x", subject="Re: Minutes", from_="ann@x"), received_at=T0 - 5)
    assert old.placement.created and not old.placement.subject_join


def test_window_is_a_parameter(db: Database) -> None:
    box = Mailbox(db)
    first = box.deliver(parsed("a@x", subject="Ping", from_="ann@x"), received_at=T0)
    late = box.deliver(
        parsed("b@x", subject="Re: Ping", from_="ann@x"),
        received_at=T0 + 2 * DAY_MS,
        subject_window_ms=DAY_MS,
    )
    assert late.placement.thread_id != first.placement.thread_id


def test_a_message_named_by_stored_replies_is_placed_by_identifier_not_subject(
    db: Database,
) -> None:
    box = Mailbox(db)
    box.deliver(parsed("x@x", subject="Other", from_="ann@x"), received_at=T0)
    reply = box.deliver(parsed("r@x", in_reply_to="root@x", from_="ann@x"), received_at=T0 + 1)
    # "Re: Other" would qualify for a subject join, but the replies already name it.
    root = box.deliver(parsed("root@x", subject="Re: Other", from_="ann@x"), received_at=T0 + 2)
    assert root.placement.thread_id == reply.placement.thread_id
    assert not root.placement.subject_join

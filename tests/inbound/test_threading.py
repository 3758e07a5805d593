"""Placing messages in conversations: chains, absent and late roots, merges, counters,
identities, races, and the T510/T200 expectations of notmuch's test suite that apply."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from threading_support import DAY_MS, Mailbox, parse_headers, parsed

from postroom.errors import DatabaseBusy, NotFound
from postroom.inbound.threading import place_message, record_in_thread, resolve_thread
from postroom.mail.message import Mailbox as Address
from postroom.mail.threading import identifier_hash
from postroom.store import threads as thread_rows
from postroom.store.db import Database


@pytest.fixture
def box(db: Database) -> Mailbox:
    return Mailbox(db)


def test_reply_chain_shares_one_thread_with_parents(box: Mailbox) -> None:
    a = box.deliver(parsed("a@x", subject="Plans", from_="ann@x"), received_at=1_000)
    b = box.deliver(
        parsed("b@x", in_reply_to="a@x", references=("a@x",), subject="Re: Plans", from_="bo@y"),
        received_at=2_000,
    )
    c = box.deliver(
        parsed(
            "c@x",
            in_reply_to="b@x",
            references=("a@x", "b@x"),
            subject="RE: Re: Plans",
            from_="ann@x",
        ),
        received_at=3_000,
        read=True,
    )
    assert a.placement.created and not b.placement.created and not c.placement.created
    assert a.placement.thread_id == b.placement.thread_id == c.placement.thread_id
    assert b.placement.parent_rowid == a.rowid
    assert c.placement.parent_rowid == b.rowid
    assert box.parents() == {"a@x": None, "b@x": "a@x", "c@x": "b@x"}

    thread = box.thread(a.placement.thread_id)
    assert thread.subject == "plans"
    assert (thread.message_count, thread.unread_count) == (3, 2)
    assert (thread.first_at, thread.last_at, thread.last_inbound_at) == (1_000, 3_000, 3_000)
    assert thread.last_outbound_at is None
    assert [p["address"] for p in thread.participants] == ["ann@x", "bo@y"]
    box.assert_consistent()


def test_identifiers_are_stored_as_digests_only(box: Mailbox) -> None:
    box.deliver(parsed("a@x", in_reply_to="root@x", references=("root@x",)))
    with box.db.read() as tx:
        rows = tx.fetchall(
            "SELECT identifier_hash FROM thread_identifiers WHERE identity_id = %s",
            (box.identity_id,),
        )
    assert {r["identifier_hash"] for r in rows} == {
        identifier_hash("a@x"),
        identifier_hash("root@x"),
    }


def test_two_replies_to_an_absent_root_land_together(box: Mailbox) -> None:
    b = box.deliver(parsed("b@x", in_reply_to="root@x", references=("root@x",)))
    c = box.deliver(parsed("c@x", references=("root@x",)))
    assert b.placement.created and not c.placement.created
    assert b.placement.thread_id == c.placement.thread_id
    assert box.parents() == {"b@x": None, "c@x": None}
    box.assert_consistent()


def test_a_late_root_joins_its_replies_and_becomes_their_parent(box: Mailbox) -> None:
    b = box.deliver(
        parsed("b@x", in_reply_to="root@x", references=("root@x",), subject="Re: Q"),
        received_at=5_000,
    )
    c = box.deliver(
        parsed("c@x", in_reply_to="b@x", references=("root@x", "b@x"), subject="Re: Q"),
        received_at=6_000,
    )
    d = box.deliver(parsed("d@x", references=("root@x",)), received_at=7_000)
    root = box.deliver(parsed("root@x", subject="Q"), received_at=8_000)
    assert root.placement.thread_id == b.placement.thread_id == d.placement.thread_id
    assert not root.placement.created and root.placement.awaited_identifier == "root@x"
    # b and d named the root directly; c keeps b, its nearer ancestor.
    assert box.parents() == {"root@x": None, "b@x": "root@x", "c@x": "b@x", "d@x": "root@x"}
    assert c.placement.parent_rowid == b.rowid
    thread = box.thread(root.placement.thread_id)
    assert thread.message_count == 4
    assert thread.subject == "q"
    assert (thread.first_at, thread.last_at) == (5_000, 8_000)
    box.assert_consistent()


def test_a_message_naming_two_threads_folds_the_later_into_the_earlier(box: Mailbox) -> None:
    first = box.deliver(parsed("a@x", subject="One", from_="ann@x"), received_at=1_000)
    second = box.deliver(parsed("b@x", subject="Two", from_="bo@y"), received_at=2_000)
    reply_b = box.deliver(
        parsed("b2@x", in_reply_to="b@x", references=("b@x",)), received_at=3_000, read=True
    )
    joiner = box.deliver(
        parsed("c@x", in_reply_to="b@x", references=("a@x", "b@x"), from_="cy@z"),
        received_at=9_000,
    )
    survivor, folded = first.placement.thread_id, second.placement.thread_id
    assert joiner.placement.thread_id == survivor
    assert joiner.placement.merged_thread_ids == (folded,)
    assert joiner.placement.parent_rowid == second.rowid
    assert reply_b.placement.thread_id == folded
    assert len(box.groups()) == 1
    assert box.thread_of("b2@x") == survivor

    with box.db.read() as tx:
        assert resolve_thread(tx, box.identity_id, folded) == survivor
        assert resolve_thread(tx, box.identity_id, survivor) == survivor
        bound = thread_rows.lookup_identifiers(tx, box.identity_id, [identifier_hash("b2@x")])
        assert bound == {identifier_hash("b2@x"): survivor}
    old = box.thread(folded)
    assert old.merged_into_thread_id == survivor and old.message_count == 0
    thread = box.thread(survivor)
    assert thread.subject == "one"
    assert (thread.message_count, thread.unread_count) == (4, 3)
    assert (thread.first_at, thread.last_at) == (1_000, 9_000)
    assert [p["address"] for p in thread.participants] == ["ann@x", "bo@y", "cy@z"]
    box.assert_consistent()


def test_folds_are_path_compressed_so_every_old_id_resolves(box: Mailbox) -> None:
    a = box.deliver(parsed("a@x"))
    b = box.deliver(parsed("b@x"))
    c = box.deliver(parsed("c@x"))
    box.deliver(parsed("bc@x", references=("b@x", "c@x")))
    assert box.thread(c.placement.thread_id).merged_into_thread_id == b.placement.thread_id
    last = box.deliver(parsed("ab@x", references=("b@x", "a@x")))
    assert last.placement.merged_thread_ids == (b.placement.thread_id,)
    for old in (b, c):
        assert box.thread(old.placement.thread_id).merged_into_thread_id == a.placement.thread_id
        with box.db.read() as tx:
            assert resolve_thread(tx, box.identity_id, old.placement.thread_id) == (
                a.placement.thread_id
            )
    assert len(box.groups()) == 1
    box.assert_consistent()


def test_resolve_thread_refuses_another_identitys_thread(db: Database) -> None:
    alice, bob = Mailbox(db, "alice"), Mailbox(db, "bob")
    mine = alice.deliver(parsed("a@x"))
    with db.read() as tx:
        with pytest.raises(NotFound):
            resolve_thread(tx, bob.identity_id, mine.placement.thread_id)
        with pytest.raises(NotFound):
            resolve_thread(tx, alice.identity_id, "thr_nope")


def test_identities_never_share_a_thread(db: Database) -> None:
    alice, bob = Mailbox(db, "alice"), Mailbox(db, "bob")
    a1 = alice.deliver(parsed("root@x", subject="Hi"))
    b1 = bob.deliver(parsed("reply@x", in_reply_to="root@x", references=("root@x",)))
    assert a1.placement.thread_id != b1.placement.thread_id
    assert b1.placement.parent_rowid is None
    b2 = bob.deliver(parsed("root@x", subject="Hi"))
    assert b2.placement.thread_id == b1.placement.thread_id
    assert alice.groups() == {frozenset({"root@x"})}
    alice.assert_consistent()
    bob.assert_consistent()


def test_a_message_naming_itself_is_never_its_own_parent(box: Mailbox) -> None:
    first = box.deliver(parsed("self@x", in_reply_to="self@x", references=("self@x",)))
    assert first.placement.parent_rowid is None
    # A second copy with the same Message-ID lands in the same thread, with no parent:
    # the first copy is the same message, not the one it answers.
    again = box.deliver(parsed("self@x", in_reply_to="self@x", references=("p@x", "self@x")))
    assert again.placement.thread_id == first.placement.thread_id
    assert again.placement.parent_rowid is None
    box.assert_consistent()


def test_duplicates_share_a_thread_and_replies_take_the_first_copy(box: Mailbox) -> None:
    one = box.deliver(parsed("dup@x", subject="Same"))
    two = box.deliver(parsed("dup@x", subject="Same"))
    reply = box.deliver(parsed("r@x", in_reply_to="dup@x", references=("dup@x",)))
    assert one.placement.thread_id == two.placement.thread_id == reply.placement.thread_id
    assert reply.placement.parent_rowid == one.rowid
    assert two.placement.parent_rowid is None
    box.assert_consistent()


def test_counters_track_direction_read_state_and_cap_participants(box: Mailbox) -> None:
    many = tuple(Address(f"p{i:02d}@x") for i in range(60))
    first = box.deliver(
        replace(parsed("a@x", from_="boss@x"), to=many), received_at=10_000, read=False
    )
    box.deliver(
        parsed("b@x", in_reply_to="a@x", references=("a@x",), from_="me@x"),
        received_at=20_000,
        read=True,
        direction="outbound",
    )
    box.deliver(parsed("c@x", references=("a@x",), from_="late@x"), received_at=15_000)
    thread = box.thread(first.placement.thread_id)
    assert (thread.message_count, thread.unread_count) == (3, 2)
    assert (thread.first_at, thread.last_at) == (10_000, 20_000)
    assert (thread.last_inbound_at, thread.last_outbound_at) == (15_000, 20_000)
    addresses = [p["address"] for p in thread.participants]
    assert len(addresses) == 50
    assert addresses[:2] == ["boss@x", "p00@x"] and "late@x" not in addresses


def test_record_in_thread_accepts_a_thread_id_and_rejects_bad_direction(box: Mailbox) -> None:
    placed = box.deliver(parsed("a@x"))
    with box.db.write() as tx, pytest.raises(ValueError):
        record_in_thread(
            tx,
            placed.placement.thread_id,
            message_rowid=placed.rowid,
            direction="sideways",
            read=False,
            received_at=1,
            participants=[],
            now=1,
        )


def test_ancestor_bounds_and_junk_identifiers_bind_nothing(box: Mailbox) -> None:
    # "yes" is what git send-email writes when its In-Reply-To prompt is answered "yes";
    # a 999-octet identifier is over seed 003's bound. Neither may join conversations.
    long_id = "x" * 995 + "@y.z"
    a = box.deliver(parsed("a@x", in_reply_to="yes", references=("yes", long_id)))
    b = box.deliver(parsed("b@x", in_reply_to="yes", references=("yes", long_id)))
    assert a.placement.thread_id != b.placement.thread_id
    box.assert_consistent()


@pytest.mark.engines("postgresql")
def test_racing_arrivals_for_one_absent_identifier_end_in_one_thread(db: Database) -> None:
    box = Mailbox(db)
    first_placed = threading.Event()
    errors: list[BaseException] = []

    def arrive(message_id: str, now: int, hold: bool) -> None:
        try:
            with db.write() as tx:
                placement = place_message(
                    tx,
                    identity_id=box.identity_id,
                    tenant_id=box.tenant_id,
                    parsed=parsed(message_id, references=("absent@x",)),
                    received_at=now,
                    now=now,
                )
                if hold:
                    first_placed.set()
                    # Keep the transaction open while the second arrival binds the same
                    # identifier and waits on this one.
                    threading.Event().wait(0.5)
                rowid = tx.fetchval(
                    "INSERT INTO messages (id, identity_id, tenant_id, thread_id, parent_rowid,"
                    " direction, status, source, rfc_message_id, received_at, kind, created_at)"
                    " VALUES (%s, %s, %s, %s, %s, 'inbound', 'received', 'smtp', %s, %s,"
                    " 'normal', %s) RETURNING rowid",
                    (
                        f"msg_{message_id}",
                        box.identity_id,
                        box.tenant_id,
                        placement.thread_id,
                        placement.parent_rowid,
                        message_id,
                        now,
                        now,
                    ),
                )
                record_in_thread(
                    tx,
                    placement,
                    message_rowid=int(rowid),
                    direction="inbound",
                    read=False,
                    received_at=now,
                    participants=[],
                    now=now,
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    early = threading.Thread(target=arrive, args=("one@x", 1_000, True))
    early.start()
    assert first_placed.wait(10)
    late = threading.Thread(target=arrive, args=("two@x", 2_000, False))
    late.start()
    early.join(20)
    late.join(20)
    assert not errors, errors
    assert len(box.groups()) == 1
    live = box.live_threads()
    assert len(live) == 1 and live[0].message_count == 2
    with db.read() as tx:
        # The thread the second arrival assembled and then lost was removed, not folded.
        assert (
            tx.fetchval(
                "SELECT count(*) AS n FROM threads WHERE identity_id = %s", (box.identity_id,)
            )
            == 1
        )
    box.assert_consistent()


# --- notmuch T510-thread-replies: which header names the parent -------------------------


def _raw(headers: dict[str, str]) -> bytes:
    lines = [f"{k}: {v}" for k, v in headers.items()]
    lines += ["From: Notmuch Test Suite <test_suite@notmuchmail.org>", "", "body", ""]
    return "\r\n".join(lines).encode()


def test_t510_use_references_when_in_reply_to_is_broken(box: Mailbox) -> None:
    box.deliver(parse_headers(_raw({"Message-ID": "<foo@one.com>", "Subject": "one"})))
    # What a lax parser could hand over for "In-Reply-To: mumble".
    box.deliver(parsed("msg-002@x", in_reply_to="mumble", references=("foo@one.com",)))
    assert box.parent_of("msg-002@x") == "foo@one.com"
    assert box.thread_of("msg-002@x") == box.thread_of("foo@one.com")


def test_t510_prefer_references_to_dodgy_in_reply_to(box: Mailbox) -> None:
    box.deliver(parse_headers(_raw({"Message-ID": "<foo@two.com>", "Subject": "two"})))
    reply = parse_headers(
        _raw(
            {
                "Message-ID": "<msg-004@x>",
                "In-Reply-To": "Your message of December 31 1999 <bar@baz.com>",
                "References": "<foo@two.com>",
                "Subject": "Re: two",
            }
        )
    )
    box.deliver(reply)
    assert box.parent_of("msg-004@x") == "foo@two.com"


def test_t510_use_in_reply_to_when_no_references(box: Mailbox) -> None:
    box.deliver(parse_headers(_raw({"Message-ID": "<foo@three.com>", "Subject": "three"})))
    box.deliver(parse_headers(_raw({"Message-ID": "<m6@x>", "In-Reply-To": "<foo@three.com>"})))
    assert box.parent_of("m6@x") == "foo@three.com"


def test_t510_use_last_reference_when_in_reply_to_is_dodgy(box: Mailbox) -> None:
    box.deliver(parse_headers(_raw({"Message-ID": "<foo@four.com>", "Subject": "four"})))
    box.deliver(parse_headers(_raw({"Message-ID": "<bar@four.com>", "Subject": "not-four"})))
    box.deliver(
        parse_headers(
            _raw(
                {
                    "Message-ID": "<m9@x>",
                    "In-Reply-To": "<baz@four.com> (RFC822 4lyfe)",
                    "References": "<baz@four.com> <foo@four.com>",
                    "Subject": "neither",
                }
            )
        )
    )
    assert box.parent_of("m9@x") == "foo@four.com"
    assert box.groups() == {frozenset({"foo@four.com", "m9@x"}), frozenset({"bar@four.com"})}


def test_t510_ignore_garbage_at_the_end_of_references(box: Mailbox) -> None:
    box.deliver(parse_headers(_raw({"Message-ID": "<foo@five.com>", "Subject": "five"})))
    box.deliver(
        parse_headers(
            _raw({"Message-ID": "<bar@five.com>", "References": "<foo@five.com> (garbage)"})
        )
    )
    assert box.parent_of("bar@five.com") == "foo@five.com"


# --- notmuch T200-thread-naming: the thread keeps its first message's subject -----------


def test_t200_thread_subject_is_the_first_messages_normalised_subject(box: Mailbox) -> None:
    root = box.deliver(parsed("r@x", subject="thread-naming: Initial thread subject"))
    for n, subject in enumerate(
        (
            "thread-naming: Older changed subject",
            "thread-naming: Newer changed subject",
            "Re: thread-naming: Initial thread subject",
            "Aw: thread-naming: Initial thread subject",
            "Vs: thread-naming: Initial thread subject",
            "Sv: thread-naming: Initial thread subject",
        )
    ):
        box.deliver(parsed(f"c{n}@x", in_reply_to="r@x", subject=subject))
    thread = box.thread(root.placement.thread_id)
    assert thread.message_count == 7
    assert thread.subject == "thread-naming: initial thread subject"


def test_an_empty_subject_is_replaced_by_the_first_non_empty_one(box: Mailbox) -> None:
    root = box.deliver(parsed("r@x", subject=""))
    box.deliver(parsed("c@x", in_reply_to="r@x", subject="Re: Non-empty subject (1)"))
    box.deliver(parsed("d@x", in_reply_to="r@x", subject="Non-empty subject (2)"))
    assert box.thread(root.placement.thread_id).subject == "non-empty subject (1)"


def test_subject_join_window_constant_is_thirty_days() -> None:
    from postroom.inbound.threading import SUBJECT_JOIN_WINDOW_MS

    assert SUBJECT_JOIN_WINDOW_MS == 30 * DAY_MS


def test_placement_that_never_settles_asks_for_a_retry(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every identifier insert "loses" to another arrival, round after round.
    monkeypatch.setattr(thread_rows, "insert_identifiers", lambda *a, **k: set())
    with pytest.raises(DatabaseBusy) as caught:
        box.deliver(parsed("a@x", references=("b@x",)))
    assert caught.value.code == "thread_placement_contended"
    assert box.groups() == set()


def test_an_own_identifier_over_the_bound_still_gets_a_thread(box: Mailbox) -> None:
    huge = "x" * 995 + "@y.z"
    first = box.deliver(parsed(huge))
    second = box.deliver(parsed(huge))
    assert first.placement.created and second.placement.created
    assert first.placement.thread_id != second.placement.thread_id
    box.assert_consistent()


def test_a_late_root_with_a_non_ascii_identifier_is_adopted(box: Mailbox) -> None:
    box.deliver(parsed("r1@x", references=('ü"root@bücher.example',)))
    root = box.deliver(parsed('ü"root@bücher.example'))
    assert box.parent_of("r1@x") == 'ü"root@bücher.example'
    assert box.thread_of("r1@x") == root.placement.thread_id


def test_a_second_copy_of_the_root_does_not_rename_the_thread(box: Mailbox) -> None:
    root = box.deliver(parsed("r@x", subject="Original"))
    box.deliver(parsed("c@x", in_reply_to="r@x", subject="Re: Original"))
    box.deliver(parsed("r@x", subject="Something else entirely"))
    assert box.thread(root.placement.thread_id).subject == "original"

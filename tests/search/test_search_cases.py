"""One table of queries over the fixture mailbox, run on SQLite and PostgreSQL alike:
both engines must find exactly the expected hit set for every case."""

from __future__ import annotations

from typing import Any

from postroom.mailbox.search import search
from postroom.store.search_index import SearchScope

ALL = {
    "invoice", "reply", "reminder", "cafe", "cjk", "report", "digest", "prize", "lunch",
    "shipped", "harvest", "standup",
}  # fmt: skip

CASES: list[tuple[str, set[str]]] = [
    # free words, case and diacritics folded
    ("invoice", {"invoice", "reply", "reminder"}),
    ("INVOICE", {"invoice", "reply", "reminder"}),
    ("cafe", {"cafe"}),
    ("CAFÉ creme", {"cafe"}),
    ("elodie", {"cafe"}),
    ("invoice late", {"reminder"}),
    ("invoice AND late", {"reminder"}),
    # phrases
    ('"late fee"', {"reminder"}),
    ('"fee late"', set()),
    ('"find the invoice"', {"invoice", "reply"}),
    # negation, OR, parentheses
    ("invoice -late", {"invoice", "reply"}),
    ("invoice NOT paid", {"invoice", "reminder"}),
    ("prize OR lunch", {"prize", "lunch"}),
    ("(prize OR lunch) -noon", {"prize"}),
    ("-invoice -prize -notes", ALL - {"invoice", "reply", "reminder", "prize", "standup"}),
    ("label:finance OR harvest", {"invoice", "reminder", "harvest"}),
    # prefix
    ("quarter*", {"report"}),
    ("report*", {"report"}),
    ("invoice*", {"invoice", "reply", "reminder", "standup"}),
    # fields over people
    ("from:alice", {"invoice", "report"}),
    ("from:acme.example", {"invoice", "report", "reminder"}),
    ("from:zoë", {"cafe"}),
    ("to:dave", {"lunch"}),
    ("cc:carol", {"invoice"}),
    ("participant:carol", {"invoice"}),
    ("participant:globex", {"reply", "lunch", "standup"}),
    ("domain:globex.example", {"reply", "standup"}),
    # subject
    ("subject:invoice", {"invoice", "reply"}),
    ('subject:"payment reminder"', {"reminder"}),
    ("subject:repo*", {"report"}),
    # labels, state, folders
    ("label:finance", {"invoice", "reminder"}),
    ("is:starred", {"cafe"}),
    ("is:unread", {"reminder", "cjk", "digest", "prize", "shipped", "standup"}),
    ("is:read -from:alice", {"reply", "cafe", "lunch", "harvest"}),
    ("in:archive", {"report"}),
    ("in:sent", {"lunch"}),
    ("in:spam", {"prize"}),
    ("in:quarantine", {"prize"}),
    ("in:inbox invoice", {"invoice", "reply", "reminder"}),
    ("direction:outbound", {"lunch"}),
    ("kind:list", {"digest"}),
    # attachments and sizes
    ("has:attachment", {"invoice", "report"}),
    ("filename:pdf", {"invoice"}),
    ("filename:report", {"report"}),
    ("larger:20K", {"report"}),
    ("smaller:20K has:attachment", {"invoice"}),
    # dates
    ("before:2024-03-10", {"invoice", "reply"}),
    ("after:2024-05-01", {"shipped", "harvest", "standup"}),
    ("after:2024-03-01 before:2024-04-01", {"invoice", "reply", "reminder"}),
    ("newer_than:7d", {"standup"}),
    ("older_than:10w", {"invoice", "reply", "reminder"}),
    # refs and threads
    ("ref:invoice:INV-2024-031", {"invoice", "reply", "reminder"}),
    ("ref:order:5678", {"shipped"}),
    ("ref:1Z999AA10123456784", {"shipped"}),
    ("5678", {"shipped"}),
    # multilingual: CJK substrings through the trigram index
    ("東京駅", {"cjk"}),
    ("会議", set()),
    ("田中", {"cjk"}),
    # nothing
    ("zeppelin", set()),
    ("from:nobody@nowhere.example", set()),
]


def test_every_case_finds_the_same_hits_on_both_engines(mailbox: Any) -> None:
    assert len(CASES) >= 40
    scope = SearchScope(identity_id=mailbox.identity_id)
    wrong = []
    with mailbox.app.db.read() as tx:
        for q, expected in CASES:
            result = search(tx, q, scope, offset=0, limit=50, now_ms=mailbox.app.clock.now_ms())
            found = mailbox.names([h.message_id for h in result.hits])
            assert "elsewhere" not in found, q
            if found != expected or result.fuzzy or result.total != len(expected):
                wrong.append((q, sorted(found), sorted(expected), result.fuzzy, result.total))
    assert wrong == []


def test_the_thread_matches_every_message_of_a_conversation(mailbox: Any) -> None:
    with mailbox.app.db.read() as tx:
        thread_id = tx.fetchval(
            "SELECT thread_id FROM messages WHERE id = %s", (mailbox.ids["invoice"],)
        )
        result = search(
            tx,
            f"thread:{thread_id}",
            SearchScope(identity_id=mailbox.identity_id),
            offset=0,
            limit=10,
            now_ms=0,
        )
    assert mailbox.names([h.message_id for h in result.hits]) == {"invoice", "reply"}

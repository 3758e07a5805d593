"""What a search returns beyond hit sets: ranking by field, sort by date, one hit per
thread, the bounded total, pages, the fuzzy fallback and marked snippets — on both
engines."""

from __future__ import annotations

from typing import Any

from postroom.mailbox.search import highlight, search, similarity
from postroom.search.compiler import fold
from postroom.store import search_index
from postroom.store.search_index import SearchScope


def run(mailbox: Any, q: str, **kw: Any) -> Any:
    kw.setdefault("offset", 0)
    kw.setdefault("limit", 50)
    with mailbox.app.db.read() as tx:
        return search(
            tx, q, SearchScope(identity_id=mailbox.identity_id), now_ms=mailbox.app.clock.now_ms(),
            **kw,
        )  # fmt: skip


def names(mailbox: Any, result: Any) -> list[str]:
    back = {v: k for k, v in mailbox.ids.items()}
    return [back[h.message_id] for h in result.hits]


def test_subject_outranks_body_and_ties_go_newest_first(mailbox: Any) -> None:
    ranked = names(mailbox, run(mailbox, "reminder"))
    assert ranked == ["reminder"]
    both = run(mailbox, "quarterly OR apples")
    assert names(mailbox, both)[0] == "report"  # in the subject beats in the body
    assert both.hits[0].score > both.hits[1].score
    tie = names(mailbox, run(mailbox, "invoice", sort="date"))
    assert tie == ["reminder", "reply", "invoice"]
    assert all(h.score == 0 for h in run(mailbox, "invoice", sort="date").hits)


def test_group_by_thread_keeps_the_best_message_and_counts(mailbox: Any) -> None:
    grouped = run(mailbox, "invoice", group="thread")
    assert sorted(names(mailbox, grouped)) in (["invoice", "reminder"], ["reminder", "reply"])
    counts = {h.thread_id: h.thread_hits for h in grouped.hits}
    assert sorted(counts.values()) == [1, 2] and grouped.total == 2
    by_date = run(mailbox, "invoice", group="thread", sort="date")
    assert names(mailbox, by_date) == ["reminder", "reply"]


def test_pages_and_the_bounded_total(mailbox: Any, monkeypatch: Any) -> None:
    first = run(mailbox, "-zeppelin", limit=4, sort="date")
    second = run(mailbox, "-zeppelin", offset=4, limit=4, sort="date")
    assert first.total == 12 and first.total_exact
    assert not set(names(mailbox, first)) & set(names(mailbox, second))
    monkeypatch.setattr(search_index, "COUNT_BOUND", 5)
    bounded = run(mailbox, "-zeppelin", limit=3)
    assert bounded.total == 5 and not bounded.total_exact


def test_typos_fall_back_to_trigrams(mailbox: Any) -> None:
    for typo, expected in (
        ("jonahtan", "harvest"),
        ("harvset", "harvest"),
        ("Quartelry", "report"),
        ("remindr", "reminder"),
    ):
        result = run(mailbox, typo)
        assert result.fuzzy, typo
        assert names(mailbox, result)[0] == expected, typo
    assert "**" in run(mailbox, "jonahtan").hits[0].snippet_text
    filtered = run(mailbox, "jonahtan label:finance")
    assert filtered.hits == [] and not filtered.fuzzy
    exact = run(mailbox, "harvest")
    assert not exact.fuzzy and names(mailbox, exact) == ["harvest"]
    assert run(mailbox, "xqzvw").hits == []


def test_snippets_mark_matches_in_the_best_passage() -> None:
    text = "<b>lead</b> " + "filler " * 80 + "alpha then beta here " + "word " * 50
    found = highlight(text, lambda w: fold(w) in {"alpha", "beta"})
    assert found is not None
    marked, plain = found
    assert "<mark>alpha</mark> then <mark>beta</mark>" in marked
    assert "**alpha** then **beta**" in plain
    assert marked.startswith("…") and marked.endswith("…")
    escaped = highlight("a <script>x</script> & alpha", lambda w: w == "alpha")
    assert escaped is not None and "&lt;script&gt;" in escaped[0] and "<script>" in escaped[1]
    assert highlight("nothing here", lambda w: False) is None
    assert similarity("jonahtan", "jonathan") >= 0.5 and similarity("cat", "dog") == 0

"""The query language as plain functions: the grammar table, malformed queries with
their positions, and the SQL each engine gets (user text only ever as parameters)."""

from __future__ import annotations

import pytest

from postroom.search.compiler import compile_query
from postroom.search.query import And, Filter, Node, Not, Or, QueryError, Term, parse
from postroom.store.db import Engine

DAY = 86_400_000


def t(*words: str, prefix: bool = False, field: str | None = None) -> Term:
    return Term(tuple(words), prefix=prefix, field=field)


def strip(node: Node) -> Node:
    """The tree without positions, to compare shapes."""
    if isinstance(node, Term):
        return Term(node.words, node.prefix, node.field)
    if isinstance(node, Filter):
        return Filter(node.name, node.value)
    if isinstance(node, Not):
        return Not(strip(node.child))
    if isinstance(node, And):
        return And(tuple(strip(c) for c in node.children))
    return Or(tuple(strip(c) for c in node.children))


GRAMMAR: list[tuple[str, Node]] = [
    ("invoice", t("invoice")),
    ("invoice late", And((t("invoice"), t("late")))),
    ("invoice AND late", And((t("invoice"), t("late")))),
    ('"late fee"', t("late", "fee")),
    ("foo-bar", t("foo", "bar")),
    ("repo*", t("repo", prefix=True)),
    ("-draft", Not(t("draft"))),
    ("NOT draft", Not(t("draft"))),
    ("--draft", t("draft")),
    ("a OR b c", Or((t("a"), And((t("b"), t("c")))))),
    ("(a OR b) c", And((Or((t("a"), t("b"))), t("c")))),
    ("a OR b OR c", Or((t("a"), t("b"), t("c")))),
    ("a or b", And((t("a"), t("or"), t("b")))),
    ("subject:hello", t("hello", field="subject")),
    ('subject:"weekly report"', t("weekly", "report", field="subject")),
    ("SUBJECT:rep*", t("rep", prefix=True, field="subject")),
    ("from:Alice@Example.com", Filter("from", "alice@example.com")),
    ('to:"Dave Smith"', Filter("to", "dave smith")),
    ("label:finance", Filter("label", "finance")),
    ("in:Inbox", Filter("in", "inbox")),
    ("is:starred", Filter("is", "starred")),
    ("has:attachment", Filter("has", "attachment")),
    ("larger:10K", Filter("larger", 10 * 1024)),
    ("smaller:2M", Filter("smaller", 2 * 1024 * 1024)),
    ("larger:500", Filter("larger", 500)),
    ("after:2024-03-01", Filter("after", 1_709_251_200_000)),
    ("before:2024/3/1", Filter("before", 1_709_251_200_000)),
    ("newer_than:7d", Filter("newer_than", 7 * DAY)),
    ("older_than:2w", Filter("older_than", 14 * DAY)),
    ("older_than:3m", Filter("older_than", 90 * DAY)),
    ("ref:order:1234", Filter("ref", ("order", "1234"))),
    ("ref:1234", Filter("ref", ("", "1234"))),
    ("direction:inbound", Filter("direction", "inbound")),
    ("kind:list", Filter("kind", "list")),
    ("http://example.com/x", t("http", "example", "com", "x")),
    ("re: hello", And((t("re"), t("hello")))),
    ("... invoice &", t("invoice")),
    ("-(a OR label:x)", Not(Or((t("a"), Filter("label", "x"))))),
]


@pytest.mark.parametrize(("q", "tree"), GRAMMAR)
def test_grammar(q: str, tree: Node) -> None:
    assert strip(parse(q)) == tree


MALFORMED: list[tuple[str, int, str]] = [
    ("", 0, "nothing to search for"),
    ("   ", 0, "nothing to search for"),
    ("!!! ...", 0, "nothing to search for"),
    ('"late fee', 0, "not closed"),
    ('invoice "late', 8, "not closed"),
    ("(a OR b", 0, "not closed"),
    ("a OR b)", 6, "without a matching"),
    ("()", 0, "hold nothing"),
    ("OR a", 0, "on its left"),
    ("a OR", 2, "on its right"),
    ("a AND", 2, "both sides"),
    ("AND a", 0, "both sides"),
    ("a -", 2, "must be followed"),
    ("a - b", 2, "must be followed"),
    ("NOT", 0, "must be followed"),
    ("from:", 5, "needs a value"),
    ("subject:...", 8, "needs a word"),
    ("in:nowhere", 3, "inbox, archive"),
    ("is:happy", 3, "unread, read, starred"),
    ("has:pdf", 4, "attachment"),
    ("larger:big", 7, "size"),
    ("larger:10Q", 7, "size"),
    ("before:2024-13-01", 7, "date"),
    ("after:yesterday", 6, "date"),
    ("newer_than:7", 11, "age"),
    ("direction:sideways", 10, "inbound, outbound"),
    ("kind:weird", 5, "normal"),
    ("x\x00y", 1, "NUL"),
    ("(" * 20 + "a" + ")" * 20, 16, "deeper"),
    (" ".join(f"w{n}" for n in range(33)), 118, "at most 32 terms"),
    ("a" * 1001, 1000, "1000 characters"),
]


@pytest.mark.parametrize(("q", "position", "reason"), MALFORMED)
def test_malformed_queries_name_the_position(q: str, position: int, reason: str) -> None:
    with pytest.raises(QueryError) as caught:
        parse(q)
    assert caught.value.position == position
    assert reason in caught.value.reason
    assert caught.value.code == "invalid_query"
    assert f"position {position}" in str(caught.value)


def test_user_text_reaches_sql_only_as_parameters() -> None:
    tree = parse('from:x\'y "it\'s" label:"a\' OR 1=1 --" subject:z%_')
    for engine in Engine:
        plan = compile_query(engine, tree, 0)
        sql = plan.where.text
        assert "'y" not in sql and "1=1" not in sql and "z%" not in sql
        assert any(p == "a' or 1=1 --" for p in plan.where.params)
        assert plan.drive is not None
        assert "'" not in plan.drive


def test_drive_rank_and_fuzzy_parts() -> None:
    plan = compile_query(Engine.SQLITE, parse("invoice -late label:x"), 0)
    assert plan.drive is not None and '"invoice"' in plan.drive and "NOT" in plan.drive
    assert plan.fuzzy_words == ("invoice",)
    pg = compile_query(Engine.POSTGRESQL, parse('subject:"a b" repo*'), 0)
    assert pg.drive == "((a:A <-> b:A) & (repo:*))"
    only_filters = compile_query(Engine.POSTGRESQL, parse("label:x OR invoice"), 0)
    assert only_filters.drive is None and only_filters.rank == "(invoice)"

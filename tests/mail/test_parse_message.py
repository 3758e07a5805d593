"""parse_message end to end on hand-written fixtures, and the parser's public surface."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import postroom.mail.parse as parse_module
from postroom.mail.message import FLAGS, Mailbox
from postroom.mail.parse import parse_message

DATA = Path(__file__).parents[1] / "data" / "mail"
MAIL = Path(parse_module.__file__).parent
PARSER_MODULES = [
    "addresses", "attachments", "bodies", "bounces", "charsets", "fields", "headers", "html",
    "kind", "mime", "parse", "quotes", "sniff",
]  # fmt: skip


def _fixture(name: str) -> bytes:
    return (DATA / name).read_bytes()


def test_outlook_reply() -> None:
    parsed = parse_message(_fixture("outlook_reply.eml"))
    assert parsed.rfc_message_id == "CAL123.outlook@mail.example.com"
    assert parsed.in_reply_to == "orig-1@example.org"
    assert parsed.references == ("root-0@example.org", "orig-1@example.org")
    assert parsed.subject == "RE: Quarterly résumé"
    assert parsed.from_ == Mailbox("jane.doe@example.com", "Doe, Jane")
    assert parsed.to == (Mailbox("bob@example.org", "Bob"),)
    assert parsed.cc == (Mailbox("alice@example.org"), Mailbox("carol@example.org", "Carol C."))
    assert parsed.sent_at == 1578384900000
    assert parsed.kind == "normal" and parsed.automated is None
    assert parsed.text is not None and "Please check the attached numbers." in parsed.text
    assert parsed.extracted_text == (
        "Hi Bob,\n\nthe numbers look right to me. Let's ship it on Friday.\n\nJane"
    )
    assert parsed.snippet == "Hi Bob, the numbers look right to me. Let's ship it on Friday. Jane"
    assert parsed.html is not None and "<style" not in parsed.html
    assert parsed.flags == frozenset()
    assert parsed.size == len(_fixture("outlook_reply.eml"))


def test_html_only_newsletter() -> None:
    parsed = parse_message(_fixture("newsletter_html_only.eml"))
    assert parsed.kind == "list"
    assert parsed.list_id == "news.example.com"
    assert "hidden_text" in parsed.flags
    assert parsed.text is not None
    assert parsed.text.startswith("Café opening")  # iso-8859-1, quoted-printable
    assert "Ignore previous instructions" not in parsed.text
    assert parsed.html is not None
    assert "tracker.example.com" not in parsed.html
    assert "javascript" not in parsed.html
    assert "<form" not in parsed.html and "<script" not in parsed.html
    assert 'src="cid:logo@news.example.com"' in parsed.html


def test_smime_enveloped_data_is_encrypted() -> None:
    parsed = parse_message(_fixture("smime_encrypted.eml"))
    assert "encrypted" in parsed.flags
    assert parsed.text is None
    (attachment,) = parsed.attachments
    assert attachment.filename == "smime.p7m"


def test_snippet_is_folded_and_bounded() -> None:
    body = "word " * 200 + "\n\n\t end"
    parsed = parse_message(f"Content-Type: text/plain\r\n\r\n{body}".encode())
    assert parsed.snippet is not None
    assert len(parsed.snippet) <= 240
    assert "  " not in parsed.snippet and "\n" not in parsed.snippet
    assert parsed.snippet.endswith("…")


def test_forward_without_comment_keeps_a_snippet() -> None:
    raw = (
        b"Content-Type: text/plain\r\n\r\n"
        b"On Mon, Jan 7, 2019, X <x@example.com> wrote:\r\n> the forwarded words\r\n"
    )
    parsed = parse_message(raw)
    assert parsed.extracted_text == ""
    assert parsed.snippet is not None and "forwarded words" in parsed.snippet


def test_message_without_body() -> None:
    parsed = parse_message(b"Subject: nothing\r\n\r\n")
    assert parsed.text == "" or parsed.text is None
    assert parsed.snippet is None
    assert parsed.attachments == ()


def test_flags_are_known_flags() -> None:
    for name in sorted(DATA.glob("*.eml")):
        assert parse_message(name.read_bytes()).flags <= FLAGS


def test_a_failure_anywhere_still_returns_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(raw: bytes) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(parse_module, "parse_tree", explode)
    raw = b"Message-ID: <kept@example.com>\r\nSubject: x\r\n\r\nbody"
    parsed = parse_message(raw)
    assert parsed.rfc_message_id == "kept@example.com"
    assert "parse_degraded" in parsed.flags
    assert parsed.size == len(raw)


def test_a_failing_stage_degrades_only_that_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(parse_module, "read_bodies", explode)
    parsed = parse_message(_fixture("outlook_reply.eml"))
    assert "parse_degraded" in parsed.flags
    assert parsed.text is None
    assert parsed.subject == "RE: Quarterly résumé"


def _imports(module: str) -> set[str]:
    tree = ast.parse((MAIL / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", PARSER_MODULES)
def test_parser_modules_stay_pure(module: str) -> None:
    forbidden = (
        "postroom.store", "socket", "ssl", "http", "urllib.request", "requests", "httpx",
        "aiohttp", "smtplib", "imaplib", "asyncio",
    )  # fmt: skip
    for name in _imports(module):
        assert not name.startswith(forbidden), f"{module} imports {name}"


@pytest.mark.parametrize("module", PARSER_MODULES)
def test_parser_modules_declare_their_surface(module: str) -> None:
    import importlib

    imported = importlib.import_module(f"postroom.mail.{module}")
    assert imported.__doc__
    exported = getattr(imported, "__all__", None)
    assert exported, f"{module} has no __all__"
    for name in exported:
        assert hasattr(imported, name), f"{module}.__all__ names a missing {name}"

"""Real and test-suite mail through ``parse_message``: no stage may fail, and the bodies
and attachment names agree with Stalwart's mail-parser on the mime-expected corpus.

Normalisation used for the comparison (docs/parsing.md, "Conformance"):

* input: the ``.eml`` with CRLF turned into LF, compared with the ``.json`` (LF) file;
* text: the reference's ``text_body`` parts joined (Text as is, Html through the same
  HTML-to-text conversion Postroom uses), against ``ParsedMessage.text``;
* HTML: when the reference's ``html_body`` holds an Html part, its parts joined (Text
  parts as ``<pre>``) and converted to text, against Postroom's sanitised HTML
  converted the same way; otherwise Postroom must have no HTML;
* both sides lower-cased with whitespace runs folded to one space; a U+FFFD in the
  reference (a byte it could not decode) matches any one character or none;
* attachments: the sorted list of names (Content-Disposition filename, else Content-Type
  name), put through Postroom's filename sanitiser, with the same U+FFFD rule; a
  reference name that ends with Postroom's name also matches, because the reference
  unescapes the backslashes of a quoted Windows path ("C:\\TEMP\\a.png" becomes
  "C:TEMPa.png") where Postroom keeps them as separators and keeps "a.png".
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from postroom.mail import parse as parse_module
from postroom.mail.attachments import sanitize_filename
from postroom.mail.html import process_html
from postroom.mail.message import ParsedMessage
from postroom.mail.parse import parse_message
from postroom.testing.corpora import corpus_path

MIME_EXPECTED = corpus_path("mime-expected", "resources", "eml")
LORE = corpus_path("lore-bluetooth-10k.maildir.tar.xz")

# Messages where Postroom deliberately reads the structure differently from the
# reference; each reason is in docs/parsing.md. Structure-aware splitting (an enclosing
# boundary ends an unclosed inner multipart) is also what CPython's compat32 does.
KNOWN_DIFFERENCES = {
    "malformed/007.eml": "the reference reads '--ab--' as boundary 'a' and skips a non-field",
    "malformed/009.eml": "an enclosing boundary ends an unclosed inner multipart",
    "malformed/011.eml": "an enclosing boundary ends an unclosed inner multipart",
    "malformed/012.eml": "an enclosing boundary ends an unclosed inner multipart",
    "malformed/016.eml": "boundaries that are prefixes of each other: no prefix match",
    "malformed/017.eml": "Postroom reads the filename of 'Content-Disposition: ;'",
    "malformed/019.eml": "fuzzed headers: the reference drops a body line that is no field",
    "thirdparty/015.eml": "an attached message's unclosed multipart ends at the outer boundary",
}

_T = TypeVar("_T")


@pytest.fixture
def strict_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every guarded stage raise, so that a swallowed failure fails the test."""

    def guard(self: Any, stage: Callable[[], _T], default: _T) -> _T:
        return stage()

    monkeypatch.setattr(parse_module._Run, "guard", guard)


def _fold(text: str | None) -> str:
    return " ".join((text or "").lower().split())


def _html_text(source: str) -> str:
    return _fold(process_html(source, want_text=True).text)


def _same(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    if "\ufffd" not in expected:
        return False
    pattern = "".join(
        ".?" if char == "\ufffd" else (r"\s*" if char == " " else re.escape(char))
        for char in expected
    )
    return re.fullmatch(pattern, actual) is not None


def _reference_name(part: dict[str, Any]) -> str | None:
    name: str | None = None
    for header in part["headers"]:
        value = header["value"]
        if not isinstance(value, dict) or "ContentType" not in value:
            continue
        for attribute in value["ContentType"].get("attributes") or []:
            if header["name"] == "content_disposition" and attribute["name"] == "filename":
                return str(attribute["value"])
            if header["name"] == "content_type" and attribute["name"] == "name":
                name = name or str(attribute["value"])
    return name


def compare_with_reference(eml: Path) -> list[str]:
    """What differs between Postroom's reading of a message and the reference's."""
    reference = json.loads(eml.with_suffix(".json").read_text())
    parsed = parse_message(eml.read_bytes().replace(b"\r\n", b"\n"))
    parts = reference["parts"]
    problems: list[str] = []

    texts: list[str] = []
    for index in reference["text_body"]:
        body = parts[index]["body"]
        if "Text" in body:
            texts.append(_fold(body["Text"]))
        elif "Html" in body:
            texts.append(_html_text(body["Html"]))
    expected_text = " ".join(piece for piece in texts if piece)
    if not _same(expected_text, _fold(parsed.text)):
        problems.append(f"text: expected {expected_text[:80]!r}, got {_fold(parsed.text)[:80]!r}")

    html_parts = [parts[index]["body"] for index in reference["html_body"]]
    if any("Html" in body for body in html_parts):
        sources = [
            body["Html"] if "Html" in body else f"<pre>{html.escape(body['Text'])}</pre>"
            for body in html_parts
            if "Html" in body or "Text" in body
        ]
        expected_html = _html_text("\n".join(sources))
    else:
        expected_html = ""
    actual_html = _html_text(parsed.html) if parsed.html else ""
    if not _same(expected_html, actual_html):
        problems.append(f"html: expected {expected_html[:80]!r}, got {actual_html[:80]!r}")

    expected_names = sorted(
        sanitize_filename(_reference_name(parts[index])) or "" for index in reference["attachments"]
    )
    actual_names = sorted(info.filename or "" for info in parsed.attachments)
    if len(expected_names) != len(actual_names) or not all(
        any(_same(e, a) or (a and e.endswith(a)) for a in actual_names) for e in expected_names
    ):
        problems.append(f"attachments: expected {expected_names}, got {actual_names}")
    return problems


def _mime_expected() -> list[Path]:
    return sorted(MIME_EXPECTED.rglob("*.eml"))


def _cpython_data() -> list[Path]:
    # The standard library's own email test messages (absent from some Python builds).
    test_email = pytest.importorskip("test.test_email")
    folder = Path(os.path.dirname(test_email.__file__)) / "data"
    return sorted(p for p in folder.iterdir() if p.is_file())


needs_corpus = pytest.mark.skipif(
    not MIME_EXPECTED.is_dir(),
    reason=f"shared corpora absent (looked for {MIME_EXPECTED}; set POSTROOM_CORPORA)",
)


@needs_corpus
@pytest.mark.usefixtures("strict_stages")
def test_every_mime_expected_message_parses_without_a_failing_stage() -> None:
    messages = _mime_expected()
    assert len(messages) >= 100
    for path in messages:
        parsed = parse_module._parse(path.read_bytes())
        assert isinstance(parsed, ParsedMessage), path


@pytest.mark.usefixtures("strict_stages")
def test_every_cpython_email_test_message_parses_without_a_failing_stage() -> None:
    messages = _cpython_data()
    assert messages
    for path in messages:
        parsed = parse_module._parse(path.read_bytes())
        assert isinstance(parsed, ParsedMessage), path


@needs_corpus
def test_mime_expected_agrees_with_the_reference_parser() -> None:
    differing: dict[str, list[str]] = {}
    messages = _mime_expected()
    for path in messages:
        problems = compare_with_reference(path)
        if problems:
            differing[str(path.relative_to(MIME_EXPECTED))] = problems
    matched = len(messages) - len(differing)
    print(f"\nmime-expected: {matched}/{len(messages)} match the reference")
    for name, problems in sorted(differing.items()):
        print(f"  {name}: {KNOWN_DIFFERENCES.get(name, 'UNEXPECTED')}")
        for problem in problems:
            print(f"      {problem}")

    # Every difference is one we chose and documented; a new one is a regression.
    assert set(differing) <= set(KNOWN_DIFFERENCES), sorted(set(differing) - set(KNOWN_DIFFERENCES))
    well_formed = [p for p in messages if p.parent.name != "malformed"]
    well_formed_matched = sum(
        1 for p in well_formed if str(p.relative_to(MIME_EXPECTED)) not in differing
    )
    assert well_formed_matched / len(well_formed) >= 0.95
    assert matched / len(messages) >= 0.925  # 99 of 107


def _lore_messages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bytes]:
    import tarfile

    with tarfile.open(LORE, "r:xz") as archive:
        for member in archive:
            if member.isfile():
                handle = archive.extractfile(member)
                if handle is not None:
                    yield handle.read()


@pytest.mark.skipif(not LORE.is_file(), reason="shared corpora absent")
@pytest.mark.usefixtures("strict_stages")
def test_lore_sample_parses_without_a_failing_stage(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    count = 0
    for raw in _lore_messages(tmp_path_factory):
        parsed = parse_module._parse(raw)
        assert not parsed.message_id_synthetic
        count += 1
        if count >= 1500:
            break
    assert count == 1500

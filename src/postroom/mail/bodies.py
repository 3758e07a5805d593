"""Which parts are the message's text, which are attachments, and the text itself.

Part selection is the JMAP algorithm (RFC 8621 §4.1.4, ``parseStructure``), which is
what Stalwart's mail-parser implements and what the mime-expected corpus records:
inline text/plain and text/html parts form the text and HTML bodies (alternatives split
between them; a body missing on one side is filled from the other), everything else is
an attachment, and inline images, audio and video are both body and attachment.
Attached messages (message/rfc822) are attachments and are not entered.

Bounds: the text body is cut at :data:`MAX_TEXT_CHARS` characters and the HTML body at
:data:`MAX_HTML_CHARS`; a cut body sets ``truncated`` (flag ``body_truncated``).
"""

from __future__ import annotations

import html as html_escape
import re
from dataclasses import dataclass, field

from postroom.mail.charsets import decode_text
from postroom.mail.html import HtmlResult, process_html
from postroom.mail.mime import MimePart, decode_body
from postroom.mail.quotes import extract_new_content

__all__ = [
    "MAX_HTML_CHARS",
    "MAX_TEXT_CHARS",
    "Bodies",
    "PartSelection",
    "read_bodies",
    "select_parts",
    "snippet",
]

MAX_TEXT_CHARS = 1_000_000
MAX_HTML_CHARS = 2_000_000
# Decoded bytes read for a text part: enough for the character bound in any charset.
_BYTES_PER_CHAR = 4

_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", re.I)
_PGP_MESSAGE = "-----BEGIN PGP MESSAGE-----"


@dataclass(slots=True)
class PartSelection:
    text: list[MimePart] = field(default_factory=list)
    html: list[MimePart] = field(default_factory=list)
    attachments: list[MimePart] = field(default_factory=list)


def _is_media(content_type: str) -> bool:
    return content_type.startswith(("image/", "audio/", "video/"))


def _has_name(part: MimePart) -> bool:
    if "name" in part.params:
        return True
    disposition = part.headers.get_last("content-disposition")
    return bool(disposition) and "filename" in (disposition or "").lower()


def select_parts(root: MimePart) -> PartSelection:
    """Text, HTML and attachment parts by RFC 8621's algorithm."""
    selection = PartSelection()
    text: list[MimePart] | None = selection.text
    html: list[MimePart] | None = selection.html
    _structure([root], "mixed", False, html, text, selection.attachments)
    # Inline media in both bodies are attachments too (the API lists them).
    listed = set(map(id, selection.attachments))
    for part in (*selection.text, *selection.html):
        if _is_media(part.content_type) and id(part) not in listed:
            selection.attachments.append(part)
            listed.add(id(part))
    order = {id(part): index for index, part in enumerate(root.walk())}
    selection.attachments.sort(key=lambda part: order.get(id(part), 0))
    return selection


def _structure(
    parts: list[MimePart],
    multipart_type: str,
    in_alternative: bool,
    html_body: list[MimePart] | None,
    text_body: list[MimePart] | None,
    attachments: list[MimePart],
) -> None:
    text_length = len(text_body) if text_body is not None else -1
    html_length = len(html_body) if html_body is not None else -1
    for index, part in enumerate(parts):
        content_type = part.content_type
        if part.is_multipart:
            subtype = content_type.split("/", 1)[1]
            _structure(
                part.children,
                subtype,
                in_alternative or subtype == "alternative",
                html_body,
                text_body,
                attachments,
            )
            continue
        is_inline = (
            not part.damaged
            and part.disposition != "attachment"
            and (content_type in ("text/plain", "text/html") or _is_media(content_type))
            and (
                index == 0
                or (
                    multipart_type != "related" and (_is_media(content_type) or not _has_name(part))
                )
            )
        )
        if not is_inline:
            attachments.append(part)
            continue
        if multipart_type == "alternative":
            if content_type == "text/plain" and text_body is not None:
                text_body.append(part)
            elif content_type == "text/html" and html_body is not None:
                html_body.append(part)
            else:
                attachments.append(part)
            continue
        if in_alternative:
            if content_type == "text/plain":
                html_body = None
            if content_type == "text/html":
                text_body = None
        if text_body is not None:
            text_body.append(part)
        if html_body is not None:
            html_body.append(part)
        if (text_body is None or html_body is None) and _is_media(content_type):
            attachments.append(part)
    if multipart_type == "alternative" and text_body is not None and html_body is not None:
        if text_length == len(text_body) and html_length != len(html_body):
            text_body.extend(html_body[html_length:])
        if html_length == len(html_body) and text_length != len(text_body):
            html_body.extend(text_body[text_length:])


def _decode_part(part: MimePart, char_limit: int) -> tuple[str, bool]:
    data, cut = decode_body(part, limit=char_limit * _BYTES_PER_CHAR)
    charset = part.params.get("charset")
    if charset is None and part.content_type == "text/html":
        match = _META_CHARSET.search(data[:4096])
        if match:
            charset = match.group(1).decode("ascii")
    text = decode_text(data, charset, truncated=cut)
    if "\r" in text:
        # Stored text uses one line ending, whatever the transport used.
        text = text.replace("\r\n", "\n")
    if len(text) > char_limit:
        return text[:char_limit], True
    return text, cut


@dataclass(slots=True)
class Bodies:
    text: str | None = None
    html: str | None = None
    extracted: str | None = None
    truncated: bool = False
    hidden_text: bool = False
    pgp_encrypted: bool = False


def _join(pieces: list[str]) -> str:
    return "\n".join(piece.rstrip("\n") for piece in pieces if piece)


def read_bodies(selection: PartSelection) -> Bodies:
    """Decode the selected bodies within the bounds; HTML is sanitised here."""
    bodies = Bodies()
    # An HTML-only message has the same part in both lists: convert it once.
    converted: dict[int, HtmlResult] = {}
    html_sources: list[str] = []
    html_budget = MAX_HTML_CHARS
    has_html_part = any(part.content_type == "text/html" for part in selection.html)
    if has_html_part:
        for part in selection.html:
            if html_budget <= 0:
                bodies.truncated = True
                break
            if part.content_type == "text/html":
                source, cut = _decode_part(part, html_budget)
            elif part.content_type == "text/plain":
                plain, cut = _decode_part(part, html_budget)
                source = f"<pre>{html_escape.escape(plain)}</pre>"
            else:
                continue
            bodies.truncated |= cut
            html_budget -= len(source)
            html_sources.append(source)

    text_pieces: list[str] = []
    new_pieces: list[str] = []
    text_budget = MAX_TEXT_CHARS
    plain_only = all(part.content_type != "text/html" for part in selection.text)
    for part in selection.text:
        if text_budget <= 0:
            bodies.truncated = True
            break
        if part.content_type == "text/plain":
            piece, cut = _decode_part(part, text_budget)
            bodies.truncated |= cut
            text_pieces.append(piece)
            new_pieces.append(extract_new_content(piece))
        elif part.content_type == "text/html":
            source, cut = _decode_part(part, MAX_HTML_CHARS)
            bodies.truncated |= cut
            result = process_html(source, want_text=True)
            converted[id(part)] = result
            bodies.hidden_text |= result.hidden_text
            piece = result.text or ""
            if len(piece) > text_budget:
                piece, bodies.truncated = piece[:text_budget], True
            text_pieces.append(piece)
            new_pieces.append(extract_new_content(result.new_text or ""))
        else:
            continue
        text_budget -= len(text_pieces[-1])

    if html_sources:
        cached = converted.get(id(selection.html[0])) if len(selection.html) == 1 else None
        result = cached or process_html("\n".join(html_sources), want_text=False)
        bodies.hidden_text |= result.hidden_text
        bodies.html = result.sanitized or None
    if text_pieces:
        bodies.text = _join(text_pieces)
        bodies.extracted = _join([piece for piece in new_pieces if piece.strip()])
        if plain_only and bodies.text.lstrip().startswith(_PGP_MESSAGE):
            bodies.pgp_encrypted = True
    return bodies


_SPACE = re.compile(r"\s+")


def snippet(text: str | None, limit: int) -> str | None:
    """At most ``limit`` characters of the text, whitespace folded, cut at a word."""
    if not text:
        return None
    folded = _SPACE.sub(" ", text[: limit * 8]).strip()
    if not folded:
        return None
    if len(folded) <= limit:
        return folded
    cut = folded[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"

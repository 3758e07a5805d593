"""``parse_message``: raw MIME in, :class:`ParsedMessage` out, and never an exception.

The stages, each guarded so that one failing stage degrades the result instead of
losing it (flag ``parse_degraded``):

1. the bounded MIME tree (:mod:`postroom.mail.mime`);
2. header fields: identifiers and dates (:mod:`~postroom.mail.fields`), addresses
   (:mod:`~postroom.mail.addresses`), subject (:mod:`~postroom.mail.headers`);
3. part selection and bodies: text, sanitised HTML, new content, snippet
   (:mod:`~postroom.mail.bodies`, :mod:`~postroom.mail.html`, :mod:`~postroom.mail.quotes`);
4. attachments: sniffed type, digest, risk (:mod:`~postroom.mail.attachments`);
5. kind and its evidence (:mod:`~postroom.mail.kind`), the ``encrypted`` flag.

If something still escapes, :func:`parse_message` returns a minimal message flagged
``parse_degraded``; the raw bytes stay in the blob store and a later parser version can
read them again (``parser_version``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from postroom.mail.addresses import AddressList, parse_address_list, parse_mailbox
from postroom.mail.attachments import describe_part, extract_part, iter_part_bytes
from postroom.mail.bodies import Bodies, read_bodies, select_parts, snippet
from postroom.mail.fields import (
    first_message_id,
    list_id,
    references,
    sent_at_ms,
    synthetic_message_id,
)
from postroom.mail.headers import Headers, decode_words, fold_whitespace
from postroom.mail.kind import classify
from postroom.mail.message import SNIPPET_CHARS, AttachmentInfo, Mailbox, ParsedMessage
from postroom.mail.mime import MimePart, MimeTree, parse_tree

__all__ = ["MAX_SUBJECT_CHARS", "extract_part", "iter_part_bytes", "parse_message"]

MAX_SUBJECT_CHARS = 998

_T = TypeVar("_T")


class _Run:
    """Flags gathered while parsing one message."""

    __slots__ = ("flags",)

    def __init__(self) -> None:
        self.flags: set[str] = set()

    def guard(self, stage: Callable[[], _T], default: _T) -> _T:
        try:
            return stage()
        except Exception:  # noqa: BLE001 - a failing stage degrades the message, never raises
            self.flags.add("parse_degraded")
            return default

    def addresses(self, headers: Headers, name: str) -> tuple[Mailbox, ...]:
        values = headers.get_all(name)
        if not values:
            return ()
        # Several To (or Cc) fields happen; RFC 5322 allows one, mail clients merge them.
        found: AddressList = self.guard(
            lambda: parse_address_list(values[0] if len(values) == 1 else ", ".join(values)),
            AddressList(),
        )
        if found.dropped:
            self.flags.add("parse_degraded")
        return tuple(found)

    def mailbox(self, headers: Headers, name: str) -> Mailbox | None:
        none: tuple[Mailbox | None, bool] = (None, True)
        found, dropped = self.guard(lambda: parse_mailbox(headers.get(name)), none)
        if dropped:
            self.flags.add("parse_degraded")
        return found


def _subject(value: str | None, run: _Run) -> str | None:
    if value is None:
        return None
    subject = fold_whitespace(decode_words(value))
    if len(subject) > MAX_SUBJECT_CHARS:
        run.flags.add("parse_degraded")
        subject = subject[:MAX_SUBJECT_CHARS]
    return subject


def _is_encrypted(root: MimePart) -> bool:
    for part in root.walk():
        if part.content_type == "multipart/encrypted":
            return True
        if part.content_type in ("application/pkcs7-mime", "application/x-pkcs7-mime"):
            smime_type = part.params.get("smime-type", "").strip().lower()
            if smime_type not in ("signed-data", "certs-only", "compressed-data"):
                return True
    return False


def _attachments(parts: list[MimePart], run: _Run) -> tuple[AttachmentInfo, ...]:
    infos: list[AttachmentInfo] = []
    for part in parts:
        try:
            infos.append(describe_part(part))
        except Exception:  # noqa: BLE001 - one unreadable attachment must not lose the rest
            run.flags.add("parse_degraded")
    return tuple(infos)


def _parse(raw: bytes) -> ParsedMessage:
    run = _Run()
    no_id: tuple[str | None, bool] = (None, True)
    no_refs: tuple[tuple[str, ...], bool] = ((), True)
    no_kind: tuple[str, dict[str, Any] | None] = ("normal", None)
    tree: MimeTree = parse_tree(raw)
    if tree.degraded:
        run.flags.add("parse_degraded")
    root = tree.root
    headers = root.headers

    message_id, _ = run.guard(lambda: first_message_id(headers.get("message-id")), no_id)
    synthetic = message_id is None
    if synthetic:
        message_id = synthetic_message_id(raw)
        run.flags.add("message_id_synthetic")
    in_reply_to, dropped_reply = run.guard(
        lambda: first_message_id(headers.get("in-reply-to")), no_id
    )
    ancestors, dropped_refs = run.guard(lambda: references(headers.get("references")), no_refs)
    if dropped_reply or dropped_refs:
        run.flags.add("parse_degraded")

    subject = run.guard(lambda: _subject(headers.get("subject"), run), None)
    from_ = run.mailbox(headers, "from")
    selection = run.guard(lambda: select_parts(root), None)
    bodies = run.guard(lambda: read_bodies(selection), Bodies()) if selection else Bodies()
    if bodies.truncated:
        run.flags.add("body_truncated")
    if bodies.hidden_text:
        run.flags.add("hidden_text")
    attachments = _attachments(selection.attachments, run) if selection else ()
    kind, evidence = run.guard(lambda: classify(headers, root, from_, subject), no_kind)
    if bodies.pgp_encrypted or run.guard(lambda: _is_encrypted(root), False):
        run.flags.add("encrypted")

    extracted = bodies.extracted
    if bodies.text is not None and extracted is None:
        extracted = ""
    return ParsedMessage(
        rfc_message_id=message_id or synthetic_message_id(raw),
        message_id_synthetic=synthetic,
        in_reply_to=in_reply_to,
        references=ancestors,
        subject=subject,
        from_=from_,
        sender=run.mailbox(headers, "sender"),
        reply_to=run.addresses(headers, "reply-to"),
        to=run.addresses(headers, "to"),
        cc=run.addresses(headers, "cc"),
        bcc=run.addresses(headers, "bcc"),
        sent_at=run.guard(lambda: sent_at_ms(headers.get("date")), None),
        text=bodies.text,
        html=bodies.html,
        extracted_text=extracted,
        snippet=snippet(extracted or bodies.text, SNIPPET_CHARS),
        attachments=attachments,
        kind=kind,
        automated=evidence,
        list_id=run.guard(lambda: list_id(headers.get("list-id")), None),
        flags=frozenset(run.flags),
        size=len(raw),
    )


_MESSAGE_ID = re.compile(rb"^message-id:[ \t]*<([^<>\s]{1,998})>", re.I | re.M)


def _degraded(raw: bytes) -> ParsedMessage:
    """What is left when parsing failed outright: enough to store and find the message."""
    flags = {"parse_degraded"}
    message_id: str | None = None
    try:
        match = _MESSAGE_ID.search(raw, 0, 65536)
        if match:
            message_id = match.group(1).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the last resort must not raise either
        message_id = None
    if message_id is None:
        message_id = synthetic_message_id(raw)
        flags.add("message_id_synthetic")
    return ParsedMessage.bare(
        message_id,
        message_id_synthetic="message_id_synthetic" in flags,
        flags=frozenset(flags),
        size=len(raw),
    )


def parse_message(raw: bytes) -> ParsedMessage:
    """Parse raw MIME; never raises. What could not be read is dropped, bounded or
    flagged (``parse_degraded``); see docs/parsing.md."""
    try:
        return _parse(bytes(raw))
    except Exception:  # noqa: BLE001 - the contract: a stored message, never an exception
        return _degraded(bytes(raw))

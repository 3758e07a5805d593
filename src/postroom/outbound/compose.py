"""Outgoing messages composed from values: pure, bytes out, no store and no network.

:func:`compose` turns a :class:`Composition` into RFC 5322 bytes: CRLF line endings,
7-bit transfer encodings only (quoted-printable or base64 bodies, RFC 2047 encoded words
in headers, RFC 2231 file names), no line over 998 octets. The MIME tree comes from the
standard library's :mod:`email` package; the top-level fields are written here, because
their folding and encoding decide whether header injection is possible and whether the
inbound parser reads back exactly what was sent (a test holds both to that).

The tree::

    multipart/mixed                      only with attachments or a forwarded message
    ├── multipart/alternative            only with both text and HTML
    │   ├── text/plain
    │   └── multipart/related            only with inline parts and HTML
    │       ├── text/html
    │       └── image/png (Content-ID)   inline parts
    ├── application/pdf                  attachments
    └── message/rfc822                   forward as attachment

Header injection is impossible by construction and refused loudly: CR, LF, NUL, any
other control character except TAB, DEL and the Unicode line separators (U+0085, U+2028,
U+2029) in any header value — raw, or hidden in an RFC 2047 encoded word — raise
:class:`CompositionError` naming the field (``subject``, ``to[2].name``,
``headers.X-Campaign``, ``attachments[0].filename``, ``list_unsubscribe[1]``...).

Extra headers (``Composition.headers``) must be ``X-*`` or in :data:`ALLOWED_HEADERS`:
``List-Id`` and the other RFC 2369 list fields (``List-Help``, ``List-Subscribe``,
``List-Post``, ``List-Owner``, ``List-Archive``), ``Precedence``, ``Auto-Submitted``
(not with kind ``auto_reply``, which sets ``Auto-Submitted: auto-replied`` itself),
``Feedback-ID``, ``Organization``, ``Importance``, ``Priority``, ``Keywords`` and
``Comments``. Fields the composition writes itself (From, To, Cc, Bcc, Subject, Date,
Message-ID, Sender, Reply-To, In-Reply-To, References, MIME-Version, Content-*,
List-Unsubscribe*) and trace or authentication fields (Return-Path, Received,
DKIM-Signature, ARC-*, Authentication-Results) can never be set that way.

Addresses are validated and written normalised (lower case, IDNA A-label domains, as
:func:`postroom.mail.addresses.normalise_address` writes them). A non-ASCII local part
is refused: it needs SMTPUTF8, which Postroom does not send yet.

Message identifiers: a message ID, In-Reply-To or Reference longer than
:data:`MAX_IDENTIFIER_OCTETS` (995) is not written. Seed 003 bounds identifiers at 998
octets, but ``<`` + 998 octets + ``>`` cannot fit a 998-octet line even alone on a
continuation line; References over the bound are dropped (never truncated, a prefix of
an identifier is another identifier), and the 64 nearest (the last 64) are kept.
"""

from __future__ import annotations

import base64
import hashlib
import html as html_lib
import mimetypes
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy as email_policy
from email.generator import BytesGenerator
from email.message import Message, MIMEPart
from email.utils import format_datetime
from io import BytesIO
from typing import Literal
from urllib.parse import urlsplit

from postroom.errors import InvalidInput
from postroom.ids import new_ulid
from postroom.mail.addresses import normalise_address
from postroom.mail.attachments import sanitize_filename
from postroom.mail.headers import decode_words, fold_whitespace
from postroom.mail.message import MAX_ANCESTORS, MAX_RECIPIENTS

__all__ = [
    "ALLOWED_HEADERS",
    "MAX_IDENTIFIER_OCTETS",
    "Address",
    "Composition",
    "CompositionError",
    "Original",
    "OutgoingAttachment",
    "compose",
    "envelope_recipients",
    "forward_subject",
    "forward_text",
    "new_message_id",
    "quote_html",
    "quote_text",
    "reply_recipients",
    "reply_subject",
    "thread_headers",
    "validate",
]

MAX_IDENTIFIER_OCTETS = 995
MAX_SUBJECT_CHARS = 998
MAX_HEADER_VALUE_CHARS = 998
MAX_NAME_CHARS = 256
MAX_EXTRA_HEADERS = 64
MAX_URI_CHARS = 2048
_FORWARDED_NAME = "forwarded-message.eml"

ALLOWED_HEADERS: frozenset[str] = frozenset(
    {
        "list-id",
        "list-help",
        "list-subscribe",
        "list-post",
        "list-owner",
        "list-archive",
        "precedence",
        "auto-submitted",
        "feedback-id",
        "organization",
        "importance",
        "priority",
        "keywords",
        "comments",
    }
)

Kind = Literal["transactional", "marketing", "auto_reply"]
_KINDS = ("transactional", "marketing", "auto_reply")

# 78 is RFC 5322's SHOULD; 998 its MUST.
_SOFT_LINE = 78
_HARD_LINE = 998
# UTF-8 octets per encoded word: 36 octets make 48 base64 characters, a 60-character word.
_WORD_OCTETS = 36

_POLICY = email_policy.SMTP.clone(cte_type="7bit", max_line_length=_SOFT_LINE)
_TYPES = mimetypes.MimeTypes()  # the built-in table only: the same answer on every host

_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
_BREAKS = re.compile(r"[\r\n\x00]")
_BODY_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Stricter than RFC 5322's ftext: every real field name is letters, digits and hyphens.
_FIELD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,75}$")
_CONTENT_TYPE = re.compile(r"^[a-z0-9!#$&^_.+-]+/[a-z0-9!#$&^_.+-]+$")
_ATOM_PHRASE = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?: [A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$")
_DOT_ATOM = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$")
_QUOTED_LOCAL = re.compile(r'^"(?:[ !#-\[\]-~]|\\[ -~])+"$')
_IDENTIFIER = re.compile(r"^[!-;=?-~]+@[!-;=?-~]+$")  # printable ASCII, no < > or spaces
_CHUNKS = re.compile(r"[ \t]*[^ \t]+")
_REPLY_PREFIX = re.compile(r"^\s*(?:re|aw|sv|antw)\s*(?:\[\d+\]|\(\d+\))?\s*:\s*", re.I)
_FORWARD_PREFIX = re.compile(r"^\s*(?:fwd?|fw)\s*:\s*", re.I)


class CompositionError(InvalidInput):
    """A composition value is not acceptable; ``field`` is its dotted JSON path."""

    def __init__(self, field: str, problem: str, *, code: str = "invalid_input") -> None:
        super().__init__(f"{field}: {problem}", code=code)
        self.field = field


@dataclass(frozen=True)
class Address:
    address: str
    name: str | None = None


@dataclass(frozen=True)
class OutgoingAttachment:
    filename: str
    content_type: str  # "type/subtype"; "" guesses from the file name
    data: bytes
    disposition: Literal["attachment", "inline"] = "attachment"
    content_id: str | None = None  # without angle brackets


@dataclass(frozen=True)
class Composition:
    from_: Address
    to: tuple[Address, ...] = ()
    cc: tuple[Address, ...] = ()
    bcc: tuple[Address, ...] = ()  # envelope only, never a header
    reply_to: tuple[Address, ...] = ()
    subject: str = ""
    text: str | None = None
    html: str | None = None
    attachments: tuple[OutgoingAttachment, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()  # X-* or ALLOWED_HEADERS
    in_reply_to: str | None = None  # without <>
    references: tuple[str, ...] = ()  # without <>, oldest first
    kind: Kind = "transactional"
    list_unsubscribe: tuple[str, ...] = ()  # https: / mailto:; required for marketing
    attached_message: bytes | None = None  # forward as attachment (message/rfc822)


# --- validation -----------------------------------------------------------------------


def _check_text(field: str, value: object, *, limit: int | None = None) -> str:
    """A header value: a string of valid Unicode, no line break or control character,
    not even inside an encoded word."""
    if not isinstance(value, str):
        raise CompositionError(field, "must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CompositionError(field, "is not valid Unicode") from None
    if _FORBIDDEN.search(value):
        raise CompositionError(
            field,
            "contains a line break or control character; header fields cannot carry one",
            code="header_injection" if _BREAKS.search(value) else "invalid_input",
        )
    if "=?" in value and _FORBIDDEN.search(decode_words(value)):
        raise CompositionError(
            field,
            "contains an encoded word that decodes to a line break or control character",
            code="header_injection",
        )
    if limit is not None and len(value) > limit:
        raise CompositionError(field, f"is longer than {limit} characters")
    return value


def _check_body(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise CompositionError(field, "must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CompositionError(field, "is not valid Unicode") from None
    return value


def _mailbox_address(field: str, value: object) -> str:
    """The normalised address, or CompositionError naming ``field``."""
    address = _check_text(field, value)
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        raise CompositionError(
            field, f"{address!r} is not an email address", code="invalid_address"
        )
    if not local.isascii():
        raise CompositionError(
            field,
            f"{address!r} has a non-ASCII local part, which needs SMTPUTF8 (not supported yet)",
            code="smtputf8_unsupported",
        )
    if not (_DOT_ATOM.match(local) or _QUOTED_LOCAL.match(local)):
        raise CompositionError(
            field, f"{address!r} is not an email address", code="invalid_address"
        )
    normalised = normalise_address(local, domain)
    if normalised is None or not normalised.isascii():
        raise CompositionError(
            field, f"{address!r} is not an email address", code="invalid_address"
        )
    return normalised


def _name(field: str, value: object) -> str | None:
    if value is None:
        return None
    name = _check_text(field, value, limit=MAX_NAME_CHARS)
    return name if name.strip() else None


def _addresses(field: str, values: object, *, limit: int | None) -> list[tuple[str, str | None]]:
    if not isinstance(values, tuple | list):
        raise CompositionError(field, "must be a list of addresses")
    if limit is not None and len(values) > limit:
        raise CompositionError(field, f"has more than {limit} addresses")
    found: list[tuple[str, str | None]] = []
    for index, item in enumerate(values):
        if not isinstance(item, Address):
            raise CompositionError(f"{field}.{index}", "must be an address")
        found.append(
            (
                _mailbox_address(f"{field}.{index}.address", item.address),
                _name(f"{field}.{index}.name", item.name),
            )
        )
    return found


def _identifier(field: str, value: object) -> str:
    identifier = _check_text(field, value)
    identifier = identifier.strip()
    if identifier.startswith("<") and identifier.endswith(">"):
        identifier = identifier[1:-1]
    if not _IDENTIFIER.match(identifier):
        raise CompositionError(
            field, "is not a message identifier (id-left@id-right, no spaces or angle brackets)"
        )
    if len(identifier) > MAX_IDENTIFIER_OCTETS:
        raise CompositionError(field, f"is longer than {MAX_IDENTIFIER_OCTETS} octets")
    return identifier


def _references(values: object) -> list[str]:
    """Valid identifiers, over-long ones dropped, duplicates removed, the last 64 kept."""
    if not isinstance(values, tuple | list):
        raise CompositionError("references", "must be a list of message identifiers")
    kept: dict[str, None] = {}
    for index, value in enumerate(values):
        field = f"references.{index}"
        if isinstance(value, str) and len(value.strip().strip("<>")) > MAX_IDENTIFIER_OCTETS:
            _check_text(field, value)
            continue
        kept.pop(identifier := _identifier(field, value), None)
        kept[identifier] = None
    return list(kept)[-MAX_ANCESTORS:]


def _content_type(field: str, value: object, filename: str) -> str:
    if not isinstance(value, str):
        raise CompositionError(field, "must be a string")
    _check_text(field, value)
    content_type = value.strip().lower()
    if not content_type:
        guessed, _ = _TYPES.guess_type(filename, strict=False)
        return guessed or "application/octet-stream"
    if not _CONTENT_TYPE.match(content_type):
        raise CompositionError(field, f"{value!r} is not a media type (type/subtype)")
    if content_type.startswith(("multipart/", "message/")):
        raise CompositionError(
            field, f"{content_type} cannot be attached as bytes (forward with attached_message)"
        )
    return content_type


@dataclass(frozen=True)
class _Part:
    filename: str
    content_type: str
    data: bytes
    disposition: str
    content_id: str | None


def _attachments(values: object) -> list[_Part]:
    if not isinstance(values, tuple | list):
        raise CompositionError("attachments", "must be a list of attachments")
    parts: list[_Part] = []
    for index, item in enumerate(values):
        field = f"attachments.{index}"
        if not isinstance(item, OutgoingAttachment):
            raise CompositionError(field, "must be an attachment")
        raw_name = _check_text(f"{field}.filename", item.filename)
        filename = sanitize_filename(decode_words(raw_name))
        if filename is None:
            raise CompositionError(f"{field}.filename", "is empty once path parts are removed")
        if not isinstance(item.data, bytes | bytearray | memoryview):
            raise CompositionError(f"{field}.data", "must be bytes")
        if item.disposition not in ("attachment", "inline"):
            raise CompositionError(f"{field}.disposition", "must be 'attachment' or 'inline'")
        content_id = None
        if item.content_id is not None:
            content_id = _identifier(f"{field}.content_id", item.content_id)
        parts.append(
            _Part(
                filename=filename,
                content_type=_content_type(f"{field}.content_type", item.content_type, filename),
                data=bytes(item.data),
                disposition=item.disposition,
                content_id=content_id,
            )
        )
    return parts


def _extra_headers(values: object, kind: str) -> list[tuple[str, str]]:
    if not isinstance(values, tuple | list):
        raise CompositionError("headers", "must be a list of (name, value) pairs")
    if len(values) > MAX_EXTRA_HEADERS:
        raise CompositionError("headers", f"has more than {MAX_EXTRA_HEADERS} fields")
    found: list[tuple[str, str]] = []
    for index, pair in enumerate(values):
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise CompositionError(f"headers.{index}", "must be a (name, value) pair")
        name, value = pair
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise CompositionError(
                f"headers.{index}",
                "the field name must be 1-76 letters, digits or hyphens",
                code="header_injection"
                if isinstance(name, str) and _BREAKS.search(name)
                else "invalid_input",
            )
        lowered = name.lower()
        field = f"headers.{name}"
        if not (lowered.startswith("x-") or lowered in ALLOWED_HEADERS):
            raise CompositionError(
                field, "is not a field a caller may set (X-* or the documented list only)"
            )
        if lowered == "auto-submitted" and kind == "auto_reply":
            raise CompositionError(field, "is set by kind auto_reply (auto-replied)")
        found.append((name, _check_text(field, value, limit=MAX_HEADER_VALUE_CHARS)))
    return found


def _unsubscribe_uris(values: object, kind: str) -> list[str]:
    if not isinstance(values, tuple | list):
        raise CompositionError("list_unsubscribe", "must be a list of URIs")
    if kind == "marketing" and not values:
        raise CompositionError(
            "list_unsubscribe", "is required for marketing mail (RFC 8058 one-click)"
        )
    uris: list[str] = []
    for index, value in enumerate(values):
        field = f"list_unsubscribe.{index}"
        uri = _check_text(field, value, limit=MAX_URI_CHARS).strip()
        if not uri.isascii() or any(char in uri for char in " \t<>\"'"):
            raise CompositionError(
                field, "must be a URI without spaces, quotes or angle brackets (percent-encode)"
            )
        parts = urlsplit(uri)
        scheme = parts.scheme.lower()
        if scheme == "https" and parts.netloc:
            uris.append(uri)
        elif scheme == "mailto" and "@" in parts.path:
            _mailbox_address(field, parts.path)
            uris.append(uri)
        else:
            raise CompositionError(field, "must be an https: or mailto: URI")
    return uris


def _attached_message(value: object) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, bytes | bytearray | memoryview):
        raise CompositionError("attached_message", "must be the raw message bytes")
    raw = bytes(value)
    if not raw.strip():
        raise CompositionError("attached_message", "is empty")
    # Lines end in CRLF on the wire, whatever the stored copy used.
    return re.sub(rb"\r?\n|\r", b"\r\n", raw)


@dataclass(frozen=True)
class _Checked:
    from_: tuple[str, str | None]
    to: list[tuple[str, str | None]]
    cc: list[tuple[str, str | None]]
    bcc: list[tuple[str, str | None]]
    reply_to: list[tuple[str, str | None]]
    subject: str
    text: str | None
    html: str | None
    attachments: list[_Part]
    headers: list[tuple[str, str]]
    in_reply_to: str | None
    references: list[str]
    kind: str
    list_unsubscribe: list[str]
    attached_message: bytes | None


def _check(c: Composition) -> _Checked:
    if not isinstance(c, Composition):
        raise CompositionError("composition", "must be a Composition")
    if c.kind not in _KINDS:
        raise CompositionError("kind", f"must be one of {', '.join(_KINDS)}")
    if not isinstance(c.from_, Address):
        raise CompositionError("from", "must be an address")
    return _Checked(
        from_=(
            _mailbox_address("from.address", c.from_.address),
            _name("from.name", c.from_.name),
        ),
        to=_addresses("to", c.to, limit=MAX_RECIPIENTS),
        cc=_addresses("cc", c.cc, limit=MAX_RECIPIENTS),
        bcc=_addresses("bcc", c.bcc, limit=None),
        reply_to=_addresses("reply_to", c.reply_to, limit=MAX_RECIPIENTS),
        subject=_check_text("subject", c.subject, limit=MAX_SUBJECT_CHARS),
        text=None if c.text is None else _check_body("text", c.text),
        html=None if c.html is None else _check_body("html", c.html),
        attachments=_attachments(c.attachments),
        headers=_extra_headers(c.headers, c.kind),
        in_reply_to=None if c.in_reply_to is None else _identifier("in_reply_to", c.in_reply_to),
        references=_references(c.references),
        kind=c.kind,
        list_unsubscribe=_unsubscribe_uris(c.list_unsubscribe, c.kind),
        attached_message=_attached_message(c.attached_message),
    )


def validate(c: Composition) -> None:
    """Raise :class:`CompositionError` naming the first field that cannot be sent."""
    _check(c)


def envelope_recipients(c: Composition) -> tuple[str, ...]:
    """To, Cc and Bcc, normalised and deduplicated in order: the RCPT TO list."""
    checked = _check(c)
    seen: dict[str, None] = {}
    for address, _ in (*checked.to, *checked.cc, *checked.bcc):
        seen.setdefault(address, None)
    return tuple(seen)


# --- header fields ----------------------------------------------------------------------


def _encoded_words(text: str) -> list[str]:
    """``text`` as RFC 2047 B-encoded UTF-8 words, never splitting a character."""
    words: list[bytes] = []
    chunk = b""
    for char in text:
        encoded = char.encode("utf-8")
        if chunk and len(chunk) + len(encoded) > _WORD_OCTETS:
            words.append(chunk)
            chunk = b""
        chunk += encoded
    if chunk or not words:
        words.append(chunk)
    return [f"=?utf-8?b?{base64.b64encode(word).decode('ascii')}?=" for word in words]


def _field(name: str, chunks: list[str]) -> str:
    """``name: chunks``, folded before a chunk (each chunk after the first starts with
    whitespace) when the line would pass 78 characters; unfolding restores the value."""
    line = f"{name}:"
    lines: list[str] = []
    for index, chunk in enumerate(chunks):
        piece = " " + chunk if index == 0 else chunk
        if index > 0 and len(line) + len(piece) > _SOFT_LINE:
            lines.append(line)
            line = piece
        else:
            line += piece
    lines.append(line)
    if any(len(text) > _HARD_LINE for text in lines):
        raise CompositionError(name.lower(), "cannot be folded into lines of 998 octets")
    return "\r\n".join(lines) + "\r\n"


def _spaced(tokens: list[str]) -> list[str]:
    return [token if index == 0 else " " + token for index, token in enumerate(tokens)]


def _unstructured(value: str) -> list[str]:
    """Chunks of an unstructured value: plain ASCII as written, anything else (non-ASCII,
    text that looks like an encoded word, a word too long to fold) as encoded words."""
    chunks = _CHUNKS.findall(value)
    if (
        value.isascii()
        and "=?" not in value
        and "\t" not in value
        and all(len(chunk) < _HARD_LINE - 80 for chunk in chunks)
    ):
        return chunks or [""]
    return _spaced(_encoded_words(value))


def _phrase(name: str) -> list[str]:
    if name.isascii() and "=?" not in name and "\t" not in name:
        if _ATOM_PHRASE.match(name):
            return name.split(" ")
        return ['"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"']
    return _encoded_words(name)


def _address_list(mailboxes: list[tuple[str, str | None]]) -> list[str]:
    tokens: list[str] = []
    for index, (address, name) in enumerate(mailboxes):
        mailbox = [*_phrase(name), f"<{address}>"] if name else [address]
        if index < len(mailboxes) - 1:
            mailbox[-1] += ","
        tokens.extend(mailbox)
    return _spaced(tokens)


def _date(date_ms: int) -> str:
    if isinstance(date_ms, bool) or not isinstance(date_ms, int):
        raise CompositionError("date_ms", "must be Unix milliseconds")
    try:
        moment = datetime.fromtimestamp(date_ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        raise CompositionError("date_ms", "is out of range") from None
    if not 1970 <= moment.year <= 9999:
        raise CompositionError("date_ms", "is out of range")
    return format_datetime(moment.replace(microsecond=0))


def _header_block(c: _Checked, message_id: str, date_ms: int) -> str:
    fields = [_field("From", _address_list([c.from_]))]
    if c.to:
        fields.append(_field("To", _address_list(c.to)))
    if c.cc:
        fields.append(_field("Cc", _address_list(c.cc)))
    if c.reply_to:
        fields.append(_field("Reply-To", _address_list(c.reply_to)))
    fields.append(_field("Subject", _unstructured(c.subject) if c.subject else []))
    fields.append(_field("Date", [_date(date_ms)]))
    fields.append(_field("Message-ID", [f"<{message_id}>"]))
    if c.in_reply_to:
        fields.append(_field("In-Reply-To", [f"<{c.in_reply_to}>"]))
    if c.references:
        fields.append(_field("References", _spaced([f"<{i}>" for i in c.references])))
    if c.list_unsubscribe:
        uris = [f"<{uri}>" for uri in c.list_unsubscribe]
        fields.append(_field("List-Unsubscribe", _spaced([u + "," for u in uris[:-1]] + uris[-1:])))
        # RFC 8058: one-click unsubscription needs an HTTPS URI to POST to.
        if any(uri.lower().startswith("https:") for uri in c.list_unsubscribe):
            fields.append(_field("List-Unsubscribe-Post", ["List-Unsubscribe=One-Click"]))
    if c.kind == "auto_reply":
        fields.append(_field("Auto-Submitted", ["auto-replied"]))
    for name, value in c.headers:
        fields.append(_field(name, _unstructured(value) if value else []))
    fields.append("MIME-Version: 1.0\r\n")
    return "".join(fields)


# --- MIME body -------------------------------------------------------------------------


def _text_part(text: str, subtype: str) -> MIMEPart:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    part = MIMEPart(policy=_POLICY)
    # "=_" starts every boundary this module writes; quoted-printable never writes "=_",
    # so a body that holds it, or control characters 7bit may not carry, is encoded.
    cte = "quoted-printable" if "=_" in text or _BODY_CONTROLS.search(text) else None
    part.set_content(text, subtype=subtype, charset="utf-8", cte=cte)
    return part


def _binary_part(attachment: _Part) -> MIMEPart:
    maintype, subtype = attachment.content_type.split("/", 1)
    part = MIMEPart(policy=_POLICY)
    part.set_content(
        attachment.data,
        maintype=maintype,
        subtype=subtype,
        disposition=attachment.disposition,
        filename=attachment.filename,
        cid=f"<{attachment.content_id}>" if attachment.content_id else None,
        params={"name": attachment.filename},
    )
    return part


def _message_part(raw: bytes) -> MIMEPart:
    part = MIMEPart(policy=_POLICY)
    part["Content-Type"] = "message/rfc822"
    seven_bit = all(byte < 0x80 for byte in raw) and b"\x00" not in raw
    if seven_bit and all(len(line) <= _HARD_LINE for line in raw.split(b"\r\n")):
        body = raw if raw.endswith(b"\r\n") else raw + b"\r\n"
    else:
        # Eight-bit or over-long lines cannot travel as 7bit; base64 keeps the bytes exact
        # (RFC 2046 asks for 7bit/8bit/binary here, mail clients read base64 as well).
        part["Content-Transfer-Encoding"] = "base64"
        body = base64.encodebytes(raw).replace(b"\n", b"\r\n")
    part["Content-Disposition"] = f'attachment; filename="{_FORWARDED_NAME}"'
    # The generator writes a message/rfc822 payload given as a string verbatim.
    part.set_payload(body.decode("ascii"))
    return part


def _multipart(subtype: str, children: list[MIMEPart]) -> MIMEPart:
    part = MIMEPart(policy=_POLICY)
    part["Content-Type"] = f"multipart/{subtype}"
    for child in children:
        part.attach(child)
    return part


def _leaf_payloads(part: Message) -> Iterator[str]:
    payload = part.get_payload()
    if isinstance(payload, list):
        for child in payload:
            if isinstance(child, Message):
                yield from _leaf_payloads(child)
    elif isinstance(payload, str):
        yield payload


def _set_boundaries(part: MIMEPart, seed: str, path: str = "1") -> None:
    """Boundaries derived from the message ID, so that composing twice gives the same
    bytes; one that occurs in the content below is replaced by the next candidate."""
    payload = part.get_payload()
    if not isinstance(payload, list):
        return
    for index, child in enumerate(payload, start=1):
        _set_boundaries(child, seed, f"{path}.{index}")
    content = list(_leaf_payloads(part))
    attempt = 0
    while True:
        digest = hashlib.sha256(f"{seed}\0{path}\0{attempt}".encode()).hexdigest()
        boundary = f"=_pr{digest[:28]}"
        if not any(boundary in text for text in content):
            break
        attempt += 1
    part.set_boundary(boundary)


def _body(c: _Checked) -> MIMEPart:
    inline = [a for a in c.attachments if a.disposition == "inline"]
    attached = [a for a in c.attachments if a.disposition == "attachment"]
    html_part: MIMEPart | None = None
    if c.html is not None:
        html_part = _text_part(c.html, "html")
        if inline:
            html_part = _multipart("related", [html_part, *map(_binary_part, inline)])
            inline = []
    text_part = _text_part(c.text, "plain") if c.text is not None else None
    if text_part is not None and html_part is not None:
        main: MIMEPart | None = _multipart("alternative", [text_part, html_part])
    else:
        main = text_part or html_part
    extras = [*map(_binary_part, inline), *map(_binary_part, attached)]
    if c.attached_message is not None:
        extras.append(_message_part(c.attached_message))
    if not extras:
        return main if main is not None else _text_part("", "plain")
    return _multipart("mixed", [main, *extras] if main is not None else extras)


def compose(c: Composition, *, message_id: str, date_ms: int) -> bytes:
    """The message as RFC 5322 bytes (CRLF, 7-bit, lines of at most 998 octets).

    Composing the same values with the same ``message_id`` and ``date_ms`` gives the same
    bytes. Bcc never appears; use :func:`envelope_recipients` for RCPT TO.
    """
    checked = _check(c)
    identifier = _identifier("message_id", message_id)
    head = _header_block(checked, identifier, date_ms)
    root = _body(checked)
    _set_boundaries(root, identifier)
    buffer = BytesIO()
    generator: BytesGenerator[MIMEPart] = BytesGenerator(buffer, mangle_from_=False, policy=_POLICY)
    generator.flatten(root)
    raw = head.encode("ascii") + buffer.getvalue()
    lines = raw.split(b"\r\n")
    if not raw.isascii() or any(len(line) > _HARD_LINE or b"\n" in line for line in lines):
        # Every writer above keeps to 7 bits and 998 octets; this guards the guarantee.
        raise CompositionError("message", "could not be written as 7-bit lines")
    return raw


def new_message_id(domain: str) -> str:
    """A fresh ``ulid@domain`` (no angle brackets); the domain written as its A-label."""
    checked = normalise_address("x", domain) if isinstance(domain, str) else None
    if checked is None or domain.startswith("[") or _FORBIDDEN.search(domain):
        raise InvalidInput(f"{domain!r} is not a domain name", code="invalid_domain")
    return f"{new_ulid()}@{checked.rpartition('@')[2]}"


# --- replies and forwards ---------------------------------------------------------------


@dataclass(frozen=True)
class Original:
    rfc_message_id: str | None
    references: tuple[str, ...]
    from_: Address | None
    reply_to: tuple[Address, ...]
    to: tuple[Address, ...]
    cc: tuple[Address, ...]
    subject: str | None
    sent_at_ms: int | None
    text: str | None
    html: str | None


def _key(address: str) -> str:
    return address.strip().lower()


def _dedupe(addresses: Iterable[Address], skip: set[str]) -> tuple[Address, ...]:
    found: list[Address] = []
    for item in addresses:
        key = _key(item.address)
        if key and key not in skip:
            skip.add(key)
            found.append(item)
    return tuple(found)


def reply_recipients(
    original: Original, *, own_addresses: frozenset[str], reply_all: bool
) -> tuple[tuple[Address, ...], tuple[Address, ...]]:
    """(to, cc) of a reply: Reply-To, else From; reply-all adds the original To and Cc.

    Own addresses never receive the reply, except that a reply to one's own message goes
    to its recipients (as mail clients do). Addresses compare case-insensitively.
    """
    own = {_key(address) for address in own_addresses}
    sender = original.from_
    if original.reply_to:
        primary: tuple[Address, ...] = original.reply_to
    elif sender is not None and _key(sender.address) in own:
        primary = original.to
    else:
        primary = (sender,) if sender is not None else ()
    seen = set(own)
    to = _dedupe(primary, seen)
    if not to:
        # Replying to oneself only: keep the address rather than send to nobody.
        to = _dedupe(primary, set())
    cc = _dedupe((*original.to, *original.cc), seen) if reply_all else ()
    return to, cc


def _strip_prefixes(subject: str | None, prefix: re.Pattern[str]) -> str:
    text = fold_whitespace(subject or "")
    while True:
        stripped = prefix.sub("", text, count=1)
        if stripped == text:
            return text
        text = stripped


def reply_subject(subject: str | None) -> str:
    """``Re: subject``, without stacking reply prefixes (Re:, RE:, Re[2]:, AW:, SV:)."""
    return f"Re: {_strip_prefixes(subject, _REPLY_PREFIX)}".rstrip()


def forward_subject(subject: str | None) -> str:
    """``Fwd: subject``, without stacking forward prefixes (Fwd:, Fw:)."""
    return f"Fwd: {_strip_prefixes(subject, _FORWARD_PREFIX)}".rstrip()


def thread_headers(original: Original) -> tuple[str | None, tuple[str, ...]]:
    """(In-Reply-To, References) of a reply: the original's identifier, and its
    References followed by that identifier, over-long ones dropped, the last 64 kept."""

    def usable(identifier: str | None) -> str | None:
        if not identifier:
            return None
        identifier = identifier.strip().strip("<>")
        if len(identifier.encode("utf-8")) > MAX_IDENTIFIER_OCTETS:
            return None
        return identifier if _IDENTIFIER.match(identifier) else None

    parent = usable(original.rfc_message_id)
    chain: dict[str, None] = {}
    for identifier in (*original.references, parent):
        kept = usable(identifier)
        if kept is not None:
            chain.pop(kept, None)
            chain[kept] = None
    return parent, tuple(chain)[-MAX_ANCESTORS:]


def _when(sent_at_ms: int | None) -> str | None:
    if sent_at_ms is None:
        return None
    try:
        moment = datetime.fromtimestamp(sent_at_ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{moment:%a}, {moment.day} {moment:%b %Y at %H:%M} UTC"


def _who(address: Address | None) -> str:
    if address is None:
        return "an unknown sender"
    return f"{address.name} <{address.address}>" if address.name else address.address


def _lines(text: str | None) -> list[str]:
    body = (text or "").replace("\r\n", "\n").replace("\r", "\n").rstrip()
    return [line.rstrip() for line in body.split("\n")] if body else []


def _attribution(original: Original) -> str:
    when = _when(original.sent_at_ms)
    who = _who(original.from_)
    return f"On {when}, {who} wrote:" if when else f"{who} wrote:"


def quote_text(original: Original) -> str:
    """The attribution line and the original text quoted with ``>``; no line ends in
    whitespace."""
    quoted = [
        ">" if not line else (">" + line if line.startswith(">") else "> " + line)
        for line in _lines(original.text)
    ]
    return "\n".join([_attribution(original), *quoted])


def quote_html(original: Original) -> str:
    """The attribution and the original text, escaped, in a ``blockquote type="cite"``.

    The original's HTML is not embedded: its text, escaped, is safe whatever it held.
    """
    body = "<br>\n".join(html_lib.escape(line) for line in _lines(original.text))
    return (
        f'<div class="postroom-quote"><div>{html_lib.escape(_attribution(original))}</div>\n'
        f'<blockquote type="cite" style="margin:0 0 0 .8ex;border-left:1px solid #ccc;'
        f'padding-left:1ex">{body}</blockquote></div>'
    )


def forward_text(original: Original) -> str:
    """The forwarded message's header summary and text, as mail clients write it."""
    lines = ["---------- Forwarded message ---------", f"From: {_who(original.from_)}"]
    when = _when(original.sent_at_ms)
    if when:
        lines.append(f"Date: {when}")
    lines.append(f"Subject: {fold_whitespace(original.subject or '')}".rstrip())
    if original.to:
        lines.append("To: " + ", ".join(_who(a) for a in original.to))
    if original.cc:
        lines.append("Cc: " + ", ".join(_who(a) for a in original.cc))
    return "\n".join([*lines, "", *_lines(original.text)])

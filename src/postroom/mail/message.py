"""What the parser makes of a message: plain values, no I/O.

``mail/`` is pure: bytes in, values out. It never imports ``store/`` or a network
library. :func:`postroom.mail.parse.parse_message` turns raw MIME into a
:class:`ParsedMessage` and never raises; what it could not read is dropped, bounded or
flagged (``parse_degraded``), and the raw bytes stay in the blob store untouched.

Header bounds (seed 003 "Bounds on what a header may contribute"): an address over 320
octets, a message identifier over 998 octets, recipients beyond 256 per field and thread
ancestors beyond the 64 nearest are dropped, never truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Bumped whenever part paths can change (ADR 0006). 2: the innermost multipart takes a
# delimiter line it shares with an enclosing one; the last Content-Type field counts.
PARSER_VERSION = 2

MAX_ADDRESS_OCTETS = 320
MAX_MESSAGE_ID_OCTETS = 998
MAX_RECIPIENTS = 256
MAX_ANCESTORS = 64
SNIPPET_CHARS = 240

# Flags a message row can carry (messages.flags_json). The trust ones are returned by
# the API under trust.flags, the rest under flags.
FLAGS = frozenset(
    {
        "parse_degraded",  # a bound was hit or a part could not be decoded
        "message_id_synthetic",  # no usable Message-ID: one was derived from the bytes
        "message_id_conflict",  # same Message-ID as a stored message with other bytes
        "encrypted",  # multipart/encrypted or S/MIME enveloped data
        "body_truncated",  # text or HTML cut at the body bound
        "hidden_text",  # HTML hides text (display:none, zero size, same colour)
        "bcc",  # the recipient is in no visible header
        "display_name_spoof",
        "lookalike_domain",
        "reply_to_mismatch",
        "thread_join_unverified",
    }
)


@dataclass(frozen=True)
class Mailbox:
    """One address as a header wrote it: normalised address and display name."""

    address: str  # lower case; domain as IDNA A-label; at most 320 octets
    name: str | None = None

    @property
    def domain(self) -> str:
        return self.address.rpartition("@")[2]

    def as_json(self) -> dict[str, str | None]:
        return {"address": self.address, "name": self.name}


@dataclass(frozen=True)
class AttachmentInfo:
    """Metadata of one attachment or inline part (bytes stay in the raw message)."""

    part_path: str  # position in the MIME tree, "1", "2.1", ...
    filename: str | None  # sanitised: no path parts, no control characters, <= 255 bytes
    content_type: str  # as declared, lower case, without parameters
    sniffed_type: str | None  # from the decoded bytes' magic numbers; wins on conflict
    size: int  # decoded bytes
    sha256: str  # of the decoded bytes
    disposition: str | None  # "attachment" | "inline" | None
    content_id: str | None  # without angle brackets
    risk: str | None  # executable | macro | encrypted_archive | archive_bomb |
    #                     type_mismatch | encrypted_document | None


@dataclass(frozen=True)
class ParsedMessage:
    """Everything Postroom stores about a message besides the raw bytes."""

    rfc_message_id: str  # without angle brackets; synthetic when missing or over-bound
    message_id_synthetic: bool
    in_reply_to: str | None  # the first identifier of In-Reply-To, bounded
    references: tuple[str, ...]  # oldest first; the 64 nearest ancestors kept
    subject: str | None  # decoded (RFC 2047), whitespace-folded
    from_: Mailbox | None
    sender: Mailbox | None
    reply_to: tuple[Mailbox, ...]
    to: tuple[Mailbox, ...]
    cc: tuple[Mailbox, ...]
    bcc: tuple[Mailbox, ...]
    sent_at: int | None  # Date header, Unix ms; None when missing or unparseable
    text: str | None  # full plain text (derived from HTML when the message is HTML-only)
    html: str | None  # sanitised HTML: no scripts, handlers, forms or remote loads;
    #                   cid: references kept for the API to rewrite to attachment URLs
    extracted_text: str | None  # the new content: quotes and signature removed
    snippet: str | None  # <= 240 characters of extracted_text
    attachments: tuple[AttachmentInfo, ...]
    kind: str  # normal | automated | dsn | list | calendar | mdn
    automated: dict[str, Any] | None  # evidence for the kind (Auto-Submitted, List-Id...)
    list_id: str | None
    flags: frozenset[str] = field(default_factory=frozenset)
    size: int = 0  # raw octets
    parser_version: int = PARSER_VERSION

    @classmethod
    def bare(cls, rfc_message_id: str, **fields: Any) -> ParsedMessage:
        """A message of which nothing but the identifier (and ``fields``) is known: the
        parser's last resort, and test fixtures."""
        empty: dict[str, Any] = {
            "message_id_synthetic": False,
            "in_reply_to": None,
            "references": (),
            "subject": None,
            "from_": None,
            "sender": None,
            "reply_to": (),
            "to": (),
            "cc": (),
            "bcc": (),
            "sent_at": None,
            "text": None,
            "html": None,
            "extracted_text": None,
            "snippet": None,
            "attachments": (),
            "kind": "normal",
            "automated": None,
            "list_id": None,
        }
        return cls(rfc_message_id=rfc_message_id, **{**empty, **fields})

    @property
    def thread_identifiers(self) -> tuple[str, ...]:
        """Every identifier that ties this message to a conversation: its own, the one
        it answers and its ancestors (for seed 003 thread_identifiers)."""
        seen: dict[str, None] = {self.rfc_message_id: None}
        for identifier in (*self.references, *((self.in_reply_to,) if self.in_reply_to else ())):
            seen.setdefault(identifier, None)
        return tuple(seen)

"""Single header fields read into values: message identifiers, dates and List-Id.

Bounds follow seed 003 ("Bounds on what a header may contribute"): an identifier over
998 octets is dropped, never truncated, because a prefix of an identifier is an
identifier another message may carry; References keep the 64 identifiers nearest this
message (the end of the list), which is the end a thread view walks first.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC
from email.utils import parsedate_to_datetime

from postroom.mail.message import MAX_ANCESTORS, MAX_MESSAGE_ID_OCTETS

__all__ = [
    "first_message_id",
    "list_id",
    "message_ids",
    "references",
    "sent_at_ms",
    "synthetic_message_id",
]

_ANGLED = re.compile(r"<([^<>]*)>")
_COMMENT = re.compile(r"\([^()]*\)")
# Dates outside this range are typos or forgeries; either way they would sort a
# message into a place no reader looks for it.
_MIN_YEAR = 1970
_MAX_YEAR = 2200
MAX_LIST_ID_CHARS = 255


def _clean(identifier: str) -> str | None:
    identifier = "".join(identifier.split())
    if not identifier or len(identifier.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_ID_OCTETS:
        return None
    return identifier


def message_ids(value: str | None, *, limit: int | None = None) -> tuple[list[str], bool]:
    """Every identifier in a Message-ID/In-Reply-To/References value, in order.

    Identifiers are taken from angle brackets; a value without any brackets is read as
    whitespace-separated tokens containing ``@`` (some mailers omit the brackets).
    Duplicates are dropped (the first occurrence stays). Returns the identifiers and
    whether any was dropped for being over the bound.
    """
    if not value:
        return [], False
    dropped = False
    found: list[str] = []
    if "<" in value:
        candidates = _ANGLED.findall(value)
        if not candidates:
            candidates = [value.split("<", 1)[1]]
    else:
        candidates = [token for token in _COMMENT.sub(" ", value).split() if "@" in token]
    seen: set[str] = set()
    for candidate in candidates:
        identifier = _clean(candidate)
        if identifier is None:
            dropped = dropped or bool(candidate.strip())
            continue
        if identifier not in seen:
            seen.add(identifier)
            found.append(identifier)
    if limit is not None and len(found) > limit:
        found = found[-limit:]
        dropped = True
    return found, dropped


def first_message_id(value: str | None) -> tuple[str | None, bool]:
    """The first identifier of the value (Message-ID, In-Reply-To) and a dropped flag."""
    found, dropped = message_ids(value)
    return (found[0] if found else None), dropped


def references(value: str | None) -> tuple[tuple[str, ...], bool]:
    """References, oldest first, keeping the :data:`MAX_ANCESTORS` nearest."""
    found, dropped = message_ids(value, limit=MAX_ANCESTORS)
    return tuple(found), dropped


def synthetic_message_id(raw: bytes) -> str:
    """A stable identifier for a message that has no usable one: the hash of its bytes."""
    return f"sha256.{hashlib.sha256(raw).hexdigest()}@postroom.invalid"


def sent_at_ms(value: str | None) -> int | None:
    """The Date header as Unix milliseconds; None when missing, unreadable or absurd."""
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment is None or not _MIN_YEAR <= moment.year <= _MAX_YEAR:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return int(moment.timestamp() * 1000)
    except (OverflowError, ValueError, OSError):
        return None


def list_id(value: str | None) -> str | None:
    """The identifier of List-Id (RFC 2919), lower case, without the description."""
    if not value:
        return None
    found = _ANGLED.findall(value)
    identifier = (found[-1] if found else value).strip().lower()
    identifier = "".join(identifier.split())
    if not identifier or len(identifier) > MAX_LIST_ID_CHARS:
        return None
    return identifier

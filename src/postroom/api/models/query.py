"""Query parameters shared by the event, audit and code routes: times and filter text.

``since`` / ``until`` are RFC 3339 timestamps (``2026-11-30T01:02:03Z``,
``2026-11-30T02:02:03.5+01:00``); anything else answers 422 ``validation_failed`` naming
the field. Filter strings are printable ASCII of bounded length, so no odd byte (NUL)
ever reaches the database.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import Query
from pydantic import AfterValidator

__all__ = [
    "PRINTABLE",
    "Since",
    "Until",
    "is_plain_id",
    "rfc3339_ms",
]

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PLAIN_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")


def rfc3339_ms(text: str) -> int:
    """Unix milliseconds of an RFC 3339 timestamp; ValueError when it is not one."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError("must be an RFC 3339 timestamp, e.g. 2026-11-30T01:02:03Z")
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    fraction, offset = match[7], match[8]
    leap = second == 60  # RFC 3339 allows a leap second; it reads as the next second
    try:
        moment = datetime(year, month, day, hour, minute, 59 if leap else second, tzinfo=UTC)
        if offset not in ("Z", "z"):
            sign = 1 if offset[0] == "+" else -1
            hours, minutes = int(offset[1:3]), int(offset[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError
            moment -= sign * timedelta(hours=hours, minutes=minutes)
    except (ValueError, OverflowError):
        raise ValueError("must be an RFC 3339 timestamp with a valid date and time") from None
    millis = int((fraction or ".0")[1:].ljust(3, "0")[:3])
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + millis + (1000 if leap else 0)


def _valid_time(text: str | None) -> str | None:
    if text is not None:
        rfc3339_ms(text)
    return text


def is_plain_id(value: str) -> bool:
    """An ID shaped like Postroom's (``evt_...``): anything else cannot exist."""
    return _PLAIN_ID.fullmatch(value) is not None


Since = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Only items at or after this time (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    ),
    AfterValidator(_valid_time),
]
Until = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Only items before this time (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    ),
    AfterValidator(_valid_time),
]
PRINTABLE = r"^[\x20-\x7e]+$"
"""The pattern of a filter string: printable ASCII."""

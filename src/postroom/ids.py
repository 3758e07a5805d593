"""Identifiers: a type prefix, an underscore and a ULID, monotonic within a millisecond.

A ULID is 48 bits of Unix milliseconds followed by 80 random bits, written as 26
Crockford base32 characters in upper case. Within one millisecond the random part of
each new ID is the previous one plus one, so IDs minted by one process sort in the
order they were minted (seed 000, Conventions).
"""

from __future__ import annotations

import re
import secrets
import threading
import time

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(CROCKFORD)}

# The prefixes of seed 000, plus those Postroom adds. A prefix not listed here is a bug.
PREFIXES = frozenset(
    {
        "ten",  # tenant
        "ptn",  # partner
        "idn",  # identity (inbox)
        "adr",  # address
        "dom",  # domain
        "key",  # API key
        "thr",  # thread
        "msg",  # message
        "att",  # attachment
        "whk",  # webhook endpoint
        "dlv",  # webhook delivery
        "evt",  # event
        "job",  # job
        "aud",  # audit entry
        "req",  # request
        "era",  # erasure request
        "exp",  # export
        "out",  # outgoing email (outbox record)
        "drf",  # draft
        "imp",  # IMAP account
        "fld",  # mail folder (IMAP)
        "mut",  # mailbox mutation (IMAP)
    }
)

_ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_MAX_RANDOM = (1 << 80) - 1


class _UlidGenerator:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def next(self) -> str:
        with self._lock:
            now = time.time_ns() // 1_000_000
            if now <= self._last_ms:
                # Same millisecond (or the clock stepped back): stay monotonic.
                if self._last_random >= _MAX_RANDOM:
                    now = self._last_ms + 1
                    rand = secrets.randbits(79)
                else:
                    now = self._last_ms
                    rand = self._last_random + 1
            else:
                # Keep headroom so increments within this millisecond cannot overflow.
                rand = secrets.randbits(79)
            self._last_ms = now
            self._last_random = rand
        return encode_ulid(now, rand)


def encode_ulid(ms: int, rand: int) -> str:
    value = (ms << 80) | rand
    chars = []
    for _ in range(26):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def ulid_timestamp_ms(ulid: str) -> int:
    """The millisecond a ULID was minted in."""
    value = 0
    for c in ulid[:10]:
        value = (value << 5) | _DECODE[c]
    return value


_generator = _UlidGenerator()


def new_ulid() -> str:
    return _generator.next()


def new_id(prefix: str) -> str:
    """A new ID such as ``msg_01J9Z3K8V4QW7X2M5N6P8R0T1Y``."""
    if prefix not in PREFIXES:
        raise ValueError(f"unknown ID prefix {prefix!r}")
    return f"{prefix}_{_generator.next()}"


def is_id(value: str, prefix: str) -> bool:
    """Whether ``value`` is a well-formed ID of the given type."""
    head, sep, tail = value.partition("_")
    return sep == "_" and head == prefix and bool(_ULID_RE.match(tail))

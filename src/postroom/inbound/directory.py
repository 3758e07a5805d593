"""Routing an envelope recipient to an inbox (seed 000 "Directory lookups").

One lookup on ``addresses.address``. Unknown, retired and tombstoned addresses are all
refused alike (``550 5.1.1``), so nothing reveals which addresses once existed. A domain
in ``catch_all`` mode delivers unknown local parts to its catch-all inbox — except
tombstoned addresses, which stay refused. ``user+tag@domain`` routes to
``user@domain`` (when no address ``user+tag@domain`` exists itself) and the tag becomes
a label. A suspended tenant's mail is deferred (``450``), not refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from postroom.config import normalize_domain
from postroom.keyring import Keyring
from postroom.store import tenancy as directory
from postroom.store.db import Tx

_ACCEPTING_ADDRESS = ("active", "retiring")
_ACCEPTING_IDENTITY = ("active", "paused")
_LABEL_BAD = re.compile(r"[^a-z0-9_:-]+")


@dataclass(frozen=True)
class Route:
    """Deliver to this identity; ``address`` is the normalised envelope recipient."""

    address: str
    identity_id: str
    tenant_id: str
    labels: tuple[str, ...] = ()
    catch_all: bool = False


@dataclass(frozen=True)
class Refusal:
    """Do not deliver: the SMTP reply to give."""

    reply: str

    @property
    def temporary(self) -> bool:
        return self.reply.startswith("4")


UNKNOWN = Refusal("550 5.1.1 No such recipient here")
DEFERRED = Refusal("450 4.2.1 Mailbox temporarily unavailable; try again later")


def normalize_address(address: str) -> str | None:
    """``Local@Domain`` → ``local@domain`` with an IDNA A-label; None when malformed."""
    local, at, domain = address.strip().strip("<>").rpartition("@")
    if not at or not local or not domain or len(address) > 320:
        return None
    try:
        return f"{local.lower()}@{normalize_domain(domain)}"
    except ValueError:
        return None


def tag_label(tag: str) -> str | None:
    """A plus-address tag as a label (``^[a-z0-9][a-z0-9_:-]{0,63}$``), or None."""
    label = _LABEL_BAD.sub("-", tag.lower()).strip("-_:")[:64]
    return label or None


def route_recipient(tx: Tx, keyring: Keyring, recipient: str) -> Route | Refusal:
    address = normalize_address(recipient)
    if address is None:
        return UNKNOWN
    candidates: list[tuple[str, tuple[str, ...]]] = [(address, ())]
    local, _, domain = address.rpartition("@")
    if "+" in local:
        base, _, tag = local.partition("+")
        label = tag_label(tag)
        if base:
            candidates.append((f"{base}@{domain}", (label,) if label else ()))
    for candidate, labels in candidates:
        found = directory.lookup_address(tx, candidate)
        if found is None:
            continue
        if found.address_status not in _ACCEPTING_ADDRESS:
            return UNKNOWN
        if found.identity_status not in _ACCEPTING_IDENTITY:
            return UNKNOWN
        if found.tenant_status == "suspended":
            return DEFERRED
        if found.tenant_status != "active":
            return UNKNOWN
        return Route(address, found.identity_id, found.tenant_id, tuple(labels))
    # Nothing in the directory. Erased and deleted addresses must not fall through to a
    # catch-all: they are refused exactly like unknown ones.
    for candidate, _labels in candidates:
        if directory.is_tombstoned(tx, keyring.address_hash(candidate)):
            return UNKNOWN
    catch_all = directory.catch_all_route(tx, domain)
    if catch_all is None or catch_all.identity_status not in _ACCEPTING_IDENTITY:
        return UNKNOWN
    if catch_all.tenant_status == "suspended":
        return DEFERRED
    if catch_all.tenant_status != "active":
        return UNKNOWN
    return Route(address, catch_all.identity_id, catch_all.tenant_id, ("catch-all",), True)

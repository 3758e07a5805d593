"""Replacing a domain's DKIM key (``postroom domain dkim-key generate``).

A new RSA-2048 key pair gets the next selector (``pr1`` → ``pr2``), so the DNS zone can
hold the old and the new ``<selector>._domainkey`` records side by side while resolvers
still cache the old one. The private key is sealed under the master key exactly as
:func:`postroom.tenancy.domains.create_domain` seals it, so
:func:`~postroom.tenancy.domains.dkim_private_key` opens it. Mail composed from then on is
signed with the new key; the operator publishes the new record before relying on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from postroom.config import normalize_domain
from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.store import tenancy as directory
from postroom.store.tenancy import Domain
from postroom.tenancy import audit
from postroom.tenancy.domains import (
    _SEALED_COLUMN,
    _SEALED_TABLE,
    DKIM_SELECTOR,
    DnsRecord,
    _dkim_key_pair,
)

if TYPE_CHECKING:
    from postroom.app import App

__all__ = ["DkimKeyChange", "generate_dkim_key", "next_selector"]

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
# A selector is one DNS label (RFC 6376 3.1 allows dots, Postroom never makes them).
_MAX_LABEL = 63
_RETIRED_STATES = ("removing", "removed")


@dataclass(frozen=True)
class DkimKeyChange:
    """The domain, its new and previous selector, and the DKIM record to publish."""

    domain: Domain
    selector: str
    previous_selector: str | None
    record: DnsRecord


def next_selector(current: str | None) -> str:
    """The selector after ``current``: its numeric suffix plus one (``pr1`` → ``pr2``,
    ``pr9`` → ``pr10``); ``current2`` for a selector without one; ``pr1`` for none."""
    if not current:
        return DKIM_SELECTOR
    match = _NUMBERED.match(current)
    number = 1 if match is None else int(match.group(2))
    candidate = f"{current if match is None else match.group(1)}{number + 1}"
    if len(candidate) > _MAX_LABEL:
        # A selector this long was not made here; start a fresh numbered series.
        return DKIM_SELECTOR
    return candidate


def _domain_name(name: str) -> str:
    try:
        return normalize_domain(name)
    except (ValueError, UnicodeError):
        raise InvalidInput(
            f"{name[:80]!r} is not a valid domain name", code="invalid_domain"
        ) from None


def generate_dkim_key(app: App, name: str, *, actor_key_id: str | None = None) -> DkimKeyChange:
    """Give the domain ``name`` (a tenant's domain or the platform domain) a new DKIM key
    under the next selector; NotFound ``domain_not_found`` when no such domain is live."""
    domain_name = _domain_name(name)
    with app.db.read() as tx:
        found = directory.get_domain_by_name(tx, domain_name)
    if found is None or found.state in _RETIRED_STATES:
        raise NotFound(f"no domain {domain_name!r}", code="domain_not_found")
    # Made before the write transaction: generating the key takes a while.
    private_pem, public_b64 = _dkim_key_pair()
    sealed = app.keys().seal(private_pem, _SEALED_TABLE, _SEALED_COLUMN, found.id)
    now = app.clock.now_ms()
    with app.db.write() as tx:
        current = directory.get_domain(tx, found.id)
        if current is None or current.state in _RETIRED_STATES:
            raise NotFound(f"no domain {domain_name!r}", code="domain_not_found")
        detail = directory.get_domain_detail(tx, found.id)
        previous = None if detail is None else detail.dkim_selector
        selector = next_selector(previous)
        if not directory.set_domain_dkim(tx, found.id, selector, sealed, public_b64, now):
            raise Conflict(f"the domain {domain_name} changed meanwhile; try again")
        audit.record(
            app,
            tx,
            action="domain.dkim_key.generate",
            tenant_id=current.tenant_id,
            target_type="domain",
            target_id=current.id,
            actor_key_id=actor_key_id,
            details={"selector": selector, "previous_selector": previous},
        )
    record = DnsRecord(
        type="TXT",
        name=f"{selector}._domainkey.{current.name}",
        value=f"v=DKIM1; k=rsa; p={public_b64}",
        purpose="dkim",
        status="unverified",
    )
    return DkimKeyChange(current, selector, previous, record)

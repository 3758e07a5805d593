"""A tenant's own mail domains: adding one, its DKIM key, the DNS records to publish.

A tenant adds a domain it controls with a connection ``method``:

* ``dns_records`` — the tenant publishes MX, SPF, DKIM, DMARC and ownership records at
  its DNS host; Postroom receives and sends mail for the domain;
* ``send_only`` — Postroom only sends (no MX); the domain's mail stays where it is;
* ``smtp_relay`` — mail is sent through the tenant's own SMTP relay (its credentials
  arrive with the outbound capability); no MX, and SPF is the relay's.

A new domain is ``pending``. It gets a random ownership token (the ``_postroom`` TXT
challenge) and an RSA-2048 DKIM key pair under the selector :data:`DKIM_SELECTOR`: the
private key is sealed under the master key (``domains.dkim_private_sealed``), the public
key is the ``p=`` of the DKIM record. Verifying the records arrives with the trust
capability; until then every record is ``unverified``.

Domain names are global: the platform domain and any domain already registered, by
whichever tenant, are refused alike with ``domain_taken``, naming no owner.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from postroom.config import Settings, normalize_domain
from postroom.errors import Conflict, InvalidInput
from postroom.ids import new_id
from postroom.store import tenancy as directory
from postroom.store.tenancy import DomainDetail
from postroom.tenancy import audit
from postroom.tenancy.service import resolve_tenant

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "DKIM_SELECTOR",
    "METHODS",
    "DnsRecord",
    "create_domain",
    "dkim_private_key",
    "dns_records",
    "normalize_new_domain",
]

DKIM_SELECTOR = "pr1"
DKIM_KEY_BITS = 2048
OWNERSHIP_LABEL = "_postroom"

# method -> (receiving, sending)
METHODS: dict[str, tuple[bool, bool]] = {
    "dns_records": (True, True),
    "send_only": (False, True),
    "smtp_relay": (False, True),
}

# The sealed-column coordinates of the DKIM private key (keyring AAD).
_SEALED_TABLE = "domains"
_SEALED_COLUMN = "dkim_private_sealed"


@dataclass(frozen=True)
class DnsRecord:
    """One DNS record to publish. ``name`` is the fully qualified owner name;
    ``priority`` is set for MX only; ``status`` is the last observed state
    ('unverified' until checks run)."""

    type: str
    name: str
    value: str
    purpose: str
    status: str
    priority: int | None = None


def _normalize(name: str) -> str:
    try:
        return normalize_domain(name)
    except (ValueError, UnicodeError):
        raise InvalidInput(f"{name!r} is not a valid domain name", code="invalid_domain") from None


def normalize_new_domain(name: str) -> str:
    """A domain a tenant may add, as stored (lower case A-label), or InvalidInput
    ``invalid_domain``: at least two labels, the last not all digits (no IP address)."""
    normalized = _normalize(name)
    labels = normalized.split(".")
    if len(labels) < 2 or labels[-1].isdigit():
        raise InvalidInput(f"{name!r} is not a valid domain name", code="invalid_domain")
    return normalized


def _dkim_key_pair() -> tuple[bytes, str]:
    """A new RSA key: (PKCS#8 PEM private key, base64 DER SubjectPublicKeyInfo)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=DKIM_KEY_BITS)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, base64.b64encode(public_der).decode("ascii")


def _taken(name: str) -> Conflict:
    # The same answer whoever holds it: nothing about another tenant's domains leaks.
    return Conflict(f"the domain {name} is already registered", code="domain_taken")


def create_domain(
    app: App,
    name: str,
    method: str,
    *,
    tenant: str,
    actor_key_id: str | None = None,
) -> DomainDetail:
    """Add a domain to ``tenant`` (ID or slug) in state 'pending', with its ownership
    token and DKIM key pair."""
    # The platform domain is refused as taken even where it is not a name a tenant could
    # add (a single label such as localhost).
    if _normalize(name) == _normalize(app.settings.platform_domain):
        raise _taken(_normalize(name))
    domain_name = normalize_new_domain(name)
    if method not in METHODS:
        raise InvalidInput(
            f"method must be one of {', '.join(METHODS)}, not {method!r}", code="invalid_method"
        )
    receiving, sending = METHODS[method]
    with app.db.read() as tx:
        owner = resolve_tenant(tx, tenant)
        if directory.get_domain_by_name(tx, domain_name) is not None:
            raise _taken(domain_name)
    # Made before the write transaction: generating the key takes a while.
    domain_id = new_id("dom")
    private_pem, public_b64 = _dkim_key_pair()
    sealed = app.keys().seal(private_pem, _SEALED_TABLE, _SEALED_COLUMN, domain_id)
    token = secrets.token_hex(20)
    now = app.clock.now_ms()
    with app.db.write() as tx:
        owner = resolve_tenant(tx, owner.id)
        if owner.status != "active":
            raise Conflict(f"tenant {owner.slug} is {owner.status}", code="tenant_not_active")
        platform = directory.get_platform_domain(tx)
        if platform is not None and platform.name == domain_name:
            raise _taken(domain_name)
        inserted = directory.insert_domain(
            tx,
            domain_id=domain_id,
            tenant_id=owner.id,
            name=domain_name,
            kind="external",
            method=method,
            routing_mode="literal",
            receiving=receiving,
            sending=sending,
            state="pending",
            now=now,
            ownership_token=token,
            dkim_selector=DKIM_SELECTOR,
            dkim_private_sealed=sealed,
            dkim_public=public_b64,
        )
        if inserted is None:
            raise _taken(domain_name)
        audit.record(
            app,
            tx,
            action="domain.create",
            tenant_id=owner.id,
            target_type="domain",
            target_id=domain_id,
            actor_key_id=actor_key_id,
            details={"kind": "external", "method": method, "name": domain_name},
        )
        detail = directory.get_domain_detail(tx, domain_id)
    assert detail is not None
    return detail


def dns_records(settings: Settings, detail: DomainDetail) -> list[DnsRecord]:
    """The records a tenant's domain needs, with their last observed status.

    * MX ``{domain}`` → ``smtp_hostname``, priority 10 — receiving methods only;
    * SPF TXT ``{domain}``: ``v=spf1 mx ~all`` (dns_records: the MX host sends too) or
      ``v=spf1 a:{smtp_hostname} ~all`` (send_only); none for smtp_relay, whose SPF
      ``include:`` is the relay provider's;
    * DKIM TXT ``{selector}._domainkey.{domain}``: ``v=DKIM1; k=rsa; p=...``;
    * DMARC TXT ``_dmarc.{domain}``: ``v=DMARC1; p=none; rua=mailto:postmaster@{domain}``
      (monitoring only, to start with);
    * ownership TXT ``_postroom.{domain}``: the token.

    The platform domain is the operator's to publish: it has no records here.
    """
    domain = detail.domain
    if domain.kind == "platform":
        return []
    observed = {
        str(r.get("purpose")): str(r["status"])
        for r in detail.records
        if isinstance(r.get("status"), str)
    }
    host = settings.smtp_hostname
    wanted: list[tuple[str, str, str, str, int | None]] = []
    if domain.receiving:
        wanted.append(("MX", domain.name, host, "inbound", 10))
    if domain.method == "dns_records":
        wanted.append(("TXT", domain.name, "v=spf1 mx ~all", "spf", None))
    elif domain.method == "send_only":
        wanted.append(("TXT", domain.name, f"v=spf1 a:{host} ~all", "spf", None))
    if detail.dkim_selector and detail.dkim_public:
        wanted.append(
            (
                "TXT",
                f"{detail.dkim_selector}._domainkey.{domain.name}",
                f"v=DKIM1; k=rsa; p={detail.dkim_public}",
                "dkim",
                None,
            )
        )
    wanted.append(
        (
            "TXT",
            f"_dmarc.{domain.name}",
            f"v=DMARC1; p=none; rua=mailto:postmaster@{domain.name}",
            "dmarc",
            None,
        )
    )
    if detail.ownership_token:
        wanted.append(
            ("TXT", f"{OWNERSHIP_LABEL}.{domain.name}", detail.ownership_token, "ownership", None)
        )
    return [
        DnsRecord(kind, name, value, purpose, observed.get(purpose, "unverified"), priority)
        for kind, name, value, purpose, priority in wanted
    ]


def dkim_private_key(app: App, domain_id: str) -> tuple[str, bytes] | None:
    """A domain's DKIM selector and private key (PKCS#8 PEM), opened from its sealed
    column, for signing outbound mail; None when the domain has no key."""
    with app.db.read() as tx:
        found = directory.get_domain_dkim(tx, domain_id)
    if found is None:
        return None
    selector, sealed = found
    return selector, app.keys().open(sealed, _SEALED_TABLE, _SEALED_COLUMN, domain_id)

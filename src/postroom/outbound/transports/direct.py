"""``direct``: deliver to each recipient domain's MX hosts (RFC 5321 §5.1).

Recipients are grouped by domain, one route (and one SMTP transaction) per domain.
:class:`MxResolver` (dnspython, ``outbound.dns_nameservers`` or the system resolver)
lists the hosts to try:

* the MX records by preference (equal preferences in random order, as §5.1 asks);
* no MX records at all: the domain itself (its A/AAAA records), the "implicit MX";
* a null MX (RFC 7505, ``0 .``): ``null_mx``, permanent;
* the domain does not exist: ``dns_nxdomain``, permanent; no MX and no address:
  ``dns_no_mx``, permanent;
* timeouts, SERVFAIL and other resolver failures: ``dns_timeout`` / ``dns_failed``,
  temporary.

Each host's addresses are tried in turn (A, then AAAA) on ``outbound.direct_port``: a
refused or timed-out connection, or a greeting other than 220, moves on to the next one.
STARTTLS is opportunistic: tried when offered, with no certificate check (RFC 7435); if
the handshake fails, the same address is tried once more without TLS. A host that does
not offer STARTTLS gets plain text.
"""

from __future__ import annotations

import ipaddress
import random
import ssl
from collections.abc import Sequence
from dataclasses import dataclass

import dns.exception
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver

from postroom.config import Settings, normalize_domain
from postroom.errors import ConfigError
from postroom.outbound.transports.base import Reply, Route, TransportError
from postroom.outbound.transports.smtp import SmtpConnection, open_smtp, start_tls

# At most this many addresses are tried for one route (each may take a timeout).
MAX_ADDRESSES_TRIED = 10


def parse_nameserver(text: str) -> dns.nameserver.Do53Nameserver:
    """``ip``, ``ip:port``, ``[v6]:port`` or a bare IPv6 address → a nameserver."""
    text = text.strip()
    host, port = text, 53
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(f"outbound.dns_nameservers: {text!r} is not ip or ip:port")
            port = _port(rest[1:], text)
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        port = _port(port_text, text)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(
            f"outbound.dns_nameservers: {text!r} is not an IP address (ip or ip:port)"
        ) from None
    return dns.nameserver.Do53Nameserver(host, port)


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigError(f"outbound.dns_nameservers: {whole!r} has a bad port")
    return int(text)


def recipient_domain(address: str) -> str:
    """The domain part of ``address``, as stored (IDNA A-label, lower case)."""
    domain = address.strip().strip("<>").rpartition("@")[2]
    if domain.startswith("["):
        return domain
    try:
        return normalize_domain(domain)
    except ValueError:
        return domain.lower()


@dataclass(frozen=True)
class MailHost:
    """One host to try, in order: its name and addresses."""

    name: str
    addresses: tuple[str, ...]


class MxResolver:
    """MX and address lookups for direct delivery."""

    def __init__(self, nameservers: Sequence[str], timeout: float) -> None:
        try:
            if nameservers:
                self.resolver = dns.resolver.Resolver(configure=False)
                self.resolver.nameservers = [parse_nameserver(n) for n in nameservers]
            else:
                self.resolver = dns.resolver.Resolver()
        except dns.resolver.NoResolverConfiguration:
            raise ConfigError(
                "no system DNS resolver (resolv.conf); set outbound.dns_nameservers"
            ) from None
        self.resolver.timeout = timeout
        self.resolver.lifetime = timeout

    def mail_hosts(self, domain: str) -> list[MailHost]:
        """The hosts to try for ``domain``, best first; TransportError when there are none."""
        if domain.startswith("[") and domain.endswith("]"):
            literal = domain[1:-1]
            literal = literal[5:] if literal.lower().startswith("ipv6:") else literal
            try:
                return [MailHost(domain, (str(ipaddress.ip_address(literal)),))]
            except ValueError:
                raise TransportError(
                    "bad_domain", f"{domain} is not an address literal", permanent=True
                ) from None
        try:
            name = dns.name.from_text(domain)
        except dns.exception.DNSException:
            raise TransportError(
                "bad_domain", f"{domain!r} is not a domain name", permanent=True
            ) from None
        try:
            answer = self.resolver.resolve(name, "MX", search=False)
        except dns.resolver.NoAnswer:
            addresses = self._addresses(name)
            if not addresses:
                raise TransportError(
                    "dns_no_mx", f"{domain} has no MX and no address records", permanent=True
                ) from None
            return [MailHost(domain, addresses)]
        except dns.exception.DNSException as exc:
            raise self._failure(domain, exc) from None
        records = [(int(r.preference), r.exchange) for r in answer]
        usable = [(pref, host) for pref, host in records if host != dns.name.root]
        if not usable:
            raise TransportError(
                "null_mx", f"{domain} accepts no mail (null MX, RFC 7505)", permanent=True
            )
        random.shuffle(usable)
        usable.sort(key=lambda record: record[0])
        hosts = []
        for _pref, host in usable:
            try:
                addresses = self._addresses(host)
            except TransportError:
                addresses = ()
            if addresses:
                hosts.append(MailHost(host.to_text(omit_final_dot=True), addresses))
        if not hosts:
            raise TransportError(
                "dns_no_address", f"no MX host of {domain} has an address (A/AAAA)"
            )
        return hosts

    def _addresses(self, name: dns.name.Name) -> tuple[str, ...]:
        found: list[str] = []
        for rdtype in ("A", "AAAA"):
            try:
                answer = self.resolver.resolve(name, rdtype, search=False)
            except (dns.resolver.NoAnswer, dns.resolver.NXDOMAIN):
                continue
            except dns.exception.DNSException as exc:
                raise self._failure(name.to_text(omit_final_dot=True), exc) from None
            found.extend(r.to_text() for r in answer)
        return tuple(found)

    @staticmethod
    def _failure(domain: str, exc: dns.exception.DNSException) -> TransportError:
        if isinstance(exc, dns.resolver.NXDOMAIN):
            return TransportError("dns_nxdomain", f"{domain} does not exist", permanent=True)
        if isinstance(exc, dns.exception.Timeout):
            return TransportError("dns_timeout", f"DNS lookup for {domain} timed out")
        return TransportError("dns_failed", f"DNS lookup for {domain} failed: {exc}")


class DirectTransport:
    """MX delivery, one route per recipient domain; connections are not pooled."""

    name = "direct"
    provider = "smtp"

    def __init__(self, settings: Settings) -> None:
        self.port = settings.outbound_direct_port
        self.timeout = settings.outbound_timeout_seconds
        self.local_hostname = settings.smtp_hostname
        self.resolver = MxResolver(settings.outbound_dns_nameservers, self.timeout)
        # Opportunistic TLS: encrypt when offered, verify nothing (RFC 7435).
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE

    def routes(self, recipients: Sequence[str]) -> list[Route]:
        grouped: dict[str, list[str]] = {}
        for address in recipients:
            grouped.setdefault(recipient_domain(address), []).append(address)
        return [Route(tuple(rcpts), domain) for domain, rcpts in grouped.items()]

    def connect(self, route: Route) -> SmtpConnection:
        hosts = self.resolver.mail_hosts(route.destination)
        last: TransportError | None = None
        tried = 0
        for host in hosts:
            for address in host.addresses:
                if tried >= MAX_ADDRESSES_TRIED:
                    break
                tried += 1
                try:
                    return self._open(host.name, address)
                except TransportError as exc:
                    last = exc
        reply: Reply | None = last.reply if last is not None else None
        raise TransportError(
            "connect_failed",
            f"no mail host of {route.destination} took the connection"
            + (f" (last: {last})" if last is not None else ""),
            reply=reply,
        )

    def close(self) -> None:
        """Nothing pooled."""

    def _open(self, host: str, address: str) -> SmtpConnection:
        where = f"{host} [{address}]:{self.port}"
        client = open_smtp(
            address, self.port, timeout=self.timeout, local_hostname=self.local_hostname
        )
        if client.has_extn("starttls"):
            try:
                start_tls(client, self.context, where)
            except TransportError:
                # A broken TLS stack must not stop the mail: once more, in plain text.
                client = open_smtp(
                    address, self.port, timeout=self.timeout, local_hostname=self.local_hostname
                )
        return SmtpConnection(client, host)

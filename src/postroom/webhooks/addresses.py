"""Where a webhook may point: URL rules and the addresses a delivery may connect to.

Two checks, both needed:

* :func:`check_url`, when an endpoint is created or changed and again before every
  attempt: an absolute ``https://`` URL (``http://`` only with
  ``webhooks.allow_insecure``), no credentials in it, a host that is a name or a
  canonical IP literal. Numeric spellings that resolvers read as IPv4 addresses
  (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``) are refused outright, whatever
  they decode to: only dotted-decimal is accepted as an IPv4 literal.
* :func:`forbidden_reason`, on every address a name resolves to and on the address the
  socket actually connected to: loopback, RFC 1918, link-local (169.254.0.0/16, the
  cloud metadata services), CGNAT 100.64.0.0/10, 0.0.0.0/8, multicast, broadcast and
  the other reserved blocks, ::1, fc00::/7, fe80::/10, and the IPv4-mapped, IPv4-compatible,
  NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms of any refused IPv4 address.
  ``webhooks.allow_loopback`` lets loopback through (development), nothing else.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from postroom.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH = 2048

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
# A label a resolver could read as a number: decimal, octal (leading 0) or hex (0x).
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


class ForbiddenUrl(InvalidInput):
    """A webhook URL the rules refuse (422 ``invalid_webhook_url`` in the API)."""

    code = "invalid_webhook_url"


@dataclass(frozen=True)
class WebhookUrl:
    """A checked URL: what to connect to and what to ask for."""

    scheme: str
    host: str  # a lower-case name, or an IP literal without brackets
    port: int
    target: str  # path and query, as sent on the request line
    literal: IPAddress | None  # set when the host is an IP address

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 transition form carries, if it is one."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    packed = int(ip)
    # IPv4-compatible (::a.b.c.d, deprecated): the top 96 bits are zero.
    if packed >> 32 == 0 and packed > 1:
        return ipaddress.IPv4Address(packed)
    return None


def forbidden_reason(ip: IPAddress, *, allow_loopback: bool = False) -> str | None:
    """Why a delivery may not connect to ``ip`` (a short phrase), or None when it may."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "an IPv6 address with a zone"
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            inner = forbidden_reason(embedded, allow_loopback=allow_loopback)
            if inner is not None:
                return f"{inner} (in an IPv6 transition form)"
            if ip in _SIX_TO_FOUR or ip in _NAT64 or ip.ipv4_mapped is not None:
                return None
            return "an IPv4-compatible IPv6 address"
    if ip.is_loopback:
        return None if allow_loopback else "loopback"
    if isinstance(ip, ipaddress.IPv4Address):
        if ip in _THIS_NETWORK:
            return "'this network' (0.0.0.0/8)"
        if ip in _CGNAT:
            return "carrier-grade NAT (100.64.0.0/10)"
        if ip == _LIMITED_BROADCAST:
            return "broadcast"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not globally routable"
    return None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _numeric_spelling(host: str) -> bool:
    """A host every label of which is a number: an IPv4 address in a loose spelling."""
    labels = host.rstrip(".").split(".")
    return 1 <= len(labels) <= 4 and all(_NUMERIC_LABEL.match(label) for label in labels)


def check_url(url: str, *, allow_insecure: bool, allow_loopback: bool) -> WebhookUrl:
    """Parse and check a webhook URL; ForbiddenUrl says what is wrong."""
    if not url or len(url) > MAX_URL_LENGTH:
        raise ForbiddenUrl(f"a webhook URL is 1-{MAX_URL_LENGTH} characters")
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise ForbiddenUrl("a webhook URL may not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ForbiddenUrl(f"not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise ForbiddenUrl("a webhook URL must start with https://")
    if scheme == "http" and not allow_insecure:
        raise ForbiddenUrl("a webhook URL must use https (webhooks.allow_insecure is off)")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ForbiddenUrl("a webhook URL may not carry credentials (user:password@)")
    host = (parts.hostname or "").lower()
    if not host:
        raise ForbiddenUrl("a webhook URL must name a host")
    literal = _literal(host)
    if literal is None:
        if _numeric_spelling(host):
            raise ForbiddenUrl(
                f"{host!r} spells an IPv4 address in a non-canonical form; "
                "write it as a.b.c.d or use a name"
            )
        try:
            ascii_host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ForbiddenUrl(f"{host!r} is not a valid host name") from None
        if not _NAME.match(ascii_host.rstrip(".")):
            raise ForbiddenUrl(f"{host!r} is not a valid host name")
        host = ascii_host.rstrip(".")
    else:
        reason = forbidden_reason(literal, allow_loopback=allow_loopback)
        if reason is not None:
            raise ForbiddenUrl(f"a webhook may not point at {reason} addresses")
        host = str(literal)
    if port == 0:
        raise ForbiddenUrl("port 0 is not a port a webhook can use")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return WebhookUrl(
        scheme=scheme,
        host=host,
        port=port if port is not None else (443 if scheme == "https" else 80),
        target=target,
        literal=literal,
    )

"""The HTTP client of webhook deliveries: resolve once, check, pin, connect, POST.

A delivery never hands a host name to a library that would resolve it again. The client

1. checks the URL (:func:`postroom.webhooks.addresses.check_url`);
2. resolves the name itself, through a :class:`Resolver` (the system's ``getaddrinfo``;
   tests pass a :class:`StaticResolver` standing in for DNS), and refuses the whole
   delivery when any answer is a forbidden address;
3. connects a socket to the resolved address — pinned, so a DNS answer that changes
   between the check and the connection (rebinding) changes nothing — and checks the
   socket's peer address once more;
4. speaks TLS over that socket with the URL's name as SNI and as the name the
   certificate must carry, and sends ``Host: <name>``;
5. POSTs the body with ``http.client`` (which follows no redirect: a 3xx is a failure),
   within one deadline for the whole attempt (``webhooks.timeout_seconds``), reads at most
   a little of the answer and closes the connection.

No proxy is ever used. The outcome is a :class:`Attempt`: the HTTP status, or an error
class (``timeout``, ``dns``, ``tls``, ``forbidden_address``, ...), and the duration.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from postroom.webhooks.addresses import ForbiddenUrl, WebhookUrl, check_url, forbidden_reason

MAX_BODY_BYTES = 256 * 1024
_READ_LIMIT = 64 * 1024


class Resolver(Protocol):
    """Host name → IP addresses (as text), in the order to try them."""

    def resolve(self, host: str, port: int) -> list[str]: ...


class SystemResolver:
    """The system's resolver (``getaddrinfo``)."""

    def resolve(self, host: str, port: int) -> list[str]:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        seen: list[str] = []
        for info in infos:
            address = str(info[4][0])
            if address not in seen:
                seen.append(address)
        return seen


class StaticResolver:
    """A stand-in for DNS: fixed answers per name (for tests and local setups).

    ``answers`` maps a name to its addresses, or to a list of successive answers (one per
    lookup, the last repeated) to play a rebinding resolver. ``lookups`` counts lookups.
    """

    def __init__(self, answers: Mapping[str, Sequence[str] | Sequence[Sequence[str]]]) -> None:
        self._answers = {name.lower(): list(value) for name, value in answers.items()}
        self.lookups: dict[str, int] = {}

    def resolve(self, host: str, port: int) -> list[str]:
        key = host.lower()
        if key not in self._answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        count = self.lookups.get(key, 0)
        self.lookups[key] = count + 1
        answer = self._answers[key]
        if answer and not isinstance(answer[0], str):
            rounds = [list(a) for a in answer]
            return rounds[min(count, len(rounds) - 1)]
        return [str(a) for a in answer]


@dataclass(frozen=True)
class Attempt:
    """What one POST came to."""

    http_status: int | None
    error: str | None  # None when the receiver answered 2xx
    duration_ms: int
    peer: str | None = None  # the address the socket was connected to
    detail: str = ""  # for logs; never stored

    @property
    def ok(self) -> bool:
        return self.error is None


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the delivery ran out of time")
        return remaining


class _PinnedConnection(http.client.HTTPConnection):
    """An HTTPConnection over a socket that is already connected (and checked)."""

    def __init__(self, url: WebhookUrl, sock: socket.socket, timeout: float) -> None:
        super().__init__(url.host, url.port, timeout=timeout)
        self.default_port = 443 if url.scheme == "https" else 80
        self.sock = sock

    def connect(self) -> None:  # the socket is given; never dial again
        raise http.client.NotConnected("a pinned connection does not reconnect")


def _status_error(status: int) -> str | None:
    if 200 <= status < 300:
        return None
    if status == 410:
        return "status_410"
    return f"status_{status // 100}xx" if 300 <= status < 600 else "status_other"


class DeliveryClient:
    """POSTs webhook bodies under the SSRF rules of :mod:`postroom.webhooks.addresses`."""

    def __init__(
        self,
        *,
        allow_insecure: bool,
        allow_loopback: bool,
        timeout_s: float,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        user_agent: str = "Postroom-Webhooks",
    ) -> None:
        self.allow_insecure = allow_insecure
        self.allow_loopback = allow_loopback
        self.timeout_s = timeout_s
        self.resolver: Resolver = resolver or SystemResolver()
        self.ssl_context = ssl_context or ssl.create_default_context()
        self.user_agent = user_agent

    def check(self, url: str) -> WebhookUrl:
        return check_url(
            url, allow_insecure=self.allow_insecure, allow_loopback=self.allow_loopback
        )

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Attempt:
        started = time.monotonic()

        def done(status: int | None, error: str | None, peer: str | None, detail: str) -> Attempt:
            elapsed = int((time.monotonic() - started) * 1000)
            return Attempt(status, error, elapsed, peer, detail)

        if len(body) > MAX_BODY_BYTES:
            return done(None, "payload_too_large", None, f"{len(body)} bytes")
        try:
            target = self.check(url)
        except ForbiddenUrl as exc:
            return done(None, "invalid_url", None, str(exc))
        deadline = _Deadline(self.timeout_s)
        peer: str | None = None
        try:
            addresses = self._addresses(target)
            for address in addresses:
                reason = forbidden_reason(address, allow_loopback=self.allow_loopback)
                if reason is not None:
                    return done(None, "forbidden_address", None, f"{address}: {reason}")
            sock, peer = self._connect(target, addresses, deadline)
            reason = forbidden_reason(
                ipaddress.ip_address(peer), allow_loopback=self.allow_loopback
            )
            if reason is not None:  # the address the socket really reached
                sock.close()
                return done(None, "forbidden_address", peer, f"peer {peer}: {reason}")
            status = self._exchange(target, sock, body, headers, deadline)
        except socket.gaierror as exc:
            return done(None, "dns", peer, str(exc))
        except TimeoutError:
            return done(None, "timeout", peer, "timed out")
        except ssl.SSLError as exc:
            return done(None, "tls", peer, str(exc))
        except ssl.CertificateError as exc:
            return done(None, "tls", peer, str(exc))
        except ConnectionRefusedError:
            return done(None, "connection_refused", peer, "refused")
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as exc:
            return done(None, "connection_reset", peer, str(exc))
        except http.client.HTTPException as exc:
            return done(None, "protocol_error", peer, type(exc).__name__)
        except OSError as exc:
            return done(None, "connection_error", peer, str(exc))
        return done(status, _status_error(status), peer, "")

    def _addresses(self, target: WebhookUrl) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        if target.literal is not None:
            return [target.literal]
        answers = self.resolver.resolve(target.host, target.port)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, "no addresses")
        parsed = []
        for answer in answers:
            try:
                parsed.append(ipaddress.ip_address(answer.split("%", 1)[0]))
            except ValueError:
                raise socket.gaierror(socket.EAI_FAIL, "the resolver gave a non-address") from None
        return parsed

    def _connect(
        self,
        target: WebhookUrl,
        addresses: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address],
        deadline: _Deadline,
    ) -> tuple[socket.socket, str]:
        last: OSError | None = None
        for address in addresses:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(deadline.left())
                sock.connect((str(address), target.port))
                peer = str(sock.getpeername()[0])
                return sock, peer
            except OSError as exc:
                sock.close()
                last = exc
                if isinstance(exc, TimeoutError | socket.timeout):
                    raise
        assert last is not None
        raise last

    def _exchange(
        self,
        target: WebhookUrl,
        sock: socket.socket,
        body: bytes,
        headers: Mapping[str, str],
        deadline: _Deadline,
    ) -> int:
        try:
            if target.scheme == "https":
                sock.settimeout(deadline.left())
                sock = self.ssl_context.wrap_socket(sock, server_hostname=target.host)
            conn = _PinnedConnection(target, sock, deadline.left())
            sock.settimeout(deadline.left())
            conn.putrequest("POST", target.target, skip_accept_encoding=True)
            sent = {
                "Content-Type": "application/json",
                "User-Agent": self.user_agent,
                "Connection": "close",
                **headers,
                "Content-Length": str(len(body)),
            }
            for name, value in sent.items():
                conn.putheader(name, value)
            conn.endheaders(body)
            sock.settimeout(deadline.left())
            response = conn.getresponse()
            remaining = _READ_LIMIT
            while remaining > 0:
                # The socket's timeout (set before the answer) bounds each read; the
                # deadline bounds them all.
                deadline.left()
                chunk = response.read(min(remaining, 8192))
                if not chunk:
                    break
                remaining -= len(chunk)
            return int(response.status)
        finally:
            sock.close()

"""One SMTP client connection for the outbox, over :mod:`smtplib` (used by relay and direct).

:func:`open_smtp` connects, reads the greeting and says EHLO; the transports add TLS and
AUTH on top. :class:`SmtpConnection` then offers the steps the engine drives one at a
time (``mail`` / ``rcpt`` / ``data``), each answering a :class:`Reply` with the enhanced
status code (RFC 3463) parsed out of the text.

Failures are :class:`TransportError` with a stable ``code``:

* ``connect_failed`` — no TCP connection, or a greeting other than 220 (``reply`` set);
* ``tls_failed`` / ``tls_unavailable`` — the handshake failed / STARTTLS not offered;
* ``timeout`` — no reply to MAIL, RCPT or RSET within ``outbound.timeout_seconds``;
* ``connection_lost`` — the connection broke before a reply to MAIL, RCPT or RSET, or —
  in ``data`` — at any point after the body began to go out, a timeout included: this is
  the unknown outcome, the server may have taken the message;
* ``data_not_sent`` — ``data`` failed before the server's 354, so the body never left.

Timeouts: ``outbound.timeout_seconds`` bounds the connect and every reply (the socket
timeout). The body is dot-stuffed and sent with CRLF line endings; ``SIZE=`` goes with
MAIL FROM when the server advertises SIZE. Our messages are 7bit, so 8BITMIME needs
nothing; a non-ASCII address is refused locally (no SMTPUTF8 support yet).
"""

from __future__ import annotations

import re
import select
import smtplib
import ssl
import time
from collections.abc import Callable

from postroom.outbound.transports.base import Reply, TransportError

_ENHANCED = re.compile(r"^([245])\.(\d{1,3})\.(\d{1,3})(?:\s+|$)")
_LINE_END = re.compile(rb"\r\n|\r|\n")
_LEADING_DOT = re.compile(rb"^\.", re.MULTILINE)
_MAX_ADDRESS = 320


def parse_reply(code: int, text: bytes | str) -> Reply:
    """An SMTP reply as smtplib gives it (lines joined by ``\\n``) → :class:`Reply`.

    The enhanced status code is taken only when its class matches the basic code's
    (``550 5.1.1 ...``), and it is removed from the text of every line.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    enhanced: str | None = None
    lines = []
    for line in text.split("\n"):
        found = _ENHANCED.match(line)
        if found and str(code)[:1] == found.group(1):
            enhanced = enhanced or ".".join(found.groups())
            line = line[found.end() :]
        lines.append(line.strip())
    return Reply(code, enhanced, "\n".join(lines).strip())


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (or what smtplib wrapped into it) is a socket timeout."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _bad_address(address: str) -> str | None:
    """Why ``address`` cannot go on a command line, or None."""
    if len(address) > _MAX_ADDRESS:
        return "address too long"
    if any(ord(c) < 33 or ord(c) == 127 or c in "<>" for c in address):
        return "address holds spaces, angle brackets or control characters"
    if not address.isascii():
        return "non-ASCII address (SMTPUTF8 is not supported)"
    return None


def dot_stuffed(message: bytes) -> bytes:
    """The DATA payload: CRLF line endings, leading dots doubled, ending CRLF "." CRLF."""
    body = _LINE_END.sub(b"\r\n", message)
    if body and not body.endswith(b"\r\n"):
        body += b"\r\n"
    return _LEADING_DOT.sub(b"..", body) + b".\r\n"


def open_smtp(
    host: str,
    port: int,
    *,
    timeout: float,
    local_hostname: str,
    implicit_tls: ssl.SSLContext | None = None,
) -> smtplib.SMTP:
    """Connect, read a 220 greeting, say EHLO (HELO as a fallback).

    Raises TransportError ``connect_failed`` (``reply`` set for a refusing greeting),
    ``tls_failed`` (implicit TLS) or ``timeout``.
    """
    where = f"{host}:{port}"
    client: smtplib.SMTP
    try:
        # The constructor connects and reads the greeting (closing on anything but 220);
        # it also names the TLS server (SNI, certificate check) after ``host``.
        if implicit_tls is not None:
            client = smtplib.SMTP_SSL(
                host, port, local_hostname=local_hostname, timeout=timeout, context=implicit_tls
            )
        else:
            client = smtplib.SMTP(host, port, local_hostname=local_hostname, timeout=timeout)
    except smtplib.SMTPConnectError as exc:
        reply = parse_reply(exc.smtp_code, exc.smtp_error)
        raise TransportError(
            "connect_failed", f"{where} greeted with {exc.smtp_code}", reply=reply
        ) from None
    except (ssl.SSLError, ssl.CertificateError) as exc:
        raise TransportError("tls_failed", f"TLS with {where} failed: {exc}") from None
    except OSError as exc:
        if _timed_out(exc):
            raise TransportError("timeout", f"{where} did not answer in time") from None
        raise TransportError("connect_failed", f"cannot connect to {where}: {exc}") from None
    try:
        client.ehlo_or_helo_if_needed()
    except smtplib.SMTPHeloError as exc:
        client.close()
        reply = parse_reply(exc.smtp_code, exc.smtp_error)
        raise TransportError("connect_failed", f"{where} refused EHLO", reply=reply) from None
    except OSError as exc:
        client.close()
        if _timed_out(exc):
            raise TransportError("timeout", f"{where} did not answer EHLO in time") from None
        raise TransportError("connect_failed", f"{where}: lost at EHLO: {exc}") from None
    return client


def start_tls(client: smtplib.SMTP, context: ssl.SSLContext, where: str) -> None:
    """STARTTLS and the EHLO after it; TransportError ``tls_failed`` (client closed)."""
    try:
        client.starttls(context=context)
        client.ehlo()
    except smtplib.SMTPResponseException as exc:
        client.close()
        reply = parse_reply(exc.smtp_code, exc.smtp_error)
        raise TransportError("tls_failed", f"{where} refused STARTTLS", reply=reply) from None
    except (OSError, ValueError, smtplib.SMTPException) as exc:
        client.close()
        raise TransportError("tls_failed", f"TLS with {where} failed: {exc}") from None


def tls_version(client: smtplib.SMTP) -> str | None:
    sock = client.sock
    return sock.version() if isinstance(sock, ssl.SSLSocket) else None


class SmtpConnection:
    """One open SMTP session; ``close`` hands it to ``release`` (a pool) when given."""

    def __init__(
        self,
        client: smtplib.SMTP,
        destination: str,
        *,
        release: Callable[[SmtpConnection], None] | None = None,
    ) -> None:
        self.client = client
        self.destination = destination
        self.tls = tls_version(client)
        self.broken = False
        self.in_transaction = False
        self.transactions = 0
        self.last_used = time.monotonic()
        self._release = release

    # --- the steps ---------------------------------------------------------------------

    def mail(self, mail_from: str, size: int) -> Reply:
        problem = _bad_address(mail_from) if mail_from else None
        if problem:
            return Reply(501, "5.1.7", f"bad sender address: {problem}")
        self.in_transaction = True
        params = f" SIZE={size}" if size > 0 and self.client.has_extn("size") else ""
        return self._command("MAIL FROM", "mail", f"FROM:<{mail_from}>{params}")

    def rcpt(self, address: str) -> Reply:
        problem = _bad_address(address) if address else "empty address"
        if problem:
            return Reply(501, "5.1.3", f"bad recipient address: {problem}")
        return self._command("RCPT TO", "rcpt", f"TO:<{address}>")

    def data(self, message: bytes) -> Reply:
        try:
            code, text = self.client.docmd("data")
        except OSError as exc:
            # Nothing of the body left: the outcome is known (not delivered).
            self._break()
            why = "timed out" if _timed_out(exc) else "was lost"
            raise TransportError(
                "data_not_sent", f"{self.destination}: connection {why} before 354"
            ) from None
        if code != 354:
            self.in_transaction = False
            return self._checked(parse_reply(code, text))
        try:
            self.client.send(dot_stuffed(message))
            code, text = self.client.getreply()
        except OSError as exc:
            # The body went out (maybe all of it): the server may have the message.
            self._break()
            why = "no reply in time" if _timed_out(exc) else "connection lost"
            raise TransportError(
                "connection_lost",
                f"{self.destination}: {why} after the message was sent; outcome unknown",
            ) from None
        self.in_transaction = False
        self.transactions += 1
        self.last_used = time.monotonic()
        return self._checked(parse_reply(code, text))

    def reset(self) -> None:
        if self.broken or not self.in_transaction:
            return
        reply = self._command("RSET", "rset", "")
        if reply.code != 250:
            self.broken = True
            raise TransportError("connection_lost", f"{self.destination} refused RSET", reply=reply)
        self.in_transaction = False

    def close(self) -> None:
        if self._release is not None and not self.broken:
            self._release(self)
            return
        self.quit()

    def discard(self) -> None:
        self.broken = True
        self.client.close()

    # --- for the pool ------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether the server still holds this idle connection: no pending input (an
        EOF or a 421 the server sent before closing), then a NOOP answered 250."""
        sock = self.client.sock
        if self.broken or sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                return False
            code, _ = self.client.noop()
        except (OSError, ValueError):
            return False
        return code == 250

    def quit(self) -> None:
        """QUIT politely (best effort) and close."""
        try:
            if not self.broken and self.client.sock is not None:
                self.client.quit()
        except OSError:
            pass
        finally:
            self.broken = True
            self.client.close()

    # --- internals ---------------------------------------------------------------------

    def _command(self, what: str, verb: str, args: str) -> Reply:
        try:
            code, text = self.client.docmd(verb, args)
        except OSError as exc:
            self._break()
            if _timed_out(exc):
                raise TransportError(
                    "timeout", f"{self.destination}: no reply to {what} in time"
                ) from None
            raise TransportError(
                "connection_lost", f"{self.destination}: connection lost at {what}"
            ) from None
        return self._checked(parse_reply(code, text))

    def _checked(self, reply: Reply) -> Reply:
        # 421: the server is closing the channel; never reuse it.
        if reply.code == 421:
            self._break()
        return reply

    def _break(self) -> None:
        self.broken = True
        self.client.close()

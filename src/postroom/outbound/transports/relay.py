"""``smtp_relay``: every recipient through one smarthost (``outbound.relay_*``).

All recipients share one route (the smarthost takes them in one transaction). TLS is
``starttls`` (required: no STARTTLS offered is ``tls_unavailable``), ``implicit`` (TLS
from the first byte) or ``none``; the certificate is verified against
``outbound.relay_ca_file`` or the system's CAs, for the host name ``relay_host``. With a
user name set, AUTH follows TLS; a refusal with a 5xx reply is ``auth_failed``, permanent.

Connections are reused: each thread keeps one idle connection (keyed by thread id), so
consecutive sends from one worker thread ride one session. Closing a connection hands
it back after RSET when the transaction was left open; a connection that broke is never
pooled. Before reuse the idle connection is checked (pending input means the server
closed or said 421; otherwise one NOOP); a dead one is dropped and a new one opened.
"""

from __future__ import annotations

import smtplib
import ssl
import threading
from collections.abc import Sequence

from postroom.config import Settings
from postroom.errors import ConfigError
from postroom.outbound.transports.base import Route, TransportError
from postroom.outbound.transports.smtp import (
    SmtpConnection,
    open_smtp,
    parse_reply,
    start_tls,
)

# Reuse a pooled connection for at most this many messages, then open a fresh one.
MAX_TRANSACTIONS_PER_CONNECTION = 100


class RelayTransport:
    """The smarthost transport; thread-safe, one idle connection per thread."""

    name = "smtp_relay"
    provider = "smtp"

    def __init__(self, settings: Settings) -> None:
        if not settings.outbound_relay_host:
            raise ConfigError("outbound.transport is smtp_relay but outbound.relay_host is not set")
        self.host = settings.outbound_relay_host
        self.port = settings.outbound_relay_port
        self.tls = settings.outbound_relay_tls
        self.username = settings.outbound_relay_username
        self.password = settings.outbound_relay_password
        self.timeout = settings.outbound_timeout_seconds
        self.local_hostname = settings.smtp_hostname
        self.context: ssl.SSLContext | None = None
        if self.tls != "none":
            ca_file = settings.outbound_relay_ca_file
            try:
                self.context = ssl.create_default_context(
                    cafile=str(ca_file) if ca_file is not None else None
                )
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"outbound.relay_ca_file {ca_file} cannot be used: {exc}"
                ) from None
        self._idle: dict[int, SmtpConnection] = {}
        self._lock = threading.Lock()

    def routes(self, recipients: Sequence[str]) -> list[Route]:
        return [Route(tuple(recipients), "smarthost")] if recipients else []

    def connect(self, route: Route) -> SmtpConnection:
        with self._lock:
            pooled = self._idle.pop(threading.get_ident(), None)
        if pooled is not None:
            if pooled.alive():
                return pooled
            pooled.discard()
        return self._open()

    def close(self) -> None:
        with self._lock:
            idle = list(self._idle.values())
            self._idle.clear()
        for connection in idle:
            connection.quit()

    # --- internals ---------------------------------------------------------------------

    def _open(self) -> SmtpConnection:
        where = f"{self.host}:{self.port}"
        client = open_smtp(
            self.host,
            self.port,
            timeout=self.timeout,
            local_hostname=self.local_hostname,
            implicit_tls=self.context if self.tls == "implicit" else None,
        )
        if self.tls == "starttls":
            assert self.context is not None
            if not client.has_extn("starttls"):
                client.close()
                raise TransportError("tls_unavailable", f"{where} does not offer STARTTLS")
            start_tls(client, self.context, where)
        if self.username:
            self._login(client, where)
        return SmtpConnection(client, "smarthost", release=self._give_back)

    def _login(self, client: smtplib.SMTP, where: str) -> None:
        try:
            client.login(self.username, self.password)
        except smtplib.SMTPAuthenticationError as exc:
            client.close()
            reply = parse_reply(exc.smtp_code, exc.smtp_error)
            raise TransportError(
                "auth_failed",
                f"{where} refused our credentials ({exc.smtp_code})",
                permanent=reply.permanent,
                reply=reply,
            ) from None
        except smtplib.SMTPResponseException as exc:
            client.close()
            reply = parse_reply(exc.smtp_code, exc.smtp_error)
            raise TransportError(
                "auth_failed", f"{where} AUTH failed", permanent=reply.permanent, reply=reply
            ) from None
        except smtplib.SMTPServerDisconnected:
            client.close()
            raise TransportError("connection_lost", f"{where}: lost during AUTH") from None
        except smtplib.SMTPException:
            # Not advertised, or no mechanism we speak (smtplib: CRAM-MD5, PLAIN, LOGIN).
            client.close()
            raise TransportError(
                "auth_unavailable", f"{where} offers no AUTH mechanism we speak"
            ) from None
        except OSError as exc:
            client.close()
            raise TransportError("connection_lost", f"{where}: lost during AUTH: {exc}") from None

    def _give_back(self, connection: SmtpConnection) -> None:
        """``Connection.close`` of a pooled connection: keep it for this thread."""
        try:
            connection.reset()
        except TransportError:
            connection.discard()
            return
        if connection.transactions >= MAX_TRANSACTIONS_PER_CONNECTION:
            connection.quit()
            return
        with self._lock:
            previous = self._idle.get(threading.get_ident())
            self._idle[threading.get_ident()] = connection
        if previous is not None and previous is not connection:
            previous.quit()

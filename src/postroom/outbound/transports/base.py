"""What every transport offers the outbox: routes, connections and replies.

The outbox engine (:mod:`postroom.outbound.engine`) drives the SMTP conversation itself,
one step at a time, because the stages of a send hang on those steps: a record moves to
``transmission_begun`` *after* at least one RCPT TO was accepted and *before* DATA, and
whether an interrupted attempt may be retried depends on which replies were read. A
transport therefore exposes the steps, not a one-shot ``send``:

* :meth:`Transport.routes` splits an envelope's recipients into groups that share one
  SMTP transaction (a smarthost takes them all; direct delivery groups by domain);
* :meth:`Transport.connect` opens (or reuses) a connection for one group;
* :class:`Connection` offers ``mail`` / ``rcpt`` / ``data`` and answers :class:`Reply`.

A connection that breaks raises :class:`TransportError`; ``data`` raising after the body
began to go out is what the engine reports as an unknown outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Reply:
    """One SMTP reply: the code, the enhanced status code (RFC 3463) if any, the text."""

    code: int
    enhanced: str | None = None
    text: str = ""

    @property
    def positive(self) -> bool:
        return 200 <= self.code < 300

    @property
    def transient(self) -> bool:
        return 400 <= self.code < 500

    @property
    def permanent(self) -> bool:
        return self.code >= 500


@dataclass(frozen=True)
class Route:
    """Recipients that go through one SMTP transaction, and where to."""

    recipients: tuple[str, ...]
    destination: str  # a host name, "smarthost", "local" or "sink" (for logs and metrics)


class TransportError(Exception):
    """The conversation could not go on (DNS, connect, TLS, AUTH, a dropped connection).

    ``code`` is a stable machine code (``dns_no_mx``, ``connect_failed``, ``tls_failed``,
    ``auth_failed``, ``connection_lost``, ``timeout``...). ``permanent`` says retrying
    cannot help (a domain with a null MX, a relay refusing our credentials); ``reply`` is
    the SMTP reply that ended it when there was one.
    """

    def __init__(
        self, code: str, message: str = "", *, permanent: bool = False, reply: Reply | None = None
    ) -> None:
        super().__init__(message or code)
        self.code = code
        self.permanent = permanent
        self.reply = reply


class Connection(Protocol):
    def mail(self, mail_from: str, size: int) -> Reply: ...

    def rcpt(self, address: str) -> Reply: ...

    def data(self, message: bytes) -> Reply:
        """Send the message; the reply to the end of data. Raising means unknown outcome."""
        ...

    def reset(self) -> None:
        """RSET, so the connection can carry the next transaction (no-op when not needed)."""
        ...

    def close(self) -> None:
        """QUIT and close, or hand the connection back to the transport's pool."""
        ...

    def discard(self) -> None:
        """Close without reuse (after an error)."""
        ...


class Transport(Protocol):
    name: str  # "sink" | "smtp_relay" | "direct" | "local"
    provider: str  # messages.provider: "smtp" | "sink" | "local"

    def routes(self, recipients: Sequence[str]) -> list[Route]: ...

    def connect(self, route: Route) -> Connection: ...

    def close(self) -> None:
        """Close every pooled connection."""
        ...

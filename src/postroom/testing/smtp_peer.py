"""A controllable SMTP server for tests: the far end of outbound mail (aiosmtpd).

:class:`SmtpPeer` listens on ``127.0.0.1`` (an ephemeral port by default) on its own
event-loop thread, so it keeps answering while the test — or worker subprocesses the test
started — talk to it. It records every connection and transaction, so tests can assert
that a message arrived exactly once and whether the reply to its DATA went out.

What it can be told to do, per recipient address (``"*"``: every address without its
own rule) with :meth:`SmtpPeer.on`:

* ``rcpt="452 4.2.2 Mailbox full"`` — answer RCPT with this instead of 250;
* ``data="554 5.7.1 Rejected"`` — answer the end of DATA with this instead of 250 (the
  first accepted recipient with a ``data`` rule decides);
* ``drop="rcpt"`` — close the connection instead of answering RCPT;
  ``drop="after_rcpt"`` — answer 250, then close;
  ``drop="data"`` — read and record the whole body, then close without replying;
* ``stall=("rcpt" | "data", seconds)`` — wait that long before answering.

And per server (constructor): ``tls="starttls"`` (with ``require_tls``) or
``"implicit"``, with a certificate from a trustme CA (``peer.ca``; :meth:`ca_file` writes
it for a client); ``credentials=(user, password)`` — AUTH PLAIN/LOGIN offered (after
STARTTLS when ``tls="starttls"``) and required before MAIL; ``greeting="421 ..."`` —
greet with this and close; ``broken_tls`` — answer STARTTLS with 220, then garbage.
:meth:`close_connections` closes every open connection (an idle timeout, say).

The pytest fixture ``smtp_peer`` is a factory: ``peer = smtp_peer(tls="starttls")``
starts one; every peer it started is stopped after the test.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast

import pytest
from aiosmtpd.smtp import MISSING, SMTP, AuthResult, LoginPassword

Phase = Literal["rcpt", "data"]
Drop = Literal["rcpt", "after_rcpt", "data"]
TlsMode = Literal["none", "starttls", "implicit"]

# A stalled or dropped handler waits here until the connection's end cancels it.
_FOREVER = 3600.0


@dataclass(frozen=True)
class Behaviour:
    """How the peer treats one recipient address."""

    rcpt: str | None = None
    data: str | None = None
    drop: Drop | None = None
    stall: tuple[Phase, float] | None = None


@dataclass
class Transaction:
    """One MAIL FROM ... onwards, as the peer saw it."""

    connection: int
    mail_from: str
    mail_options: list[str]
    tls: bool
    authenticated_as: str | None
    rcpt_to: list[str] = field(default_factory=list)  # accepted recipients
    refused: list[str] = field(default_factory=list)
    data: bytes | None = None  # the body, once fully received (dot-unstuffed)
    reply: str | None = None  # the reply to the end of DATA
    replied: bool = False  # whether that reply was sent


class _PeerSMTP(SMTP):
    """aiosmtpd's protocol with the peer's connection-level tricks."""

    def __init__(self, peer: SmtpPeer, number: int, **kwargs: Any) -> None:
        super().__init__(peer._handler, **kwargs)
        self.peer = peer
        self.number = number
        self.current: Transaction | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peer._live.add(self)

    def connection_lost(self, error: Exception | None) -> None:
        self.peer._live.discard(self)
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        if self.peer.greeting is not None:
            await self.push(self.peer.greeting)
            assert self.transport is not None
            self.transport.close()
            return
        await super()._handle_client()

    async def smtp_STARTTLS(self, arg: str) -> None:
        if not self.peer.broken_tls:
            await super().smtp_STARTTLS(arg)
            return
        await self.push("220 Ready to start TLS")
        transport = _wire(self)
        transport.write(b"this is not a TLS handshake\r\n")
        transport.close()


class _Handler:
    """aiosmtpd hooks: decide per recipient, record everything."""

    def __init__(self, peer: SmtpPeer) -> None:
        self.peer = peer

    async def handle_EHLO(
        self, server: _PeerSMTP, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        session.host_name = hostname
        if self.peer.credentials is None:
            responses = [r for r in responses if not r[4:].startswith("AUTH")]
        return responses

    async def handle_MAIL(
        self, server: _PeerSMTP, session: Any, envelope: Any, address: str, options: list[str]
    ) -> Any:
        if self.peer.credentials is not None and not session.authenticated:
            return "530 5.7.0 Authentication required"
        auth = session.auth_data
        server.current = Transaction(
            connection=server.number,
            mail_from=address,
            mail_options=list(options),
            tls=session.ssl is not None or self.peer.tls == "implicit",
            authenticated_as=auth.login.decode() if isinstance(auth, LoginPassword) else None,
        )
        self.peer._record(server.current)
        return MISSING

    async def handle_RCPT(
        self, server: _PeerSMTP, session: Any, envelope: Any, address: str, options: list[str]
    ) -> Any:
        rule = self.peer.behaviour(address)
        transaction = server.current
        assert transaction is not None
        if rule.stall is not None and rule.stall[0] == "rcpt":
            await asyncio.sleep(rule.stall[1])
        if rule.drop == "rcpt":
            await _drop(server)
        if rule.rcpt is not None:
            with self.peer._lock:
                transaction.refused.append(address)
            return rule.rcpt
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        with self.peer._lock:
            transaction.rcpt_to.append(address)
        if rule.drop == "after_rcpt":
            # After this 250 is written (the write happens before the loop runs again).
            server.loop.call_soon(_wire(server).abort)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: _PeerSMTP, session: Any, envelope: Any) -> Any:
        transaction = server.current
        assert transaction is not None
        with self.peer._lock:
            transaction.data = bytes(envelope.original_content)
        rules = [self.peer.behaviour(a) for a in envelope.rcpt_tos]
        stall = next((r.stall[1] for r in rules if r.stall and r.stall[0] == "data"), None)
        if stall is not None:
            await asyncio.sleep(stall)
        if any(r.drop == "data" for r in rules):
            await _drop(server)
        reply = next((r.data for r in rules if r.data is not None), "250 2.0.0 OK queued")
        with self.peer._lock:
            transaction.reply = reply
            transaction.replied = True
        return reply

    def authenticate(
        self, server: _PeerSMTP, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        expected = self.peer.credentials
        ok = (
            expected is not None
            and isinstance(data, LoginPassword)
            and data.login.decode() == expected[0]
            and data.password.decode() == expected[1]
        )
        with self.peer._lock:
            self.peer.auth_attempts.append((mechanism, ok))
        return AuthResult(success=ok, handled=False, auth_data=data if ok else None)


def _wire(protocol: SMTP) -> asyncio.Transport:
    """The connection's transport (plain or TLS), typed for write and abort."""
    assert protocol.transport is not None
    return cast(asyncio.Transport, protocol.transport)


async def _drop(server: _PeerSMTP) -> None:
    """Close the connection now, without a reply; the connection's end cancels us."""
    _wire(server).abort()
    await asyncio.sleep(_FOREVER)


class SmtpPeer:
    """A programmable SMTP server on a background thread; see the module docstring."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsMode = "none",
        require_tls: bool = False,
        credentials: tuple[str, str] | None = None,
        greeting: str | None = None,
        broken_tls: bool = False,
        hostname: str = "peer.test",
        data_size_limit: int = 10 * 1024 * 1024,
    ) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.require_tls = require_tls
        self.credentials = credentials
        self.greeting = greeting
        self.broken_tls = broken_tls
        self.hostname = hostname
        self.data_size_limit = data_size_limit
        self.rules: dict[str, Behaviour] = {}
        self.auth_attempts: list[tuple[str, bool]] = []
        self.ca: Any = None
        self._server_context: ssl.SSLContext | None = None
        if tls != "none":
            import trustme  # a dev dependency: imported only when TLS is asked for

            self.ca = trustme.CA()
            certificate = self.ca.issue_cert("127.0.0.1", "localhost", hostname)
            self._server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            certificate.configure_cert(self._server_context)
        self._handler = _Handler(self)
        self._lock = threading.Lock()
        self._transactions: list[Transaction] = []
        self._connections = 0
        self._live: set[_PeerSMTP] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    # --- programming it --------------------------------------------------------------

    def on(
        self,
        address: str,
        *,
        rcpt: str | None = None,
        data: str | None = None,
        drop: Drop | None = None,
        stall: tuple[Phase, float] | None = None,
    ) -> SmtpPeer:
        """Set how ``address`` (case-insensitive; ``"*"``: any other) is treated."""
        self.rules[address.lower()] = Behaviour(rcpt=rcpt, data=data, drop=drop, stall=stall)
        return self

    def behaviour(self, address: str) -> Behaviour:
        return self.rules.get(address.lower()) or self.rules.get("*") or Behaviour()

    # --- what it saw -------------------------------------------------------------------

    @property
    def connections(self) -> int:
        """TCP connections accepted so far."""
        with self._lock:
            return self._connections

    @property
    def transactions(self) -> list[Transaction]:
        with self._lock:
            return list(self._transactions)

    def received(self, address: str | None = None) -> list[Transaction]:
        """Transactions whose body arrived (for ``address``, when given)."""
        return [
            t
            for t in self.transactions
            if t.data is not None and (address is None or address in t.rcpt_to)
        ]

    def ca_file(self, directory: Path) -> Path:
        """Write the CA certificate (PEM) into ``directory``; its path."""
        if self.ca is None:
            raise ValueError("this peer has no TLS (tls='none')")
        path = directory / f"peer-ca-{self.port}.pem"
        self.ca.cert_pem.write_to_path(str(path))
        return path

    def client_context(self) -> ssl.SSLContext:
        """A client SSL context that trusts this peer's certificate."""
        context = ssl.create_default_context()
        if self.ca is not None:
            self.ca.configure_trust(context)
        return context

    # --- running -----------------------------------------------------------------------

    def start(self) -> SmtpPeer:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="smtp-peer", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=10)
        return self

    def close_connections(self, reply: str | None = "421 4.4.2 peer.test idle timeout") -> int:
        """Close every open connection (after ``reply``, when given); how many."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self._close_all(reply), self._loop).result(10)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> SmtpPeer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- internals ---------------------------------------------------------------------

    def _record(self, transaction: Transaction) -> None:
        with self._lock:
            self._transactions.append(transaction)

    def _factory(self) -> _PeerSMTP:
        with self._lock:
            self._connections += 1
            number = self._connections
        starttls = self.tls == "starttls"
        return _PeerSMTP(
            self,
            number,
            hostname=self.hostname,
            data_size_limit=self.data_size_limit,
            tls_context=self._server_context if starttls else None,
            require_starttls=starttls and self.require_tls,
            # AUTH is enforced at MAIL by the handler; aiosmtpd's own auth_required
            # without TLS would warn.
            auth_required=False,
            auth_require_tls=starttls,
            authenticator=self._handler.authenticate,
            timeout=60,
            loop=self._loop,
        )

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._factory,
            self.host,
            self.port,
            ssl=self._server_context if self.tls == "implicit" else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close_all(self, reply: str | None) -> int:
        live = list(self._live)
        for protocol in live:
            if protocol.transport is None:
                continue
            transport = _wire(protocol)
            if reply is not None:
                transport.write(reply.encode() + b"\r\n")
            transport.close()
        # Let connection_lost run for each.
        for _ in range(20):
            if not any(p in self._live for p in live):
                break
            await asyncio.sleep(0.01)
        return len(live)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for protocol in list(self._live):
            if protocol.transport is not None:
                _wire(protocol).abort()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


@pytest.fixture
def smtp_peer() -> Iterator[Callable[..., SmtpPeer]]:
    """A factory of started :class:`SmtpPeer` servers, all stopped after the test."""
    started: list[SmtpPeer] = []

    def start(**options: Any) -> SmtpPeer:
        peer = SmtpPeer(**options).start()
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()

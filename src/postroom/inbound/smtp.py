"""The inbound SMTP server (aiosmtpd), kept thin: protocol here, decisions in services.

aiosmtpd's ``SMTP`` speaks the protocol and calls our :class:`InboundHandler` at MAIL,
RCPT and DATA. The handler asks the directory (``inbound.directory``) at RCPT and hands
the message to ``inbound.accept`` at DATA; it holds no SQL. Blocking work (the group
commit's flush and transaction, PostgreSQL reads, large writes) runs on a thread pool so
the event loop keeps accepting.

What is hardened here, beyond aiosmtpd's defaults:

* ``250`` only after the message is durable: blob flushed and the staging row committed.
  Commits are grouped: every DATA that completes while a commit is in flight joins the
  next one, and each ``250`` still follows its own message's commit. Any failure before
  that answers ``451``.
* Command lines must end in CRLF and hold no other CR or LF (``501``). DATA ends only at
  CRLF "." CRLF (aiosmtpd reads DATA by CRLF-terminated lines), so no bare-LF or bare-CR
  variant can smuggle a second message.
* DATA lines may be long (``smtp.max_line_length``; real mail exceeds 998 octets) while
  command lines stay limited to 512 octets (plus extensions).
* SIZE advertised and enforced (``552``), recipients per message bounded (``452``),
  unknown recipients ``550 5.1.1``, a throttled sender ``451 4.7.1``, no AUTH.
* STARTTLS when a certificate is configured; anything the client pipelined after
  STARTTLS in the clear is discarded, never executed inside TLS (aiosmtpd >= 1.4.5).
* An unexpected error answers ``451 4.3.0`` without its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from aiosmtpd.smtp import SMTP, Envelope, Session

from postroom.inbound import accept
from postroom.inbound.directory import Refusal, Route, normalize_address, route_recipient
from postroom.store.db import Engine

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.smtp")

T = TypeVar("T")

MAX_COMMIT_BATCH = 256
INLINE_WRITE_BYTES = 256 * 1024


class BareLineEnding(Exception):
    """A command line with a bare CR or LF."""


class _StrictCommandReader:
    """The connection's StreamReader, refusing bare CR/LF in command lines.

    aiosmtpd reads a command with ``readuntil()`` (up to LF) and DATA with
    ``readuntil(b"\\r\\n")``; only the first kind is checked here. Every other attribute
    (STARTTLS swaps the transport and clears the buffer) goes to the wrapped reader.
    """

    _inner: asyncio.StreamReader

    def __init__(self, inner: asyncio.StreamReader) -> None:
        object.__setattr__(self, "_inner", inner)

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        line: bytes = await self._inner.readuntil(separator)
        if separator == b"\n" and (not line.endswith(b"\r\n") or b"\r" in line[:-2]):
            raise BareLineEnding()
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)


class PostroomEnvelope(Envelope):
    """aiosmtpd's envelope plus the routes RCPT resolved."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: list[Route] = []


class PostroomSMTP(SMTP):
    """aiosmtpd's protocol with strict command lines; one instance per connection."""

    def _cb_client_connected(self, reader: Any, writer: Any) -> None:
        strict: Any = _StrictCommandReader(reader)
        super()._cb_client_connected(strict, writer)

    def _create_envelope(self) -> Envelope:
        return PostroomEnvelope()


@dataclass
class SmtpStats:
    accepted: int = 0
    refused_recipients: int = 0
    throttled: int = 0
    failed: int = 0
    by_reply: dict[str, int] = field(default_factory=dict)


class GroupCommitter:
    """Commits staged messages in batches; each submitter waits for its own commit."""

    def __init__(self, app: App, executor: ThreadPoolExecutor) -> None:
        self.app = app
        self.executor = executor
        self._queue: asyncio.Queue[tuple[accept.Submission, asyncio.Future[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def submit(self, submission: accept.Submission) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put((submission, future))
        await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < MAX_COMMIT_BATCH:
                batch.append(self._queue.get_nowait())
            submissions = [item[0] for item in batch]
            try:
                await loop.run_in_executor(
                    self.executor, accept.commit_batch, self.app, submissions
                )
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
            else:
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)


class InboundHandler:
    """aiosmtpd hooks: route at RCPT, stage at DATA. No SQL here."""

    def __init__(self, app: App, executor: ThreadPoolExecutor, committer: GroupCommitter) -> None:
        self.app = app
        self.executor = executor
        self.committer = committer
        self.stats = SmtpStats()
        self._throttled_until: dict[str, int] = {}
        self._inline_reads = app.db.engine is Engine.SQLITE

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def _count(self, reply: str) -> str:
        code = reply[:3]
        self.stats.by_reply[code] = self.stats.by_reply.get(code, 0) + 1
        return reply

    def _sender_throttled(self, sender: str) -> bool:
        """Known to be over the limit for the current window (no database read: the
        authoritative count is taken in the commit, which refuses at DATA)."""
        until = self._throttled_until.get(sender.lower())
        return until is not None and self.app.clock.now_ms() < until

    def _remember_throttled(self, sender: str) -> None:
        window = self.app.settings.smtp_sender_rate_window_seconds * 1000
        start = accept.window_start(self.app, self.app.clock.now_ms())
        if len(self._throttled_until) > 10_000:
            self._throttled_until.clear()
        self._throttled_until[sender.lower()] = start + window

    def _route(self, address: str) -> Route | Refusal:
        with self.app.db.read() as tx:
            return route_recipient(tx, self.app.keys(), address)

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self._sender_throttled(address):
            self.stats.throttled += 1
            return self._count("451 4.7.1 Too many messages from this sender; try again later")
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return self._count("250 2.1.0 OK")

    @staticmethod
    def _outcome(reply: str) -> str:
        return {"2": "accepted", "4": "deferred"}.get(reply[:1], "refused")

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        reply = await self._handle_rcpt(envelope, address, options)
        self.app.metrics.smtp_recipients.labels(self._outcome(reply)).inc()
        return reply

    async def _handle_rcpt(self, envelope: Envelope, address: str, options: list[str]) -> str:
        assert isinstance(envelope, PostroomEnvelope)
        if len(envelope.rcpt_tos) >= self.app.settings.smtp_max_recipients:
            return self._count("452 4.5.3 Too many recipients")
        if normalize_address(address) is None:
            return self._count("553 5.1.3 Malformed recipient address")
        # A SQLite read in WAL mode never waits for the writer and takes tens of
        # microseconds: cheaper on the loop than a hop to the thread pool. PostgreSQL
        # is a network round trip: off the loop.
        if self._inline_reads:
            decision = self._route(address)
        else:
            decision = await self._blocking(self._route, address)
        if isinstance(decision, Refusal):
            self.stats.refused_recipients += 1
            return self._count(decision.reply)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        envelope.routes.append(decision)
        return self._count("250 2.1.5 OK")

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        reply = await self._handle_data(server, session, envelope)
        self.app.metrics.smtp_messages.labels(self._outcome(reply)).inc()
        return reply

    async def _handle_data(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope, PostroomEnvelope)
        raw = envelope.original_content
        if not isinstance(raw, bytes | bytearray) or not envelope.routes:
            return self._count("554 5.5.1 No valid recipients")
        peer = session.peer if isinstance(session.peer, tuple) else (None, None)
        tls = None
        if session.ssl is not None:
            tls_object = session.ssl.get("ssl_object")
            if tls_object is not None:
                cipher = tls_object.cipher()
                tls = {"version": tls_object.version(), "cipher": cipher[0] if cipher else None}
        submission = accept.Submission(
            raw=bytes(raw),
            envelope=accept.Envelope(
                mail_from=envelope.mail_from or "",
                rcpt_to=tuple(envelope.rcpt_tos),
                client_ip=str(peer[0]) if peer[0] is not None else None,
                client_port=int(peer[1]) if peer[1] is not None else None,
                helo=session.host_name if isinstance(session.host_name, str) else None,
                tls=tls,
            ),
            routes=list(envelope.routes),
            received_at=self.app.clock.now_ms(),
        )
        try:
            # Writing without a flush only copies into the page cache; small messages
            # do it on the loop, large ones in the pool (the flush is the committer's).
            if len(submission.raw) <= INLINE_WRITE_BYTES:
                accept.write_blobs(self.app, submission)
            else:
                await self._blocking(accept.write_blobs, self.app, submission)
            await self.committer.submit(submission)
        except Exception:
            log.exception("could not make a message durable; answered 451")
            self.stats.failed += 1
            await self._blocking(accept.remove_blobs, self.app, submission)
            return self._count("451 4.3.0 Temporary failure storing the message; try again")
        if submission.throttled:
            self.stats.throttled += 1
            self._remember_throttled(submission.sender)
            await self._blocking(accept.remove_blobs, self.app, submission)
            return self._count("451 4.7.1 Too many messages from this sender; try again later")
        self.stats.accepted += 1
        ids = " ".join(staged.id for staged in submission.staged)
        return self._count(f"250 2.0.0 OK queued as {ids}")

    async def handle_exception(self, error: Exception) -> str:
        if isinstance(error, BareLineEnding):
            return self._count("501 5.5.2 Syntax error: bare CR or LF in a command line")
        log.exception("SMTP session error", exc_info=error)
        return self._count("451 4.3.0 Temporary server error")


def tls_context(app: App) -> ssl.SSLContext | None:
    cert, key = app.settings.smtp_tls_cert_file, app.settings.smtp_tls_key_file
    if cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key) if key else None)
    return context


class SMTPServer:
    """The inbound server on its own event loop thread: ``start()`` / ``stop()``."""

    def __init__(
        self,
        app: App,
        host: str | None = None,
        port: int | None = None,
        *,
        reuse_port: bool = False,
    ) -> None:
        self.app = app
        self.reuse_port = reuse_port
        self.host = host if host is not None else app.settings.smtp_listen.host
        self.port = port if port is not None else app.settings.smtp_listen.port
        self.executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="postroom-smtp")
        self.loop = asyncio.new_event_loop()
        self.committer = GroupCommitter(app, self.executor)
        self.handler = InboundHandler(app, self.executor, self.committer)
        self._server: asyncio.AbstractServer | None = None
        self._connections: weakref.WeakSet[SMTP] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def _protocol(self) -> SMTP:
        settings = self.app.settings
        cls = type(
            "ConfiguredSMTP", (PostroomSMTP,), {"line_length_limit": settings.smtp_max_line_length}
        )
        protocol: SMTP = cls(
            self.handler,
            data_size_limit=settings.smtp_max_message_bytes,
            enable_SMTPUTF8=True,
            decode_data=False,
            hostname=settings.smtp_hostname,
            ident="Postroom ESMTP",
            tls_context=self._tls,
            timeout=settings.smtp_timeout_seconds,
            loop=self.loop,
        )
        self._connections.add(protocol)
        return protocol

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._tls = tls_context(self.app)
            self.committer_started = self.loop.run_until_complete(self._start())
        except BaseException as exc:
            self._error = exc
            self.loop.close()
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._shutdown())
        self.loop.close()

    async def _start(self) -> bool:
        self._server = await self.loop.create_server(
            self._protocol, self.host, self.port, reuse_port=self.reuse_port or None
        )
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.committer.start()
        return True

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        # Close open sessions too; a message whose 250 was not sent is not acknowledged.
        for protocol in list(self._connections):
            transport = protocol.transport
            if transport is not None:
                transport.close()
        await asyncio.sleep(0.05)
        tasks = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await self.committer.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="postroom-smtp", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self._thread is None:
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.executor.shutdown(wait=True)

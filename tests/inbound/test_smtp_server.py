"""The inbound SMTP server over real loopback connections, on both engines."""

from __future__ import annotations

import smtplib
import socket
import ssl
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from postroom.inbound.smtp import SMTPServer
from postroom.store import inbound as inbound_rows
from postroom.tenancy.service import create_identity

MESSAGE = (
    b"From: Alice <alice@example.org>\r\nTo: bob@localhost\r\nSubject: hi\r\n\r\nHello Bob\r\n"
)


@pytest.fixture
def app(ready_app: Any) -> Any:
    return ready_app


@pytest.fixture
def inbox(app: Any) -> str:
    create_identity(app, "bob")
    create_identity(app, "carol")
    return "bob@localhost"


def _start(app: Any, **settings: Any) -> SMTPServer:
    if settings:
        app.settings = replace(app.settings, **settings)
    server = SMTPServer(app, host="127.0.0.1", port=0)
    server.start()
    return server


@pytest.fixture
def server(app: Any, inbox: str) -> Iterator[SMTPServer]:
    running = _start(app)
    yield running
    running.stop()


def _staged(app: Any) -> list[inbound_rows.StagedMessage]:
    with app.db.read() as tx:
        rows = tx.fetchall("SELECT * FROM inbound_queue ORDER BY received_at, id")
    return [inbound_rows.StagedMessage.from_row(r) for r in rows]


class RawClient:
    """A line-level SMTP client for what smtplib refuses to send."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""
        self.greeting = self.reply()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> str:
        """One complete (possibly multi-line) reply."""
        lines: list[str] = []
        while True:
            while b"\r\n" not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\r\n", 1)
            lines.append(line.decode())
            if len(line) < 4 or line[3:4] != b"-":
                return "\n".join(lines)

    def command(self, line: bytes) -> str:
        self.send(line)
        return self.reply()

    def close(self) -> None:
        self.sock.close()


# --- the normal path -----------------------------------------------------------------


def test_a_message_for_a_known_address_is_durable_before_the_250(
    app: Any, server: SMTPServer
) -> None:
    with smtplib.SMTP("127.0.0.1", server.port) as client:
        client.ehlo("sender.example")
        refused = client.sendmail("alice@example.org", ["bob@localhost"], MESSAGE)
        assert refused == {}
    [staged] = _staged(app)
    raw = app.blobs.get(staged.raw_blob_key)
    assert raw.endswith(MESSAGE)
    assert raw.startswith(b"Received: from sender.example ([127.0.0.1])")
    assert staged.envelope["mail_from"] == "alice@example.org"
    assert staged.envelope["rcpt_to"] == ["bob@localhost"]
    assert staged.envelope["helo"] == "sender.example"
    assert staged.envelope["client_ip"] == "127.0.0.1"
    assert staged.envelope["tls"] is None
    assert staged.delivered_to == "bob@localhost"
    job = app.queue.list(job_type="inbound.ingest")
    assert [j.payload["message_id"] for j in job] == [staged.id]
    assert server.handler.stats.accepted == 1


def test_unknown_recipients_get_550_and_known_ones_are_kept(app: Any, server: SMTPServer) -> None:
    with smtplib.SMTP("127.0.0.1", server.port) as client:
        refused = client.sendmail(
            "alice@example.org", ["nobody@localhost", "bob@localhost", "x@elsewhere.test"], MESSAGE
        )
    assert refused == {
        "nobody@localhost": (550, b"5.1.1 No such recipient here"),
        "x@elsewhere.test": (550, b"5.1.1 No such recipient here"),
    }
    assert [s.delivered_to for s in _staged(app)] == ["bob@localhost"]


def test_one_copy_per_identity_and_plus_tags_become_labels(app: Any, server: SMTPServer) -> None:
    with smtplib.SMTP("127.0.0.1", server.port) as client:
        client.sendmail(
            "alice@example.org",
            ["Bob+Invoices@localhost", "bob@localhost", "carol@localhost"],
            MESSAGE,
        )
    staged = {s.delivered_to: s for s in _staged(app)}
    assert sorted(staged) == ["bob+invoices@localhost", "carol@localhost"]
    bob = staged["bob+invoices@localhost"]
    assert bob.labels == ("invoices",)
    assert bob.envelope["rcpt_to"] == ["bob+invoices@localhost", "bob@localhost"]
    # One primary copy per tenant (seed 000 A9).
    assert sorted(s.is_primary_recipient for s in staged.values()) == [False, True]
    # Each copy has its own blob with its own Received header.
    assert bob.raw_blob_key != staged["carol@localhost"].raw_blob_key


def test_all_recipients_unknown_means_no_data(server: SMTPServer) -> None:
    client = RawClient(server.port)
    assert client.command(b"EHLO x\r\n").startswith("250")
    assert client.command(b"MAIL FROM:<a@example.org>\r\n").startswith("250")
    assert client.command(b"RCPT TO:<ghost@localhost>\r\n").startswith("550 5.1.1")
    assert client.command(b"DATA\r\n").startswith("503")
    client.close()


# --- limits --------------------------------------------------------------------------


def test_size_is_advertised_and_enforced(app: Any, inbox: str) -> None:
    server = _start(app, smtp_max_message_bytes=4096)
    try:
        with smtplib.SMTP("127.0.0.1", server.port) as client:
            client.ehlo()
            assert client.esmtp_features["size"] == "4096"
            # smtplib declares SIZE=: refused at MAIL FROM.
            with pytest.raises(smtplib.SMTPSenderRefused) as refused:
                client.sendmail("a@example.org", ["bob@localhost"], MESSAGE + b"x" * 5000)
            assert refused.value.smtp_code == 552
        # A client that declares nothing is refused after the data.
        raw = RawClient(server.port)
        raw.command(b"EHLO x\r\n")
        raw.command(b"MAIL FROM:<a@example.org>\r\n")
        raw.command(b"RCPT TO:<bob@localhost>\r\n")
        assert raw.command(b"DATA\r\n").startswith("354")
        assert raw.command(MESSAGE + b"x" * 5000 + b"\r\n.\r\n").startswith("552")
        raw.close()
        assert _staged(app) == []
    finally:
        server.stop()


def test_recipients_per_message_are_bounded(app: Any, inbox: str) -> None:
    server = _start(app, smtp_max_recipients=2)
    try:
        raw = RawClient(server.port)
        raw.command(b"EHLO x\r\n")
        raw.command(b"MAIL FROM:<a@example.org>\r\n")
        assert raw.command(b"RCPT TO:<bob@localhost>\r\n").startswith("250")
        assert raw.command(b"RCPT TO:<carol@localhost>\r\n").startswith("250")
        assert raw.command(b"RCPT TO:<bob+x@localhost>\r\n").startswith("452 4.5.3")
        raw.close()
    finally:
        server.stop()


def test_long_data_lines_are_accepted_and_kept_whole(app: Any, server: SMTPServer) -> None:
    line = b"x" * 50_000
    body = b"Subject: long\r\n\r\n" + line + b"\r\n"
    with smtplib.SMTP("127.0.0.1", server.port) as client:
        assert client.sendmail("a@example.org", ["bob@localhost"], body) == {}
    [staged] = _staged(app)
    assert line in app.blobs.get(staged.raw_blob_key)


def test_command_lines_stay_limited(server: SMTPServer) -> None:
    raw = RawClient(server.port)
    raw.command(b"EHLO x\r\n")
    assert raw.command(b"MAIL FROM:<" + b"a" * 2000 + b"@example.org>\r\n").startswith("500")
    raw.close()


def test_a_throttled_sender_gets_451(app: Any, inbox: str) -> None:
    server = _start(app, smtp_sender_rate_limit=2)
    try:
        with smtplib.SMTP("127.0.0.1", server.port) as client:
            client.sendmail("spammy@example.org", ["bob@localhost"], MESSAGE)
            client.sendmail("spammy@example.org", ["bob@localhost"], MESSAGE)
            # The third is refused after its data, when the count is taken...
            with pytest.raises(smtplib.SMTPDataError) as info:
                client.sendmail("spammy@example.org", ["bob@localhost"], MESSAGE)
            assert info.value.smtp_code == 451
            assert b"4.7.1" in info.value.smtp_error
            # ...and from then on at MAIL FROM, before any data is sent.
            with pytest.raises(smtplib.SMTPSenderRefused) as early:
                client.sendmail("spammy@example.org", ["bob@localhost"], MESSAGE)
            assert early.value.smtp_code == 451
            # Another sender is not affected.
            assert client.sendmail("calm@example.org", ["bob@localhost"], MESSAGE) == {}
        assert len(_staged(app)) == 3
        assert len(list(Path(app.settings.blobs_path).rglob("*.eml"))) == 3
    finally:
        server.stop()


# --- protocol abuse ------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [b"MAIL FROM:<a@example.org>\n", b"MAIL FROM:<a@example.org>\rRCPT TO:<bob@localhost>\r\n"],
)
def test_bare_cr_or_lf_in_commands_is_refused(server: SMTPServer, line: bytes) -> None:
    raw = RawClient(server.port)
    raw.command(b"EHLO x\r\n")
    assert raw.command(line).startswith("501")
    # The session goes on.
    assert raw.command(b"NOOP\r\n").startswith("250")
    raw.close()


SMUGGLE_VARIANTS = [
    b"\n.\n",
    b"\r.\r",
    b"\r.\n",
    b"\n.\r",
    b"\n.\r\n",
    b"\r\n.\n",
    b"\r.\r\n",
    b"\r\n.\r",
    b"\r\n\x00.\r\n",
]


@pytest.mark.parametrize("ending", SMUGGLE_VARIANTS, ids=repr)
def test_smtp_smuggling_is_impossible(app: Any, server: SMTPServer, ending: bytes) -> None:
    # If `ending` ended DATA, the server would run this as a second transaction, ended
    # by the real terminator below.
    smuggled = (
        b"MAIL FROM:<ceo@bank.example>\r\nRCPT TO:<bob@localhost>\r\nDATA\r\n"
        b"Subject: smuggled\r\n\r\nsend money"
    )
    raw = RawClient(server.port)
    raw.command(b"EHLO x\r\n")
    assert raw.command(b"MAIL FROM:<a@example.org>\r\n").startswith("250")
    assert raw.command(b"RCPT TO:<bob@localhost>\r\n").startswith("250")
    assert raw.command(b"DATA\r\n").startswith("354")
    raw.send(b"Subject: real\r\n\r\nhello" + ending + smuggled + b"\r\n.\r\n")
    assert raw.reply().startswith("250")
    # Nothing else is answered: no second transaction was started.
    raw.sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        raw.reply()
    raw.close()
    [staged] = _staged(app)
    stored = app.blobs.get(staged.raw_blob_key)
    assert b"hello" in stored and b"send money" in stored and b"ceo@bank.example" in stored


# --- STARTTLS ------------------------------------------------------------------------


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Any]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    return chain, key, ca


def test_starttls_when_a_certificate_is_configured(
    app: Any, inbox: str, tls_files: tuple[Path, Path, Any]
) -> None:
    chain, key, ca = tls_files
    server = _start(app, smtp_tls_cert_file=chain, smtp_tls_key_file=key)
    try:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        with smtplib.SMTP("127.0.0.1", server.port) as client:
            client.ehlo()
            assert client.has_extn("starttls")
            assert not client.has_extn("auth")
            client.starttls(context=context)
            client.ehlo()
            assert client.sendmail("a@example.org", ["bob@localhost"], MESSAGE) == {}
        [staged] = _staged(app)
        assert staged.envelope["tls"]["version"].startswith("TLS")
        assert b"with ESMTPS" in app.blobs.get(staged.raw_blob_key)
    finally:
        server.stop()


def test_commands_pipelined_after_starttls_are_not_run_inside_tls(
    app: Any, inbox: str, tls_files: tuple[Path, Path, Any]
) -> None:
    chain, key, ca = tls_files
    server = _start(app, smtp_tls_cert_file=chain, smtp_tls_key_file=key)
    try:
        raw = RawClient(server.port)
        raw.command(b"EHLO x\r\n")
        # An attacker in the middle appends commands to the cleartext STARTTLS packet.
        raw.send(b"STARTTLS\r\nMAIL FROM:<evil@example.org>\r\nRCPT TO:<bob@localhost>\r\n")
        assert raw.reply().startswith("220")
        context = ssl.create_default_context()
        ca.configure_trust(context)
        tls = context.wrap_socket(raw.sock, server_hostname="localhost")
        tls.sendall(b"EHLO x\r\n")
        buffer = b""
        while b"250 " not in buffer:
            buffer += tls.recv(65536)
        # Had the injected MAIL been run, this DATA would be accepted.
        tls.sendall(b"DATA\r\n")
        answer = tls.recv(65536)
        assert answer.startswith(b"503"), answer
        tls.close()
        assert _staged(app) == []
    finally:
        server.stop()


# --- failures before the commit answer 4xx ------------------------------------------


def test_a_database_failure_answers_451_and_leaves_no_blob(
    app: Any, server: SMTPServer, engine: str
) -> None:
    with app.db.write() as tx:
        if engine == "sqlite":
            tx.execute(
                "CREATE TRIGGER fail_staging BEFORE INSERT ON inbound_queue"
                " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        else:
            tx.execute(
                "CREATE FUNCTION fail_staging() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$"
            )
            tx.execute(
                "CREATE TRIGGER fail_staging BEFORE INSERT ON inbound_queue"
                " FOR EACH ROW EXECUTE FUNCTION fail_staging()"
            )
    with smtplib.SMTP("127.0.0.1", server.port) as client:
        with pytest.raises(smtplib.SMTPDataError) as info:
            client.sendmail("a@example.org", ["bob@localhost"], MESSAGE)
        assert info.value.smtp_code == 451
        assert b"disk on fire" not in info.value.smtp_error
    assert _staged(app) == []
    blobs = [p for p in Path(app.settings.blobs_path).rglob("*.eml")]
    assert blobs == []


def test_a_blob_store_failure_answers_451(app: Any, inbox: str) -> None:
    Path(app.settings.blobs_path).parent.mkdir(parents=True, exist_ok=True)
    Path(app.settings.blobs_path).write_text("not a folder")
    from postroom.store.blobs import FilesystemBlobStore

    app.blobs = FilesystemBlobStore(Path(app.settings.blobs_path))
    server = _start(app)
    try:
        with smtplib.SMTP("127.0.0.1", server.port) as client:
            with pytest.raises(smtplib.SMTPDataError) as info:
                client.sendmail("a@example.org", ["bob@localhost"], MESSAGE)
            assert info.value.smtp_code == 451
        assert _staged(app) == []
    finally:
        server.stop()

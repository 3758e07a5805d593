"""Outbound transports against real peers: SMTP over loopback, a DNS stub, both engines."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from postroom.config import load_settings
from postroom.errors import ConfigError
from postroom.jobs.builtin import default_registry
from postroom.jobs.worker import Worker
from postroom.outbound.transports import (
    Reply,
    Route,
    TransportError,
    build_transport,
    is_local_recipient,
)
from postroom.outbound.transports.direct import DirectTransport, parse_nameserver
from postroom.outbound.transports.relay import RelayTransport
from postroom.outbound.transports.smtp import dot_stuffed, parse_reply
from postroom.store import tenancy as directory
from postroom.tenancy.service import create_identity
from postroom.testing.dns_stub import DnsStub
from postroom.testing.smtp_peer import SmtpPeer

MESSAGE = (
    b"From: Ann <ann@localhost>\r\n"
    b"To: Bob <bob@example.test>\r\n"
    b"Subject: Transports\r\n"
    b"Message-ID: <transports-1@localhost>\r\n"
    b"\r\n"
    b"Hello.\r\n"
    b".A line starting with a dot.\r\n"
    b".\r\n"
    b"The end.\r\n"
)

PeerFactory = Callable[..., SmtpPeer]


def _settings(tmp_path: Path, **overrides: Any) -> Any:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return load_settings(env={}, overrides={"data_dir": str(data), **overrides}, cwd=tmp_path)


def _relay(tmp_path: Path, peer: SmtpPeer, **overrides: Any) -> RelayTransport:
    values = {
        "outbound.relay_host": "127.0.0.1",
        "outbound.relay_port": peer.port,
        "outbound.relay_tls": "none",
        **overrides,
    }
    timeout = values.pop("timeout", None)
    settings = _settings(tmp_path, **values)
    if timeout is not None:
        # Below the setting's parsed minimum (1 s), to keep the stall tests short.
        settings = replace(settings, outbound_timeout_seconds=timeout)
    return RelayTransport(settings)


def _send(transport: Any, recipients: list[str], message: bytes = MESSAGE) -> Reply:
    """One whole transaction per route; the last DATA reply."""
    reply = Reply(0)
    for route in transport.routes(recipients):
        conn = transport.connect(route)
        assert conn.mail("ann@localhost", len(message)).code == 250
        for address in route.recipients:
            assert conn.rcpt(address).code == 250
        reply = conn.data(message)
        conn.close()
    return reply


# --- pure helpers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text", "expected"),
    [
        (550, b"5.1.1 No such user", Reply(550, "5.1.1", "No such user")),
        (452, b"4.2.2 Full\n4.2.2 Try later", Reply(452, "4.2.2", "Full\nTry later")),
        (250, b"OK", Reply(250, None, "OK")),
        # An enhanced code of another class than the reply's is text, not a status.
        (550, b"2.0.0 odd", Reply(550, None, "2.0.0 odd")),
        (421, "4.4.2 closing", Reply(421, "4.4.2", "closing")),
    ],
)
def test_replies_carry_the_enhanced_status_code(code: int, text: Any, expected: Reply) -> None:
    assert parse_reply(code, text) == expected


def test_the_body_is_dot_stuffed_with_crlf_line_endings() -> None:
    assert dot_stuffed(b"a\n.b\r\n..c\rd") == b"a\r\n..b\r\n...c\r\nd\r\n.\r\n"


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [("127.0.0.1", "127.0.0.1", 53), ("127.0.0.1:5353", "127.0.0.1", 5353), ("::1", "::1", 53)],
)
def test_nameservers_are_ip_or_ip_port(text: str, host: str, port: int) -> None:
    server = parse_nameserver(text)
    assert (server.address, server.port) == (host, port)


@pytest.mark.parametrize("text", ["resolver.example", "127.0.0.1:99999", "[::1]x"])
def test_a_bad_nameserver_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="dns_nameservers"):
        parse_nameserver(text)


def test_build_transport_refuses_unknown_names_and_a_relay_without_host(tmp_path: Path) -> None:
    app = SimpleNamespace(settings=_settings(tmp_path))
    with pytest.raises(ConfigError, match="unknown outbound transport 'pigeon'"):
        build_transport(app, "pigeon")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="relay_host"):
        build_transport(app, "smtp_relay")  # type: ignore[arg-type]


# --- smtp_relay ----------------------------------------------------------------------


def test_relay_with_starttls_and_auth(tmp_path: Path, smtp_peer: PeerFactory) -> None:
    peer = smtp_peer(tls="starttls", require_tls=True, credentials=("relay-user", "s3cret"))
    transport = _relay(
        tmp_path,
        peer,
        **{
            "outbound.relay_tls": "starttls",
            "outbound.relay_username": "relay-user",
            "outbound.relay_password": "s3cret",
            "outbound.relay_ca_file": str(peer.ca_file(tmp_path)),
        },
    )
    [route] = transport.routes(["bob@example.test", "carol@other.test"])
    assert route == Route(("bob@example.test", "carol@other.test"), "smarthost")
    conn = transport.connect(route)
    assert conn.tls is not None and conn.tls.startswith("TLS")
    assert conn.mail("ann@localhost", len(MESSAGE)) == Reply(250, None, "OK")
    assert conn.rcpt("bob@example.test") == Reply(250, "2.1.5", "OK")
    assert conn.rcpt("carol@other.test").positive
    reply = conn.data(MESSAGE)
    assert reply == Reply(250, "2.0.0", "OK queued")
    conn.close()
    transport.close()
    [received] = peer.received()
    assert received.data == MESSAGE
    assert received.rcpt_to == ["bob@example.test", "carol@other.test"]
    assert received.tls and received.authenticated_as == "relay-user"
    assert f"SIZE={len(MESSAGE)}" in received.mail_options
    assert received.replied


def test_relay_with_implicit_tls(tmp_path: Path, smtp_peer: PeerFactory) -> None:
    peer = smtp_peer(tls="implicit")
    transport = _relay(
        tmp_path,
        peer,
        **{"outbound.relay_tls": "implicit", "outbound.relay_ca_file": str(peer.ca_file(tmp_path))},
    )
    assert _send(transport, ["bob@example.test"]).code == 250
    transport.close()
    [received] = peer.received()
    assert received.tls and received.data == MESSAGE


def test_relay_verifies_the_certificate(tmp_path: Path, smtp_peer: PeerFactory) -> None:
    peer = smtp_peer(tls="starttls")
    transport = _relay(tmp_path, peer, **{"outbound.relay_tls": "starttls"})  # system CAs
    with pytest.raises(TransportError) as caught:
        transport.connect(Route(("bob@example.test",), "smarthost"))
    assert caught.value.code == "tls_failed"
    assert peer.transactions == []


def test_relay_requires_starttls_when_configured(tmp_path: Path, smtp_peer: PeerFactory) -> None:
    peer = smtp_peer()
    transport = _relay(tmp_path, peer, **{"outbound.relay_tls": "starttls"})
    with pytest.raises(TransportError) as caught:
        transport.connect(Route(("bob@example.test",), "smarthost"))
    assert caught.value.code == "tls_unavailable"


def test_relay_with_bad_credentials_fails_permanently(
    tmp_path: Path, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer(credentials=("relay-user", "s3cret"))
    transport = _relay(
        tmp_path,
        peer,
        **{"outbound.relay_username": "relay-user", "outbound.relay_password": "wrong"},
    )
    with pytest.raises(TransportError) as caught:
        transport.connect(Route(("bob@example.test",), "smarthost"))
    error = caught.value
    assert error.code == "auth_failed" and error.permanent
    assert error.reply is not None and error.reply.code == 535
    assert error.reply.enhanced == "5.7.8"
    assert peer.auth_attempts and not any(ok for _mech, ok in peer.auth_attempts)
    assert peer.transactions == []


def test_relay_reuses_one_connection_per_thread(tmp_path: Path, smtp_peer: PeerFactory) -> None:
    peer = smtp_peer()
    transport = _relay(tmp_path, peer)
    assert _send(transport, ["a@example.test"]).code == 250
    assert _send(transport, ["b@example.test"]).code == 250
    assert peer.connections == 1
    assert [t.rcpt_to for t in peer.received()] == [["a@example.test"], ["b@example.test"]]
    # Another worker thread gets a connection of its own.
    replies: list[Reply] = []
    worker = threading.Thread(target=lambda: replies.append(_send(transport, ["c@x.test"])))
    worker.start()
    worker.join()
    assert [r.code for r in replies] == [250]
    assert peer.connections == 2
    transport.close()


def test_a_refused_transaction_leaves_the_connection_reusable(
    tmp_path: Path, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer().on("gone@example.test", rcpt="550 5.1.1 No such user")
    transport = _relay(tmp_path, peer)
    route = Route(("gone@example.test",), "smarthost")
    conn = transport.connect(route)
    assert conn.mail("ann@localhost", 10).positive
    assert conn.rcpt("gone@example.test") == Reply(550, "5.1.1", "No such user")
    conn.reset()
    conn.close()
    assert _send(transport, ["bob@example.test"]).code == 250
    assert peer.connections == 1
    transport.close()


def test_relay_reconnects_when_the_server_closed_the_idle_connection(
    tmp_path: Path, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer()
    transport = _relay(tmp_path, peer)
    assert _send(transport, ["a@example.test"]).code == 250
    assert peer.close_connections() == 1
    assert _send(transport, ["b@example.test"]).code == 250
    assert peer.connections == 2
    assert len(peer.received()) == 2
    transport.close()


def test_per_recipient_replies_at_rcpt_and_at_the_end_of_data(
    tmp_path: Path, smtp_peer: PeerFactory
) -> None:
    peer = (
        smtp_peer()
        .on("full@example.test", rcpt="452 4.2.2 Mailbox full")
        .on("gone@example.test", rcpt="550 5.1.1 No such user")
        .on("spam@example.test", data="554 5.7.1 Looks like spam")
        .on("later@example.test", data="451 4.3.0 Try again later")
    )
    transport = _relay(tmp_path, peer)
    conn = transport.connect(Route(("x",), "smarthost"))
    assert conn.mail("ann@localhost", len(MESSAGE)).positive
    full = conn.rcpt("full@example.test")
    assert (full.code, full.enhanced, full.transient) == (452, "4.2.2", True)
    gone = conn.rcpt("gone@example.test")
    assert (gone.code, gone.enhanced, gone.permanent) == (550, "5.1.1", True)
    assert conn.rcpt("ok@example.test").positive
    assert conn.data(MESSAGE).code == 250
    for address, expected in [
        ("spam@example.test", Reply(554, "5.7.1", "Looks like spam")),
        ("later@example.test", Reply(451, "4.3.0", "Try again later")),
    ]:
        conn.reset()
        assert conn.mail("ann@localhost", len(MESSAGE)).positive
        assert conn.rcpt(address).positive
        assert conn.data(MESSAGE) == expected
    conn.close()
    transport.close()
    first = peer.transactions[0]
    assert first.rcpt_to == ["ok@example.test"]
    assert first.refused == ["full@example.test", "gone@example.test"]
    assert [t.reply for t in peer.transactions[1:]] == [
        "554 5.7.1 Looks like spam",
        "451 4.3.0 Try again later",
    ]


def test_a_drop_instead_of_the_rcpt_reply_is_a_lost_connection(
    tmp_path: Path, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer().on("drop@example.test", drop="rcpt")
    transport = _relay(tmp_path, peer)
    conn = transport.connect(Route(("drop@example.test",), "smarthost"))
    assert conn.mail("ann@localhost", 10).positive
    with pytest.raises(TransportError) as caught:
        conn.rcpt("drop@example.test")
    assert caught.value.code == "connection_lost"
    conn.discard()
    assert peer.received() == []
    # The broken connection is not pooled: the next send opens a new one.
    assert _send(transport, ["bob@example.test"]).code == 250
    assert peer.connections == 2
    transport.close()


def test_a_drop_after_the_rcpt_reply_means_the_body_was_never_sent(
    tmp_path: Path, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer().on("drop@example.test", drop="after_rcpt")
    transport = _relay(tmp_path, peer)
    conn = transport.connect(Route(("drop@example.test",), "smarthost"))
    assert conn.mail("ann@localhost", 10).positive
    assert conn.rcpt("drop@example.test").positive
    with pytest.raises(TransportError) as caught:
        conn.data(MESSAGE)
    assert caught.value.code == "data_not_sent"
    conn.discard()
    assert peer.received() == []


def test_a_drop_after_data_is_an_unknown_outcome(tmp_path: Path, smtp_peer: PeerFactory) -> None:
    peer = smtp_peer().on("drop@example.test", drop="data")
    transport = _relay(tmp_path, peer)
    conn = transport.connect(Route(("drop@example.test",), "smarthost"))
    assert conn.mail("ann@localhost", len(MESSAGE)).positive
    assert conn.rcpt("drop@example.test").positive
    with pytest.raises(TransportError) as caught:
        conn.data(MESSAGE)
    assert caught.value.code == "connection_lost"
    conn.discard()
    # The peer has the message, exactly once, and never said so.
    [received] = peer.received("drop@example.test")
    assert received.data == MESSAGE and not received.replied
    transport.close()


def test_a_stalled_rcpt_times_out(tmp_path: Path, smtp_peer: PeerFactory) -> None:
    peer = smtp_peer().on("slow@example.test", stall=("rcpt", 5))
    transport = _relay(tmp_path, peer, timeout=0.3)
    conn = transport.connect(Route(("slow@example.test",), "smarthost"))
    assert conn.mail("ann@localhost", 10).positive
    with pytest.raises(TransportError) as caught:
        conn.rcpt("slow@example.test")
    assert caught.value.code == "timeout"
    conn.discard()


def test_a_stalled_end_of_data_is_an_unknown_outcome(
    tmp_path: Path, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer().on("slow@example.test", stall=("data", 5))
    transport = _relay(tmp_path, peer, timeout=0.3)
    conn = transport.connect(Route(("slow@example.test",), "smarthost"))
    assert conn.mail("ann@localhost", 10).positive
    assert conn.rcpt("slow@example.test").positive
    with pytest.raises(TransportError) as caught:
        conn.data(MESSAGE)
    assert caught.value.code == "connection_lost"
    conn.discard()
    [received] = peer.received()
    assert not received.replied


def test_a_peer_that_is_not_listening_is_connect_failed(tmp_path: Path) -> None:
    with SmtpPeer() as peer:
        port = peer.port
    settings = _settings(
        tmp_path,
        **{"outbound.relay_host": "127.0.0.1", "outbound.relay_port": port},
        **{"outbound.relay_tls": "none"},
    )
    with pytest.raises(TransportError) as caught:
        RelayTransport(settings).connect(Route(("a@b.test",), "smarthost"))
    assert caught.value.code == "connect_failed" and not caught.value.permanent


def test_the_peer_serves_clients_in_subprocesses(smtp_peer: PeerFactory) -> None:
    peer = smtp_peer()
    script = (
        "import smtplib, sys\n"
        "with smtplib.SMTP('127.0.0.1', int(sys.argv[1]), timeout=10) as c:\n"
        "    c.sendmail('ann@localhost', ['bob@example.test'], b'Subject: x\\r\\n\\r\\nhi\\r\\n')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(peer.port)], check=True, timeout=30)
    [received] = peer.received("bob@example.test")
    assert received.data == b"Subject: x\r\n\r\nhi\r\n" and received.replied


# --- direct ----------------------------------------------------------------------------


@pytest.fixture
def dns() -> Iterator[DnsStub]:
    with DnsStub() as stub:
        yield stub


def _direct(tmp_path: Path, dns: DnsStub, port: int, timeout: float | None = None) -> Any:
    settings = _settings(
        tmp_path,
        **{"outbound.dns_nameservers": [dns.address], "outbound.direct_port": port},
    )
    if timeout is not None:
        settings = replace(settings, outbound_timeout_seconds=timeout)
    return DirectTransport(settings)


def test_direct_groups_by_domain_and_follows_mx_or_the_domain_itself(
    tmp_path: Path, dns: DnsStub, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer()
    dns.add("alpha.test", "MX", "10 mx.alpha.test.")
    dns.add("mx.alpha.test", "A", "127.0.0.1")
    dns.add("beta.test", "A", "127.0.0.1")  # no MX: the domain is its own mail host
    transport = _direct(tmp_path, dns, peer.port)
    routes = transport.routes(["a@alpha.test", "b@beta.test", "c@ALPHA.test"])
    assert routes == [
        Route(("a@alpha.test", "c@ALPHA.test"), "alpha.test"),
        Route(("b@beta.test",), "beta.test"),
    ]
    conn = transport.connect(routes[0])
    assert conn.destination == "mx.alpha.test"
    conn.quit()
    assert _send(transport, ["a@alpha.test", "b@beta.test", "c@ALPHA.test"]).code == 250
    assert [t.rcpt_to for t in peer.received()] == [
        ["a@alpha.test", "c@ALPHA.test"],
        ["b@beta.test"],
    ]
    assert ("beta.test", "MX") in dns.queries and ("beta.test", "A") in dns.queries


@pytest.mark.parametrize(
    ("domain", "code", "permanent"),
    [
        ("null.test", "null_mx", True),
        ("nowhere.test", "dns_nxdomain", True),
        ("bare.test", "dns_no_mx", True),
        ("broken.test", "dns_failed", False),
        ("silent.test", "dns_timeout", False),
    ],
)
def test_direct_dns_outcomes(
    tmp_path: Path, dns: DnsStub, domain: str, code: str, permanent: bool
) -> None:
    dns.add("null.test", "MX", "0 .")
    dns.add("bare.test", "TXT", '"v=spf1 -all"')  # exists, but no MX and no address
    dns.servfail("broken.test")
    dns.silent("silent.test")
    transport = _direct(tmp_path, dns, 25, timeout=0.5)
    [route] = transport.routes([f"someone@{domain}"])
    with pytest.raises(TransportError) as caught:
        transport.connect(route)
    assert (caught.value.code, caught.value.permanent) == (code, permanent)


def test_direct_tries_the_next_mx_when_the_first_refuses_connections(
    tmp_path: Path, dns: DnsStub, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer()
    dns.add("fallback.test", "MX", "20 live.fallback.test.", "10 dead.fallback.test.")
    dns.add("dead.fallback.test", "A", "127.0.0.2")  # nothing listens there
    dns.add("live.fallback.test", "A", "127.0.0.1")
    transport = _direct(tmp_path, dns, peer.port)
    [route] = transport.routes(["x@fallback.test"])
    conn = transport.connect(route)
    assert conn.destination == "live.fallback.test"
    conn.quit()
    queried = [name for name, rdtype in dns.queries if rdtype == "A"]
    assert queried.index("dead.fallback.test") < queried.index("live.fallback.test")


def test_direct_moves_on_after_a_4xx_greeting(
    tmp_path: Path, dns: DnsStub, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer()
    busy = smtp_peer(host="127.0.0.3", port=peer.port, greeting="421 4.3.2 Too busy")
    dns.add("greet.test", "MX", "10 busy.greet.test.", "20 ok.greet.test.")
    dns.add("busy.greet.test", "A", "127.0.0.3")
    dns.add("ok.greet.test", "A", "127.0.0.1")
    transport = _direct(tmp_path, dns, peer.port)
    assert _send(transport, ["x@greet.test"]).code == 250
    assert busy.connections == 1 and busy.transactions == []
    assert [t.rcpt_to for t in peer.received()] == [["x@greet.test"]]


def test_direct_fails_when_no_host_takes_the_connection(tmp_path: Path, dns: DnsStub) -> None:
    dns.add("down.test", "MX", "10 mx.down.test.")
    dns.add("mx.down.test", "A", "127.0.0.2")
    transport = _direct(tmp_path, dns, 2525)
    with pytest.raises(TransportError) as caught:
        transport.connect(Route(("x@down.test",), "down.test"))
    assert caught.value.code == "connect_failed" and not caught.value.permanent


def test_direct_uses_starttls_when_offered_without_verifying(
    tmp_path: Path, dns: DnsStub, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer(tls="starttls")
    dns.add("tls.test", "A", "127.0.0.1")
    transport = _direct(tmp_path, dns, peer.port)
    [route] = transport.routes(["x@tls.test"])
    conn = transport.connect(route)
    assert conn.tls is not None
    conn.quit()
    assert _send(transport, ["x@tls.test"]).code == 250
    assert [t.tls for t in peer.received()] == [True]


def test_direct_falls_back_to_plain_text_when_the_tls_handshake_fails(
    tmp_path: Path, dns: DnsStub, smtp_peer: PeerFactory
) -> None:
    peer = smtp_peer(tls="starttls", broken_tls=True)
    dns.add("badtls.test", "A", "127.0.0.1")
    transport = _direct(tmp_path, dns, peer.port)
    assert _send(transport, ["x@badtls.test"]).code == 250
    assert peer.connections == 2
    [received] = peer.received()
    assert not received.tls and received.data == MESSAGE


# --- local and sink (both engines) ----------------------------------------------------


def _drain_ingest(app: Any) -> int:
    worker = Worker(app, default_registry(app.settings), job_types=["inbound.ingest"])
    ran = 0
    while worker.run_once():
        ran += 1
    return ran


def _messages_of(app: Any, address: str) -> list[dict[str, Any]]:
    with app.db.read() as tx:
        found = directory.get_address(tx, address)
        assert found is not None
        return tx.fetchall(
            "SELECT * FROM messages WHERE identity_id = %s ORDER BY received_at",
            (found.identity_id,),
        )


def test_local_delivery_lands_in_the_inbox(ready_app: Any) -> None:
    import json

    app = ready_app
    create_identity(app, "bob")
    transport = build_transport(app, "local")
    assert transport.provider == "local"
    [route] = transport.routes(["bob@localhost", "nobody@localhost"])
    conn = transport.connect(route)
    assert conn.mail("ann@localhost", len(MESSAGE)).positive
    assert conn.rcpt("bob@localhost") == Reply(250, "2.1.5", "Recipient OK")
    assert conn.rcpt("nobody@localhost") == Reply(550, "5.1.1", "No such recipient here")
    assert conn.data(MESSAGE).code == 250
    conn.close()
    # Staged with its ingest job, not ingested inline.
    assert _messages_of(app, "bob@localhost") == []
    assert len(app.queue.list(job_type="inbound.ingest")) == 1
    assert _drain_ingest(app) == 1
    [stored] = _messages_of(app, "bob@localhost")
    assert stored["subject"] == "Transports"
    assert stored["source"] == "local" and stored["direction"] == "inbound"
    envelope = json.loads(stored["envelope_json"])
    assert envelope["mail_from"] == "ann@localhost"
    assert envelope["rcpt_to"] == ["bob@localhost"]
    assert app.blobs.get(stored["raw_blob_key"]).endswith(MESSAGE)


def test_is_local_recipient(ready_app: Any) -> None:
    create_identity(ready_app, "bob")
    with ready_app.db.read() as tx:
        keys = ready_app.keys()
        assert is_local_recipient(tx, keys, "bob@localhost")
        assert is_local_recipient(tx, keys, "Bob+news@LOCALHOST")
        # A domain we receive for stays local: the directory refuses the unknown user.
        assert is_local_recipient(tx, keys, "nobody@localhost")
        assert not is_local_recipient(tx, keys, "bob@example.test")
        assert not is_local_recipient(tx, keys, "not an address")


def test_the_sink_captures_everything_with_the_real_recipients(ready_app: Any) -> None:
    import json

    app = ready_app
    transport = build_transport(app, "sink")
    assert transport.provider == "sink"
    recipients = ["bob@example.test", "carol@other.test"]
    for _ in range(2):
        [route] = transport.routes(recipients)
        conn = transport.connect(route)
        assert conn.mail("ann@localhost", len(MESSAGE)).positive
        for address in recipients:
            assert conn.rcpt(address).code == 250
        assert conn.data(MESSAGE).code == 250
        conn.close()
    assert _drain_ingest(app) == 2
    stored = _messages_of(app, "sink@localhost")
    assert len(stored) == 2
    for row in stored:
        assert json.loads(row["envelope_json"])["rcpt_to"] == recipients
        assert row["delivered_to"] == "sink@localhost"
    with app.db.read() as tx:
        sinks = [i for i in directory.list_identities(tx) if i.address == "sink@localhost"]
    assert len(sinks) == 1


def test_the_sink_creates_its_inbox_only_on_the_platform_domain(ready_app: Any) -> None:
    app = ready_app
    app.settings = replace(app.settings, outbound_sink_address="sink@elsewhere.test")
    transport = build_transport(app, "sink")
    [route] = transport.routes(["bob@example.test"])
    with pytest.raises(ConfigError, match="platform domain localhost"):
        transport.connect(route)

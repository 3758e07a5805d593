"""The bounded IMAP client against a real Dovecot and against a hostile loopback server."""

from __future__ import annotations

import itertools
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from postroom.sync.imap_client import (
    ImapAuthError,
    ImapClient,
    ImapError,
    ImapNoSuchFolder,
    ImapProtocolError,
    ImapThrottled,
    ImapTlsError,
    ImapUnreachable,
    decode_mutf7,
    encode_mutf7,
)
from postroom.testing.dovecot import Dovecot

_users = itertools.count(1)


def _message(n: int, size: int = 0) -> bytes:
    body = (b"x" * 76 + b"\r\n") * (size // 78) if size else b"hello\r\n"
    return (
        f"From: a{n}@example.org\r\nTo: b@example.org\r\nSubject: message {n}\r\n"
        f"Message-ID: <m{n}@example.org>\r\n\r\n"
    ).encode() + body


@pytest.fixture(scope="module")
def server(dovecot_server: Callable[..., Dovecot]) -> Dovecot:
    return dovecot_server(tls=True)


@pytest.fixture
def user(server: Dovecot) -> str:
    """A fresh user per test, so tests share one Dovecot but not a mailbox."""
    name = f"user{next(_users)}"
    server.add_user(name, "pw-" + name)
    return name


@pytest.fixture
def client(server: Dovecot, user: str) -> Iterator[ImapClient]:
    with ImapClient(server.host, server.port, tls="none", timeout=10) as conn:
        conn.login(user, "pw-" + user)
        yield conn


# --- against Dovecot -------------------------------------------------------------------


def test_login_and_capabilities(client: ImapClient) -> None:
    assert {"IMAP4REV1", "CONDSTORE", "QRESYNC", "UIDPLUS", "MOVE", "IDLE"} <= client.capabilities


def test_wrong_password_is_an_auth_error(server: Dovecot, user: str) -> None:
    conn = ImapClient(server.host, server.port, tls="none")
    with conn, pytest.raises(ImapAuthError) as caught:
        conn.login(user, "wrong")
    assert caught.value.code == "auth_failed"
    assert not caught.value.transient


def test_xoauth2_not_offered_is_an_auth_error(server: Dovecot, user: str) -> None:
    with ImapClient(server.host, server.port, tls="none") as conn, pytest.raises(ImapAuthError):
        conn.authenticate_xoauth2(user, "token")


def test_tls_implicit_and_starttls(server: Dovecot, user: str) -> None:
    assert server.ca_file is not None
    for port, mode in ((server.imaps_port, "implicit"), (server.port, "starttls")):
        with ImapClient(server.host, port, tls=mode, ca_file=str(server.ca_file)) as conn:  # type: ignore[arg-type]
            conn.login(user, "pw-" + user)
            assert conn.select("INBOX").exists == 0


def test_tls_with_an_untrusted_certificate_fails(server: Dovecot) -> None:
    with pytest.raises(ImapTlsError) as caught:
        ImapClient(server.host, server.imaps_port, tls="implicit", timeout=5)
    assert caught.value.code == "tls_failed"
    # verify=False is the caller's explicit choice and connects.
    ImapClient(server.host, server.imaps_port, tls="implicit", verify=False).logout()


def test_unreachable_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ImapUnreachable) as caught:
        ImapClient("127.0.0.1", port, tls="none", timeout=2)
    assert caught.value.transient


def test_list_folders_with_special_use(client: ImapClient) -> None:
    folders = {f.name: f for f in client.list_folders()}
    assert {"INBOX", "Trash", "Junk", "Sent", "Drafts"} <= set(folders)
    assert folders["Trash"].special_use == "\\Trash"
    assert folders["Junk"].special_use == "\\Junk"
    assert folders["INBOX"].special_use is None
    assert folders["INBOX"].selectable
    assert folders["INBOX"].delimiter == "/"


def test_select_status(server: Dovecot, user: str, client: ImapClient) -> None:
    for n in range(3):
        server.deliver(user, _message(n))
    status = client.select("INBOX", condstore=True)
    assert status.uidvalidity > 0
    assert status.uidnext == 4
    assert status.exists == 3
    assert status.highestmodseq is not None and status.highestmodseq > 0
    with pytest.raises(ImapNoSuchFolder):
        client.select("No such folder")


def test_fetch_bodies_byte_exact_without_setting_seen(
    server: Dovecot, user: str, client: ImapClient
) -> None:
    raws = [_message(1), _message(2, size=4000), _message(3) + b"\r\n\r\n\x01\xff binary\r\n"]
    uids = [server.deliver(user, raw) for raw in raws]
    client.select("INBOX", readonly=False)
    fetched = list(client.fetch_messages([u for u in uids if u], max_size=10_000))
    assert [m.uid for m in fetched] == uids
    assert [m.raw for m in fetched] == raws
    assert [m.size for m in fetched] == [len(r) for r in raws]
    assert all(m.modseq is not None and m.internaldate_ms for m in fetched)
    updates, _ = client.fetch_flags("1:*")
    assert all("\\Seen" not in u.flags for u in updates)


def test_size_ceiling_gives_envelope_only(server: Dovecot, user: str, client: ImapClient) -> None:
    small, big = _message(1), _message(2, size=20_000)
    server.deliver(user, small)
    server.deliver(user, big, flags="\\Flagged")
    client.select("INBOX")
    fetched = list(client.fetch_messages([2, 1, 99], max_size=5_000))
    assert [(m.uid, m.raw) for m in fetched] == [(1, small), (2, None)]
    assert fetched[1].size == len(big)
    assert fetched[1].flags == {"\\Flagged"}
    headers = client.fetch_headers([2])
    assert headers[2].startswith(b"From: a2@example.org") and headers[2].endswith(b"\r\n\r\n")


def test_fetch_flags_changedsince_and_store(server: Dovecot, user: str, client: ImapClient) -> None:
    for n in range(3):
        server.deliver(user, _message(n))
    status = client.select("INBOX", readonly=False, condstore=True)
    assert status.highestmodseq is not None
    other = server.client(user)
    other.select("INBOX")
    other.uid("STORE", "2", "+FLAGS", "(\\Flagged)")
    updates, vanished = client.fetch_flags("1:*", changedsince=status.highestmodseq)
    assert [(u.uid, u.flags) for u in updates] == [(2, frozenset({"\\Flagged"}))]
    assert updates[0].modseq is not None and updates[0].modseq > status.highestmodseq
    assert vanished == []
    client.store_flags(3, "+", ["\\Seen", "$Label1"])
    client.store_flags(2, "=", ["\\Answered"])
    flags = {u.uid: u.flags for u in client.fetch_flags("1:*")[0]}
    assert flags == {1: frozenset(), 2: {"\\Answered"}, 3: {"\\Seen", "$Label1"}}
    with pytest.raises(ValueError):
        client.store_flags(1, "+", ["bad flag"])


def test_qresync_reports_vanished_uids(server: Dovecot, user: str, client: ImapClient) -> None:
    for n in range(4):
        server.deliver(user, _message(n))
    assert client.enable_qresync()
    status = client.select("INBOX")
    assert status.highestmodseq is not None
    other = server.client(user)
    other.select("INBOX")
    other.uid("STORE", "2:3", "+FLAGS", "(\\Deleted)")
    other.expunge()
    updates, vanished = client.fetch_flags("1:*", changedsince=status.highestmodseq, vanished=True)
    assert vanished == [2, 3]
    assert updates == []
    assert client.uid_search_all() == [1, 4]


def test_uids_from_filters_the_star_quirk(server: Dovecot, user: str, client: ImapClient) -> None:
    for n in range(3):
        server.deliver(user, _message(n))
    client.select("INBOX")
    assert client.uids_from(2) == [2, 3]
    # "10:*" matches the last message (UID 3) on the server; the client drops it.
    assert client.uids_from(10) == []


def test_copy_move_expunge(server: Dovecot, user: str, client: ImapClient) -> None:
    for n in range(3):
        server.deliver(user, _message(n))
    client.select("INBOX", readonly=False)
    assert client.copy(1, "Trash") == 1
    assert client.move(2, "Trash") == 2
    assert client.uid_search_all() == [1, 3]
    client.expunge_uid(3)
    assert client.uid_search_all() == [1]
    client.select("Trash")
    trashed = list(client.fetch_messages([1, 2], max_size=1 << 20))
    assert [m.raw for m in trashed] == [_message(0), _message(1)]
    with pytest.raises(ImapNoSuchFolder):
        client.copy(1, "Nowhere")


def test_append_returns_the_uid(client: ImapClient) -> None:
    assert client.append("Drafts", _message(7), ["\\Draft"]) == 1
    client.select("Drafts")
    [message] = client.fetch_messages([1], max_size=1 << 20)
    assert message.raw == _message(7)
    assert message.flags == {"\\Draft"}


def test_non_ascii_folder_names_round_trip(server: Dovecot, user: str, client: ImapClient) -> None:
    name = "Été/Ünïcode & 日本"
    server.deliver(user, _message(1), folder=name)
    assert name in {f.name for f in client.list_folders()}
    assert client.append(name, _message(2)) == 2
    assert client.select(name).exists == 2
    assert encode_mutf7("Été & 日本") == "&AMk-t&AOk- &- &ZeVnLA-"
    assert decode_mutf7(encode_mutf7(name)) == name
    assert decode_mutf7("bad &%%%-") == "bad &%%%-"


def test_idle_wakes_on_a_new_message(server: Dovecot, user: str, client: ImapClient) -> None:
    client.select("INBOX")
    started = time.monotonic()
    assert client.idle(0.3) is False
    assert time.monotonic() - started >= 0.3
    timer = threading.Timer(0.3, server.deliver, args=(user, _message(1)))
    timer.start()
    started = time.monotonic()
    try:
        assert client.idle(10) is True
    finally:
        timer.join()
    assert time.monotonic() - started < 5
    # The connection is usable after DONE.
    assert client.uid_search_all() == [1]


# --- against a hostile server ----------------------------------------------------------


class Hostile:
    """A one-connection loopback server: greets, then runs ``script`` on the socket."""

    def __init__(self, script: Callable[[socket.socket, Any], None]) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.script = script
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn, conn.makefile("rb") as reader:
            try:
                conn.sendall(b"* OK [CAPABILITY IMAP4rev1 IDLE] hostile ready\r\n")
                self.script(conn, reader)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=10)


def _answer(payload: bytes, *, hang_up: bool = False) -> Callable[[socket.socket, Any], None]:
    """Answer the first command with ``payload``, then wait for the client to leave."""

    def script(conn: socket.socket, reader: Any) -> None:
        reader.readline()
        conn.sendall(payload)
        if not hang_up:
            conn.settimeout(10)
            reader.read()

    return script


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[socket.socket, Any], None]], ImapClient]]:
    servers: list[Hostile] = []
    clients: list[ImapClient] = []

    def connect(script: Callable[[socket.socket, Any], None]) -> ImapClient:
        server = Hostile(script)
        servers.append(server)
        clients.append(ImapClient("127.0.0.1", server.port, tls="none", timeout=5))
        return clients[-1]

    yield connect
    for client in clients:
        client.close()
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"* 1 FETCH (UID 1 BODY[] {4294967295}\r\n", "literal_too_large"),
        (b"* 1 FETCH (UID 1 BODY[] {99999999999999999999999}\r\n", "literal_too_large"),
        (b"* 1 FETCH (UID 1 BODY[] {-1}\r\n", "malformed_literal"),
        (b"* 1 FETCH (UID 1 BODY[] {12a}\r\n", "malformed_literal"),
        (b"* 1 FETCH (UID 1 BODY[] {}\r\n", "malformed_literal"),
    ],
)
def test_hostile_literals(hostile: Any, payload: bytes, code: str) -> None:
    client = hostile(_answer(payload))
    started = time.monotonic()
    with pytest.raises(ImapProtocolError) as caught:
        client.noop()
    assert caught.value.code == code
    assert time.monotonic() - started < 2
    # The connection is closed, not left half-read.
    with pytest.raises(ImapError) as closed:
        client.noop()
    assert closed.value.code == "closed"


def test_literal_over_a_small_ceiling(hostile: Any) -> None:
    server = Hostile(_answer(b"* 1 FETCH (UID 1 BODY[] {2000}\r\n" + b"x" * 2000 + b")\r\n"))
    try:
        client = ImapClient("127.0.0.1", server.port, tls="none", max_literal=1000)
        with client, pytest.raises(ImapProtocolError) as caught:
            client.noop()
        assert caught.value.code == "literal_too_large"
    finally:
        server.close()


def test_a_100_mb_line_is_cut_with_bounded_memory(hostile: Any) -> None:
    def stream(conn: socket.socket, reader: Any) -> None:
        reader.readline()
        chunk = b"a" * (1 << 20)
        conn.sendall(b"* OK ")
        for _ in range(100):
            conn.sendall(chunk)

    client = hostile(stream)
    tracemalloc.start()
    try:
        with pytest.raises(ImapProtocolError) as caught:
            client.noop()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.code == "line_too_long"
    assert peak < 64 << 20


def test_server_closing_mid_response(hostile: Any) -> None:
    client = hostile(_answer(b"* 1 FETCH (UID 1 BODY[] {100}\r\nonly part", hang_up=True))
    with pytest.raises(ImapError) as caught:
        client.noop()
    assert caught.value.code == "connection_lost"
    assert caught.value.transient


def test_silent_server_times_out(hostile: Any) -> None:
    server = Hostile(_answer(b""))
    try:
        client = ImapClient("127.0.0.1", server.port, tls="none", timeout=0.3)
        with client, pytest.raises(ImapError) as caught:
            client.noop()
        assert caught.value.code == "timeout"
    finally:
        server.close()


def test_garbage_and_unknown_tags_are_bad_responses(hostile: Any) -> None:
    client = hostile(_answer(b"Z999 OK not yours\r\n"))
    with pytest.raises(ImapProtocolError) as caught:
        client.noop()
    assert caught.value.code == "bad_response"


def test_starttls_not_offered() -> None:
    server = Hostile(_answer(b""))
    try:
        with pytest.raises(ImapTlsError) as caught:
            ImapClient("127.0.0.1", server.port, tls="starttls", timeout=2)
        assert "STARTTLS" in str(caught.value)
    finally:
        server.close()


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError):
        ImapClient("127.0.0.1", 0, tls="none")
    with pytest.raises(ValueError):
        ImapClient("127.0.0.1", 143, tls="maybe")  # type: ignore[arg-type]


def test_append_without_literal_plus_waits_for_the_continuation(hostile: Any) -> None:
    received: list[bytes] = []

    def script(conn: socket.socket, reader: Any) -> None:
        line = reader.readline()
        received.append(line)
        size = int(line.rsplit(b"{", 1)[1].split(b"}")[0])
        conn.sendall(b"+ go ahead\r\n")
        received.append(reader.read(size + 2))
        conn.sendall(b"P0001 OK [APPENDUID 7 42] done\r\n")
        conn.settimeout(10)
        reader.read()

    client = hostile(script)
    assert client.append("Sent", b"Subject: s\r\n\r\nbody\r\n", ["\\Seen"]) == 42
    assert received == [b"P0001 APPEND Sent (\\Seen) {20}\r\n", b"Subject: s\r\n\r\nbody\r\n\r\n"]


@pytest.mark.parametrize(
    ("answer", "error", "code"),
    [
        # RFC 5530 LIMIT (Dovecot's per-user connection limit) and Gmail's THROTTLED say
        # "not now", not "wrong password"; UNAVAILABLE says the server's backend is down.
        (
            b"P0001 NO [LIMIT] Maximum number of connections exceeded\r\n",
            ImapThrottled,
            "throttled",
        ),
        (b"P0001 NO [THROTTLED] Account exceeded command limits\r\n", ImapThrottled, "throttled"),
        (b"P0001 NO [UNAVAILABLE] Backend down\r\n", ImapUnreachable, "unreachable"),
        (b"P0001 NO [AUTHENTICATIONFAILED] Invalid credentials\r\n", ImapAuthError, "auth_failed"),
    ],
)
def test_a_refused_login_says_whether_to_retry(
    hostile: Any, answer: bytes, error: type[ImapError], code: str
) -> None:
    client = hostile(_answer(answer))
    with pytest.raises(error) as caught:
        client.login("someone", "secret")
    assert caught.value.code == code
    assert caught.value.transient is (code != "auth_failed")


def test_a_throttled_command_is_transient(hostile: Any) -> None:
    client = hostile(_answer(b"P0001 NO [THROTTLED] Too many commands\r\n"))
    with pytest.raises(ImapThrottled) as caught:
        client.select("INBOX")
    assert caught.value.transient and "THROTTLED" in str(caught.value)

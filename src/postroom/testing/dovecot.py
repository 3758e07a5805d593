"""A private Dovecot IMAP server for tests, run from a temp folder (no system config).

:class:`Dovecot` writes its own ``dovecot.conf`` (passwd-file users, a Maildir per user,
``base_dir``/``state_dir``/log under the temp folder), starts ``dovecot -F`` on free
loopback ports and stops that master process (and with it its children) at the end.
With ``tls=True`` it also listens for implicit TLS (``imaps_port``) and offers STARTTLS,
with a certificate from a trustme CA (``ca_file``).

Running as root (CI does), Dovecot refuses mail processes with UID 0, so the mail user
is ``nobody`` and the temp folder lives straight under the system temp dir where that
user can reach it; Dovecot's own ``dovecot``/``dovenull`` users run the login and
internal services, as the Debian package sets up. As another user, everything runs as
that user.

Pytest fixtures: ``dovecot`` (function scope) and ``dovecot_server`` (module scope) are
factories — ``server = dovecot(tls=True)`` — and every server they started is stopped
afterwards. Without the ``dovecot`` binary the test is skipped ("needs Debian package
dovecot-imapd"), or fails when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import imaplib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from postroom.sync.imap_client import encode_mutf7

USER = "alice"
PASSWORD = "alice-secret"
_SPECIAL = (("Drafts", "\\Drafts"), ("Sent", "\\Sent"), ("Junk", "\\Junk"), ("Trash", "\\Trash"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _binary() -> str | None:
    return shutil.which("dovecot") or next(
        (p for p in ("/usr/sbin/dovecot", "/usr/local/sbin/dovecot") if os.path.exists(p)), None
    )


class Dovecot:
    """One running Dovecot: ``host``, ``port`` (plain IMAP), ``imaps_port`` when ``tls``."""

    def __init__(
        self,
        *,
        users: tuple[tuple[str, str], ...] = ((USER, PASSWORD),),
        tls: bool = False,
        max_connections: int = 1000,
    ) -> None:
        """``max_connections``: Dovecot's ``mail_max_userip_connections``, the logged-in
        connections one user may hold from one address (more get ``NO [LIMIT]``)."""
        binary = _binary()
        if binary is None:
            raise RuntimeError("dovecot is not installed (Debian package dovecot-imapd)")
        self.host = "127.0.0.1"
        self.tls = tls
        self.max_connections = max_connections
        self.root = Path(tempfile.mkdtemp(prefix="postroom-dovecot-"))
        self.root.chmod(0o755)
        self.home = self.root / "home"
        self.home.mkdir()
        self.passwd = self.root / "users"
        self.passwd.mkdir(mode=0o755)
        self._users: dict[str, str] = {}
        self._clients: list[imaplib.IMAP4] = []
        self.ca: Any = None
        self.ca_file: Path | None = None
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self._mail_uid, self._mail_gid = nobody.pw_uid, nobody.pw_gid
            service_users = ""
        else:
            self._mail_uid, self._mail_gid = os.getuid(), os.getgid()
            me = pwd.getpwuid(os.getuid()).pw_name
            service_users = f"default_login_user = {me}\ndefault_internal_user = {me}\n"
        os.chown(self.home, self._mail_uid, self._mail_gid)
        for name, password in users:
            self.add_user(name, password)
        self.port = _free_port()
        self.imaps_port = _free_port() if tls else 0
        (self.root / "dovecot.conf").write_text(self._config(service_users))
        self._log = open(self.root / "stdout.log", "wb")  # noqa: SIM115 (closed in stop())
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [binary, "-F", "-c", str(self.root / "dovecot.conf")],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def _config(self, service_users: str) -> str:
        root = self.root
        if self.tls:
            import trustme  # a dev dependency: imported only when TLS is asked for

            self.ca = trustme.CA()
            certificate = self.ca.issue_cert("127.0.0.1", "localhost")
            certificate.private_key_pem.write_to_path(str(root / "key.pem"))
            chain = b"".join(blob.bytes() for blob in certificate.cert_chain_pems)
            (root / "cert.pem").write_bytes(chain)
            self.ca_file = root / "ca.pem"
            self.ca.cert_pem.write_to_path(str(self.ca_file))
            ssl_settings = f"ssl = yes\nssl_cert = <{root}/cert.pem\nssl_key = <{root}/key.pem\n"
        else:
            ssl_settings = "ssl = no\n"
        mailboxes = "".join(
            f"  mailbox {name} {{\n    special_use = {flag}\n    auto = subscribe\n  }}\n"
            for name, flag in _SPECIAL
        )
        return (
            "protocols = imap\n"
            "listen = 127.0.0.1\n"
            f"base_dir = {root}/run\n"
            f"state_dir = {root}/state\n"
            f"log_path = {root}/dovecot.log\n"
            f"{ssl_settings}"
            f"{service_users}"
            "disable_plaintext_auth = no\n"
            "auth_mechanisms = plain login\n"
            "auth_failure_delay = 0\n"
            "login_trusted_networks = 127.0.0.0/8\n"
            "first_valid_uid = 1\n"
            f"passdb {{\n  driver = passwd-file\n  args = {self.passwd}/%u\n}}\n"
            "userdb {\n  driver = static\n"
            f"  args = uid={self._mail_uid} gid={self._mail_gid} home={self.home}/%u\n}}\n"
            "mail_location = maildir:~/Maildir\n"
            f"protocol imap {{\n  mail_max_userip_connections = {self.max_connections}\n}}\n"
            f"namespace inbox {{\n  inbox = yes\n  separator = /\n{mailboxes}}}\n"
            "service imap-login {\n"
            f"  inet_listener imap {{\n    address = 127.0.0.1\n    port = {self.port}\n  }}\n"
            f"  inet_listener imaps {{\n    address = 127.0.0.1\n    port = {self.imaps_port}\n"
            "  }\n  chroot =\n}\n"
            # mode = 0 on this socket turns off the auth penalty (up to 15 s of delay
            # per failed login from one IP), which would slow every later test.
            "service anvil {\n  chroot =\n"
            "  unix_listener anvil-auth-penalty {\n    mode = 0\n  }\n}\n"
        )

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"dovecot exited at start:\n{self.log()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as sock:
                    if sock.recv(100).startswith(b"* OK"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"dovecot did not start listening:\n{self.log()}")

    def log(self) -> str:
        texts = []
        for name in ("stdout.log", "dovecot.log"):
            path = self.root / name
            if path.exists():
                texts.append(path.read_text(errors="replace"))
        return "\n".join(texts)[-4000:]

    def add_user(self, name: str, password: str) -> None:
        """A user with a Maildir, usable at once.

        Each user has their own passwd file (``passdb`` args name ``users/%u``): Dovecot
        re-reads a changed passwd file at most once a second, but opens a new one at
        once.
        """
        if not name or any(c in name for c in ":/%\n\r\0") or any(c in password for c in "\n:"):
            raise ValueError(f"unusable test user name or password: {name!r}")
        if name in self._users:
            raise ValueError(f"user {name!r} exists already")
        self._users[name] = password
        path = self.passwd / name
        path.write_text(f"{name}:{{PLAIN}}{password}::::::\n")
        path.chmod(0o644)
        (self.home / name).mkdir(exist_ok=True)
        os.chown(self.home / name, self._mail_uid, self._mail_gid)

    def set_password(self, name: str, password: str) -> None:
        """Change a user's password (Dovecot re-reads the file within a second)."""
        if name not in self._users or any(c in password for c in "\n:"):
            raise ValueError(f"cannot set that password for {name!r}")
        self._users[name] = password
        time.sleep(1.1)  # the file's mtime must move to a new second to be re-read
        (self.passwd / name).write_text(f"{name}:{{PLAIN}}{password}::::::\n")

    def set_uidvalidity(self, user: str, folder: str, uidvalidity: int) -> None:
        """Give a folder a new UIDVALIDITY (as after a server-side restore), with doveadm."""
        doveadm = shutil.which("doveadm")
        if doveadm is None:
            raise RuntimeError("doveadm is missing (Debian package dovecot-core)")
        done = subprocess.run(
            [
                doveadm,
                "-c",
                str(self.root / "dovecot.conf"),
                "mailbox",
                "update",
                "-u",
                user,
                "--uid-validity",
                str(uidvalidity),
                encode_mutf7(folder),
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"doveadm mailbox update failed: {done.stderr.decode()[-500:]}")

    def maildir(self, user: str = USER) -> Path:
        return self.home / user / "Maildir"

    def client(self, user: str = USER) -> imaplib.IMAP4:
        """An imaplib connection logged in as ``user`` (closed by :meth:`stop`)."""
        conn = imaplib.IMAP4(self.host, self.port, timeout=10)
        conn.login(user, self._users[user])
        self._clients.append(conn)
        return conn

    def deliver(self, user: str, raw: bytes, folder: str = "INBOX", flags: str = "") -> int | None:
        """APPEND ``raw`` to ``folder`` (created if missing); the UID Dovecot gave it."""
        conn = imaplib.IMAP4(self.host, self.port, timeout=10)
        try:
            conn.login(user, self._users[user])
            wire = encode_mutf7(folder)
            quoted = '"' + wire.replace("\\", "\\\\").replace('"', '\\"') + '"'
            conn.create(quoted)  # NO when it exists: fine
            typ, data = conn.append(quoted, f"({flags})" if flags else None, None, raw)
            if typ != "OK":
                raise RuntimeError(f"APPEND to {folder!r} failed: {data!r}")
            code = data[0].decode() if data and isinstance(data[0], bytes) else ""
            if code.startswith("[APPENDUID "):
                return int(code.split()[2].rstrip("]"))
            return None
        finally:
            conn.logout()

    def stop(self) -> None:
        for conn in self._clients:
            with contextlib.suppress(OSError, imaplib.IMAP4.error):
                conn.logout()
        self._clients.clear()
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            # -F keeps the master in the foreground, so this PID is the master itself.
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        if not self._log.closed:
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Dovecot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _require_dovecot() -> None:
    if _binary() is None:
        from postroom.testing.plugin import _ci

        message = "needs Debian package dovecot-imapd"
        if _ci():
            pytest.fail(message + " — CI=true requires the Dovecot tests to run")
        pytest.skip(message)


def _factory() -> Iterator[Callable[..., Dovecot]]:
    _require_dovecot()
    started: list[Dovecot] = []

    def start(**kwargs: Any) -> Dovecot:
        server = Dovecot(**kwargs)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def dovecot() -> Iterator[Callable[..., Dovecot]]:
    yield from _factory()


@pytest.fixture(scope="module")
def dovecot_server() -> Iterator[Callable[..., Dovecot]]:
    yield from _factory()

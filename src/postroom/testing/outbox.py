"""Outbox test support: real ``postroom worker`` processes sending to an :class:`SmtpPeer`.

* :func:`relay_settings` points an App (the test process's, which records the sends) at a
  peer through the ``smtp_relay`` transport; :func:`worker_env` does the same for worker
  subprocesses, through ``POSTROOM_*`` variables.
* :class:`WorkerProcesses` starts, SIGKILLs and stops ``python -m postroom worker``
  processes, each logging to its own file.
* :func:`record_many` records one plain send per recipient list;
  :func:`arrivals` counts what the peer received per (Message-ID, recipient), the
  measure of "delivered exactly once".

Used by ``tests/outbound/test_outbound_crash.py``, ``test_outbound_workers.py`` and
``bench/send.py``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from postroom.outbound import compose as c
from postroom.outbound import service
from postroom.store import outbox as rows
from postroom.testing.smtp_peer import SmtpPeer

if TYPE_CHECKING:
    from postroom.app import App
    from postroom.config import Settings

_MESSAGE_ID = re.compile(rb"^Message-ID:\s*<([^>\r\n]+)>", re.IGNORECASE | re.MULTILINE)


def relay_settings(app: App, peer: SmtpPeer, **extra: object) -> None:
    """Record (and attempt, in process) sends through ``smtp_relay`` to ``peer``."""
    app.settings = dataclasses.replace(
        app.settings,
        outbound_transport="smtp_relay",
        outbound_relay_host="127.0.0.1",
        outbound_relay_port=peer.port,
        outbound_relay_tls="none",
        outbound_timeout_seconds=10.0,
        **extra,  # type: ignore[arg-type]
    )


def worker_env(settings: Settings, peer: SmtpPeer, **extra: str) -> dict[str, str]:
    """The environment of a worker process sharing ``settings``' data folder and
    database, relaying to ``peer``; ``extra`` adds or overrides ``POSTROOM_*`` names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    env.update(
        POSTROOM_DATA_DIR=str(settings.data_dir),
        POSTROOM_DATABASE_URL=settings.database_url,
        POSTROOM_WORKER_POLL_INTERVAL_MS="20",
        POSTROOM_LOG_LEVEL="warning",
        POSTROOM_OUTBOUND_TRANSPORT="smtp_relay",
        POSTROOM_OUTBOUND_RELAY_HOST="127.0.0.1",
        POSTROOM_OUTBOUND_RELAY_PORT=str(peer.port),
        POSTROOM_OUTBOUND_RELAY_TLS="none",
        POSTROOM_OUTBOUND_TIMEOUT_SECONDS="10",
    )
    env.update(extra)
    return env


class WorkerProcesses:
    """``postroom worker`` subprocesses sharing one environment; logs in ``log_dir``."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        path = self.log_dir / f"worker-{len(self.procs)}.log"
        with path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "postroom", "worker", *args],
                env={**self.env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def running(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL one worker and reap it."""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def by_owner(self, lease_owner: str) -> subprocess.Popen[bytes] | None:
        """The running worker whose lease owner (``host:pid:token``) this is."""
        parts = lease_owner.split(":")
        pid = int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None
        return next((p for p in self.running() if p.pid == pid), None)

    def kill_all(self) -> int:
        """SIGKILL every running worker (no release, no clean-up); how many."""
        victims = self.running()
        for proc in victims:
            proc.send_signal(signal.SIGKILL)
        for proc in victims:
            proc.wait(timeout=10)
        return len(victims)

    def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM every running worker and wait; SIGKILL any that outstays ``timeout``."""
        for proc in self.running():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.log_dir.glob("worker-*.log")))


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, logs: str = "") -> None:
    """Poll ``predicate`` every 50 ms; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")


def record_many(
    app: App, identity_id: str, recipients: Sequence[Sequence[str]], subject: str = "Hello"
) -> list[service.OutboxEntry]:
    """One send per item of ``recipients`` (its To addresses), recorded in order."""
    made = []
    for n, to in enumerate(recipients):
        inp = service.SendInput(
            to=tuple(c.Address(a) for a in to), subject=f"{subject} {n}", text=f"Message {n}"
        )
        made.append(service.record_send(app, identity_id, inp, service.Requester("api", None)))
    return made


def message_id_of(data: bytes) -> str | None:
    """The Message-ID (without brackets) in the header block of ``data``."""
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    found = _MESSAGE_ID.search(head)
    return None if found is None else found.group(1).decode("ascii", "replace")


def arrivals(peer: SmtpPeer) -> Counter[tuple[str, str]]:
    """Copies the peer received (body in full), per (Message-ID, accepted recipient)."""
    counts: Counter[tuple[str, str]] = Counter()
    for t in peer.received():
        assert t.data is not None
        mid = message_id_of(t.data) or "?"
        for address in t.rcpt_to:
            counts[(mid, address.lower())] += 1
    return counts


def records(app: App) -> dict[str, rows.Record]:
    """Every outbox record, by id."""
    with app.db.read() as tx:
        found = tx.fetchall("SELECT * FROM outgoing_emails")
    return {r["id"]: rows.Record.from_row(r) for r in found}


def stage_counts(app: App) -> Counter[str]:
    """Records per stage, an uncertain one (``transmission_begun`` stamped 28011) counted
    as ``uncertain``."""
    counts: Counter[str] = Counter()
    for r in records(app).values():
        counts["uncertain" if r.uncertain else r.stage] += 1
    return counts

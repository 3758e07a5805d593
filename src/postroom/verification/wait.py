"""Waiting for a verification code or link: the long-poll behind ``codes.wait``.

An agent signs up somewhere, then waits for the mail with the code. A wait releases the
first verification of the identity (oldest first; within a message codes before links)
that matches its filters and either

(a) arrived after the wait started — whether or not another wait released it too, so
    several clients waiting at once all get the same new code; or
(b) arrived unconsumed at most :data:`RECENT_WINDOW_MS` before the wait started — mail
    that beat the client to it. Such a row is claimed: of several waits racing for one
    old row exactly one gets it, and a released row is never handed out by (b) again.

Releasing a row sets its ``consumed_at`` when it has none (seed 000: "first released by
wait"). The sender filter compares organisational domains (``mail.example.com`` and
``example.com`` are the same sender), since that is what ingestion stores.

The mail may be stored by another process (the SMTP server, a worker), so a wait polls
the database every :data:`POLL_INTERVAL_S`; each poll is a short synchronous
transaction run on a worker thread, never on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from postroom.mail.domains import organizational_domain
from postroom.store import verifications as rows
from postroom.store.verifications import VerificationRow

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "POLL_INTERVAL_S",
    "RECENT_WINDOW_MS",
    "WaitFor",
    "release_once",
    "sender_filter",
    "wait_for_verification",
]

RECENT_WINDOW_MS = 5 * 60_000
POLL_INTERVAL_S = 0.2
DEFAULT_TIMEOUT_S = 60


@dataclass(frozen=True)
class WaitFor:
    """What one wait is waiting for."""

    identity_id: str
    started_at: int  # the App clock, Unix ms, when the wait began
    kind: str | None = None  # "code", "link" or None for either
    sender_domain: str | None = None  # an organisational domain (see sender_filter)


def sender_filter(domain: str) -> str:
    """The stored ``sender_domain`` a filter names: its organisational domain, lower
    case (``Accounts.Example.COM`` → ``example.com``)."""
    return organizational_domain(domain)


def release_once(app: App, wait: WaitFor) -> VerificationRow | None:
    """One poll: the verification the wait gets now, released, or None."""
    now = app.clock.now_ms()
    with app.db.read() as tx:
        candidates = rows.find_releasable(
            tx,
            wait.identity_id,
            arrived_since=wait.started_at,
            unconsumed_since=wait.started_at - RECENT_WINDOW_MS,
            now=now,
            kind=wait.kind,
            sender_domain=wait.sender_domain,
        )
    for row in candidates:
        arrived_during_wait = row.received_at >= wait.started_at
        if row.consumed_at is not None:
            # Only rule (a) reads released rows (the query gives no others).
            return row
        with app.db.write() as tx:
            claimed = rows.mark_consumed(tx, row.key, now)
        if claimed or arrived_during_wait:
            return row
        # An older row another wait claimed between the read and the write: next one.
    return None


async def wait_for_verification(
    app: App,
    wait: WaitFor,
    *,
    timeout_s: float,
    client_gone: Callable[[], Awaitable[None]] | None = None,
) -> VerificationRow | None:
    """Poll until a verification is released (returned) or ``timeout_s`` passes (None).

    ``client_gone`` returns once the client has disconnected; the wait then stops at
    once (None) rather than polling, and perhaps releasing a code, for nobody.
    """
    found: VerificationRow | None = None
    app.metrics.code_waits_started.inc()
    with app.metrics.code_waits.track_inprogress():
        async with anyio.create_task_group() as group:
            if client_gone is not None:

                async def watch() -> None:
                    await client_gone()
                    group.cancel_scope.cancel()

                group.start_soon(watch)
            found = await _poll(app, wait, timeout_s)
            group.cancel_scope.cancel()
    return found


async def _poll(app: App, wait: WaitFor, timeout_s: float) -> VerificationRow | None:
    deadline = time.monotonic() + timeout_s
    while True:
        found = await anyio.to_thread.run_sync(release_once, app, wait)
        if found is not None:
            return found
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        await anyio.sleep(min(POLL_INTERVAL_S, remaining))

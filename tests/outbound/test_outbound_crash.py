"""Crash safety of the outbox: worker processes SIGKILLed mid-send, on both engines.

200 sends are recorded in the test process; worker processes relay them to an SMTP peer
that stalls some recipients at RCPT (a kill there lands after the claim, before
``transmission_begun``) and some after the body has arrived, before its reply (a kill
there lands after ``transmission_begun``: the undecidable window). Round after round the
workers are killed with SIGKILL — once the peer shows a transaction inside the window
the round aims at, or at a random moment — and new ones started; then workers run until
every record is settled or reported uncertain (the sweep stamps a stranded transmission
once its lease runs out).

What must hold afterwards: no recipient ever received a message twice; every record is
``sent`` (each recipient's copy at the peer exactly once), ``refused`` (the peer said
550) or uncertain (``transmission_begun``, 28011, one ``message.send_uncertain``); a
record whose copy is at the peer but which is not ``sent`` is uncertain; nothing is
lost. And a lease-lost race: an attempt that stalled past its lease while another took
the record over writes nothing.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from postroom.clock import ManualClock
from postroom.outbound import engine
from postroom.store import outbox as rows
from postroom.tenancy.service import create_identity
from postroom.testing.outbox import (
    WorkerProcesses,
    arrivals,
    record_many,
    records,
    relay_settings,
    stage_counts,
    wait_for,
    worker_env,
)

MESSAGES = 200
WORKERS = 2
KILLS = 12
STALL = 0.5


def _recipients(n: int) -> list[str]:
    """Message n's recipients: every tenth has a second one."""
    first = f"r{n}@example.com"
    return [first, f"cc{n}@example.org"] if n % 10 == 3 else [first]


def _program(peer: Any) -> None:
    for n in range(MESSAGES):
        address = f"r{n}@example.com"
        if n % 4 == 0:
            peer.on(address, stall=("data", STALL))
        elif n % 4 == 1:
            peer.on(address, stall=("rcpt", STALL))
        elif n % 50 == 2:
            peer.on(address, rcpt="550 5.1.1 No such user")


def _victim(app: Any, workers: WorkerProcesses, aim: str | None, rng: random.Random) -> Any:
    """The worker to kill: the holder of a record at stage ``aim`` (claimed, at
    ``recorded``: before transmission; at ``transmission_begun``: inside it), or for
    ``aim`` None any worker after a random pause. Waits up to 5 s for such a holder."""
    deadline = time.monotonic() + 5
    while aim is not None and time.monotonic() < deadline:
        for r in records(app).values():
            if r.stage == aim and r.lease_owner is not None and r.last_failure_code is None:
                holder = workers.by_owner(r.lease_owner)
                if holder is not None:
                    return holder
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 0.5))
    return rng.choice(workers.running())


def test_kill_9_at_every_stage_loses_nothing_and_sends_nothing_twice(
    ready_app: Any, smtp_peer: Any, tmp_path: Path
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    peer = smtp_peer()
    _program(peer)
    relay_settings(ready_app, peer)
    sender = create_identity(ready_app, "sender").identity.id
    made = record_many(ready_app, sender, [_recipients(n) for n in range(MESSAGES)])
    logs = tmp_path / "logs"
    logs.mkdir()
    env = worker_env(
        ready_app.settings,
        peer,
        POSTROOM_OUTBOUND_LEASE_SECONDS="10",
        POSTROOM_OUTBOUND_RETRY_SCHEDULE="1,1,1,1,1,1,1,1,1,1,1,1",
        POSTROOM_JOBS_LEASE_SECONDS="2",
    )
    workers = WorkerProcesses(env, logs)
    args = ("--concurrency", "3", "--type", "outbound.send", "--type", "outbound.sweep")
    killed: Counter[str] = Counter()
    started = time.monotonic()
    try:
        for _ in range(WORKERS):
            workers.start(*args)
        for kill in range(KILLS):
            aim = ("transmission_begun", "recorded", None)[kill % 3]
            victim = _victim(ready_app, workers, aim, rng)
            stages = {
                r.stage
                for r in records(ready_app).values()
                if r.lease_owner is not None and workers.by_owner(r.lease_owner) is victim
            }
            workers.kill(victim)
            killed.update(stages)
            workers.start(*args)

        def settled() -> bool:
            return set(stage_counts(ready_app)) <= {"sent", "refused", "uncertain"}

        wait_for(settled, 60, "every record settled or uncertain", workers.logs())
    finally:
        workers.stop_all()
    elapsed = time.monotonic() - started
    context = f"seed {seed}, {elapsed:.0f}s, killed holding {dict(killed)}"

    # The kills landed on both sides of transmission_begun.
    assert killed["recorded"] > 0 and killed["transmission_begun"] > 0, (killed, context)

    got = arrivals(peer)
    assert not [k for k, n in got.items() if n > 1], f"a recipient received twice ({context})"
    final = records(ready_app)
    assert len(final) == MESSAGES
    with ready_app.db.read() as tx:
        recipients = rows.recipients_of(tx, list(final))
        uncertain_events = Counter(
            json.loads(e["payload_json"])["data"]["message_id"]
            for e in tx.fetchall(
                "SELECT payload_json FROM events WHERE type = 'message.send_uncertain'"
            )
        )
    uncertain = set()
    for n, entry in enumerate(made):
        record = final[entry.id]
        addresses = _recipients(n)
        at_peer = [got[(record.rfc_message_id, a)] for a in addresses]
        if record.stage == "sent":
            assert at_peer == [1] * len(addresses), (record, context)
            assert {r.status for r in recipients[record.id]} == {"accepted"}
        elif record.stage == "refused":
            assert n % 50 == 2 and at_peer == [0], (record, context)
            assert [(r.status, r.last_reply_code) for r in recipients[record.id]] == [
                ("refused", 550)
            ]
        else:
            # Copies may or may not be at the peer: that is the undecidable window.
            assert record.uncertain, (record, context)
            assert record.lease_owner is not None  # a stamp, never a release
            uncertain.add(record.message_id)
    assert dict(uncertain_events) == dict.fromkeys(uncertain, 1), context
    # Stage "sent" for every record whose recipients are all at the peer, unless uncertain.
    counts = stage_counts(ready_app)
    assert counts["sent"] + counts["refused"] + counts["uncertain"] == MESSAGES
    assert counts["refused"] == sum(1 for n in range(MESSAGES) if n % 50 == 2 and n % 4 > 1)
    assert counts["uncertain"] == len(uncertain) > 0, context


def test_an_attempt_that_lost_its_lease_writes_nothing_over_the_next(
    ready_app: Any, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    relay_settings(ready_app, peer)
    clock = ManualClock(ready_app.clock.now_ms())
    ready_app.clock = clock
    sender = create_identity(ready_app, "sender").identity.id
    [made] = record_many(ready_app, sender, [["slow@example.com"]])
    peer.on("slow@example.com", stall=("rcpt", 1.5))
    outcome: dict[str, str | None] = {}
    first = threading.Thread(
        target=lambda: outcome.update(first=engine.attempt(ready_app, made.id, "w1"))
    )
    first.start()
    wait_for(lambda: len(peer.transactions) == 1, 10, "the first attempt at RCPT")
    # The first attempt hangs past its lease; a second one takes the record over.
    clock.advance(ready_app.settings.outbound_lease_seconds * 1000 + 1)
    peer.on("slow@example.com")
    assert engine.attempt(ready_app, made.id, "w2") == "sent"
    first.join(timeout=10)
    assert not first.is_alive()
    assert outcome == {"first": None}  # lease lost: nothing written
    record = records(ready_app)[made.id]
    assert (record.stage, record.lease_owner, record.attempt_count) == ("sent", None, 2)
    assert [t.rcpt_to for t in peer.received()] == [["slow@example.com"]]
    # The first attempt's RCPT was answered, but it never sent DATA.
    assert [t.data is None for t in peer.transactions] == [True, False]


def test_a_reply_after_the_sweep_reported_uncertain_writes_nothing(
    ready_app: Any, smtp_peer: Any
) -> None:
    peer = smtp_peer()
    relay_settings(ready_app, peer)
    clock = ManualClock(ready_app.clock.now_ms())
    ready_app.clock = clock
    sender = create_identity(ready_app, "sender").identity.id
    [made] = record_many(ready_app, sender, [["slow@example.com"]])
    peer.on("slow@example.com", stall=("data", 1.5))
    outcome: dict[str, str | None] = {}
    late = threading.Thread(
        target=lambda: outcome.update(late=engine.attempt(ready_app, made.id, "w1"))
    )
    late.start()
    wait_for(lambda: len(peer.received()) == 1, 10, "the body at the peer")
    # The attempt waits for the reply to its DATA past its lease: the sweep reports it.
    clock.advance(ready_app.settings.outbound_lease_seconds * 1000 + 1)
    assert engine.sweep(ready_app).uncertain == 1
    late.join(timeout=10)
    assert outcome == {"late": None}
    assert peer.transactions[0].replied  # the 250 did go out, too late to count
    record = records(ready_app)[made.id]
    assert (record.stage, record.last_failure_code) == ("transmission_begun", "28011")
    with ready_app.db.read() as tx:
        events = [
            e["type"] for e in tx.fetchall("SELECT type FROM events WHERE type LIKE 'message.%%'")
        ]
        status = [r.status for r in rows.recipients(tx, made.id)]
    assert events == ["message.send_uncertain"]
    assert status == ["pending"]
    # Nothing automatic sends it again.
    assert engine.attempt(ready_app, made.id, "w2") is None
    assert len(peer.received()) == 1

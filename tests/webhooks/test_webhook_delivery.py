"""Delivery end to end, on both engines: events written by real changes are fanned out by
the dispatcher into jobs, delivered by a worker to a real HTTP receiver on loopback,
signed so that the standardwebhooks package (a verifier written by others) accepts them,
retried on failure with the same webhook-id, and recorded in the delivery log.

Retries run on a compressed schedule (``webhooks.retry_schedule`` = 10 ms steps); the
five-day rule runs on a ManualClock.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from webhook_receiver import Receiver

from postroom.clock import ManualClock
from postroom.jobs.handlers import HandlerRegistry
from postroom.jobs.worker import Worker
from postroom.store import webhooks as rows
from postroom.store.events import insert_event
from postroom.tenancy.service import create_identity, create_tenant
from postroom.webhooks.delivery import deliver_handler
from postroom.webhooks.dispatch import dispatch_pending
from postroom.webhooks.endpoints import (
    DELIVER_JOB,
    PLATFORM,
    EndpointChange,
    NewEndpoint,
    create,
    replay,
    rotate,
    send_test,
    update,
)

FAST = (0.01,) * 7


@pytest.fixture
def settings(settings: Any) -> Any:
    return dataclasses.replace(
        settings,
        webhooks_allow_insecure=True,
        webhooks_allow_loopback=True,
        webhooks_retry_schedule=FAST,
        webhooks_timeout_seconds=1.0,
    )


def _worker(app: Any) -> Worker:
    registry = HandlerRegistry()
    registry.register(DELIVER_JOB, deliver_handler())
    return Worker(app, registry)


def drain(app: Any, worker: Worker | None = None, seconds: float = 20.0) -> None:
    """Run delivery jobs in this thread until none is pending or running."""
    worker = worker or _worker(app)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        dispatch_pending(app)
        if worker.run_once():
            continue
        with app.db.read() as tx:
            waiting = tx.fetchval(
                "SELECT COUNT(*) FROM jobs WHERE job_type = %s AND state IN ('pending','claimed')",
                (DELIVER_JOB,),
            )
            undispatched = tx.fetchval("SELECT COUNT(*) FROM events WHERE dispatched_at IS NULL")
        if not waiting and not undispatched:
            return
        time.sleep(0.005)
    raise AssertionError("deliveries did not settle")


def _events(app: Any, count: int, prefix: str = "hook") -> list[str]:
    """Real changes that announce themselves: inboxes created (identity.created)."""
    ids = []
    for n in range(count):
        made = create_identity(app, f"{prefix}{n}")
        with app.db.read() as tx:
            ids.append(
                tx.fetchval(
                    "SELECT id FROM events WHERE identity_id = %s AND type = 'identity.created'",
                    (made.identity.id,),
                )
            )
    return ids


def _log(app: Any, endpoint_id: str) -> list[rows.Delivery]:
    with app.db.read() as tx:
        return list(reversed(rows.list_deliveries(tx, endpoint_id, limit=1000)))


def _verify(secret: str, request: Any) -> dict[str, Any]:
    verified = Webhook(secret).verify(request.body, request.headers)
    assert isinstance(verified, dict)
    return verified


def test_every_event_is_delivered_once_signed_as_the_standard_says(ready_app: Any) -> None:
    app = ready_app
    with Receiver() as receiver:
        endpoint, secret = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        event_ids = _events(app, 5)
        drain(app)
    assert sorted(receiver.ids()) == sorted(event_ids)
    with app.db.read() as tx:
        stored = {
            e: tx.fetchval("SELECT payload_json FROM events WHERE id = %s", (e,)) for e in event_ids
        }
    for request in receiver.requests:
        envelope = _verify(secret, request)
        event_id = request.headers["webhook-id"]
        assert envelope["id"] == event_id and envelope["type"] == "identity.created"
        assert request.body == stored[event_id].encode()  # the stored envelope, byte for byte
        assert request.headers["content-type"] == "application/json"
        assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 60
        assert request.headers["host"] == f"127.0.0.1:{receiver.port}"
        assert request.path == "/hook"
    # Another secret does not verify: the check above can fail.
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(
            receiver.requests[0].body, receiver.requests[0].headers
        )
    log = _log(app, endpoint.id)
    assert [(d.attempt, d.status, d.http_status, d.error) for d in log] == [
        (1, "succeeded", 200, None)
    ] * 5
    assert all(d.duration_ms is not None and d.next_attempt_at is None for d in log)


def test_a_receiver_that_fails_then_recovers_gets_every_event(ready_app: Any) -> None:
    app = ready_app
    failures: dict[str, list[Any]] = {}
    plan = [500, "reset", "hang", 503, 429]

    def script(n: int) -> Any:
        request = receiver.requests[n]
        seen = failures.setdefault(request.headers["webhook-id"], [])
        if len(seen) < len(plan):
            seen.append(plan[len(seen)])
            return seen[-1]
        return 204

    with Receiver(script) as receiver:
        endpoint, secret = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        event_ids = _events(app, 3)
        drain(app)
    by_event: dict[str, list[Any]] = {}
    for request in receiver.requests:
        by_event.setdefault(request.headers["webhook-id"], []).append(request)
    assert sorted(by_event) == sorted(event_ids)
    for requests in by_event.values():
        assert len(requests) == 6  # five failures, then the success
        bodies = {r.body for r in requests}
        assert len(bodies) == 1  # the same envelope and webhook-id on every attempt
        for request in requests:
            _verify(secret, request)
    log = _log(app, endpoint.id)
    for event_id in event_ids:
        attempts = [d for d in log if d.event_id == event_id]
        assert [d.attempt for d in attempts] == [1, 2, 3, 4, 5, 6]
        assert [d.status for d in attempts] == ["failed"] * 5 + ["succeeded"]
        assert [d.error for d in attempts] == [
            "status_5xx",
            "connection_reset",
            "timeout",
            "status_5xx",
            "status_4xx",
            None,
        ]
        assert [d.http_status for d in attempts] == [500, None, None, 503, 429, 204]
        assert all(d.next_attempt_at is not None for d in attempts[:5])
        assert attempts[-1].next_attempt_at is None
    with app.db.read() as tx:
        found = rows.get_endpoint(tx, endpoint.id)
    assert found is not None and found.enabled
    assert found.consecutive_failures == 0 and found.failing_since is None


def test_during_a_rotation_both_secrets_sign_and_each_verifies(ready_app: Any) -> None:
    app = ready_app
    with Receiver() as receiver:
        endpoint, old = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        _, new = rotate(app, PLATFORM, endpoint.id, 3_600_000)
        _events(app, 1, "rot")
        drain(app)
        _, newest = rotate(app, PLATFORM, endpoint.id, 0)
        _events(app, 1, "after")
        drain(app)
    during, after = receiver.requests
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert new != old
    _verify(old, during)
    _verify(new, during)
    # Without an overlap only the newest secret signs.
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    _verify(newest, after)
    with pytest.raises(WebhookVerificationError):
        _verify(new, after)


def test_410_disables_the_endpoint_and_says_gone(ready_app: Any) -> None:
    app = ready_app
    with Receiver(lambda n: 410) as receiver:
        endpoint, _ = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        _events(app, 1, "gone")
        drain(app)
        _events(app, 1, "later")
        drain(app)
    assert len(receiver.requests) == 1  # nothing after the 410
    with app.db.read() as tx:
        found = rows.get_endpoint(tx, endpoint.id)
        disabled = tx.fetchall("SELECT payload_json FROM events WHERE type = 'webhook.disabled'")
    assert found is not None and not found.enabled and found.disabled_reason == "failing"
    assert [json.loads(r["payload_json"])["data"] for r in disabled] == [
        {"endpoint_id": endpoint.id, "reason": "gone"}
    ]
    log = _log(app, endpoint.id)
    assert [(d.status, d.http_status, d.error) for d in log] == [("dead", 410, "status_410")]


def test_a_redirect_is_a_failure_and_never_followed(ready_app: Any) -> None:
    app = ready_app
    with Receiver(lambda n: 302) as receiver:
        endpoint, _ = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        _events(app, 1, "redirect")
        drain(app)
    log = _log(app, endpoint.id)
    # Every attempt went to the endpoint itself, none to the Location.
    assert len(receiver.requests) == len(FAST) + 1
    assert {r.path for r in receiver.requests} == {"/hook"}
    assert [d.status for d in log] == ["failed"] * len(FAST) + ["dead"]
    assert {d.error for d in log} == {"status_3xx"}


def test_attempts_run_out_into_a_dead_letter(ready_app: Any) -> None:
    app = ready_app
    with Receiver(lambda n: 500) as receiver:
        endpoint, _ = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        (event_id,) = _events(app, 1, "dead")
        drain(app)
    log = _log(app, endpoint.id)
    assert [d.attempt for d in log] == list(range(1, len(FAST) + 2))
    assert log[-1].status == "dead" and log[-1].next_attempt_at is None
    assert len(receiver.requests) == len(FAST) + 1
    with app.db.read() as tx:
        jobs = tx.fetchall(
            "SELECT idempotency_key, state, last_failure_reason FROM jobs WHERE job_type = %s",
            (DELIVER_JOB,),
        )
    chain = f"{endpoint.id}:{event_id}"
    assert {j["idempotency_key"] for j in jobs} == {chain} | {
        f"{chain}#{n}" for n in range(1, len(FAST) + 1)
    }
    dead = [j for j in jobs if j["state"] == "dead_lettered"]
    assert [j["last_failure_reason"] for j in dead] == [
        "PermanentFailure:webhook_attempts_exhausted"
    ]


def test_an_endpoint_failing_for_five_days_is_disabled(settings: Any) -> None:
    from postroom.app import build_app
    from postroom.tenancy.bootstrap import initialize

    clock = ManualClock(int(time.time() * 1000))
    slow = dataclasses.replace(settings, webhooks_retry_schedule=(3600.0,))
    app = build_app(slow, clock=clock, apply_migrations=True)
    try:
        initialize(app)
        with Receiver(lambda n: 500) as receiver:
            endpoint, _ = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
            for day in range(6):
                _events(app, 1, f"day{day}")
                dispatch_pending(app)
                while _worker(app).run_once():
                    pass
                with app.db.read() as tx:
                    found = rows.get_endpoint(tx, endpoint.id)
                assert found is not None
                assert found.enabled == (day < 5), day
                clock.advance(86_400_000)
        with app.db.read() as tx:
            disabled = tx.fetchall(
                "SELECT payload_json FROM events WHERE type = 'webhook.disabled'"
            )
        assert [json.loads(r["payload_json"])["data"]["reason"] for r in disabled] == ["failing"]
        assert found.disabled_reason == "failing" and found.consecutive_failures >= 6
        # Re-enabling ends the streak.
        enabled = update(app, PLATFORM, endpoint.id, EndpointChange(enabled=True))
        assert enabled.enabled and enabled.failing_since is None
    finally:
        app.close()


def test_a_body_over_256_kb_is_never_sent(ready_app: Any) -> None:
    app = ready_app
    with Receiver() as receiver:
        endpoint, _ = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        with app.db.write() as tx:
            big = insert_event(
                tx,
                event_type="test.big",
                tenant_id=None,
                identity_id=None,
                data={"filler": "x" * 300_000},
                now=app.clock.now_ms(),
            )
        drain(app)
    assert receiver.connections == []
    log = _log(app, endpoint.id)
    assert [(d.event_id, d.status, d.error) for d in log] == [(big.id, "dead", "payload_too_large")]


def test_scope_types_and_identity_filter_choose_what_an_endpoint_hears(
    ready_app: Any,
) -> None:
    app = ready_app
    other_tenant = create_tenant(app, "other").id
    with Receiver() as receiver:
        inbox = create_identity(app, "watched")
        only_watched, _ = create(
            app,
            PLATFORM,
            NewEndpoint(url=receiver.url("/watched"), identity_ids=[inbox.identity.id]),
        )
        other, _ = create(
            app, PLATFORM, NewEndpoint(url=receiver.url("/other"), tenant_id=other_tenant)
        )
        family, _ = create(
            app, PLATFORM, NewEndpoint(url=receiver.url("/family"), event_types=["identity.*"])
        )
        unrelated, _ = create(
            app, PLATFORM, NewEndpoint(url=receiver.url("/none"), event_types=["message.sent"])
        )
        mine = create_identity(app, "mine")
        theirs = create_identity(app, "theirs", tenant=other_tenant)
        with app.db.write() as tx:
            watched_event = insert_event(
                tx,
                event_type="identity.updated",
                tenant_id=inbox.identity.tenant_id,
                identity_id=inbox.identity.id,
                data={"fields": ["display_name"]},
                now=app.clock.now_ms(),
            )
        drain(app)
    paths: dict[str, set[str]] = {}
    for request in receiver.requests:
        paths.setdefault(request.path, set()).add(json.loads(request.body)["identity_id"])
    assert paths["/watched"] == {inbox.identity.id}
    assert paths["/other"] == {theirs.identity.id}
    # Events from before an endpoint existed are not sent to it (watched's creation).
    assert paths["/family"] == {mine.identity.id, theirs.identity.id, inbox.identity.id}
    assert "/none" not in paths
    assert any(r.headers["webhook-id"] == watched_event.id for r in receiver.requests)
    assert unrelated.id and family.id and other.id


def test_replay_and_test_events_start_new_chains(ready_app: Any) -> None:
    app = ready_app
    with Receiver() as receiver:
        endpoint, secret = create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        first, second = _events(app, 2, "replayed")
        drain(app)
        assert replay(app, PLATFORM, endpoint.id, event_id=first) == [first]
        drain(app)
        since = app.clock.now_ms() - 60_000
        assert replay(app, PLATFORM, endpoint.id, since=since) == [first, second]
        drain(app)
        update(app, PLATFORM, endpoint.id, EndpointChange(enabled=False))
        test_event, _job = send_test(app, PLATFORM, endpoint.id)
        drain(app)
    ids = receiver.ids()
    assert ids.count(first) == 3 and ids.count(second) == 2
    assert ids[-1] == test_event  # a test goes even to a disabled endpoint
    test_body = _verify(secret, receiver.requests[-1])
    assert test_body["type"] == "webhook.test"
    assert test_body["data"] == {"endpoint_id": endpoint.id}
    log = _log(app, endpoint.id)
    assert [d.attempt for d in log if d.event_id == first] == [1, 2, 3]
    assert all(d.status == "succeeded" for d in log)


@pytest.mark.parametrize("threads", [1, 3])
def test_the_built_in_worker_dispatches_and_delivers(ready_app: Any, threads: int) -> None:
    """The registry and schedules `postroom worker` runs: the dispatcher job sweeps the
    outbox; with a single thread it hands the thread over to the waiting deliveries."""
    from postroom.jobs.builtin import default_registry, default_schedules
    from postroom.webhooks.dispatch import DISPATCH_JOB, SCHEDULE_ID

    app = ready_app
    assert SCHEDULE_ID in {s.schedule_id for s in default_schedules()}
    with Receiver() as receiver:
        create(app, PLATFORM, NewEndpoint(url=receiver.url()))
        app.queue.enqueue(DISPATCH_JOB, f"{SCHEDULE_ID}@test", {"occasion": app.clock.now_ms()})
        worker = Worker(
            app, default_registry(app.settings), concurrency=threads, poll_interval_s=0.02
        )
        worker.start()
        try:
            time.sleep(0.2)
            event_ids = _events(app, 4, f"live{threads}")
            deadline = time.monotonic() + 15
            while set(receiver.ids()) != set(event_ids) and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            worker.stop(2.0)
    assert sorted(receiver.ids()) == sorted(event_ids)
    with app.db.read() as tx:
        continuations = tx.fetchval(
            "SELECT COUNT(*) FROM jobs WHERE job_type = %s AND idempotency_key LIKE %s",
            (DISPATCH_JOB, f"{SCHEDULE_ID}@%#%"),
        )
    # One thread: the dispatcher gave its thread to the deliveries at least once.
    assert (continuations > 0) == (threads == 1)

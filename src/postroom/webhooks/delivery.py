"""Delivering one event to one endpoint: the ``webhook.deliver`` job.

Each job is one attempt of a chain. The dispatcher starts a chain per (endpoint, event)
with the job keyed ``{whk}:{evt}``; a failed attempt records itself and, in the same
transaction, queues the next attempt ``{chain}#{step}`` after the retry schedule's delay
(``webhooks.retry_schedule``: about 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, each
jittered by up to 20%). A replay starts a new chain ``{whk}:{evt}@r{time}``.

An attempt:

1. ends at once, sending nothing, when the endpoint was deleted, when the pair already
   has a success since the chain began (a rerun after a crash), or when the event is gone;
2. is recorded ``dead`` (``endpoint_disabled``) when the endpoint is disabled;
3. is recorded ``dead`` (``payload_too_large``) when the body is over 256 KB — never sent;
4. otherwise POSTs the stored envelope, signed (:mod:`postroom.webhooks.signing`) with
   ``webhook-id`` = the event id on every attempt, and records the outcome:

   * any 2xx: ``succeeded``; the endpoint's failure streak ends;
   * 410 Gone: ``dead``; the endpoint is disabled (reason ``failing``) and a
     ``webhook.disabled`` event says ``gone``;
   * anything else (3xx, 4xx, 5xx, timeout, refused, reset, TLS, DNS, a forbidden
     address): ``failed`` with ``next_attempt_at``, or ``dead`` after the last retry,
     when the job is dead-lettered too (``postroom jobs redrive`` tries once more).

   A failure extends the endpoint's streak; an endpoint failing for
   ``webhooks.disable_after_hours`` (5 days) without a success is disabled with a
   ``webhook.disabled`` event (``failing``).

A test delivery (``POST /v1/webhooks/{id}/test``) makes one attempt and leaves the
endpoint's state alone. At-least-once: a worker killed after the POST but before the
record is written makes the attempt again.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from postroom import __version__
from postroom.errors import QueueFull
from postroom.events.catalogue import WebhookDisabled
from postroom.events.emit import emit
from postroom.ids import new_id
from postroom.jobs.handlers import JobContext, PermanentFailure, TransientFailure
from postroom.store import webhooks as rows
from postroom.store.db import Tx
from postroom.store.webhooks import Endpoint
from postroom.webhooks import signing
from postroom.webhooks.client import MAX_BODY_BYTES, Attempt, DeliveryClient, Resolver
from postroom.webhooks.endpoints import DELIVER_JOB, secrets_in_use

if TYPE_CHECKING:
    from postroom.app import App
    from postroom.config import Settings

log = logging.getLogger("postroom.webhooks")

JITTER = 0.2


def retry_delay_ms(schedule: tuple[float, ...], step: int, rng: random.Random | None = None) -> int:
    """Delay before retry ``step`` (0-based), jittered by up to ±20%."""
    base = schedule[step] * 1000
    draw = (rng or random).uniform(1 - JITTER, 1 + JITTER)
    return max(1, int(base * draw))


def client_for(settings: Settings, resolver: Resolver | None = None) -> DeliveryClient:
    return DeliveryClient(
        allow_insecure=settings.webhooks_allow_insecure,
        allow_loopback=settings.webhooks_allow_loopback,
        timeout_s=settings.webhooks_timeout_seconds,
        resolver=resolver,
        user_agent=f"Postroom-Webhooks/{__version__}",
    )


def deliver_handler(client: DeliveryClient | None = None) -> Callable[[JobContext], None]:
    """The ``webhook.deliver`` handler; ``client`` is the seam for tests (a stand-in
    resolver, a test CA). Without one, a client is built from the App's settings."""

    built: dict[int, DeliveryClient] = {}

    def handle(ctx: JobContext) -> None:
        use = client
        if use is None:
            use = built.get(id(ctx.app.settings))
            if use is None:
                use = built.setdefault(id(ctx.app.settings), client_for(ctx.app.settings))
        attempt(ctx.app, use, ctx.payload)

    return handle


def disable_for_failure(
    app: App, tx: Tx, endpoint: Endpoint, reason: Literal["failing", "gone"], now: int
) -> None:
    """Disable an endpoint for failing and announce it (``webhook.disabled``)."""
    if not rows.disable_failing(tx, endpoint.id, now):
        return
    event = emit(
        tx,
        WebhookDisabled(endpoint_id=endpoint.id, reason=reason),
        tenant_id=endpoint.tenant_id,
        identity_id=None,
        now=now,
    )
    if endpoint.partner_id is not None:
        rows.stamp_event_partner(tx, event.id, endpoint.partner_id)
    log.warning("webhook endpoint %s disabled (%s)", endpoint.id, reason)


def _record(
    app: App,
    tx: Tx,
    endpoint: Endpoint,
    event_id: str,
    event_type: str,
    *,
    status: str,
    http_status: int | None = None,
    error: str | None = None,
    duration_ms: int | None = None,
    next_attempt_at: int | None = None,
) -> rows.Delivery:
    return rows.insert_delivery(
        tx,
        delivery_id=new_id("dlv"),
        endpoint_id=endpoint.id,
        tenant_id=endpoint.tenant_id,
        event_id=event_id,
        event_type=event_type,
        status=status,
        http_status=http_status,
        error=error,
        duration_ms=duration_ms,
        next_attempt_at=next_attempt_at,
        now=app.clock.now_ms(),
    )


def attempt(app: App, client: DeliveryClient, payload: dict[str, Any]) -> None:
    """Run one attempt of a delivery chain (see the module docstring)."""
    endpoint_id = str(payload["endpoint_id"])
    event_id = str(payload["event_id"])
    chain = str(payload.get("chain") or f"{endpoint_id}:{event_id}")
    since = int(payload.get("since", 0))
    step = int(payload.get("step", 0))
    test = bool(payload.get("test", False))
    with app.db.read() as tx:
        endpoint = rows.get_endpoint(tx, endpoint_id)
        if endpoint is None or rows.delivered_since(tx, endpoint_id, event_id, since):
            return
        event = rows.get_stored_event(tx, event_id)
    if event is None:
        return
    if not endpoint.enabled and not test:
        with app.db.write() as tx:
            _record(
                app, tx, endpoint, event_id, event.type, status="dead", error="endpoint_disabled"
            )
        return
    body = event.payload_json.encode()
    if len(body) > MAX_BODY_BYTES:
        with app.db.write() as tx:
            _record(
                app, tx, endpoint, event_id, event.type, status="dead", error="payload_too_large"
            )
        raise PermanentFailure("payload_too_large")

    now = app.clock.now_ms()
    headers = signing.headers(secrets_in_use(app, endpoint, now), event_id, now // 1000, body)
    outcome = client.post(endpoint.url, body, headers)
    if not outcome.ok:
        log.info("webhook %s event %s: %s %s", endpoint_id, event_id, outcome.error, outcome.detail)

    try:
        _settle(app, endpoint, event.type, payload, chain, step, test, outcome)
    except QueueFull:
        # The next attempt could not be queued: nothing was recorded; this attempt is
        # made again after the queue's own backoff.
        raise TransientFailure("queue_full") from None


def _settle(
    app: App,
    endpoint: Endpoint,
    event_type: str,
    payload: dict[str, Any],
    chain: str,
    step: int,
    test: bool,
    outcome: Attempt,
) -> None:
    """Record an attempt's outcome and what follows from it, in one transaction."""
    event_id = str(payload["event_id"])
    schedule = app.settings.webhooks_retry_schedule
    exhausted = False
    with app.db.write() as tx:
        now = app.clock.now_ms()
        fields: dict[str, Any] = {
            "http_status": outcome.http_status,
            "error": outcome.error,
            "duration_ms": outcome.duration_ms,
        }
        if outcome.ok:
            _record(app, tx, endpoint, event_id, event_type, status="succeeded", **fields)
            if not test:
                rows.note_success(tx, endpoint.id, now)
            return
        if test:
            _record(app, tx, endpoint, event_id, event_type, status="failed", **fields)
            return
        current = rows.note_failure(tx, endpoint.id, now) or endpoint
        if outcome.http_status == 410:
            _record(app, tx, endpoint, event_id, event_type, status="dead", **fields)
            disable_for_failure(app, tx, current, "gone", now)
            return
        if step < len(schedule):
            next_at = now + retry_delay_ms(schedule, step)
            _record(
                app,
                tx,
                endpoint,
                event_id,
                event_type,
                status="failed",
                next_attempt_at=next_at,
                **fields,
            )
            app.queue.enqueue_in(
                tx,
                DELIVER_JOB,
                f"{chain}#{step + 1}",
                {**payload, "chain": chain, "step": step + 1},
                available_at=next_at,
                tenant_id=endpoint.tenant_id,
            )
        else:
            _record(app, tx, endpoint, event_id, event_type, status="dead", **fields)
            exhausted = True
        limit_ms = int(app.settings.webhooks_disable_after_hours * 3_600_000)
        if current.failing_since is not None and now - current.failing_since >= limit_ms:
            disable_for_failure(app, tx, current, "failing", now)
    if exhausted:
        raise PermanentFailure("webhook_attempts_exhausted")

"""The dispatcher: fans events out of the outbox into delivery jobs.

An event is written (``dispatched_at`` NULL) in the transaction that makes its change. A
sweep takes the oldest undispatched events, finds the enabled endpoints that subscribe to
each (scope, event types, identity filter; an endpoint hears events from its creation
on), queues one ``webhook.deliver`` job per (endpoint, event), keyed ``{whk}:{evt}``, and
stamps the events ``dispatched_at`` — all in one transaction, so an event is fanned out
exactly when its jobs exist. Dispatchers may overlap: PostgreSQL's ``SKIP LOCKED`` (and
SQLite's single writer) keep them off each other's events, and the queue's (type, key)
uniqueness would absorb a second fan-out anyway. A full queue (``queue_full``) rolls the
sweep back; the events wait for the next one.

Who sweeps: the ``webhook.dispatch`` job. A schedule (``webhooks.dispatch``) queues one
every ten seconds; the job sweeps every ``webhooks.dispatch_poll_ms`` until its window
ends (a second past the next occasion, so consecutive windows overlap instead of leaving
a gap), then returns. It holds one worker thread meanwhile; when delivery jobs have
waited more than a second for a thread (a worker with one thread, or every thread busy),
it hands its thread over: it queues its own continuation, due now — behind the waiting
deliveries, which are older — and returns.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from postroom.jobs.handlers import JobContext
from postroom.store import webhooks as rows
from postroom.webhooks.endpoints import DELIVER_JOB, chain_payload, matches

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.webhooks")

DISPATCH_JOB = "webhook.dispatch"
SCHEDULE_ID = "webhooks.dispatch"
WINDOW_MS = 10_000
OVERLAP_MS = 1_000
STARVED_AFTER_MS = 1_000
BATCH = 500


def dispatch_pending(app: App, *, batch: int = BATCH) -> int:
    """One sweep: fan out up to ``batch`` pending events. Returns how many were taken."""
    with app.db.read() as tx:
        if not rows.has_pending_events(tx):
            return 0
    with app.db.write() as tx:
        events = rows.pending_events(tx, batch)
        if not events:
            return 0
        tenants = sorted({e.tenant_id for e in events if e.tenant_id is not None})
        partners = sorted({e.partner_id for e in events if e.partner_id is not None})
        endpoints = rows.endpoints_for(tx, tenants, partners)
        jobs = 0
        for event in events:
            for endpoint in endpoints:
                if event.occurred_at < endpoint.created_at or not matches(
                    endpoint,
                    event_type=event.type,
                    tenant_id=event.tenant_id,
                    partner_id=event.partner_id,
                    identity_id=event.identity_id,
                ):
                    continue
                chain = f"{endpoint.id}:{event.id}"
                app.queue.enqueue_in(
                    tx,
                    DELIVER_JOB,
                    chain,
                    chain_payload(endpoint, event.id, chain=chain, since=0),
                    tenant_id=endpoint.tenant_id,
                )
                jobs += 1
        rows.mark_dispatched(tx, [e.id for e in events], app.clock.now_ms())
    if jobs:
        log.debug("dispatched %d events into %d delivery jobs", len(events), jobs)
    return len(events)


def _starved(app: App) -> bool:
    now = app.clock.now_ms()
    with app.db.read() as tx:
        oldest = rows.oldest_due_delivery(tx, DELIVER_JOB, now)
    return oldest is not None and now - oldest > STARVED_AFTER_MS


def run_dispatcher(ctx: JobContext) -> None:
    """The ``webhook.dispatch`` handler: sweep until the window ends (module docstring)."""
    app = ctx.app
    poll_s = app.settings.webhooks_dispatch_poll_ms / 1000
    started = app.clock.now_ms()
    occasion = int(ctx.payload.get("occasion", started))
    end = min(occasion, started) + WINDOW_MS + OVERLAP_MS
    next_check = started + STARVED_AFTER_MS
    while True:
        taken = dispatch_pending(app)
        now = app.clock.now_ms()
        if ctx.stopping.is_set() or now >= end:
            return
        if now >= next_check:
            next_check = now + STARVED_AFTER_MS
            if _starved(app):
                app.queue.enqueue(
                    DISPATCH_JOB,
                    f"{SCHEDULE_ID}@{occasion}#{now}",
                    {"occasion": occasion},
                )
                return
        if taken < BATCH:
            ctx.stopping.wait(poll_s)

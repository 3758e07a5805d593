"""The job handlers and schedules every Postroom worker runs."""

from __future__ import annotations

import logging

from postroom.config import Settings
from postroom.jobs.handlers import HandlerRegistry, JobContext
from postroom.jobs.schedules import Schedule
from postroom.store import inbound as inbound_rows
from postroom.store import maintenance

log = logging.getLogger("postroom.jobs")

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def run_maintenance(ctx: JobContext) -> None:
    """Hourly: drop expired idempotency records, verification codes and throttle windows."""
    now = ctx.app.clock.now_ms()
    with ctx.app.db.write() as tx:
        records = maintenance.purge_expired_idempotency_records(tx, now)
        codes = maintenance.purge_expired_verifications(tx, now)
        inbound_rows.purge_sender_windows(tx, now - DAY_MS)
    with ctx.app.db.write() as tx:
        maintenance.optimize(tx)
    log.info("maintenance: purged %d idempotency records, %d codes", records, codes)


def default_schedules() -> list[Schedule]:
    from postroom.outbound.engine import SWEEP_INTERVAL_MS, SWEEP_JOB, SWEEP_SCHEDULE
    from postroom.sync.engine import DISPATCH_INTERVAL_MS, DISPATCH_SCHEDULE
    from postroom.sync.engine import DISPATCH_JOB as IMAP_DISPATCH_JOB
    from postroom.webhooks.dispatch import DISPATCH_JOB, SCHEDULE_ID, WINDOW_MS

    return [
        Schedule(SWEEP_SCHEDULE, SWEEP_JOB, SWEEP_INTERVAL_MS),
        Schedule(DISPATCH_SCHEDULE, IMAP_DISPATCH_JOB, DISPATCH_INTERVAL_MS),
        Schedule("maintenance.hourly", "maintenance.run", HOUR_MS),
        # Each occasion's job sweeps the event outbox for its whole window.
        Schedule(SCHEDULE_ID, DISPATCH_JOB, WINDOW_MS),
    ]


def default_registry(settings: Settings) -> HandlerRegistry:
    """Built-in handlers plus those of the modules named in worker.handler_modules."""
    from postroom.inbound.ingest import INGEST_JOB, handle_ingest
    from postroom.outbound.bounces import BOUNCE_JOB, handle_bounce
    from postroom.outbound.engine import SEND_JOB, SWEEP_JOB, handle_send, handle_sweep
    from postroom.sync.engine import DISPATCH_JOB as IMAP_DISPATCH_JOB
    from postroom.sync.engine import SYNC_JOB, handle_dispatch, handle_sync
    from postroom.sync.mutations import MUTATE_JOB, handle_mutate
    from postroom.webhooks.delivery import deliver_handler
    from postroom.webhooks.dispatch import DISPATCH_JOB, run_dispatcher
    from postroom.webhooks.endpoints import DELIVER_JOB

    registry = HandlerRegistry()
    registry.register(INGEST_JOB, handle_ingest)
    registry.register("maintenance.run", run_maintenance)
    registry.register(DISPATCH_JOB, run_dispatcher)
    registry.register(DELIVER_JOB, deliver_handler())
    registry.register(SEND_JOB, handle_send)
    registry.register(SWEEP_JOB, handle_sweep)
    registry.register(BOUNCE_JOB, handle_bounce)
    registry.register(SYNC_JOB, handle_sync)
    registry.register(IMAP_DISPATCH_JOB, handle_dispatch)
    registry.register(MUTATE_JOB, handle_mutate)
    for module_name in settings.worker_handler_modules:
        registry.load_module(module_name)
    return registry

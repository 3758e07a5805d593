"""``postroom jobs``: look at the durable queue and act on dead letters."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from postroom.cli.context import emit_json, json_option, state
from postroom.clock import to_rfc3339
from postroom.store.jobs import STATES, Job


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "type": job.job_type,
        "idempotency_key": job.idempotency_key,
        "state": job.state,
        "attempts": job.attempt_count,
        "available_at": to_rfc3339(job.available_at),
        "enqueued_at": to_rfc3339(job.enqueued_at),
        "state_changed_at": to_rfc3339(job.state_changed_at),
        "last_failure": (
            {"classification": job.last_failure_classification, "reason": job.last_failure_reason}
            if job.last_failure_classification
            else None
        ),
        "lease_owner": job.lease_owner,
        "lease_expires_at": to_rfc3339(job.lease_expires_at),
        "payload": job.payload,
    }


@click.group()
def jobs() -> None:
    """The durable job queue."""


@jobs.command("list")
@click.option("--state", "job_state", type=click.Choice(STATES), default=None)
@click.option("--type", "job_type", default=None, help="Only this job type.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@click.pass_context
def list_jobs(
    ctx: click.Context, job_state: str | None, job_type: str | None, limit: int, as_json: bool
) -> None:
    """List jobs, most recently changed first."""
    app = state(ctx).app(load_keys=False)
    try:
        found = app.queue.list(state=job_state, job_type=job_type, limit=limit)
        counts = app.queue.counts()
    finally:
        app.close()
    if as_json:
        totals: dict[str, int] = {}
        for (_type, st), n in counts.items():
            totals[st] = totals.get(st, 0) + n
        emit_json({"jobs": [job_json(j) for j in found], "counts": totals})
        return
    table = Table("id", "type", "state", "attempts", "changed", "last failure")
    for job in found:
        table.add_row(
            job.id,
            job.job_type,
            job.state,
            str(job.attempt_count),
            to_rfc3339(job.state_changed_at) or "",
            job.last_failure_reason or "",
        )
    state(ctx).console.print(table)


@jobs.command("show")
@click.argument("job_id")
@click.pass_context
def show(ctx: click.Context, job_id: str) -> None:
    """Show one job as JSON."""
    app = state(ctx).app(load_keys=False)
    try:
        emit_json(job_json(app.queue.get(job_id)))
    finally:
        app.close()


def _act_on_dead_letter(ctx: click.Context, job_id: str, as_json: bool, action: str) -> None:
    app = state(ctx).app(load_keys=False)
    try:
        changed = app.queue.redrive(job_id) if action == "redrive" else app.queue.drop(job_id)
        job = app.queue.get(job_id)
    finally:
        app.close()
    if as_json:
        emit_json({"id": job_id, "changed": changed, "state": job.state})
    elif changed:
        click.echo(f"{job_id} is {job.state} now")
    else:
        click.echo(f"{job_id} is {job.state}, not dead-lettered; nothing changed")
    if not changed:
        ctx.exit(1)


@jobs.command()
@click.argument("job_id")
@json_option
@click.pass_context
def redrive(ctx: click.Context, job_id: str, as_json: bool) -> None:
    """Return a dead-lettered job to the queue, due now, with its attempts handed back."""
    _act_on_dead_letter(ctx, job_id, as_json, "redrive")


@jobs.command()
@click.argument("job_id")
@json_option
@click.pass_context
def drop(ctx: click.Context, job_id: str, as_json: bool) -> None:
    """Write a dead-lettered job off (it stays, keeping its key)."""
    _act_on_dead_letter(ctx, job_id, as_json, "drop")


COMMANDS = [jobs]

"""Recurring work: schedules declared in code, their state in ``job_schedules``.

A schedule's occasions are the instants ``offset + k·interval`` (Unix ms, so every
process computes the same ones). A dispatch pass, run by every worker:

1. meets a schedule with no state → records ``observed_from = now`` and dispatches
   nothing (a schedule declared today owes nothing since the epoch);
2. otherwise takes the latest occasion at or before now; if it is after the last one
   acted on, enqueues one job keyed ``{schedule_id}@{occasion}`` and records that
   occasion — occasions missed while nothing ran are skipped, not replayed;
3. two workers reaching the same occasion produce one job: the queue's (type, key)
   uniqueness answers the second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from postroom.jobs.queue import JobQueue
from postroom.store import jobs as job_rows
from postroom.store.jobs import Job, ScheduleState


@dataclass(frozen=True)
class Schedule:
    schedule_id: str
    job_type: str
    interval_ms: int
    offset_ms: int = 0
    payload: Mapping[str, Any] = field(default_factory=dict)

    def latest_occasion(self, now_ms: int) -> int:
        return ((now_ms - self.offset_ms) // self.interval_ms) * self.interval_ms + self.offset_ms


def dispatch(queue: JobQueue, schedules: list[Schedule]) -> list[Job]:
    """Run one dispatch pass; returns the jobs this pass enqueued (or found enqueued)."""
    dispatched: list[Job] = []
    for schedule in schedules:
        now = queue.clock.now_ms()
        with queue.db.write() as tx:
            state = job_rows.get_schedule(tx, schedule.schedule_id)
            if state is None:
                job_rows.write_schedule(tx, ScheduleState(schedule.schedule_id, now, None, None))
                continue
            base = (
                state.last_occurrence_at
                if state.last_occurrence_at is not None
                else state.observed_from
            )
            occasion = schedule.latest_occasion(now)
            if occasion <= base:
                continue
            job = queue.enqueue_in(
                tx,
                schedule.job_type,
                f"{schedule.schedule_id}@{occasion}",
                {**schedule.payload, "occasion": occasion},
            )
            job_rows.write_schedule(
                tx, ScheduleState(schedule.schedule_id, state.observed_from, occasion, job.id)
            )
            dispatched.append(job)
    return dispatched

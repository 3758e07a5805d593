"""Schedules: missed occasions are skipped, two dispatchers make one job (seed 003)."""

from __future__ import annotations

from typing import Any

import pytest

from postroom.clock import ManualClock
from postroom.jobs.queue import JobQueue, QueuePolicy
from postroom.jobs.schedules import Schedule, dispatch
from postroom.store import jobs as job_rows

MINUTE = 60_000
SCHEDULE = Schedule("digest.every_minute", "digest.send", MINUTE, payload={"kind": "digest"})


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000_000 + 12_345)


@pytest.fixture
def queue(db: Any, clock: ManualClock) -> JobQueue:
    return JobQueue(db, clock, QueuePolicy())


def _jobs(queue: JobQueue) -> list[job_rows.Job]:
    return queue.list(job_type="digest.send", limit=100)


def test_a_new_schedule_is_observed_before_anything_is_dispatched(
    queue: JobQueue, clock: ManualClock
) -> None:
    assert dispatch(queue, [SCHEDULE]) == []
    with queue.db.read() as tx:
        state = job_rows.get_schedule(tx, SCHEDULE.schedule_id)
    assert state is not None
    assert state.observed_from == clock.now_ms()
    assert state.last_occurrence_at is None
    assert _jobs(queue) == []


def test_each_occasion_dispatches_one_job_keyed_by_the_occasion(
    queue: JobQueue, clock: ManualClock
) -> None:
    dispatch(queue, [SCHEDULE])
    clock.advance(MINUTE)
    [job] = dispatch(queue, [SCHEDULE])
    occasion = SCHEDULE.latest_occasion(clock.now_ms())
    assert job.idempotency_key == f"{SCHEDULE.schedule_id}@{occasion}"
    assert job.payload == {"kind": "digest", "occasion": occasion}
    # The same occasion again: nothing new.
    assert dispatch(queue, [SCHEDULE]) == []
    with queue.db.read() as tx:
        state = job_rows.get_schedule(tx, SCHEDULE.schedule_id)
    assert state is not None
    assert (state.last_occurrence_at, state.last_dispatched_job_id) == (occasion, job.id)


def test_missed_occasions_are_skipped_not_replayed(queue: JobQueue, clock: ManualClock) -> None:
    dispatch(queue, [SCHEDULE])
    clock.advance(10 * MINUTE)  # nothing ran for ten occasions
    dispatched = dispatch(queue, [SCHEDULE])
    assert len(dispatched) == 1
    assert dispatched[0].payload["occasion"] == SCHEDULE.latest_occasion(clock.now_ms())
    assert len(_jobs(queue)) == 1


def test_two_instances_dispatching_one_occasion_make_one_job(
    db: Any, database_url: str, clock: ManualClock
) -> None:
    from postroom.store import open_database

    other_db = open_database(database_url, now_ms=0)
    try:
        first = JobQueue(db, clock, QueuePolicy())
        second = JobQueue(other_db, clock, QueuePolicy())
        dispatch(first, [SCHEDULE])
        clock.advance(MINUTE)
        a = dispatch(first, [SCHEDULE])
        # The second instance read the state before the first wrote it: simulate by
        # rewinding the state, as a replica that raced would see it.
        with other_db.write() as tx:
            state = job_rows.get_schedule(tx, SCHEDULE.schedule_id)
            assert state is not None
            job_rows.write_schedule(
                tx, job_rows.ScheduleState(state.schedule_id, state.observed_from, None, None)
            )
        b = dispatch(second, [SCHEDULE])
        assert [j.id for j in a] == [j.id for j in b]
        assert len(_jobs(first)) == 1
    finally:
        other_db.close()


def test_occasions_are_the_same_instants_in_every_process() -> None:
    schedule = Schedule("x", "x.run", interval_ms=3_600_000, offset_ms=15 * MINUTE)
    assert schedule.latest_occasion(3_600_000 * 10 + 15 * MINUTE) == 3_600_000 * 10 + 15 * MINUTE
    assert schedule.latest_occasion(3_600_000 * 10 + 15 * MINUTE - 1) == 3_600_000 * 9 + 15 * MINUTE

"""The job table's statements (seed 003 "Durable background work").

Every state change is one statement. The claim selects the oldest due row of the asked
types and stamps lease owner, expiry and the attempt count in the same statement
(PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite: the single writer). Renew, complete,
retry, dead-letter and release are each an update conditional on the lease owner, so an
attempt that lost its lease writes nothing.

States::

    pending ──claim──▶ claimed ──complete──▶ succeeded
       ▲                 │ │ └──dead_letter──▶ dead_lettered ──drop──▶ dropped
       │                 │ │                        │
       └──retry/release──┘ └─(lease expires: claimable again)
       └───────────────── redrive ◀─────────────────┘
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from postroom.store.db import Engine, Row, Tx, member_of, where_equal

STATES = ("pending", "claimed", "succeeded", "dead_lettered", "dropped")


@dataclass(frozen=True)
class Job:
    id: str
    job_type: str
    idempotency_key: str
    payload: dict[str, Any]
    tenant_id: str | None
    identity_id: str | None
    state: str
    available_at: int
    enqueued_at: int
    state_changed_at: int
    attempt_count: int
    last_failure_classification: str | None
    last_failure_reason: str | None
    lease_owner: str | None
    lease_expires_at: int | None
    enqueued_trace_parent: str | None = None

    @classmethod
    def from_row(cls, row: Row) -> Job:
        return cls(
            id=row["id"],
            job_type=row["job_type"],
            idempotency_key=row["idempotency_key"],
            payload=json.loads(row["payload_json"]),
            tenant_id=row["tenant_id"],
            identity_id=row["identity_id"],
            state=row["state"],
            available_at=row["available_at"],
            enqueued_at=row["enqueued_at"],
            state_changed_at=row["state_changed_at"],
            attempt_count=row["attempt_count"],
            last_failure_classification=row["last_failure_classification"],
            last_failure_reason=row["last_failure_reason"],
            lease_owner=row["lease_owner"],
            lease_expires_at=row["lease_expires_at"],
            enqueued_trace_parent=row["enqueued_trace_parent"],
        )


def get(tx: Tx, job_id: str) -> Job | None:
    row = tx.fetchone("SELECT * FROM jobs WHERE id = %s", (job_id,))
    return None if row is None else Job.from_row(row)


def find_by_key(tx: Tx, job_type: str, idempotency_key: str) -> Job | None:
    row = tx.fetchone(
        "SELECT * FROM jobs WHERE job_type = %s AND idempotency_key = %s",
        (job_type, idempotency_key),
    )
    return None if row is None else Job.from_row(row)


def pending_count(tx: Tx, job_type: str, limit: int) -> int:
    """Pending rows of this type, counted up to ``limit`` (the read stops there)."""
    count = tx.fetchval(
        "SELECT count(*) AS n FROM (SELECT 1 FROM jobs WHERE job_type = %s "
        "AND state = 'pending' LIMIT %s) AS bounded",
        (job_type, limit),
    )
    return int(count)


def insert(
    tx: Tx,
    *,
    job_id: str,
    job_type: str,
    idempotency_key: str,
    payload_json: str,
    tenant_id: str | None,
    identity_id: str | None,
    available_at: int,
    now: int,
    trace_parent: str | None = None,
) -> Job | None:
    """Insert a pending job; None when (type, key) already exists (the caller re-reads)."""
    row = tx.fetchone(
        "INSERT INTO jobs (id, job_type, idempotency_key, payload_json, tenant_id, identity_id,"
        " state, available_at, enqueued_at, state_changed_at, attempt_count,"
        " enqueued_trace_parent)"
        " VALUES (%s, %s, %s, %s, %s, %s, 'pending', %s, %s, %s, 0, %s)"
        " ON CONFLICT (job_type, idempotency_key) DO NOTHING RETURNING *",
        (
            job_id,
            job_type,
            idempotency_key,
            payload_json,
            tenant_id,
            identity_id,
            available_at,
            now,
            now,
            trace_parent,
        ),
    )
    return None if row is None else Job.from_row(row)


def claim(tx: Tx, job_types: list[str], owner: str, now: int, lease_ms: int) -> Job | None:
    """Claim the oldest due job of the given types, in one statement."""
    lock = " FOR UPDATE SKIP LOCKED" if tx.engine is Engine.POSTGRESQL else ""
    among, types = member_of(tx, "job_type", job_types)
    sql = (
        "UPDATE jobs SET state = 'claimed', lease_owner = %s, lease_expires_at = %s,"
        " attempt_count = attempt_count + 1, state_changed_at = %s"
        " WHERE id = (SELECT id FROM jobs"
        f"  WHERE {among}"
        "   AND state IN ('pending', 'claimed')"
        "   AND ((state = 'pending' AND available_at <= %s)"
        "     OR (state = 'claimed' AND lease_expires_at <= %s))"
        f"  ORDER BY available_at, id LIMIT 1{lock})"
        " RETURNING *"
    )
    row = tx.fetchone(sql, (owner, now + lease_ms, now, *types, now, now))
    return None if row is None else Job.from_row(row)


def renew(tx: Tx, job_id: str, owner: str, now: int, lease_ms: int) -> bool:
    return (
        tx.execute(
            "UPDATE jobs SET lease_expires_at = %s"
            " WHERE id = %s AND state = 'claimed' AND lease_owner = %s",
            (now + lease_ms, job_id, owner),
        )
        == 1
    )


def complete(tx: Tx, job_id: str, owner: str, now: int) -> bool:
    return (
        tx.execute(
            "UPDATE jobs SET state = 'succeeded', lease_owner = NULL, lease_expires_at = NULL,"
            " state_changed_at = %s WHERE id = %s AND state = 'claimed' AND lease_owner = %s",
            (now, job_id, owner),
        )
        == 1
    )


def retry(
    tx: Tx, job_id: str, owner: str, now: int, available_at: int, classification: str, reason: str
) -> bool:
    return (
        tx.execute(
            "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,"
            " available_at = %s, state_changed_at = %s,"
            " last_failure_classification = %s, last_failure_reason = %s"
            " WHERE id = %s AND state = 'claimed' AND lease_owner = %s",
            (available_at, now, classification, reason, job_id, owner),
        )
        == 1
    )


def dead_letter(
    tx: Tx, job_id: str, owner: str, now: int, classification: str, reason: str
) -> bool:
    return (
        tx.execute(
            "UPDATE jobs SET state = 'dead_lettered', lease_owner = NULL, lease_expires_at = NULL,"
            " state_changed_at = %s, last_failure_classification = %s, last_failure_reason = %s"
            " WHERE id = %s AND state = 'claimed' AND lease_owner = %s",
            (now, classification, reason, job_id, owner),
        )
        == 1
    )


def release(tx: Tx, job_id: str, owner: str, now: int) -> bool:
    """Give the job back at once, with the attempt the claim counted."""
    return (
        tx.execute(
            "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,"
            " attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END,"
            " available_at = %s, state_changed_at = %s"
            " WHERE id = %s AND state = 'claimed' AND lease_owner = %s",
            (now, now, job_id, owner),
        )
        == 1
    )


def redrive(tx: Tx, job_id: str, now: int) -> bool:
    """A dead letter back to pending, due now, with its attempts handed back."""
    return (
        tx.execute(
            "UPDATE jobs SET state = 'pending', attempt_count = 0, available_at = %s,"
            " state_changed_at = %s WHERE id = %s AND state = 'dead_lettered'",
            (now, now, job_id),
        )
        == 1
    )


def drop(tx: Tx, job_id: str, now: int) -> bool:
    """Write a dead letter off; the row stays and keeps its key."""
    return (
        tx.execute(
            "UPDATE jobs SET state = 'dropped', state_changed_at = %s"
            " WHERE id = %s AND state = 'dead_lettered'",
            (now, job_id),
        )
        == 1
    )


def list_jobs(
    tx: Tx,
    *,
    state: str | None = None,
    job_type: str | None = None,
    limit: int = 50,
) -> list[Job]:
    clause, params = where_equal(state=state, job_type=job_type)
    rows = tx.fetchall(
        f"SELECT * FROM jobs{clause} ORDER BY state_changed_at DESC, id DESC LIMIT %s",
        (*params, limit),
    )
    return [Job.from_row(r) for r in rows]


def count_by_state(tx: Tx) -> dict[tuple[str, str], int]:
    rows = tx.fetchall("SELECT job_type, state, count(*) AS n FROM jobs GROUP BY job_type, state")
    return {(r["job_type"], r["state"]): int(r["n"]) for r in rows}


# --- schedules (seed 003 job_schedules) ------------------------------------------------


@dataclass(frozen=True)
class ScheduleState:
    schedule_id: str
    observed_from: int
    last_occurrence_at: int | None
    last_dispatched_job_id: str | None


def get_schedule(tx: Tx, schedule_id: str) -> ScheduleState | None:
    row = tx.fetchone("SELECT * FROM job_schedules WHERE schedule_id = %s", (schedule_id,))
    if row is None:
        return None
    return ScheduleState(
        row["schedule_id"],
        row["observed_from"],
        row["last_occurrence_at"],
        row["last_dispatched_job_id"],
    )


def write_schedule(tx: Tx, state: ScheduleState) -> None:
    """One statement whether the row is there or not."""
    tx.execute(
        "INSERT INTO job_schedules (schedule_id, observed_from, last_occurrence_at,"
        " last_dispatched_job_id) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (schedule_id) DO UPDATE SET"
        " last_occurrence_at = excluded.last_occurrence_at,"
        " last_dispatched_job_id = excluded.last_dispatched_job_id",
        (
            state.schedule_id,
            state.observed_from,
            state.last_occurrence_at,
            state.last_dispatched_job_id,
        ),
    )

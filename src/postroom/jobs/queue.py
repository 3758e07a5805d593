"""The durable job queue: enqueue, claim and settle work, over ``store.jobs``.

What it guarantees is at-least-once execution: (type, idempotency key) is unique across
the whole table, including finished rows, so the same execution is never enqueued twice;
a job held by a process that died is taken over once its lease runs out; an attempt that
lost its lease can no longer write its result. A handler with outside effects must
tolerate being run again after a crash.

Backpressure is approximate by design (seed 003: "this is backpressure rather than an
invariant"): the pending depth of a type is read with a bounded count, and each count
lets the process enqueue up to half the remaining room within the next second without
counting again — a deep queue is counted about once a second, a nearly full one on every
enqueue.

Failures are classified before the attempt budget is consulted: a transient failure is
retried after a jittered exponential delay (written to ``available_at``) until
``jobs.max_attempts``; a permanent one dead-letters at once. The reason stored is a type
name and a stable code, never an exception message (it could quote mail).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from postroom.clock import Clock
from postroom.errors import InvalidInput, NotFound, QueueFull
from postroom.ids import new_id
from postroom.store import jobs as job_rows
from postroom.store.db import Database, Tx
from postroom.store.jobs import Job

MAX_PAYLOAD_BYTES = 8192
DEPTH_RECHECK_S = 1.0
_TYPE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")


@dataclass(frozen=True)
class QueuePolicy:
    lease_ms: int = 60_000
    max_attempts: int = 8
    max_queue_depth: int = 100_000
    retry_base_ms: int = 5_000
    retry_max_ms: int = 3_600_000


def backoff_ms(attempt: int, policy: QueuePolicy, rng: random.Random | None = None) -> int:
    """Delay before the next attempt after ``attempt`` failed: base·2^(n-1), capped, jittered.

    "Equal jitter": half the delay is fixed, half random, so retries of jobs that failed
    together spread out without any retrying almost at once.
    """
    exponent = min(max(attempt, 1) - 1, 40)
    ceiling = min(policy.retry_max_ms, policy.retry_base_ms * (2**exponent))
    draw = (rng or random).random()
    return int(ceiling / 2 + draw * ceiling / 2)


class JobQueue:
    """Queue operations with the clock and policy of one App."""

    def __init__(self, db: Database, clock: Clock, policy: QueuePolicy) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy
        # job type -> (monotonic deadline, enqueues allowed before the next count)
        self._depth_budget: dict[str, tuple[float, int]] = {}
        self._budget_lock = threading.Lock()

    def _depth_allows(self, tx: Tx, job_type: str) -> bool:
        """Backpressure: False when the type's pending depth is at its bound.

        A count grants a budget of half the remaining room, valid for a second, so a deep
        but not full queue is counted about once a second and a nearly full one on every
        enqueue."""
        now = time.monotonic()
        with self._budget_lock:
            deadline, budget = self._depth_budget.get(job_type, (0.0, 0))
            if deadline > now and budget > 0:
                self._depth_budget[job_type] = (deadline, budget - 1)
                return True
        depth = self.policy.max_queue_depth
        count = job_rows.pending_count(tx, job_type, depth)
        if count >= depth:
            return False
        with self._budget_lock:
            self._depth_budget[job_type] = (now + DEPTH_RECHECK_S, (depth - count) // 2)
        return True

    # --- enqueue -----------------------------------------------------------------------

    def enqueue(
        self,
        job_type: str,
        idempotency_key: str,
        payload: Mapping[str, Any] | None = None,
        *,
        available_at: int | None = None,
        tenant_id: str | None = None,
        identity_id: str | None = None,
    ) -> Job:
        with self.db.write() as tx:
            return self.enqueue_in(
                tx,
                job_type,
                idempotency_key,
                payload,
                available_at=available_at,
                tenant_id=tenant_id,
                identity_id=identity_id,
            )

    def enqueue_in(
        self,
        tx: Tx,
        job_type: str,
        idempotency_key: str,
        payload: Mapping[str, Any] | None = None,
        *,
        available_at: int | None = None,
        tenant_id: str | None = None,
        identity_id: str | None = None,
    ) -> Job:
        """Enqueue inside the caller's transaction (so the job commits with the change).

        An execution already enqueued under (type, key), in any state, is answered with
        that job. A type whose pending depth is at the bound refuses with QueueFull.
        """
        if not _TYPE_RE.match(job_type) or len(job_type) > 64:
            raise InvalidInput(f"job type {job_type!r} is not a dotted lower-case name")
        if not idempotency_key or len(idempotency_key) > 512:
            raise InvalidInput("a job's idempotency key must be 1-512 characters")
        payload_json = json.dumps(dict(payload or {}), separators=(",", ":"), sort_keys=True)
        if len(payload_json.encode()) > MAX_PAYLOAD_BYTES:
            raise InvalidInput(
                f"job payload is over {MAX_PAYLOAD_BYTES} bytes: carry references, not content"
            )
        if not self._depth_allows(tx, job_type):
            # At the bound, work already queued is still answered with its job.
            existing = job_rows.find_by_key(tx, job_type, idempotency_key)
            if existing is not None:
                return existing
            raise QueueFull(
                f"the {job_type} queue holds {self.policy.max_queue_depth} pending jobs "
                "(jobs.max_queue_depth); try again later"
            )
        now = self.clock.now_ms()
        # Insert first: a new execution (the common case) costs one statement, and the
        # unique (type, key) index answers an existing one.
        job = job_rows.insert(
            tx,
            job_id=new_id("job"),
            job_type=job_type,
            idempotency_key=idempotency_key,
            payload_json=payload_json,
            tenant_id=tenant_id,
            identity_id=identity_id,
            available_at=now if available_at is None else available_at,
            now=now,
        )
        if job is None:
            # Already enqueued (in any state), or an identical enqueue won a race.
            job = job_rows.find_by_key(tx, job_type, idempotency_key)
            assert job is not None
        return job

    # --- claim and settle --------------------------------------------------------------

    def claim(self, job_types: list[str], owner: str, lease_ms: int | None = None) -> Job | None:
        if not job_types:
            return None
        lease = self.policy.lease_ms if lease_ms is None else lease_ms
        with self.db.write() as tx:
            return job_rows.claim(tx, job_types, owner, self.clock.now_ms(), lease)

    def renew(self, job: Job, owner: str, lease_ms: int | None = None) -> bool:
        lease = self.policy.lease_ms if lease_ms is None else lease_ms
        with self.db.write() as tx:
            return job_rows.renew(tx, job.id, owner, self.clock.now_ms(), lease)

    def complete(self, job: Job, owner: str) -> bool:
        with self.db.write() as tx:
            return job_rows.complete(tx, job.id, owner, self.clock.now_ms())

    def release(self, job: Job, owner: str) -> bool:
        with self.db.write() as tx:
            return job_rows.release(tx, job.id, owner, self.clock.now_ms())

    def fail(self, job: Job, owner: str, *, transient: bool, reason: str) -> str | None:
        """Settle a failed attempt: retry or dead-letter. Returns the new state, or None
        when the lease was lost (nothing written)."""
        now = self.clock.now_ms()
        classification = "transient" if transient else "permanent"
        with self.db.write() as tx:
            if transient and job.attempt_count < self.policy.max_attempts:
                available = now + backoff_ms(job.attempt_count, self.policy)
                ok = job_rows.retry(tx, job.id, owner, now, available, classification, reason)
                return "pending" if ok else None
            ok = job_rows.dead_letter(tx, job.id, owner, now, classification, reason)
            return "dead_lettered" if ok else None

    # --- operator actions --------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        with self.db.read() as tx:
            job = job_rows.get(tx, job_id)
        if job is None:
            raise NotFound(f"no job {job_id}", code="job_not_found")
        return job

    def redrive(self, job_id: str) -> bool:
        """Dead letter → pending (attempts handed back). False if it was not a dead letter."""
        with self.db.write() as tx:
            if job_rows.get(tx, job_id) is None:
                raise NotFound(f"no job {job_id}", code="job_not_found")
            return job_rows.redrive(tx, job_id, self.clock.now_ms())

    def drop(self, job_id: str) -> bool:
        """Dead letter → dropped. False if it was not a dead letter."""
        with self.db.write() as tx:
            if job_rows.get(tx, job_id) is None:
                raise NotFound(f"no job {job_id}", code="job_not_found")
            return job_rows.drop(tx, job_id, self.clock.now_ms())

    def list(
        self, *, state: str | None = None, job_type: str | None = None, limit: int = 50
    ) -> list[Job]:
        if state is not None and state not in job_rows.STATES:
            raise InvalidInput(f"unknown job state {state!r} (one of {', '.join(job_rows.STATES)})")
        with self.db.read() as tx:
            return job_rows.list_jobs(tx, state=state, job_type=job_type, limit=limit)

    def counts(self) -> dict[tuple[str, str], int]:
        with self.db.read() as tx:
            return job_rows.count_by_state(tx)

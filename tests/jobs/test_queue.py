"""The durable job queue's contract (seed 003), on both engines."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from postroom.clock import ManualClock
from postroom.errors import InvalidInput, NotFound, QueueFull
from postroom.jobs.queue import JobQueue, QueuePolicy, backoff_ms
from postroom.store import jobs as job_rows

POLICY = QueuePolicy(
    lease_ms=10_000, max_attempts=3, max_queue_depth=5, retry_base_ms=1_000, retry_max_ms=60_000
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000_000)


@pytest.fixture
def queue(db: Any, clock: ManualClock) -> JobQueue:
    return JobQueue(db, clock, POLICY)


def _row(queue: JobQueue, job_id: str) -> dict[str, Any]:
    with queue.db.read() as tx:
        row = tx.fetchone("SELECT * FROM jobs WHERE id = %s", (job_id,))
    assert row is not None
    return row


# --- enqueue -----------------------------------------------------------------------


def test_enqueue_is_idempotent_on_type_and_key(queue: JobQueue) -> None:
    first = queue.enqueue("mail.index", "msg_1", {"message": "msg_1"})
    again = queue.enqueue("mail.index", "msg_1", {"message": "something else"})
    other_type = queue.enqueue("mail.embed", "msg_1")
    assert again.id == first.id
    assert again.payload == {"message": "msg_1"}
    assert other_type.id != first.id
    with queue.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM jobs") == 2


def test_a_finished_job_keeps_its_key(queue: JobQueue) -> None:
    job = queue.enqueue("mail.index", "msg_1")
    claimed = queue.claim(["mail.index"], "w1")
    assert claimed is not None and queue.complete(claimed, "w1")
    replay = queue.enqueue("mail.index", "msg_1")
    assert replay.id == job.id
    assert replay.state == "succeeded"


def test_pending_depth_is_bounded_but_known_work_is_answered(queue: JobQueue) -> None:
    for n in range(POLICY.max_queue_depth):
        queue.enqueue("mail.index", f"msg_{n}")
    with pytest.raises(QueueFull, match="jobs.max_queue_depth"):
        queue.enqueue("mail.index", "msg_new")
    # Already queued: answered with its job, not refused.
    assert queue.enqueue("mail.index", "msg_0").idempotency_key == "msg_0"
    # Other types are not affected.
    queue.enqueue("mail.embed", "msg_new")
    # Claimed work no longer counts as pending depth.
    assert queue.claim(["mail.index"], "w1") is not None
    queue.enqueue("mail.index", "msg_new")


@pytest.mark.parametrize(
    ("job_type", "key", "payload"),
    [
        ("Mail.Index", "k", {}),
        ("mail index", "k", {}),
        ("mail.index", "", {}),
        ("mail.index", "k", {"body": "x" * 9000}),
    ],
)
def test_enqueue_refuses_bad_input(queue: JobQueue, job_type: str, key: str, payload: Any) -> None:
    with pytest.raises(InvalidInput):
        queue.enqueue(job_type, key, payload)
    with queue.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM jobs") == 0


def test_enqueue_commits_with_the_callers_transaction(queue: JobQueue) -> None:
    with pytest.raises(RuntimeError), queue.db.write() as tx:
        queue.enqueue_in(tx, "mail.index", "msg_1")
        raise RuntimeError("the change failed")
    with queue.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM jobs") == 0


# --- claim ---------------------------------------------------------------------------


def test_claim_takes_the_oldest_due_job_of_the_asked_types(
    queue: JobQueue, clock: ManualClock
) -> None:
    now = clock.now_ms()
    later = queue.enqueue("a.job", "later", available_at=now + 5_000)
    old = queue.enqueue("a.job", "old", available_at=now - 2_000)
    new = queue.enqueue("a.job", "new", available_at=now - 1_000)
    queue.enqueue("b.job", "other", available_at=now - 9_000)
    assert _claimed_id(queue, "a.job") == old.id
    assert _claimed_id(queue, "a.job") == new.id
    assert queue.claim(["a.job"], "w") is None  # `later` is not due yet
    clock.advance(5_000)
    claimed = queue.claim(["a.job"], "w")
    assert claimed is not None and claimed.id == later.id


def _claimed_id(queue: JobQueue, job_type: str) -> str | None:
    job = queue.claim([job_type], "w")
    return None if job is None else job.id


def test_claim_counts_the_attempt_and_stamps_the_lease(queue: JobQueue, clock: ManualClock) -> None:
    queue.enqueue("a.job", "k")
    job = queue.claim(["a.job"], "owner-1")
    assert job is not None
    assert job.state == "claimed"
    assert job.attempt_count == 1
    assert job.lease_owner == "owner-1"
    assert job.lease_expires_at == clock.now_ms() + POLICY.lease_ms


def test_expired_lease_is_taken_over_and_the_late_writer_writes_nothing(
    queue: JobQueue, clock: ManualClock
) -> None:
    queue.enqueue("a.job", "k")
    first = queue.claim(["a.job"], "lost-owner")
    assert first is not None
    assert queue.claim(["a.job"], "other") is None  # lease still held
    clock.advance(POLICY.lease_ms)
    second = queue.claim(["a.job"], "new-owner")
    assert second is not None and second.id == first.id
    assert second.attempt_count == 2
    before = _row(queue, first.id)
    # Everything the lost attempt might still try is refused.
    assert not queue.complete(first, "lost-owner")
    assert not queue.renew(first, "lost-owner")
    assert not queue.release(first, "lost-owner")
    assert queue.fail(first, "lost-owner", transient=True, reason="X:y") is None
    assert _row(queue, first.id) == before
    assert queue.complete(second, "new-owner")
    assert _row(queue, first.id)["state"] == "succeeded"


def test_renew_extends_the_lease(queue: JobQueue, clock: ManualClock) -> None:
    queue.enqueue("a.job", "k")
    job = queue.claim(["a.job"], "w")
    assert job is not None
    clock.advance(POLICY.lease_ms - 1)
    assert queue.renew(job, "w")
    clock.advance(POLICY.lease_ms - 1)
    assert queue.claim(["a.job"], "thief") is None


# --- settling ------------------------------------------------------------------------


def test_transient_failure_retries_with_backoff_and_stores_only_a_code(
    queue: JobQueue, clock: ManualClock
) -> None:
    queue.enqueue("a.job", "k")
    job = queue.claim(["a.job"], "w")
    assert job is not None
    assert queue.fail(job, "w", transient=True, reason="TimeoutError:ETIMEDOUT") == "pending"
    row = _row(queue, job.id)
    assert row["state"] == "pending"
    assert row["last_failure_classification"] == "transient"
    assert row["last_failure_reason"] == "TimeoutError:ETIMEDOUT"
    delay = row["available_at"] - clock.now_ms()
    assert POLICY.retry_base_ms / 2 <= delay <= POLICY.retry_base_ms
    assert row["lease_owner"] is None and row["lease_expires_at"] is None
    assert queue.claim(["a.job"], "w") is None  # not due yet
    clock.advance(delay)
    assert queue.claim(["a.job"], "w") is not None


def test_transient_failures_dead_letter_when_attempts_run_out(
    queue: JobQueue, clock: ManualClock
) -> None:
    queue.enqueue("a.job", "k")
    for attempt in range(1, POLICY.max_attempts + 1):
        job = queue.claim(["a.job"], f"w{attempt}")
        assert job is not None and job.attempt_count == attempt
        outcome = queue.fail(job, f"w{attempt}", transient=True, reason="X:flaky")
        clock.advance(POLICY.retry_max_ms)
    assert outcome == "dead_lettered"
    row = _row(queue, job.id)
    assert row["state"] == "dead_lettered"
    assert row["attempt_count"] == POLICY.max_attempts
    assert queue.claim(["a.job"], "w") is None  # a dead letter is inert


def test_permanent_failure_dead_letters_on_the_first_attempt(queue: JobQueue) -> None:
    queue.enqueue("a.job", "k")
    job = queue.claim(["a.job"], "w")
    assert job is not None
    assert queue.fail(job, "w", transient=False, reason="PermanentFailure:refused") == (
        "dead_lettered"
    )
    row = _row(queue, job.id)
    assert (row["state"], row["attempt_count"], row["last_failure_classification"]) == (
        "dead_lettered",
        1,
        "permanent",
    )


def test_release_gives_the_attempt_back(queue: JobQueue) -> None:
    queue.enqueue("a.job", "k")
    job = queue.claim(["a.job"], "w")
    assert job is not None
    assert queue.release(job, "w")
    row = _row(queue, job.id)
    assert (row["state"], row["attempt_count"], row["lease_owner"]) == ("pending", 0, None)
    again = queue.claim(["a.job"], "w2")
    assert again is not None and again.attempt_count == 1


# --- dead letters ----------------------------------------------------------------------


def _dead_letter(queue: JobQueue, key: str) -> str:
    queue.enqueue("d.job", key)
    job = queue.claim(["d.job"], "w")
    assert job is not None
    queue.fail(job, "w", transient=False, reason="X:refused")
    return job.id


def test_redrive_returns_a_dead_letter_due_now_with_attempts_handed_back(
    queue: JobQueue, clock: ManualClock
) -> None:
    job_id = _dead_letter(queue, "k")
    clock.advance(1_000)
    assert queue.redrive(job_id)
    row = _row(queue, job_id)
    assert (row["state"], row["attempt_count"], row["available_at"]) == (
        "pending",
        0,
        clock.now_ms(),
    )
    assert not queue.redrive(job_id)  # not a dead letter any more: nothing changes
    again = queue.claim(["d.job"], "w")
    assert again is not None and again.id == job_id


def test_drop_is_a_fifth_state_that_keeps_the_key(queue: JobQueue) -> None:
    job_id = _dead_letter(queue, "k")
    assert queue.drop(job_id)
    assert not queue.drop(job_id)
    assert not queue.redrive(job_id)
    row = _row(queue, job_id)
    assert row["state"] == "dropped"
    assert row["last_failure_reason"] == "X:refused"
    assert queue.enqueue("d.job", "k").id == job_id


def test_operator_actions_on_unknown_jobs(queue: JobQueue) -> None:
    with pytest.raises(NotFound):
        queue.redrive("job_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    with pytest.raises(NotFound):
        queue.drop("job_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    with pytest.raises(InvalidInput):
        queue.list(state="finished")


def test_pending_live_jobs_cannot_be_dropped(queue: JobQueue) -> None:
    job = queue.enqueue("a.job", "k")
    assert not queue.drop(job.id)
    assert _row(queue, job.id)["state"] == "pending"


# --- concurrency ---------------------------------------------------------------------


def test_concurrent_claims_in_threads_never_share_a_job(db: Any) -> None:
    queue = JobQueue(db, ManualClock(), QueuePolicy(lease_ms=60_000, max_queue_depth=1_000))
    with db.write() as tx:
        for n in range(200):
            queue.enqueue_in(tx, "a.job", f"k{n}")
    claimed: list[str] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        while (job := queue.claim(["a.job"], name)) is not None:
            with lock:
                claimed.append(job.id)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 200
    assert len(set(claimed)) == 200


def test_backoff_grows_and_is_capped() -> None:
    policy = QueuePolicy(retry_base_ms=1_000, retry_max_ms=8_000)
    low = [backoff_ms(n, policy, rng=_Fixed(0.0)) for n in range(1, 7)]
    high = [backoff_ms(n, policy, rng=_Fixed(1.0)) for n in range(1, 7)]
    assert low == [500, 1_000, 2_000, 4_000, 4_000, 4_000]
    assert high == [1_000, 2_000, 4_000, 8_000, 8_000, 8_000]


class _Fixed:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def test_job_counts_by_state(queue: JobQueue) -> None:
    queue.enqueue("a.job", "1")
    queue.enqueue("a.job", "2")
    _dead_letter(queue, "3")
    with queue.db.read() as tx:
        counts = job_rows.count_by_state(tx)
    assert counts[("a.job", "pending")] == 2
    assert counts[("d.job", "dead_lettered")] == 1

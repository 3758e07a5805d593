"""The worker: threads that claim jobs, run their handlers and settle them.

Each thread loops: claim one due job of the registered types (a fresh lease owner per
attempt), run its handler, then complete / retry / dead-letter / release it with a write
conditional on that owner. A renewer thread extends the leases of running jobs every
third of the lease, so only a process that stopped (or hung past its lease) loses its
jobs to another worker. A scheduler thread runs the schedule dispatch pass.

Shutdown (SIGTERM, Ctrl-C, ``stop()``): no new claims; running handlers see
``ctx.stopping`` and may give their job back; after the grace period every job still
held is released (its attempt handed back), so another worker takes it at once.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from postroom.jobs.handlers import HandlerRegistry, JobContext, ShutdownRequested, classify
from postroom.jobs.schedules import Schedule, dispatch
from postroom.store.jobs import Job

if TYPE_CHECKING:
    from postroom.app import App

log = logging.getLogger("postroom.worker")


@dataclass
class _Held:
    job: Job
    owner: str
    lease_lost: bool = False


@dataclass
class WorkerStats:
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    lost: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


class Worker:
    def __init__(
        self,
        app: App,
        registry: HandlerRegistry,
        *,
        concurrency: int = 1,
        job_types: list[str] | None = None,
        schedules: list[Schedule] | None = None,
        poll_interval_s: float = 0.5,
        name: str | None = None,
    ) -> None:
        self.app = app
        self.registry = registry
        self.concurrency = max(1, concurrency)
        wanted = registry.job_types if job_types is None else job_types
        unknown = sorted(set(wanted) - set(registry.job_types))
        if unknown:
            raise ValueError(f"no handler registered for {', '.join(unknown)}")
        self.job_types = sorted(wanted)
        self.schedules = list(schedules or [])
        self.poll_interval_s = poll_interval_s
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.stopping = threading.Event()
        self.stats = WorkerStats()
        self._held: dict[str, _Held] = {}
        self._held_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # --- one attempt -------------------------------------------------------------------

    def run_once(self) -> bool:
        """Claim and run at most one job in this thread; True if one ran."""
        queue = self.app.queue
        owner = f"{self.name}:{secrets.token_hex(6)}"
        job = queue.claim(self.job_types, owner)
        if job is None:
            return False
        if job.attempt_count > queue.policy.max_attempts:
            # Claimed again after its lease ran out more times than the budget allows:
            # the job keeps killing or hanging its workers. Stop it here.
            queue.fail(job, owner, transient=True, reason="LeaseExpired:attempts_exhausted")
            self.stats.dead_lettered += 1
            log.warning("job %s (%s) dead-lettered: attempts exhausted", job.id, job.job_type)
            return True
        handler = self.registry.get(job.job_type)
        assert handler is not None
        held = _Held(job, owner)
        with self._held_lock:
            self._held[job.id] = held
        try:
            ctx = JobContext(self.app, job, owner, self.stopping)
            try:
                handler(ctx)
            except ShutdownRequested:
                if queue.release(job, owner):
                    self.stats.released += 1
                return True
            except Exception as exc:
                transient, reason = classify(exc)
                outcome = queue.fail(job, owner, transient=transient, reason=reason)
                if outcome == "pending":
                    self.stats.retried += 1
                elif outcome == "dead_lettered":
                    self.stats.dead_lettered += 1
                else:
                    self.stats.lost += 1
                log.warning(
                    "job %s (%s) attempt %d failed: %s -> %s",
                    job.id,
                    job.job_type,
                    job.attempt_count,
                    reason,
                    outcome or "lease lost, nothing written",
                )
                return True
            if queue.complete(job, owner):
                self.stats.completed += 1
                self.stats.by_type[job.job_type] = self.stats.by_type.get(job.job_type, 0) + 1
            else:
                self.stats.lost += 1
                log.warning("job %s finished after losing its lease; result not written", job.id)
            return True
        finally:
            with self._held_lock:
                self._held.pop(job.id, None)

    # --- threads -----------------------------------------------------------------------

    def _loop(self) -> None:
        backoff = self.poll_interval_s
        while not self.stopping.is_set():
            try:
                ran = self.run_once()
                backoff = self.poll_interval_s
            except Exception:
                log.exception("worker loop error; pausing")
                ran = False
                backoff = min(backoff * 2, 30.0)
            if not ran:
                self.stopping.wait(backoff)

    def _renew_loop(self) -> None:
        interval = max(self.app.queue.policy.lease_ms / 3000, 0.1)
        while not self.stopping.wait(interval):
            self.renew_held()

    def renew_held(self) -> None:
        with self._held_lock:
            held = list(self._held.values())
        for item in held:
            try:
                if not self.app.queue.renew(item.job, item.owner):
                    item.lease_lost = True
            except Exception:
                log.exception("lease renewal failed for job %s", item.job.id)

    def _schedule_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                dispatch(self.app.queue, self.schedules)
            except Exception:
                log.exception("schedule dispatch failed")
            self.stopping.wait(max(self.poll_interval_s, 1.0))

    def start(self) -> None:
        if not self.job_types:
            raise ValueError("the worker has no job types to run")
        targets = [self._loop] * self.concurrency + [self._renew_loop]
        if self.schedules:
            targets.append(self._schedule_loop)
        for index, target in enumerate(targets):
            thread = threading.Thread(target=target, name=f"postroom-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info(
            "worker %s started: %d threads, types %s", self.name, self.concurrency, self.job_types
        )

    def stop(self, grace_s: float = 10.0) -> int:
        """Stop claiming, wait up to ``grace_s`` for running jobs, release the rest.

        Returns the number of jobs released."""
        self.stopping.set()
        deadline = threading.Event()
        timer = threading.Timer(grace_s, deadline.set)
        timer.start()
        try:
            for thread in self._threads:
                while thread.is_alive() and not deadline.is_set():
                    thread.join(timeout=0.05)
        finally:
            timer.cancel()
        with self._held_lock:
            still_held = list(self._held.values())
        released = 0
        for item in still_held:
            try:
                if self.app.queue.release(item.job, item.owner):
                    released += 1
            except Exception:
                log.exception("could not release job %s", item.job.id)
        self.stats.released += released
        if released:
            log.info("released %d running job(s) at shutdown", released)
        return released

    def held_jobs(self) -> list[Job]:
        with self._held_lock:
            return [item.job for item in self._held.values()]

"""The App object: settings, database, blobs, job queue, clock — built once, passed in.

Entry points (CLI commands, servers, tests) call :func:`build_app` once and hand the
result to services. Nothing in Postroom keeps the database or the settings in a module
global.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from postroom.clock import Clock, SystemClock
from postroom.config import Settings
from postroom.errors import DataDirError
from postroom.jobs.queue import JobQueue, QueuePolicy
from postroom.keyring import Keyring
from postroom.metrics import Metrics
from postroom.store import Database, open_database
from postroom.store.blobs import BlobStore, FilesystemBlobStore


@dataclass
class App:
    settings: Settings
    db: Database
    blobs: BlobStore
    queue: JobQueue
    clock: Clock
    keyring: Keyring | None = None
    metrics: Metrics = field(default_factory=Metrics)
    # Per-process objects services build once (e.g. outbound transports with pools).
    services: dict[str, Any] = field(default_factory=dict)

    def keys(self) -> Keyring:
        """The keyring; built apps that will seal or hash always carry one."""
        if self.keyring is None:
            self.keyring = Keyring.load(self.settings)
        return self.keyring

    def close(self) -> None:
        for service in self.services.values():
            for item in service.values() if isinstance(service, dict) else (service,):
                closer = getattr(item, "close", None)
                if callable(closer):
                    closer()
        self.services.clear()
        self.db.close()


def queue_policy(settings: Settings) -> QueuePolicy:
    return QueuePolicy(
        lease_ms=settings.jobs_lease_seconds * 1000,
        max_attempts=settings.jobs_max_attempts,
        max_queue_depth=settings.jobs_max_queue_depth,
        retry_base_ms=int(settings.jobs_retry_base_seconds * 1000),
        retry_max_ms=int(settings.jobs_retry_max_seconds * 1000),
    )


def build_blobs(settings: Settings) -> BlobStore:
    # blobs.backend has one value today; S3 and database backends plug in here.
    return FilesystemBlobStore(settings.blobs_path)


def build_app(
    settings: Settings,
    *,
    clock: Clock | None = None,
    load_keys: bool = True,
    create_database: bool = False,
    apply_migrations: bool | None = None,
) -> App:
    """Open everything the settings name. Raises a PostroomError naming what is wrong."""
    clock = clock or SystemClock()
    if settings.is_sqlite and not settings.sqlite_path().parent.is_dir():
        raise DataDirError(
            f"data folder {settings.sqlite_path().parent} does not exist; run `postroom init`"
        )
    # The database first: a foreign, newer or not-yet-migrated database is the problem to
    # report, whatever else is missing.
    db = open_database(
        settings.database_url,
        now_ms=clock.now_ms(),
        create=create_database,
        apply_pending=apply_migrations,
        busy_timeout_ms=settings.database_busy_timeout_ms,
        pool_size=settings.database_pool_size,
    )
    try:
        keyring = Keyring.load(settings) if load_keys else None
    except BaseException:
        db.close()
        raise
    queue = JobQueue(db, clock, queue_policy(settings))
    return App(settings, db, build_blobs(settings), queue, clock, keyring)

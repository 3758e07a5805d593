"""Job handlers: the registry, the context a handler runs with, and how failures read.

A handler is a function ``handler(ctx: JobContext) -> None``. Returning means done.
Raising :class:`TransientFailure` (or an error that can clear on its own: a timeout, a
dropped connection, a busy database) asks for another attempt; raising
:class:`PermanentFailure` or anything unrecognised ends the job as a dead letter.
Raising :class:`ShutdownRequested` (for example after seeing ``ctx.stopping``) gives the
job back without spending an attempt.
"""

from __future__ import annotations

import errno
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from postroom.errors import ConfigError, DatabaseBusy, DatabaseUnavailable, PostroomError
from postroom.store.jobs import Job

if TYPE_CHECKING:
    from postroom.app import App


class JobFailure(Exception):
    """A failure a handler reports with a stable code (the code is stored, not the text)."""

    transient = False

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


class TransientFailure(JobFailure):
    transient = True


class PermanentFailure(JobFailure):
    transient = False


class ShutdownRequested(Exception):
    """The handler stopped because the worker is shutting down; the job is released."""


_TRANSIENT_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ETIMEDOUT,
    errno.EPIPE,
    errno.EAGAIN,
}


# SQLSTATEs that say "try again": deadlock detected, serialization failure.
_RETRYABLE_SQLSTATES = {"40P01", "40001"}


def classify(exc: BaseException) -> tuple[bool, str]:
    """(transient?, reason) for a failed attempt. The reason never quotes the message."""
    name = type(exc).__name__
    if isinstance(exc, JobFailure):
        return exc.transient, f"{name}:{exc.code}"
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate in _RETRYABLE_SQLSTATES:
        return True, f"{name}:{sqlstate}"
    if isinstance(exc, DatabaseBusy | DatabaseUnavailable):
        return True, f"{name}:{exc.code}"
    if isinstance(exc, PostroomError):
        return False, f"{name}:{exc.code}"
    if isinstance(exc, TimeoutError | ConnectionError):
        return True, f"{name}:{errno.errorcode.get(exc.errno or 0, 'none')}"
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True, f"{name}:{errno.errorcode.get(exc.errno or 0, 'none')}"
    return False, f"{name}:unclassified"


@dataclass
class JobContext:
    """What a handler gets: the app, the job, and the worker's stop signal."""

    app: App
    job: Job
    owner: str
    stopping: threading.Event

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload

    def check_stopping(self) -> None:
        """Raise ShutdownRequested if the worker is stopping (call between steps)."""
        if self.stopping.is_set():
            raise ShutdownRequested()


Handler = Callable[[JobContext], None]


@dataclass
class HandlerRegistry:
    """Job type → handler; a worker claims only the types registered here."""

    handlers: dict[str, Handler] = field(default_factory=dict)

    def register(self, job_type: str, handler: Handler) -> None:
        if job_type in self.handlers:
            raise ValueError(f"a handler for {job_type} is already registered")
        self.handlers[job_type] = handler

    def get(self, job_type: str) -> Handler | None:
        return self.handlers.get(job_type)

    @property
    def job_types(self) -> list[str]:
        return sorted(self.handlers)

    def load_module(self, module_name: str) -> None:
        """Import a plugin module and call its ``register(registry)``."""
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"invalid setting worker.handler_modules: cannot import {module_name!r} ({exc})"
            ) from None
        register = getattr(module, "register", None)
        if not callable(register):
            raise ConfigError(
                f"invalid setting worker.handler_modules: {module_name!r} has no register(registry)"
            )
        register(self)

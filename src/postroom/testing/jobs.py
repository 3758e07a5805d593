"""Job handlers for tests, loaded through ``worker.handler_modules``.

* ``test.record`` — appends ``{job id} {attempt}`` to the file named in the payload
  (``O_APPEND``: one write per line, safe across processes).
* ``test.sleep`` — appends a line, then sleeps ``seconds`` (for kill and shutdown tests);
  gives the job back if the worker stops while it sleeps and ``release_on_stop`` is set;
  with ``only_attempt: N`` it sleeps on attempt N only.
* ``test.fail`` — fails ``transient`` or ``permanent`` with a code.
"""

from __future__ import annotations

import os
import time

from postroom.jobs.handlers import (
    HandlerRegistry,
    JobContext,
    PermanentFailure,
    ShutdownRequested,
    TransientFailure,
)


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def record(ctx: JobContext) -> None:
    _append(ctx.payload["file"], f"{ctx.job.id} {ctx.job.attempt_count} {os.getpid()}")


def sleep(ctx: JobContext) -> None:
    _append(ctx.payload["file"], f"{ctx.job.id} {ctx.job.attempt_count} {os.getpid()}")
    only = ctx.payload.get("only_attempt")
    if only is not None and ctx.job.attempt_count != int(only):
        return
    deadline = time.monotonic() + float(ctx.payload.get("seconds", 1))
    while time.monotonic() < deadline:
        if ctx.payload.get("release_on_stop") and ctx.stopping.is_set():
            raise ShutdownRequested()
        time.sleep(0.02)


def fail(ctx: JobContext) -> None:
    if ctx.payload.get("mode") == "transient":
        raise TransientFailure(str(ctx.payload.get("code", "flaky")), "secret text never stored")
    raise PermanentFailure(str(ctx.payload.get("code", "refused")), "secret text never stored")


def register(registry: HandlerRegistry) -> None:
    registry.register("test.record", record)
    registry.register("test.sleep", sleep)
    registry.register("test.fail", fail)

"""Long-running processes: ``serve`` (everything in one process) and ``worker``."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import click

from postroom import __version__
from postroom.app import App
from postroom.cli.context import state
from postroom.config import mask_url_password
from postroom.errors import ConfigError
from postroom.jobs.builtin import default_registry, default_schedules
from postroom.jobs.worker import Worker

# The parts `serve` can run.
PARTS: dict[str, str] = {
    "worker": "background job worker",
    "smtp": "inbound SMTP server",
    "api": "REST API (HTTP)",
}


@contextlib.contextmanager
def _stop_on_signal(stop: threading.Event) -> Iterator[None]:
    """SIGTERM / SIGINT set ``stop`` while inside; installed before anything starts, so a
    signal that arrives while threads are starting is a clean stop, not a kill."""

    def handle(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _wait_for_signal(stop: threading.Event) -> None:
    with _stop_on_signal(stop):
        while not stop.wait(0.5):
            pass


def _build_worker(app: App, concurrency: int | None, types: tuple[str, ...]) -> Worker:
    registry = default_registry(app.settings)
    return Worker(
        app,
        registry,
        concurrency=concurrency or app.settings.worker_concurrency,
        job_types=list(types) or None,
        schedules=default_schedules(),
        poll_interval_s=app.settings.worker_poll_interval_ms / 1000,
    )


def _start_smtp_children(
    config_path: str | None, port: int, count: int
) -> list[subprocess.Popen[bytes]]:
    """Extra SMTP processes on the same port (SO_REUSEPORT): one event loop per core."""
    args = [sys.executable, "-m", "postroom"]
    if config_path:
        args += ["--config", config_path]
    return [
        subprocess.Popen([*args, "serve", "--only", "smtp", "--smtp-port", str(port)])
        for _ in range(count)
    ]


def _stop_children(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        child.terminate()
    for child in children:
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def _serve_smtp_child(app: App, port: int) -> None:
    from postroom.inbound.smtp import SMTPServer

    smtp = SMTPServer(app, port=port, reuse_port=True)
    try:
        smtp.start()
        _wait_for_signal(threading.Event())
    finally:
        smtp.stop()
        app.close()


@click.command()
@click.option(
    "--only",
    type=click.Choice(sorted(PARTS)),
    default=None,
    help="Run one part only (scale each part as its own process).",
)
@click.option("--smtp-port", "smtp_port", type=int, default=None, hidden=True)
@click.pass_context
def serve(ctx: click.Context, only: str | None, smtp_port: int | None) -> None:
    """Run Postroom: every part that exists in this build, in one process."""
    cli_state = state(ctx)
    settings = cli_state.settings
    if smtp_port is not None:
        # One of the extra SMTP processes of smtp.processes (started by serve itself).
        _serve_smtp_child(cli_state.app(), smtp_port)
        return
    wanted = [only] if only else list(PARTS)
    app = cli_state.app()
    stop = threading.Event()
    stoppers: list[Callable[[], object]] = []
    signals = _stop_on_signal(stop)
    signals.__enter__()
    try:
        console = cli_state.console
        console.print(f"[bold]Postroom {__version__}[/bold]")
        console.print(f"  data folder  {settings.data_dir}")
        console.print(f"  database     {mask_url_password(settings.database_url)}")
        if "smtp" in wanted:
            from postroom.inbound.smtp import SMTPServer

            processes = settings.smtp_processes
            smtp = SMTPServer(app, reuse_port=processes > 1)
            try:
                smtp.start()
            except OSError as exc:
                raise ConfigError(
                    f"invalid setting smtp.listen: cannot listen on {settings.smtp_listen}: "
                    f"{exc.strerror or exc}"
                ) from None
            stoppers.append(smtp.stop)
            children = _start_smtp_children(cli_state.config_path, smtp.port, processes - 1)
            stoppers.append(lambda: _stop_children(children))
            tls = " (STARTTLS)" if settings.smtp_tls_cert_file else ""
            extra = f"; {processes} processes" if processes > 1 else ""
            console.print(f"  smtp         listening on {smtp.host}:{smtp.port}{tls}{extra}")
        if "worker" in wanted:
            worker = _build_worker(app, None, ())
            worker.start()
            stoppers.append(lambda: worker.stop(settings.worker_shutdown_grace_seconds))
            console.print(
                f"  worker       {worker.concurrency} threads; job types: "
                f"{', '.join(worker.job_types)}"
            )
            outbound = settings.outbound_transport
            where = {
                "sink": f"captured into {settings.outbound_sink_address}; nothing leaves",
                "smtp_relay": "through "
                f"{settings.outbound_relay_host}:{settings.outbound_relay_port}",
                "direct": "to each domain's MX",
            }[outbound]
            console.print(f"  outbound     {outbound} ({where})")
        if "api" in wanted:
            from postroom.api.server import HTTPServer

            http = HTTPServer(app)
            http.start()
            stoppers.append(http.stop)
            console.print(f"  api          {http.url}  (docs: {http.url}/docs)")
        console.print("Press Ctrl-C to stop.")
        while not stop.wait(0.5):
            pass
        console.print("Stopping...")
    finally:
        for stopper in reversed(stoppers):
            stopper()
        app.close()
        signals.__exit__(None, None, None)


@click.command()
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=None,
    help="Jobs run at once (default: worker.concurrency).",
)
@click.option("--type", "types", multiple=True, help="Run only this job type (repeatable).")
@click.pass_context
def worker(ctx: click.Context, concurrency: int | None, types: tuple[str, ...]) -> None:
    """Run a background worker until SIGTERM / Ctrl-C (then release held jobs)."""
    cli_state = state(ctx)
    app = cli_state.app()
    try:
        try:
            runner = _build_worker(app, concurrency, types)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        stop = threading.Event()
        with _stop_on_signal(stop):
            runner.start()
            while not stop.wait(0.5):
                pass
        released = runner.stop(app.settings.worker_shutdown_grace_seconds)
        cli_state.err_console.print(
            f"worker stopped: {runner.stats.completed} completed, {released} released"
        )
    finally:
        app.close()


COMMANDS = [serve, worker]

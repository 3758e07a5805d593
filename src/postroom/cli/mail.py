"""``postroom import``: bring existing mail (Maildir, mbox, .eml) into an inbox."""

from __future__ import annotations

from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from postroom.cli.context import emit_json, json_option, state


@click.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--to", "to_address", required=True, help="Address of the inbox to import into.")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Parser processes (default: one per CPU).",
)
@json_option
@click.pass_context
def import_mail(
    ctx: click.Context, path: Path, to_address: str, workers: int | None, as_json: bool
) -> None:
    """Import a Maildir, an mbox file, an .eml file or a folder of .eml files.

    Safe to run again: messages the inbox already holds (same bytes) are skipped, so an
    interrupted import continues where it stopped.
    """
    from postroom.inbound.importer import run_import  # the parsing stack only when used

    cli_state = state(ctx)
    app = cli_state.app()
    progress = Progress(
        TextColumn("importing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=cli_state.err_console,
        transient=True,
    )
    task = progress.add_task("import", total=None, rate="")
    try:
        with progress:
            summary = run_import(
                app,
                path,
                to_address,
                workers=workers,
                on_start=lambda total: progress.update(task, total=total),
                progress=lambda n: progress.advance(task, n),
            )
    finally:
        app.close()
    if as_json:
        emit_json(summary.as_json())
    else:
        table = Table("imported", "duplicates", "degraded", "refused", "total", title=str(path))
        table.add_row(
            str(summary.imported),
            str(summary.duplicates),
            str(summary.degraded),
            str(len(summary.refused)),
            str(summary.total),
        )
        console = cli_state.console
        console.print(table)
        for location, reason in summary.refused[:20]:
            console.print(f"  refused {location}: {reason}")
        if len(summary.refused) > 20:
            console.print(f"  ... and {len(summary.refused) - 20} more")
    if summary.interrupted:
        cli_state.err_console.print(
            "postroom: interrupted; run the same command again to continue where it stopped"
        )
        ctx.exit(130)


COMMANDS = [import_mail]

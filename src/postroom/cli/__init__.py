"""The ``postroom`` command line.

Every command loads the settings once (``--config PATH`` / ``POSTROOM_CONFIG`` /
``./postroom.toml`` + ``POSTROOM_*``), builds what it needs, and prints either rich text
or, with ``--json``, exactly one JSON object. A ``PostroomError`` becomes one line on
stderr (``postroom: <message>``) and exit status 1; usage errors exit with 2.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import click

from postroom import __version__
from postroom.cli.context import CliState
from postroom.errors import PostroomError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML settings file (default: $POSTROOM_CONFIG, else ./postroom.toml if present).",
)
@click.version_option(__version__, prog_name="postroom")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """Postroom: inboxes for applications and AI agents."""
    ctx.obj = CliState(config_path)


def _register() -> None:
    from postroom.cli import imap, jobs, mail, outbound, run, search, setup, tenancy, webhooks

    for module in (setup, run, jobs, tenancy, mail, search, webhooks, outbound, imap):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="postroom",
            standalone_mode=False,
        )
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("postroom: aborted", err=True)
        sys.exit(1)
    except PostroomError as exc:
        click.echo(f"postroom: {exc.message}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("postroom: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        from postroom.store.sqlite import DatabaseError

        if isinstance(exc, DatabaseError):
            click.echo(f"postroom: SQLite database error: {exc}", err=True)
            sys.exit(1)
        logging.getLogger("postroom").exception("internal error")
        click.echo(f"postroom: internal error ({type(exc).__name__}); this is a bug", err=True)
        sys.exit(70)
    sys.exit(result if isinstance(result, int) else 0)

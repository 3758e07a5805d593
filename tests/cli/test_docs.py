"""Every CLI command is documented in docs/cli.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click

from postroom.cli import cli

DOC = Path(__file__).parents[2] / "docs" / "cli.md"


def _commands(command: click.Command, prefix: list[str]) -> Iterator[tuple[str, click.Command]]:
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, [*prefix, name])
    else:
        yield " ".join(prefix), command


def test_every_command_and_option_is_documented() -> None:
    doc = DOC.read_text()
    headings = [line for line in doc.splitlines() if line.startswith("### `postroom ")]
    for name, command in _commands(cli, []):
        matching = [h for h in headings if h.startswith(f"### `postroom {name}")]
        assert matching, f"`postroom {name}` is not documented in docs/cli.md"
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[0] in matching[0], f"{param.opts[0]} of `postroom {name}`"
        assert command.help, f"`postroom {name}` has no help text"

"""What every CLI command shares: the settings, building the App, printing results."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click
from rich.console import Console

from postroom.app import App, build_app
from postroom.config import Settings, load_settings


class CliState:
    """Per-invocation state: settings are loaded once, on first use."""

    def __init__(self, config_path: str | None) -> None:
        self.config_path = config_path
        self._settings: Settings | None = None
        self.console = Console(highlight=False, soft_wrap=True)
        self.err_console = Console(stderr=True, highlight=False, soft_wrap=True)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config_path)
            configure_logging(self._settings.log_level)
        return self._settings

    def app(self, *, load_keys: bool = True, apply_migrations: bool | None = None) -> App:
        return build_app(self.settings, load_keys=load_keys, apply_migrations=apply_migrations)


def configure_logging(level: str) -> None:
    root = logging.getLogger("postroom")
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level.upper())


def state(ctx: click.Context) -> CliState:
    obj = ctx.find_root().obj
    assert isinstance(obj, CliState)
    return obj


def emit_json(value: Any) -> None:
    """Print exactly one JSON object on stdout."""
    click.echo(json.dumps(value, sort_keys=True, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")

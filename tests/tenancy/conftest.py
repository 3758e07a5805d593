"""Fixtures for tenancy tests: an initialised App, and one whose clock moves on request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from postroom.app import App, build_app
from postroom.clock import ManualClock
from postroom.tenancy.bootstrap import initialize


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def clocked_app(settings: Any, clock: ManualClock) -> Iterator[App]:
    """An initialised App on a ManualClock, for expiry, overlap and last-used tests."""
    built = build_app(settings, clock=clock, apply_migrations=True)
    initialize(built)
    yield built
    built.close()

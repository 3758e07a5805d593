"""Pytest plugin shipped with Postroom: every storage test on both engines.

Fixtures:

* ``engine`` — parametrised ``sqlite`` / ``postgresql``; any fixture or test that uses
  it (directly or through ``database_url``, ``db``, ``app``) runs once per engine.
* ``pg_server`` — the session's own PostgreSQL database, created at the start of the
  run and dropped at the end (``POSTROOM_TEST_PG``, default
  ``postgresql://postgres@127.0.0.1:5432/postgres``). Unreachable → the PostgreSQL half
  is skipped, or fails when ``CI=true``.
* ``empty_database_url`` — a fresh, empty database of the engine.
* ``database_url`` — a fresh database migrated to head (PostgreSQL: cloned from a
  migrated template, ~40 ms).
* ``db`` — that database opened; ``settings`` / ``app`` — a whole data folder around it
  (key files, blob store), built with :func:`postroom.app.build_app`;
  ``ready_app`` — that App after ``postroom init`` (default tenant, platform domain
  ``localhost``, a platform key).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _with_dbname(url: str, dbname: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


@dataclass
class PgServer:
    """The session's PostgreSQL: an admin URL and a migrated template database."""

    admin_url: str
    template: str
    template_url: str
    prefix: str
    created: list[str] = field(default_factory=list)
    _counter: int = 0

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True)

    def new_database(self, *, migrated: bool) -> str:
        self._counter += 1
        name = f"{self.prefix}_{self._counter}"
        with self._admin() as conn:
            if migrated:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
            else:
                conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return _with_dbname(self.admin_url, name)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[-1]
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def drop_all(self) -> None:
        with self._admin() as conn:
            for name in [*self.created, self.template]:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    import psycopg

    from postroom.store import apply_migrations

    admin_url = os.environ.get("POSTROOM_TEST_PG", DEFAULT_PG)
    try:
        conn = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL not reachable at {admin_url} (POSTROOM_TEST_PG): {exc}"
        if _ci():
            pytest.fail(message + " — CI=true requires the PostgreSQL half to run")
        pytest.skip(message)
    prefix = f"postroom_test_{os.getpid()}_{secrets.token_hex(3)}"
    template = f"{prefix}_tmpl"
    with conn:
        conn.execute(f'CREATE DATABASE "{template}"')
    template_url = _with_dbname(admin_url, template)
    server = PgServer(admin_url, template, template_url, prefix)
    try:
        apply_migrations(template_url, now_ms=0)
        yield server
    finally:
        server.drop_all()


ENGINES = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engines(*names): run this storage test on these engines only"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise every test that uses ``engine`` (directly or through a fixture)."""
    if "engine" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("engines")
    names = list(marker.args) if marker else list(ENGINES)
    unknown = set(names) - set(ENGINES)
    if unknown:
        raise ValueError(f"unknown engine(s) {sorted(unknown)}")
    metafunc.parametrize("engine", names, indirect=True)


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_database_url(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str]:
    if engine == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.new_database(migrated=False)
    yield url
    server.drop(url)


@pytest.fixture
def database_url(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    if engine == "sqlite":
        from postroom.store import apply_migrations

        data = tmp_path / "data"
        data.mkdir(exist_ok=True)
        url = f"sqlite:///{data / 'postroom.db'}"
        apply_migrations(url, now_ms=0)
        yield url
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.new_database(migrated=True)
    yield url
    server.drop(url)


@pytest.fixture
def db(database_url: str) -> Iterator[Any]:
    from postroom.store import open_database

    database = open_database(database_url, now_ms=0, pool_size=4)
    yield database
    database.close()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Any:
    from postroom.config import load_settings
    from postroom.keyring import create_key_files

    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    loaded = load_settings(
        env={},
        overrides={
            "data_dir": str(data),
            "database_url": database_url,
            "jobs.lease_seconds": 30,
            "worker.poll_interval_ms": 50,
        },
        cwd=tmp_path,
    )
    create_key_files(loaded)
    return loaded


@pytest.fixture
def app(settings: Any) -> Iterator[Any]:
    from postroom.app import build_app

    built = build_app(settings, apply_migrations=True)
    yield built
    built.close()


@pytest.fixture
def ready_app(app: Any) -> Any:
    """The App after `postroom init`: default tenant, platform domain, platform key."""
    from postroom.tenancy.bootstrap import initialize

    initialize(app)
    return app


# API fixtures live in their own module; importing them here registers them.
from postroom.testing.api import api, api_server  # noqa: E402, F401
from postroom.testing.dovecot import dovecot, dovecot_server  # noqa: E402, F401
from postroom.testing.smtp_peer import smtp_peer  # noqa: E402, F401

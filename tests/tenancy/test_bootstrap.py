"""First start on both engines: what `initialize` writes, idempotence, and racing inits."""

from __future__ import annotations

import threading
from typing import Any

from postroom.app import App, build_app
from postroom.ids import new_id
from postroom.store import tenancy as directory
from postroom.tenancy.api_keys import verify
from postroom.tenancy.bootstrap import InitResult, initialize, is_initialized
from postroom.tenancy.permissions import DEFAULT_PERMISSIONS


def _counts(app: App) -> dict[str, int]:
    with app.db.read() as tx:
        return {
            table: int(tx.fetchval(f"SELECT count(*) FROM {table}"))
            for table in ("tenants", "domains", "api_keys", "audit_log")
        }


def test_initialize_writes_tenant_domain_and_platform_key(app: App) -> None:
    assert not is_initialized(app.db)
    result = initialize(app)
    assert is_initialized(app.db)
    assert result.created
    assert result.domain == "localhost"
    assert result.api_key_id is not None and result.api_key_secret is not None
    with app.db.read() as tx:
        tenant = directory.get_default_tenant(tx)
        domain = directory.get_domain_by_name(tx, "localhost")
    assert tenant is not None and tenant.id == result.tenant_id
    assert (tenant.slug, tenant.name, tenant.mode, tenant.address_suffix) == (
        "default",
        "Default",
        "live",
        "",
    )
    assert domain is not None
    assert (domain.tenant_id, domain.kind, domain.method, domain.routing_mode, domain.state) == (
        None,
        "platform",
        "platform",
        "literal",
        "healthy",
    )
    assert domain.receiving and domain.sending
    key = verify(app, result.api_key_secret)
    assert (key.id, key.level, key.name, key.mode) == (
        result.api_key_id,
        "platform",
        "bootstrap",
        "live",
    )
    assert set(key.permissions) == DEFAULT_PERMISSIONS["platform"]
    with app.db.read() as tx:
        entries = tx.fetchall("SELECT action, actor FROM audit_log ORDER BY action")
    assert [(e["action"], e["actor"]) for e in entries] == [
        ("domain.create", "cli"),
        ("key.create", "cli"),
        ("tenant.create", "cli"),
    ]


def test_initialize_twice_changes_nothing(app: App) -> None:
    first = initialize(app)
    before = _counts(app)
    second = initialize(app)
    assert second == InitResult(
        created=False,
        tenant_id=first.tenant_id,
        domain=first.domain,
        api_key_id=None,
        api_key_secret=None,
    )
    assert _counts(app) == before
    assert before["tenants"] == 1 and before["api_keys"] == 1


def test_concurrent_initialize_ends_with_one_default_tenant(settings: Any) -> None:
    apps = [build_app(settings, apply_migrations=True) for _ in range(2)]
    results: list[InitResult] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(apps))

    def run(app: App) -> None:
        try:
            barrier.wait(timeout=10)
            results.append(initialize(app))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in apps]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        assert sorted(r.created for r in results) == [False, True]
        assert len({r.tenant_id for r in results}) == 1
        with apps[0].db.read() as tx:
            assert tx.fetchval("SELECT count(*) FROM tenants WHERE is_default = 1") == 1
            assert tx.fetchval("SELECT count(*) FROM api_keys WHERE level = 'platform'") == 1
    finally:
        for a in apps:
            a.close()


def test_initialize_that_loses_the_insert_race_reports_the_winner(settings: Any) -> None:
    """Another process's default tenant, still uncommitted when we look, wins."""
    holder = build_app(settings, apply_migrations=True)
    racer = build_app(settings, apply_migrations=True)
    results: list[InitResult] = []
    errors: list[BaseException] = []
    winner_id = new_id("ten")

    def run() -> None:
        try:
            results.append(initialize(racer))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=run)
    try:
        with holder.db.write() as tx:
            directory.insert_tenant(
                tx,
                tenant_id=winner_id,
                slug="default",
                name="Default",
                mode="live",
                address_suffix="",
                now=holder.clock.now_ms(),
                is_default=True,
            )
            # The racer reads no default tenant (PostgreSQL) or waits for the writer
            # (SQLite); either way it must end with ours.
            thread.start()
            thread.join(timeout=0.5)
        thread.join(timeout=60)
        assert errors == []
        assert len(results) == 1
        assert not results[0].created and results[0].tenant_id == winner_id
        assert results[0].api_key_secret is None
        with holder.db.read() as tx:
            assert tx.fetchval("SELECT count(*) FROM tenants") == 1
            assert tx.fetchval("SELECT count(*) FROM api_keys") == 0
    finally:
        holder.close()
        racer.close()

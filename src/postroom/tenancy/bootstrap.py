"""First start: the default tenant, the platform domain and a platform API key.

:func:`initialize` writes all of it in one transaction, or nothing when the default
tenant already exists, so ``postroom init`` is safe to run again. Two initialisations
racing end with one default tenant: the unique index ``tenants_one_default`` lets one
insert through, and the other finds the winner's tenant and reports ``created=False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from postroom.errors import Conflict
from postroom.ids import new_id
from postroom.store import tenancy as directory
from postroom.store.db import Database, Tx
from postroom.tenancy import audit
from postroom.tenancy.api_keys import create_key_in

if TYPE_CHECKING:
    from postroom.app import App

DEFAULT_SLUG = "default"
DEFAULT_NAME = "Default"
BOOTSTRAP_KEY_NAME = "bootstrap"


@dataclass(frozen=True)
class InitResult:
    created: bool
    tenant_id: str
    domain: str
    api_key_id: str | None
    api_key_secret: str | None


def is_initialized(db: Database) -> bool:
    """Whether the default tenant exists."""
    with db.read() as tx:
        return directory.get_default_tenant(tx) is not None


def _existing(tx: Tx, tenant_id: str, fallback_domain: str) -> InitResult:
    platform = directory.get_platform_domain(tx)
    return InitResult(
        created=False,
        tenant_id=tenant_id,
        domain=platform.name if platform is not None else fallback_domain,
        api_key_id=None,
        api_key_secret=None,
    )


def initialize(app: App) -> InitResult:
    """Create the default tenant, platform domain and a platform key, unless they exist.

    The secret of the key is in the result and nowhere else; it cannot be shown again.
    """
    domain_name = app.settings.platform_domain
    with app.db.write() as tx:
        existing = directory.get_default_tenant(tx)
        if existing is not None:
            return _existing(tx, existing.id, domain_name)
        now = app.clock.now_ms()
        tenant = directory.insert_tenant(
            tx,
            tenant_id=new_id("ten"),
            slug=DEFAULT_SLUG,
            name=DEFAULT_NAME,
            mode="live",
            address_suffix="",
            now=now,
            is_default=True,
        )
        if tenant is None:
            # Another process initialised between our read and our insert (PostgreSQL
            # waits for it to commit, then skips the row); its tenant is now visible.
            winner = directory.get_default_tenant(tx)
            if winner is None:
                raise Conflict(
                    "a tenant with the slug 'default' exists but is not the default tenant",
                    code="slug_taken",
                )
            return _existing(tx, winner.id, domain_name)
        domain = directory.insert_domain(
            tx,
            domain_id=new_id("dom"),
            tenant_id=None,
            name=domain_name,
            kind="platform",
            method="platform",
            routing_mode="literal",
            receiving=True,
            sending=True,
            state="healthy",
            now=now,
        )
        if domain is None:
            raise Conflict(
                f"the platform domain {domain_name} is already registered as another domain",
                code="domain_taken",
            )
        audit.record(
            app,
            tx,
            action="tenant.create",
            tenant_id=tenant.id,
            target_type="tenant",
            target_id=tenant.id,
            details={"slug": DEFAULT_SLUG, "mode": "live", "is_default": True},
        )
        audit.record(
            app,
            tx,
            action="domain.create",
            tenant_id=None,
            target_type="domain",
            target_id=domain.id,
            details={"kind": "platform", "name": domain.name},
        )
        key, secret = create_key_in(app, tx, "platform", name=BOOTSTRAP_KEY_NAME)
    return InitResult(
        created=True,
        tenant_id=tenant.id,
        domain=domain.name,
        api_key_id=key.id,
        api_key_secret=secret,
    )

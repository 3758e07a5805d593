"""Fixtures for REST API tests: the API in-process, keys of every level, a second tenant.

* ``api`` — an :class:`ApiWorld` over ``ready_app`` (both engines): ``client`` is a
  Starlette TestClient on the real application, ``platform`` the bootstrap platform key.
* ``api_server`` — the same API served by uvicorn on a loopback port (long-polls,
  concurrency); ``api_server.url``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class ApiWorld:
    app: Any
    client: Any
    platform: str  # the platform key's secret
    _counter: list[int] = field(default_factory=lambda: [0])

    @staticmethod
    def auth(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    def key(
        self,
        level: str,
        *,
        tenant_id: str | None = None,
        identity_id: str | None = None,
        partner_id: str | None = None,
        permissions: Iterable[str] | None = None,
        expires_at: int | None = None,
    ) -> str:
        """Mint a key directly (no API call); returns its secret."""
        from postroom.tenancy.api_keys import create_key

        _key, secret = create_key(
            self.app,
            level,
            tenant_id=tenant_id,
            identity_id=identity_id,
            partner_id=partner_id,
            permissions=permissions,
            expires_at=expires_at,
        )
        return secret

    def headers(self, level: str = "platform", **scope: Any) -> dict[str, str]:
        if level == "platform" and not scope:
            return self.auth(self.platform)
        return self.auth(self.key(level, **scope))

    def tenant(self, slug: str | None = None, *, partner_id: str | None = None) -> str:
        from postroom.tenancy.service import create_tenant

        self._counter[0] += 1
        return create_tenant(
            self.app, slug or f"t{self._counter[0]}-test", partner_id=partner_id
        ).id

    def partner(self, name: str = "Partner") -> str:
        from postroom.ids import new_id

        partner_id = new_id("ptn")
        now = self.app.clock.now_ms()
        with self.app.db.write() as tx:
            tx.execute(
                "INSERT INTO partners (id, name, created_at, updated_at) VALUES (%s, %s, %s, %s)",
                (partner_id, name, now, now),
            )
        return partner_id

    def identity(self, username: str, *, tenant_id: str | None = None) -> tuple[str, str]:
        """Create an identity on the platform domain; returns (identity id, address)."""
        from postroom.tenancy.service import create_identity

        made = create_identity(self.app, username, tenant=tenant_id)
        return made.identity.id, made.address.address


@pytest.fixture
def api(ready_app: Any) -> Iterator[ApiWorld]:
    from fastapi.testclient import TestClient

    from postroom.api.app import create_api
    from postroom.tenancy.api_keys import create_key

    _key, platform = create_key(ready_app, "platform", name="test platform key")
    with TestClient(create_api(ready_app), raise_server_exceptions=False) as client:
        yield ApiWorld(ready_app, client, platform)


@pytest.fixture
def api_server(ready_app: Any) -> Iterator[Any]:
    from postroom.api.server import HTTPServer

    server = HTTPServer(ready_app, host="127.0.0.1", port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()

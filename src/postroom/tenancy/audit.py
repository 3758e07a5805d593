"""Writing audit rows from tenancy services, inside the transaction that makes the change."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from postroom.ids import new_id
from postroom.store import audit as audit_rows
from postroom.store.db import Tx

if TYPE_CHECKING:
    from postroom.app import App

# Who acted when no API key did: the local command line (seed 000 "Who acted").
CLI_ACTOR = "cli"

# The X-Request-Id of the API request being served, set by the API's middleware, so every
# audit row a request writes carries it without each service passing it along.
REQUEST_ID: ContextVar[str | None] = ContextVar("postroom_request_id", default=None)


def record(
    app: App,
    tx: Tx,
    *,
    action: str,
    tenant_id: str | None,
    target_type: str,
    target_id: str,
    actor_key_id: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> None:
    """One audit row; ``details`` must hold no clear address and no message content."""
    audit_rows.insert(
        tx,
        entry_id=new_id("aud"),
        action=action,
        now=app.clock.now_ms(),
        tenant_id=tenant_id,
        actor_key_id=actor_key_id,
        actor=None if actor_key_id is not None else CLI_ACTOR,
        target_type=target_type,
        target_id=target_id,
        details=details,
        request_id=REQUEST_ID.get(),
    )

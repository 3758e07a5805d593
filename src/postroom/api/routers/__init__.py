"""One router per resource; ROUTERS is what the application includes."""

from __future__ import annotations

from fastapi import APIRouter

from postroom.api.routers import (
    audit,
    codes,
    domains,
    events,
    health,
    identities,
    imap,
    keys,
    messages,
    search,
    sending,
    stream,
    tenants,
    threads,
    webhooks,
)

ROUTERS: list[APIRouter] = [
    health.router,
    tenants.router,
    identities.router,
    imap.router,
    domains.router,
    keys.router,
    threads.router,
    messages.router,
    codes.router,
    search.router,
    sending.router,
    stream.router,  # before events: /v1/events/stream must not match /v1/events/{event_id}
    events.router,
    webhooks.router,
    audit.router,
]

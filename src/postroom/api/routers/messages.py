"""Routes for messages (see the route table, postroom.api.routes)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["messages"])

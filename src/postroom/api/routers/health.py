"""Liveness, readiness and metrics: public, no key."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from postroom.api.core import app_of, endpoint
from postroom.api.models.common import Out
from postroom.errors import PostroomError
from postroom.store import migrate

router = APIRouter(tags=["service"])


class Live(Out):
    status: Literal["ok"]


class Check(Out):
    name: str
    ok: bool
    detail: str | None = None


class Ready(Out):
    status: Literal["ready", "not_ready"]
    checks: list[Check]


@endpoint(router, "health.live", response_model=Live)
def live() -> Live:
    return Live(status="ok")


@endpoint(
    router,
    "health.ready",
    response_model=Ready,
    responses={503: {"model": Ready, "description": "A check failed"}},
)
def ready(request: Request) -> JSONResponse:
    app = app_of(request)
    checks: list[Check] = []
    try:
        with app.db.read() as tx:
            version = tx.fetchval("SELECT MAX(version) FROM schema_migrations")
        checks.append(Check(name="database", ok=True))
        head = migrate.head_version()
        current = version == head
        checks.append(
            Check(
                name="migrations",
                ok=current,
                detail=None if current else f"database at {version}, build at {head}",
            )
        )
    except PostroomError as exc:
        checks.append(Check(name="database", ok=False, detail=exc.code))
    except Exception:  # noqa: BLE001 - readiness reports, it does not raise
        checks.append(Check(name="database", ok=False, detail="unreachable"))
    try:
        app.blobs.check_writable()
        checks.append(Check(name="blobs", ok=True))
    except PostroomError as exc:
        checks.append(Check(name="blobs", ok=False, detail=exc.code))
    except OSError:
        checks.append(Check(name="blobs", ok=False, detail="not writable"))
    ok = all(check.ok for check in checks)
    body = Ready(status="ready" if ok else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@endpoint(
    router,
    "metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def metrics(request: Request) -> Response:
    return Response(
        app_of(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )

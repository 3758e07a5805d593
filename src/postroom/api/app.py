"""The FastAPI application: one per App, built by :func:`create_api`."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from postroom import __version__
from postroom.api import errors
from postroom.api.core import Cursors
from postroom.api.ratelimit import Decision, RateLimiter
from postroom.api.routers import ROUTERS
from postroom.app import App
from postroom.ids import new_id
from postroom.tenancy.audit import REQUEST_ID

log = logging.getLogger("postroom.api")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

DESCRIPTION = """\
Postroom's REST API. Authenticate with `Authorization: Bearer <API key>`.
Errors are RFC 9457 `application/problem+json` with a stable `code`.
POST requests accept `Idempotency-Key`. Lists are paged with `limit` and `cursor`.
"""


def _queue_depth(app: App) -> Callable[[], list[tuple[str, str, int]]]:
    def read() -> list[tuple[str, str, int]]:
        with app.db.read() as tx:
            rows = tx.fetchall(
                "SELECT job_type, state, COUNT(*) AS n FROM jobs"
                " WHERE state IN ('pending', 'claimed') GROUP BY job_type, state"
            )
        return [(r["job_type"], r["state"], int(r["n"])) for r in rows]

    return read


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


async def _refuse_nul(request: Request) -> Response | None:
    """NUL can be stored by neither engine's text type, and control characters have no
    place in a path: refuse them up front with a 400 instead of failing deep inside."""
    query = request.query_params.multi_items()
    if _CONTROL.search(request.scope.get("path", "")) or any(
        "\x00" in key or "\x00" in value for key, value in query
    ):
        return errors.problem(
            400, "invalid_character", "the URL contains a control character", request=request
        )
    if request.method in ("POST", "PUT", "PATCH"):
        body = await request.body()
        if b"\\u0000" in body or b"\x00" in body:
            return errors.problem(
                400, "invalid_character", "the body contains a NUL character", request=request
            )
    return None


def create_api(app: App) -> FastAPI:
    api = FastAPI(
        title="Postroom",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    api.state.postroom = app
    api.state.cursors = Cursors(app.keys().hash_key)
    api.state.rate_limiter = RateLimiter(
        app.settings.http_rate_limit_per_minute, app.settings.http_rate_limit_burst
    )
    app.metrics.watch_queue(_queue_depth(app))
    errors.install(api)
    for router in ROUTERS:
        api.include_router(router)

    @api.middleware("http")
    async def context(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        given = request.headers.get("x-request-id")
        request_id = given if given and _REQUEST_ID.fullmatch(given) else new_id("req")
        request.state.request_id = request_id
        refusal = await _refuse_nul(request)
        if refusal is not None:
            refusal.headers["X-Request-Id"] = request_id
            return refusal
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        try:
            response = await call_next(request)
        finally:
            REQUEST_ID.reset(token)
        route = request.scope.get("route")
        template = getattr(route, "path", "unmatched")
        elapsed = time.perf_counter() - started
        app.metrics.http_requests.labels(request.method, template, str(response.status_code)).inc()
        app.metrics.http_latency.labels(request.method, template).observe(elapsed)
        response.headers["X-Request-Id"] = request_id
        decision: Decision | None = getattr(request.state, "rate_limit", None)
        if decision is not None:
            response.headers.update(decision.headers())
        log.info(
            "%s %s %s %.1fms request_id=%s",
            request.method,
            template,
            response.status_code,
            elapsed * 1000,
            request_id,
        )
        return response

    return api

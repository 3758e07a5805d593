"""The FastAPI application: one per App, built by :func:`create_api`."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers, MutableHeaders, QueryParams
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from postroom import __version__
from postroom.api import errors
from postroom.api.core import Cursors
from postroom.api.forms import FORM_ROUTES, FormRefused, accepts_form, form_to_json, is_form
from postroom.api.ratelimit import Decision, RateLimiter
from postroom.api.routers import ROUTERS
from postroom.api.routes import ROUTES
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


class RequestContext:
    """Pure ASGI middleware around every request: the request id (``X-Request-Id``, also
    carried by a context variable into audit rows), refusal of NUL and control
    characters, rate-limit headers, metrics and the access log line.

    Pure ASGI rather than Starlette's BaseHTTPMiddleware: the route sees the client's
    ``http.disconnect`` (long-polls and event streams stop when the client goes away) and
    streaming responses pass through untouched.
    """

    def __init__(self, app: ASGIApp, postroom: App) -> None:
        self.app = app
        self.postroom = postroom

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("x-request-id")
        request_id = given if given and _REQUEST_ID.fullmatch(given) else new_id("req")
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        method = scope["method"]
        started = time.perf_counter()
        status = 500

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = MutableHeaders(scope=message)
                extra["X-Request-Id"] = request_id
                decision: Decision | None = state.get("rate_limit")
                if decision is not None:
                    extra.update(decision.headers())
            await send(message)

        replay, refusal = await _screen(
            scope, receive, request_id, self.postroom.settings.http_max_request_bytes
        )
        token = REQUEST_ID.set(request_id)
        try:
            if refusal is not None:
                await refusal(scope, receive, send_with_headers)
            else:
                await self.app(scope, replay, send_with_headers)
        finally:
            REQUEST_ID.reset(token)
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            elapsed = time.perf_counter() - started
            metrics = self.postroom.metrics
            metrics.http_requests.labels(method, template, str(status)).inc()
            metrics.http_latency.labels(method, template).observe(elapsed)
            log.info(
                "%s %s %s %.1fms request_id=%s",
                method,
                template,
                status,
                elapsed * 1000,
                request_id,
            )


async def _screen(
    scope: Scope, receive: Receive, request_id: str, max_bytes: int
) -> tuple[Receive, Response | None]:
    """Refuse NUL and control characters up front (neither engine's text type stores NUL;
    control characters have no place in a path) and bodies over ``max_bytes``; turn a
    composing form into its JSON body (:mod:`postroom.api.forms`). Returns the receive
    channel to use (the body, once read for the checks, is handed on) and a refusal, if
    any."""

    def refuse(
        detail: str,
        status: int = 400,
        code: str = "invalid_character",
        problems: list[dict[str, str]] | None = None,
    ) -> Response:
        body: dict[str, Any] = {
            "type": errors.PROBLEM_TYPE_BASE + code,
            "title": HTTPStatus(status).phrase,
            "status": status,
            "code": code,
            "detail": detail,
            "request_id": request_id,
        }
        if problems:
            body["errors"] = problems
        return JSONResponse(body, status_code=status, media_type=errors.PROBLEM_JSON)

    def too_large() -> Response:
        return refuse(
            f"the request body is larger than {max_bytes} bytes (http.max_request_bytes)",
            413,
            "request_too_large",
        )

    path: str = scope.get("path", "")
    query = QueryParams(scope.get("query_string", b""))
    if _CONTROL.search(path) or any(
        "\x00" in key or "\x00" in value for key, value in query.multi_items()
    ):
        return receive, refuse("the URL contains a control character")
    if scope["method"] not in ("POST", "PUT", "PATCH"):
        return receive, None
    headers = Headers(scope=scope)
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        return receive, too_large()
    chunks: list[bytes] = []
    size = 0
    ended: Message | None = None
    while True:
        message = await receive()
        if message["type"] != "http.request":
            ended = message  # the client went away before sending its body
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            return receive, too_large()
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    if ended is not None:
        gone_message = ended

        async def gone() -> Message:
            return gone_message

        return gone, None
    body = b"".join(chunks)
    content_type = headers.get("content-type")
    if is_form(content_type) and accepts_form(scope["method"], scope.get("path", "")):
        assert content_type is not None
        try:
            # Parsing and base64 of up to http.max_request_bytes: off the event loop.
            body = await anyio.to_thread.run_sync(form_to_json, content_type, body)
        except FormRefused as exc:
            return receive, refuse(exc.detail, exc.status, exc.code, exc.errors)
        scope["headers"] = [
            (name, value)
            for name, value in scope["headers"]
            if name not in (b"content-type", b"content-length")
        ] + [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if b"\\u0000" in body or b"\x00" in body:
        return receive, refuse("the body contains a NUL character")
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay, None


PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "RFC 9457 problem details with a stable `code`.",
    "required": ["type", "title", "status", "code", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "code": {"type": "string", "description": "Stable machine code"},
        "detail": {"type": "string"},
        "request_id": {"type": "string"},
        "errors": {
            "type": "array",
            "description": "Validation errors: the offending fields",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "additionalProperties": True,
}

_PROBLEM_STATUSES = {
    "400": "Malformed request (bad JSON, cursor, header or character)",
    "401": "No, malformed, unknown, revoked or expired API key",
    "403": "The key lacks the permission, or its tenant or partner is suspended",
    "404": "Not found, or outside the key's reach",
    "409": "Conflicts with the current state, or an Idempotency-Key conflict",
    "413": "The body is larger than http.max_request_bytes",
    "422": "Invalid field values (`errors` names the fields)",
    "429": "Rate limited: retry after `Retry-After` seconds",
    "500": "Internal error",
    "503": "The database or the queue cannot take the request now",
}
_PUBLIC_STATUSES = ("400", "500", "503")
_BODILESS = tuple(s for s in _PROBLEM_STATUSES if s != "413")
FORM_BODY: dict[str, Any] = {
    "schema": {
        "type": "object",
        "description": (
            "The JSON body as the `message` part, and files as `attachment` parts"
            " (appended to the JSON's `attachments`)."
        ),
        "properties": {
            "message": {"type": "string", "description": "The JSON body of the route."},
            "attachment": {"type": "array", "items": {"type": "string", "format": "binary"}},
        },
        "additionalProperties": False,
    },
    "encoding": {"message": {"contentType": "application/json"}},
}


def _openapi(api: FastAPI) -> dict[str, Any]:
    """OpenAPI 3.1 where every error answer is a problem+json ``Problem``."""
    if api.openapi_schema:
        return api.openapi_schema
    schema = get_openapi(
        title=api.title, version=api.version, description=api.description, routes=api.routes
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = PROBLEM_SCHEMA
    for key in ("HTTPValidationError", "ValidationError"):
        components.pop(key, None)
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    schema["components"]["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "An API key"}
    }
    public_operations = {
        spec.name.replace(".", "_") for spec in ROUTES.values() if spec.permission is None
    }
    form_operations = {name.replace(".", "_") for name in FORM_ROUTES}
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if operation.get("operationId") in form_operations:
                content = operation.setdefault("requestBody", {}).setdefault("content", {})
                content["multipart/form-data"] = FORM_BODY
            responses = operation.setdefault("responses", {})
            public = operation.get("operationId") in public_operations
            if not public:
                operation["security"] = [{"bearer": []}]
            statuses = _PUBLIC_STATUSES if public else _BODILESS
            if "requestBody" in operation:
                statuses = (*statuses, "413")
            for status in (*statuses, *[s for s in responses if s[:1] in "45"]):
                existing = responses.get(status, {})
                responses[status] = {
                    "description": _PROBLEM_STATUSES.get(status)
                    or existing.get("description", "Problem"),
                    "content": {"application/problem+json": {"schema": problem_ref}},
                    **({"headers": existing["headers"]} if "headers" in existing else {}),
                }
    api.openapi_schema = schema
    return schema


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
    api.openapi = lambda: _openapi(api)  # type: ignore[method-assign]
    for router in ROUTERS:
        api.include_router(router)

    api.add_middleware(RequestContext, postroom=app)
    return api

"""Errors as RFC 9457 problems: one mapping from Postroom's errors to HTTP.

Every response that is not a success is ``application/problem+json``::

    {"type": "https://postroom.dev/problems/identity_not_found",
     "title": "Not Found", "status": 404, "code": "identity_not_found",
     "detail": "no identity 'idn_...'", "request_id": "..."}

``code`` is stable (clients branch on it); ``detail`` is for people. Validation errors
add ``errors``: ``[{"field": "body.username", "message": "..."}]``. No response ever
carries a stack trace, SQL or an internal path: anything that is not a PostroomError
becomes a bare 500 ``internal_error`` and is logged with the request id.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from postroom.errors import (
    BlobNotFound,
    Conflict,
    DatabaseBusy,
    InvalidInput,
    LimitExceeded,
    NotFound,
    PostroomError,
    QueueFull,
    Refused,
    StoreError,
)
from postroom.tenancy.api_keys import Unauthenticated

log = logging.getLogger("postroom.api")

PROBLEM_TYPE_BASE = "https://postroom.dev/problems/"
PROBLEM_JSON = "application/problem+json"


class ApiError(PostroomError):
    """An error only the HTTP layer raises; ``status`` is its HTTP status."""

    status = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code)
        if status is not None:
            self.status = status
        self.headers = headers or {}
        self.extra = extra or {}


class Forbidden(ApiError):
    status = 403
    code = "permission_denied"


class RateLimited(ApiError):
    status = 429
    code = "rate_limited"


class WaitTimeout(ApiError):
    status = 408
    code = "wait_timeout"


# Postroom's own errors and the status each answers with; the first match wins.
_STATUS: Sequence[tuple[type[PostroomError], int]] = (
    (ApiError, 400),  # replaced by the instance's own status
    (Unauthenticated, 401),
    (Refused, 403),  # routes audit it through core.refusals first
    (BlobNotFound, 404),
    (NotFound, 404),
    (Conflict, 409),
    (InvalidInput, 422),
    (LimitExceeded, 429),
    (QueueFull, 503),
    (DatabaseBusy, 503),
    (StoreError, 503),
)


def status_for(exc: PostroomError) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    request: Request | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem+json response."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "code": code,
        "detail": detail,
    }
    request_id = getattr(request.state, "request_id", None) if request is not None else None
    if request_id:
        body["request_id"] = request_id
    body.update(extra)
    all_headers = dict(headers or {})
    if status == 401:
        all_headers.setdefault("WWW-Authenticate", 'Bearer realm="postroom"')
    return JSONResponse(body, status_code=status, headers=all_headers, media_type=PROBLEM_JSON)


def _field(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)


async def _postroom_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PostroomError)
    status = status_for(exc)
    if status >= 500:
        log.warning(
            "request %s failed: %s (%s)",
            getattr(request.state, "request_id", "-"),
            exc.code,
            type(exc).__name__,
        )
    headers = exc.headers if isinstance(exc, ApiError) else None
    extra = exc.extra if isinstance(exc, ApiError) else {}
    field = getattr(exc, "field", None)
    if isinstance(exc, InvalidInput) and field:
        extra = {**extra, "errors": [{"field": field, "message": str(exc)}]}
    detail = str(exc) if status < 500 else "the service cannot complete this request now"
    return problem(status, exc.code, detail, request=request, headers=headers, **extra)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            return problem(
                400, "invalid_json", "the request body is not valid JSON", request=request
            )
        message = str(error.get("msg", "invalid value"))
        if error.get("type") == "extra_forbidden":
            message = "unknown field"
        errors.append({"field": _field(error.get("loc", ())), "message": message})
    fields = ", ".join(e["field"] for e in errors)
    return problem(
        422, "validation_failed", f"invalid request: {fields}", request=request, errors=errors
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "route_not_found", 405: "method_not_allowed"}
    code = codes.get(exc.status_code, "http_error")
    detail = {
        404: "no such route",
        405: "the route does not accept this method",
    }.get(exc.status_code, str(exc.detail))
    headers = dict(exc.headers) if exc.headers else None
    return problem(exc.status_code, code, detail, request=request, headers=headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("request %s: unexpected error", getattr(request.state, "request_id", "-"))
    return problem(500, "internal_error", "an internal error occurred", request=request)


def install(api: FastAPI) -> None:
    api.add_exception_handler(PostroomError, _postroom_error)
    api.add_exception_handler(RequestValidationError, _validation_error)
    api.add_exception_handler(StarletteHTTPException, _http_error)
    api.add_exception_handler(Exception, _unexpected)

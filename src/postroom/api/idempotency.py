"""``Idempotency-Key`` on POST, exactly as seed 000 idempotency_records.

A POST carrying ``Idempotency-Key: <k>`` (at most 255 printable ASCII characters) is
recorded under (scope, calling key, k), where scope is the key's tenant, else its
partner, else ``platform``:

1. A completed record with the same method, path and body fingerprint is replayed: the
   stored status and body, with ``Idempotent-Replayed: true``. A different request under
   the same key answers 409 ``idempotency_conflict``.
2. A record still in progress answers 409 ``request_in_progress``; one older than 60 s
   (its request died) is taken over.
3. Otherwise an in_progress record is inserted (losing that race: 409
   ``request_in_progress``), the action runs, and the record is completed with the
   response. An action that fails deletes the record, so the key can be retried.

A response carrying a one-time secret (a new or rotated API key) is stored with the
secret removed and ``"secret_replayed": false``: a replay never shows the secret again.
Records expire after 30 days (the maintenance job deletes them).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import JSONResponse

from postroom.api.core import Principal, app_of
from postroom.api.errors import ApiError
from postroom.errors import Conflict, PostroomError
from postroom.store import idempotency as records

if TYPE_CHECKING:
    from pydantic import BaseModel

log = logging.getLogger("postroom.api")

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
IN_PROGRESS_TAKEOVER_MS = 60_000
LIFETIME_MS = 30 * 86_400_000

# What an action returns: HTTP status, JSON body, and the tenant the response belongs to.
Outcome = tuple[int, dict[str, Any], str | None]


def _check_key(value: str) -> str:
    if not value or len(value) > MAX_KEY_LENGTH or any(not 32 <= ord(c) < 127 for c in value):
        raise ApiError(
            f"{HEADER} must be 1-{MAX_KEY_LENGTH} printable ASCII characters",
            code="invalid_idempotency_key",
        )
    return value


def fingerprint(method: str, path: str, body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{method}\n{path}\n{canonical}".encode()).hexdigest()


def _replay(record: records.IdempotencyRecord) -> JSONResponse:
    assert record.response_status is not None and record.response_body is not None
    return JSONResponse(
        json.loads(record.response_body),
        status_code=record.response_status,
        headers={"Idempotent-Replayed": "true"},
    )


def _in_progress() -> Conflict:
    return Conflict(
        "a request with this Idempotency-Key is still in progress; retry shortly",
        code="request_in_progress",
    )


def _mismatch() -> Conflict:
    return Conflict(
        "this Idempotency-Key was used for a different request", code="idempotency_conflict"
    )


def run_idempotent(
    request: Request,
    caller: Principal,
    body: BaseModel | None,
    action: Callable[[], Outcome],
    *,
    secret_field: str | None = None,
) -> JSONResponse:
    """Run ``action`` once per Idempotency-Key (or simply run it when there is none)."""
    header = request.headers.get(HEADER)
    if header is None:
        status, payload, _tenant = action()
        return JSONResponse(payload, status_code=status)
    idem_key = _check_key(header)
    app = app_of(request)
    method, path = request.method, request.url.path
    content = None if body is None else body.model_dump(mode="json", exclude_unset=True)
    digest = fingerprint(method, path, content)
    scope, key_id = caller.idempotency_scope, caller.key_id
    now = app.clock.now_ms()

    with app.db.write() as tx:
        record = records.get(tx, scope, key_id, idem_key)
        if record is not None and record.expires_at <= now:
            records.delete(tx, scope, key_id, idem_key)
            record = None
        if record is None:
            started = records.begin(
                tx,
                scope=scope,
                key_id=key_id,
                idem_key=idem_key,
                method=method,
                path=path,
                fingerprint=digest,
                now=now,
                expires_at=now + LIFETIME_MS,
            )
            if not started:
                record = records.get(tx, scope, key_id, idem_key)
        if record is not None:
            same = (record.method, record.path, record.fingerprint) == (method, path, digest)
            if record.status == "completed":
                if not same:
                    raise _mismatch()
                return _replay(record)
            if now - record.created_at < IN_PROGRESS_TAKEOVER_MS:
                raise _mismatch() if not same else _in_progress()
            if not records.take_over(tx, scope, key_id, idem_key, record.created_at, now, digest):
                raise _in_progress()

    try:
        status, payload, tenant_id = action()
    except PostroomError:
        with app.db.write() as tx:
            records.abandon(tx, scope, key_id, idem_key)
        raise
    except BaseException:
        # Unknown whether the action changed anything: keep the record in progress; it is
        # taken over after 60 s.
        log.warning("idempotent request %s failed unexpectedly", request.url.path)
        raise
    stored = dict(payload)
    if secret_field is not None and secret_field in stored:
        del stored[secret_field]
        stored["secret_replayed"] = False
    with app.db.write() as tx:
        records.complete(
            tx,
            scope,
            key_id,
            idem_key,
            tenant_id=tenant_id,
            response_status=status,
            response_body=json.dumps(stored, separators=(",", ":")),
        )
    return JSONResponse(payload, status_code=status)

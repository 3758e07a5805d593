"""The idempotency_records table's statements (seed 000 idempotency_records)."""

from __future__ import annotations

from dataclasses import dataclass

from postroom.store.db import Row, Tx


@dataclass(frozen=True)
class IdempotencyRecord:
    scope: str
    key_id: str
    idem_key: str
    method: str
    path: str
    fingerprint: str
    status: str
    response_status: int | None
    response_body: str | None
    created_at: int
    expires_at: int

    @classmethod
    def from_row(cls, row: Row) -> IdempotencyRecord:
        return cls(
            scope=row["scope"],
            key_id=row["key_id"],
            idem_key=row["idem_key"],
            method=row["method"],
            path=row["path"],
            fingerprint=row["fingerprint"],
            status=row["status"],
            response_status=row["response_status"],
            response_body=row["response_body"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
        )


_KEY = "scope = %s AND key_id = %s AND idem_key = %s"


def get(tx: Tx, scope: str, key_id: str, idem_key: str) -> IdempotencyRecord | None:
    row = tx.fetchone(f"SELECT * FROM idempotency_records WHERE {_KEY}", (scope, key_id, idem_key))
    return None if row is None else IdempotencyRecord.from_row(row)


def begin(
    tx: Tx,
    *,
    scope: str,
    key_id: str,
    idem_key: str,
    method: str,
    path: str,
    fingerprint: str,
    now: int,
    expires_at: int,
) -> bool:
    """Insert an in_progress record; False when one exists already (a concurrent request)."""
    row = tx.fetchone(
        "INSERT INTO idempotency_records (scope, key_id, idem_key, method, path, fingerprint,"
        " status, created_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, 'in_progress', %s, %s)"
        " ON CONFLICT DO NOTHING RETURNING scope",
        (scope, key_id, idem_key, method, path, fingerprint, now, expires_at),
    )
    return row is not None


def take_over(
    tx: Tx, scope: str, key_id: str, idem_key: str, old_created_at: int, now: int, fingerprint: str
) -> bool:
    """Claim an in_progress record whose request died; False when another request won."""
    row = tx.fetchone(
        "UPDATE idempotency_records SET created_at = %s, fingerprint = %s"
        f" WHERE {_KEY} AND status = 'in_progress' AND created_at = %s RETURNING scope",
        (now, fingerprint, scope, key_id, idem_key, old_created_at),
    )
    return row is not None


def complete(
    tx: Tx,
    scope: str,
    key_id: str,
    idem_key: str,
    *,
    tenant_id: str | None,
    response_status: int,
    response_body: str,
) -> None:
    tx.execute(
        "UPDATE idempotency_records SET status = 'completed', response_status = %s,"
        f" response_body = %s, tenant_id = %s WHERE {_KEY}",
        (response_status, response_body, tenant_id, scope, key_id, idem_key),
    )


def abandon(tx: Tx, scope: str, key_id: str, idem_key: str) -> None:
    """Delete an in_progress record whose request failed, so the key can be retried."""
    tx.execute(
        f"DELETE FROM idempotency_records WHERE {_KEY} AND status = 'in_progress'",
        (scope, key_id, idem_key),
    )


def delete(tx: Tx, scope: str, key_id: str, idem_key: str) -> None:
    tx.execute(f"DELETE FROM idempotency_records WHERE {_KEY}", (scope, key_id, idem_key))

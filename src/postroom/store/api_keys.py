"""The api_keys table's statements.

Two row types on purpose: :class:`ApiKey` is what may be shown or listed and has no hash
fields, so no listing can leak them; :class:`KeyCredentials` (the hashes) is returned only
by :func:`find_credentials`, which authentication alone calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from postroom.store.db import Row, Tx, partner_owned


@dataclass(frozen=True)
class ApiKey:
    id: str
    lookup: str
    name: str
    level: str
    partner_id: str | None
    tenant_id: str | None
    identity_id: str | None
    mode: str
    permissions: tuple[str, ...]
    created_by_key_id: str | None
    expires_at: int | None
    revoked_at: int | None
    last_used_at: int | None
    prev_expires_at: int | None
    created_at: int

    @property
    def prefix(self) -> str:
        """The public head of the secret (``pr_live_{lookup}``): names a key safely."""
        return f"pr_{self.mode}_{self.lookup}"

    @classmethod
    def from_row(cls, row: Row) -> ApiKey:
        return cls(
            id=row["id"],
            lookup=row["lookup"],
            name=row["name"],
            level=row["level"],
            partner_id=row["partner_id"],
            tenant_id=row["tenant_id"],
            identity_id=row["identity_id"],
            mode=row["mode"],
            permissions=tuple(json.loads(row["permissions_json"])),
            created_by_key_id=row["created_by_key_id"],
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
            last_used_at=row["last_used_at"],
            prev_expires_at=row["prev_expires_at"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True)
class KeyCredentials:
    """A key with its stored hashes, for verification only."""

    key: ApiKey
    hash: str
    prev_hash: str | None


_COLUMNS = (
    "id, lookup, name, level, partner_id, tenant_id, identity_id, mode, permissions_json,"
    " created_by_key_id, expires_at, revoked_at, last_used_at, prev_expires_at, created_at"
)


def insert(
    tx: Tx,
    *,
    key_id: str,
    lookup: str,
    secret_hash: str,
    name: str,
    level: str,
    mode: str,
    permissions: tuple[str, ...],
    now: int,
    partner_id: str | None = None,
    tenant_id: str | None = None,
    identity_id: str | None = None,
    created_by_key_id: str | None = None,
    expires_at: int | None = None,
) -> ApiKey | None:
    """Insert a key; None when the lookup is taken (the caller draws another)."""
    row = tx.fetchone(
        "INSERT INTO api_keys (id, lookup, hash, name, level, partner_id, tenant_id,"
        " identity_id, mode, permissions_json, created_by_key_id, expires_at, created_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {_COLUMNS}",
        (
            key_id,
            lookup,
            secret_hash,
            name,
            level,
            partner_id,
            tenant_id,
            identity_id,
            mode,
            json.dumps(list(permissions)),
            created_by_key_id,
            expires_at,
            now,
        ),
    )
    return None if row is None else ApiKey.from_row(row)


def get(tx: Tx, key_id: str) -> ApiKey | None:
    row = tx.fetchone(f"SELECT {_COLUMNS} FROM api_keys WHERE id = %s", (key_id,))
    return None if row is None else ApiKey.from_row(row)


def find_credentials(tx: Tx, lookup: str) -> KeyCredentials | None:
    row = tx.fetchone(
        f"SELECT {_COLUMNS}, hash, prev_hash FROM api_keys WHERE lookup = %s", (lookup,)
    )
    if row is None:
        return None
    return KeyCredentials(ApiKey.from_row(row), row["hash"], row["prev_hash"])


def list_keys(
    tx: Tx, *, tenant_id: str | None = None, include_revoked: bool = True
) -> list[ApiKey]:
    """Keys, oldest first; with ``tenant_id``, that tenant's tenant and identity keys."""
    clauses: list[str] = []
    params: list[str] = []
    if tenant_id is not None:
        clauses.append("tenant_id = %s")
        params.append(tenant_id)
    if not include_revoked:
        clauses.append("revoked_at IS NULL")
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = tx.fetchall(f"SELECT {_COLUMNS} FROM api_keys{where} ORDER BY created_at, id", params)
    return [ApiKey.from_row(row) for row in rows]


def revoke(tx: Tx, key_id: str, now: int) -> bool:
    """Revoke a key (and any previous secret still in its overlap); False if it already was."""
    return (
        tx.execute(
            "UPDATE api_keys SET revoked_at = %s, prev_hash = NULL, prev_expires_at = NULL"
            " WHERE id = %s AND revoked_at IS NULL",
            (now, key_id),
        )
        == 1
    )


def rotate(
    tx: Tx,
    key_id: str,
    *,
    new_hash: str,
    keep_previous_until: int | None,
) -> bool:
    """Store a new secret's hash; the current one becomes ``prev_hash`` until
    ``keep_previous_until`` (None: it stops working at once). False if the key is revoked."""
    if keep_previous_until is None:
        sql = (
            "UPDATE api_keys SET prev_hash = NULL, prev_expires_at = NULL, hash = %s"
            " WHERE id = %s AND revoked_at IS NULL"
        )
        params: tuple[object, ...] = (new_hash, key_id)
    else:
        # Every right-hand side reads the row as it was, so prev_hash takes the old hash.
        sql = (
            "UPDATE api_keys SET prev_hash = hash, prev_expires_at = %s, hash = %s"
            " WHERE id = %s AND revoked_at IS NULL"
        )
        params = (keep_previous_until, new_hash, key_id)
    return tx.execute(sql, params) == 1


def touch_last_used(tx: Tx, key_id: str, now: int, min_interval_ms: int = 60_000) -> bool:
    """Record use, at most once per ``min_interval_ms``; True when a write happened."""
    return (
        tx.execute(
            "UPDATE api_keys SET last_used_at = %s"
            " WHERE id = %s AND (last_used_at IS NULL OR last_used_at < %s)",
            (now, key_id, now - min_interval_ms),
        )
        == 1
    )


def list_page(
    tx: Tx,
    *,
    partner_id: str | None = None,
    tenant_id: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> list[ApiKey]:
    """Keys in ID (creation) order after ``after``, at most ``limit``.

    ``partner_id``: only that partner's own keys and the keys of the tenants it owns;
    ``tenant_id``: only that tenant's tenant and identity keys. Both: both must hold.
    """
    clauses: list[str] = []
    params: list[object] = []
    if partner_id is not None:
        clause, values = partner_owned(partner_id)
        clauses.append(clause)
        params.extend(values)
    if tenant_id is not None:
        clauses.append("tenant_id = %s")
        params.append(tenant_id)
    if after is not None:
        clauses.append("id > %s")
        params.append(after)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = tx.fetchall(
        f"SELECT {_COLUMNS} FROM api_keys{where} ORDER BY id LIMIT %s", [*params, limit]
    )
    return [ApiKey.from_row(row) for row in rows]

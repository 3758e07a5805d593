"""Recent verification codes and links of an identity, newest first (``codes.list``).

Rows live until they expire (received + 24 h, then purged); a released row shows
``consumed_at``. Listing releases nothing: only a wait does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from postroom.store import verifications as rows
from postroom.store.verifications import VerificationRow

if TYPE_CHECKING:
    from postroom.app import App

__all__ = ["POSITION_SHAPE", "list_recent", "position_of"]

# The types of a sort position as :func:`position_of` makes them.
POSITION_SHAPE: tuple[type, ...] = (int, int, str, str)


def position_of(row: VerificationRow) -> list[Any]:
    """The sort position of a row, for a cursor."""
    return [row.received_at, row.message_rowid, row.kind, row.value]


def list_recent(
    app: App,
    identity_id: str,
    *,
    before: Sequence[Any] | None,
    limit: int,
    kind: str | None = None,
    sender_domain: str | None = None,
) -> list[VerificationRow]:
    """Up to ``limit`` unexpired rows after the position ``before`` (None: from the
    newest)."""
    with app.db.read() as tx:
        return rows.list_recent(
            tx,
            identity_id,
            now=app.clock.now_ms(),
            before=before,
            limit=limit,
            kind=kind,
            sender_domain=sender_domain,
        )

"""Rebuilding the lexical index from the stored messages (``postroom search reindex``).

Each batch of messages is re-indexed in its own transaction, in row ID order, so a
rebuild can be stopped and run again at any time: a message is always indexed, with
either its old index rows or its new ones. Needed after an upgrade changes what is
indexed (PostgreSQL rows indexed by 0.2.0 keep the parser's old tokens; 0007's ranking
vector of migrated rows holds the whole new text), and safe whenever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from postroom.app import App
from postroom.store import search_index

__all__ = ["REINDEX_BATCH", "ReindexSummary", "reindex"]

REINDEX_BATCH = 500


@dataclass(frozen=True)
class ReindexSummary:
    messages: int
    batches: int


def reindex(
    app: App,
    *,
    batch: int = REINDEX_BATCH,
    on_start: Callable[[int], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReindexSummary:
    """Rebuild every message's index rows, ``batch`` messages per transaction;
    ``on_start`` is told how many messages there are, ``progress`` each batch done."""
    if batch < 1:
        raise ValueError("a batch holds at least one message")
    with app.db.read() as tx:
        total = search_index.reindex_total(tx)
    if on_start is not None:
        on_start(total)
    last, done, batches = 0, 0, 0
    while True:
        with app.db.write() as tx:
            last, count = search_index.reindex_batch(tx, last, batch)
        if count == 0:
            return ReindexSummary(messages=done, batches=batches)
        done, batches = done + count, batches + 1
        if progress is not None:
            progress(count)

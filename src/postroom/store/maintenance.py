"""Housekeeping statements run by the maintenance job."""

from __future__ import annotations

from postroom.store.db import Engine, Tx


def purge_expired_idempotency_records(tx: Tx, now: int) -> int:
    """Idempotency records live 30 days (seed 000); afterwards the key may be reused."""
    return tx.execute("DELETE FROM idempotency_records WHERE expires_at <= %s", (now,))


def purge_expired_verifications(tx: Tx, now: int) -> int:
    """Codes and links are kept 24 hours after arrival (seed 000 verifications)."""
    return tx.execute("DELETE FROM verifications WHERE expires_at <= %s", (now,))


def analyze_after_bulk_load(tx: Tx) -> None:
    """Give the planner statistics for rows just bulk-loaded (an import, a first IMAP
    sync): until autovacuum (PostgreSQL) or the hourly ``PRAGMA optimize`` (SQLite) gets
    there, statements plan as if the tables were empty. On the 10,000 message benchmark
    SQLite counted a thread's 119 messages in 1.4 ms without statistics and 0.1 ms with
    them. SQLite samples at most ``analysis_limit`` rows of each index (well under a
    second on a large database)."""
    if tx.engine is Engine.POSTGRESQL:
        tx.execute(
            "ANALYZE messages, message_search, threads, thread_identifiers, attachments,"
            " labels, events"
        )
    else:
        tx.execute("PRAGMA analysis_limit = 1000")
        tx.execute("ANALYZE")


def optimize(tx: Tx) -> None:
    """Let SQLite refresh its planner statistics where they went stale."""
    if tx.engine is Engine.SQLITE:
        tx.execute("PRAGMA optimize")

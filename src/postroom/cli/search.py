"""``postroom search``: the query language of docs/search.md over one inbox or a tenant,
printed as a table (or one JSON object)."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from postroom.cli.context import emit_json, json_option, state
from postroom.clock import to_rfc3339
from postroom.mailbox import search as mailbox


@click.command("search")
@click.argument("query")
@click.option("--identity", default=None, help="Search this inbox (an idn_ ID or an address).")
@click.option(
    "--tenant",
    default=None,
    help="Search every inbox of this tenant (ID or slug; default: the default tenant).",
)
@click.option(
    "--sort",
    type=click.Choice(["relevance", "date"]),
    default="relevance",
    show_default=True,
    help="Best first, or newest first.",
)
@click.option("--thread", "by_thread", is_flag=True, help="One hit per thread (group=thread).")
@click.option(
    "--limit", type=click.IntRange(1, 200), default=20, show_default=True, help="Hits to show."
)
@json_option
@click.pass_context
def search_mail(
    ctx: click.Context,
    query: str,
    identity: str | None,
    tenant: str | None,
    sort: str,
    by_thread: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Search mail with QUERY, e.g. 'from:alice invoice -draft newer_than:30d'."""
    cli_state = state(ctx)
    app = cli_state.app()
    try:
        with app.db.read() as tx:
            scope = mailbox.scope_for(tx, identity, tenant)
            result = mailbox.search(
                tx,
                query,
                scope,
                offset=0,
                limit=limit,
                now_ms=app.clock.now_ms(),
                sort=sort,
                group="thread" if by_thread else None,
            )
    finally:
        app.close()
    total: int | str = result.total if result.total_exact else f"{result.total}+"
    if as_json:
        emit_json(
            {
                "total": total,
                "fuzzy": result.fuzzy,
                "hits": [
                    {
                        "message_id": h.message_id,
                        "thread_id": h.thread_id,
                        "identity_id": h.identity_id,
                        "received_at": to_rfc3339(h.received_at),
                        "from": None if h.sender is None else h.sender.address,
                        "subject": h.subject,
                        "score": h.score,
                        "snippet": h.snippet_text,
                        "thread_hits": h.thread_hits,
                    }
                    for h in result.hits
                ],
            }
        )
        return
    title = f"{total} hit(s)" + (" — no exact match; fuzzy" if result.fuzzy else "")
    table = Table("received", "from", "subject", "snippet", "message", title=title)
    for h in result.hits:
        received = (to_rfc3339(h.received_at) or "")[:16].replace("T", " ")
        sender = h.sender.address if h.sender else ""
        subject = h.subject or ""
        if h.thread_hits is not None:
            subject += f" ({h.thread_hits})"
        snippet = escape(h.snippet_text)
        parts = snippet.split("**")
        marked = "".join(f"[bold]{p}[/bold]" if i % 2 else p for i, p in enumerate(parts))
        table.add_row(received, escape(sender), escape(subject), marked, h.message_id)
    cli_state.console.print(table)


COMMANDS = [search_mail]

"""``postroom search``: the query language of docs/search.md over one inbox or a tenant,
printed as a table (or one JSON object); ``postroom search reindex`` rebuilds the index.

``search`` is a group whose default is the query: ``postroom search QUERY ...`` runs a
search unless its first word names a subcommand (search for the word itself with
``postroom search -- reindex``)."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from postroom.cli.context import emit_json, json_option, state
from postroom.clock import to_rfc3339
from postroom.mailbox import search as mailbox
from postroom.search.reindex import REINDEX_BATCH, reindex


@click.command("query")
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


@click.command("reindex")
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=REINDEX_BATCH,
    show_default=True,
    help="Messages per transaction.",
)
@json_option
@click.pass_context
def reindex_mail(ctx: click.Context, batch: int, as_json: bool) -> None:
    """Rebuild the search index of every message from what is stored, in batches.

    Safe to stop and run again. Run it after an upgrade that changes what is indexed
    (docs/search.md says when).
    """
    cli_state = state(ctx)
    app = cli_state.app()
    progress = Progress(
        TextColumn("reindexing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=cli_state.err_console,
        transient=True,
    )
    task = progress.add_task("reindex", total=None)
    try:
        with progress:
            summary = reindex(
                app,
                batch=batch,
                on_start=lambda total: progress.update(task, total=total),
                progress=lambda n: progress.advance(task, n),
            )
    finally:
        app.close()
    if as_json:
        emit_json({"reindexed": summary.messages, "batches": summary.batches})
    else:
        cli_state.console.print(f"reindexed {summary.messages} message(s)")


class _SearchCommands(click.Group):
    """``postroom search QUERY``, or a subcommand when the first word names one."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = [search_mail.name or "query", *args]
        return super().parse_args(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == search_mail.name:
            return search_mail
        return super().get_command(ctx, cmd_name)


search_commands = _SearchCommands(
    "search",
    commands=[reindex_mail],
    help="Search mail (postroom search QUERY ...), or rebuild the index (reindex).",
)

COMMANDS = [search_commands]

"""Drafts (seed 003 mail_drafts): messages still being written, offered to nobody.

A draft keeps the authored fields (the same as a send request) and its recipients; each
update replaces them and counts a revision. Sending a draft records an ordinary send
with requester ``draft:<id>``, so sending the same draft twice is one send, and stamps
the draft with the send it became (it is then read-only).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.ids import new_id
from postroom.outbound import compose as c
from postroom.outbound.service import OutboxEntry, Requester, SendInput, load_original, record_send
from postroom.store.db import Tx

if TYPE_CHECKING:
    from postroom.app import App

MAX_DRAFT_BYTES = 10 * 1024 * 1024
OPERATIONS = ("send", "reply", "reply_all", "forward")


@dataclass(frozen=True)
class Draft:
    id: str
    tenant_id: str
    identity_id: str
    revision: int
    operation: str
    source_message_id: str | None
    content: dict[str, Any]
    composed_at: int
    revised_at: int
    promoted_to: str | None


def _row(row: dict[str, Any]) -> Draft:
    return Draft(
        id=row["id"],
        tenant_id=row["tenant_id"],
        identity_id=row["identity_id"],
        revision=int(row["revision"]),
        operation=row["operation"],
        source_message_id=row["source_message_id"],
        content=json.loads(row["content_json"]),
        composed_at=int(row["composed_at"]),
        revised_at=int(row["revised_at"]),
        promoted_to=row["promoted_to_outgoing_email_id"],
    )


def _encode(content: dict[str, Any]) -> str:
    text = json.dumps(content, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) > MAX_DRAFT_BYTES:
        raise InvalidInput(
            f"a draft may hold at most {MAX_DRAFT_BYTES} bytes", code="draft_too_large"
        )
    return text


def _recipients(content: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    out = []
    for role in ("to", "cc", "bcc"):
        for item in content.get(role) or []:
            out.append((str(item["address"]), item.get("name"), role))
    return out


def _write_recipients(tx: Tx, draft_id: str, content: dict[str, Any]) -> None:
    tx.execute("DELETE FROM mail_draft_recipients WHERE mail_draft_id = %s", (draft_id,))
    tx.executemany(
        "INSERT INTO mail_draft_recipients (mail_draft_id, ordinal, address, name, role)"
        " VALUES (%s, %s, %s, %s, %s)",
        [(draft_id, i, a, n, r) for i, (a, n, r) in enumerate(_recipients(content))],
    )


def create(
    app: App,
    tenant_id: str,
    identity_id: str,
    content: dict[str, Any],
    *,
    operation: str = "send",
    source_message_id: str | None = None,
) -> Draft:
    if operation not in OPERATIONS:
        raise InvalidInput(f"operation must be one of {', '.join(OPERATIONS)}", field="operation")
    if operation != "send":
        if source_message_id is None:
            raise InvalidInput(f"a {operation} draft names its message", field="message_id")
        load_original(app, identity_id, source_message_id)  # exists, and is this inbox's
    now = app.clock.now_ms()
    draft_id = new_id("drf")
    with app.db.write() as tx:
        tx.execute(
            "INSERT INTO mail_drafts (id, tenant_id, identity_id, revision, operation,"
            " source_message_id, content_json, composed_at, revised_at)"
            " VALUES (%s, %s, %s, 1, %s, %s, %s, %s, %s)",
            (
                draft_id,
                tenant_id,
                identity_id,
                operation,
                source_message_id,
                _encode(content),
                now,
                now,
            ),
        )
        _write_recipients(tx, draft_id, content)
    return get(app, draft_id)


def get(app: App, draft_id: str) -> Draft:
    with app.db.read() as tx:
        row = tx.fetchone("SELECT * FROM mail_drafts WHERE id = %s", (draft_id,))
    if row is None:
        raise NotFound(f"no draft {draft_id[:80]!r}", code="draft_not_found")
    return _row(row)


def list_page(app: App, identity_id: str, after: tuple[int, str] | None, limit: int) -> list[Draft]:
    clause, params = "", []
    if after is not None:
        clause = " AND (revised_at < %s OR (revised_at = %s AND id < %s))"
        params = [after[0], after[0], after[1]]
    with app.db.read() as tx:
        rows = tx.fetchall(
            "SELECT * FROM mail_drafts WHERE identity_id = %s AND"
            f" promoted_to_outgoing_email_id IS NULL{clause}"
            " ORDER BY revised_at DESC, id DESC LIMIT %s",
            (identity_id, *params, limit),
        )
    return [_row(r) for r in rows]


def update(app: App, draft_id: str, changes: dict[str, Any]) -> Draft:
    now = app.clock.now_ms()
    with app.db.write() as tx:
        row = tx.fetchone("SELECT * FROM mail_drafts WHERE id = %s", (draft_id,))
        if row is None:
            raise NotFound(f"no draft {draft_id[:80]!r}", code="draft_not_found")
        draft = _row(row)
        if draft.promoted_to is not None:
            raise Conflict("the draft was sent; it can no longer change", code="draft_sent")
        content = {**draft.content, **changes}
        tx.execute(
            "UPDATE mail_drafts SET content_json = %s, revision = revision + 1, revised_at = %s"
            " WHERE id = %s AND promoted_to_outgoing_email_id IS NULL",
            (_encode(content), now, draft_id),
        )
        _write_recipients(tx, draft_id, content)
    return get(app, draft_id)


def delete(app: App, draft_id: str) -> None:
    with app.db.write() as tx:
        if tx.execute("DELETE FROM mail_drafts WHERE id = %s", (draft_id,)) != 1:
            raise NotFound(f"no draft {draft_id[:80]!r}", code="draft_not_found")


def _addresses(items: Any) -> tuple[c.Address, ...]:
    return tuple(c.Address(str(i["address"]), i.get("name")) for i in items or [])


def send_input(content: dict[str, Any]) -> SendInput:
    """The send request a draft's fields make (the same shape the API takes)."""
    return SendInput(
        to=_addresses(content.get("to")),
        cc=_addresses(content.get("cc")),
        bcc=_addresses(content.get("bcc")),
        reply_to=_addresses(content.get("reply_to")),
        from_address=content.get("from"),
        subject=content.get("subject"),
        text=content.get("text"),
        html=content.get("html"),
        attachments=tuple(
            c.OutgoingAttachment(
                filename=str(a["filename"]),
                content_type=str(a.get("content_type") or ""),
                data=base64.b64decode(a["content"]),
                disposition=a.get("disposition") or "attachment",
                content_id=a.get("content_id"),
            )
            for a in content.get("attachments") or []
        ),
        headers=tuple((str(k), str(v)) for k, v in (content.get("headers") or {}).items()),
        labels=tuple(content.get("labels") or ()),
        metadata=dict(content.get("metadata") or {}),
        kind=content.get("kind") or "transactional",
        list_unsubscribe=tuple(content.get("list_unsubscribe") or ()),
        forward_mode=content.get("forward_mode") or "inline",
    )


def send(app: App, draft_id: str, principal: str | None) -> OutboxEntry:
    draft = get(app, draft_id)
    sent = record_send(
        app,
        draft.identity_id,
        send_input(draft.content),
        Requester("draft", draft.id, principal),
        operation=draft.operation,  # type: ignore[arg-type]
        source_message_id=draft.source_message_id,
    )
    with app.db.write() as tx:
        tx.execute(
            "UPDATE mail_drafts SET promoted_to_outgoing_email_id = %s WHERE id = %s"
            " AND promoted_to_outgoing_email_id IS NULL",
            (sent.id, draft_id),
        )
    return sent

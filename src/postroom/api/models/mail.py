"""Shapes of threads, messages and search hits (REST API v1)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints

from postroom.api.models.common import Model, Out, time_of, time_req
from postroom.mailbox import LABEL_PATTERN
from postroom.mailbox import messages as mail
from postroom.mailbox.search import SearchHit
from postroom.mailbox.threads import ThreadDetail, ThreadView

Label = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]
LabelList = Annotated[list[Label], Field(max_length=32)]


class PersonOut(Out):
    address: str
    name: str | None

    @classmethod
    def of(cls, person: mail.Person) -> PersonOut:
        return cls(address=person.address, name=person.name)


def _people(people: tuple[mail.Person, ...]) -> list[PersonOut]:
    return [PersonOut.of(p) for p in people]


class MessageSummaryOut(Out):
    """A message as lists and threads show it (no bodies)."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    identity_id: str
    thread_id: str
    parent_id: str | None = Field(description="The message this one answers, when stored.")
    direction: str
    status: str
    kind: str
    from_: PersonOut | None = Field(alias="from")
    to: list[PersonOut]
    cc: list[PersonOut]
    subject: str | None
    snippet: str | None = Field(description="Up to 240 characters of the new text (plain).")
    sent_at: str | None
    received_at: str
    read: bool
    archived: bool
    labels: list[str]
    flags: list[str]
    attachment_count: int

    @classmethod
    def fields_of(cls, m: mail.MessageSummary) -> dict[str, Any]:
        return {
            "id": m.id,
            "identity_id": m.identity_id,
            "thread_id": m.thread_id,
            "parent_id": m.parent_id,
            "direction": m.direction,
            "status": m.status,
            "kind": m.kind,
            "from_": None if m.sender is None else PersonOut.of(m.sender),
            "to": _people(m.to),
            "cc": _people(m.cc),
            "subject": m.subject,
            "snippet": m.snippet,
            "sent_at": time_of(m.sent_at),
            "received_at": time_req(m.received_at),
            "read": m.read,
            "archived": m.archived,
            "labels": list(m.labels),
            "flags": list(m.flags),
            "attachment_count": m.attachment_count,
        }

    @classmethod
    def of(cls, m: mail.MessageSummary) -> MessageSummaryOut:
        return cls(**cls.fields_of(m))


class AttachmentOut(Out):
    id: str
    filename: str | None = Field(description="Sanitised: no path, no control characters.")
    content_type: str = Field(description="As the sender declared it.")
    sniffed_type: str | None = Field(description="From the bytes; wins over the declared type.")
    size: int
    disposition: str | None
    content_id: str | None
    risk: str | None = Field(
        description="executable, macro, encrypted_archive, archive_bomb, type_mismatch,"
        " encrypted_document, or null"
    )
    url: str = Field(description="Path of the download route.")


class RefOut(Out):
    kind: str
    value: str
    source: str


class EnvelopeOut(Out):
    mail_from: str | None
    rcpt_to: list[str]
    client_ip: str | None
    helo: str | None
    tls: dict[str, Any] | None


class MessageOut(MessageSummaryOut):
    """Everything about one message."""

    tenant_id: str
    source: str
    reply_to: list[PersonOut]
    text: str | None = Field(description="The full plain text (derived when HTML-only).")
    extracted_text: str | None = Field(description="New content: quotes and signature cut.")
    html: str | None = Field(description="The sanitised HTML body.")
    attachments: list[AttachmentOut]
    refs: list[RefOut]
    verdict: str | None
    auth: dict[str, Any] | None
    spam_score: float | None
    known_sender: bool | None
    quarantine_reason: str | None
    rfc_message_id: str | None
    in_reply_to: str | None
    references: list[str]
    delivered_to: str | None
    envelope: EnvelopeOut | None
    raw_size: int | None
    raw_url: str = Field(description="Path of the raw MIME download route.")

    @classmethod
    def of_message(cls, m: mail.Message) -> MessageOut:
        base = f"/v1/messages/{m.summary.id}"
        env = m.envelope
        return cls(
            **cls.fields_of(m.summary),
            tenant_id=m.tenant_id,
            source=m.source,
            reply_to=_people(m.reply_to),
            text=m.text,
            extracted_text=m.extracted_text,
            html=m.html,
            attachments=[
                AttachmentOut(
                    id=a.id,
                    filename=a.filename,
                    content_type=a.content_type,
                    sniffed_type=a.sniffed_type,
                    size=a.size,
                    disposition=a.disposition,
                    content_id=a.content_id,
                    risk=a.risk,
                    url=f"{base}/attachments/{a.id}",
                )
                for a in m.attachments
            ],
            refs=[RefOut(kind=r.kind, value=r.value, source=r.source) for r in m.refs],
            verdict=m.verdict,
            auth=m.auth,
            spam_score=m.spam_score,
            known_sender=m.known_sender,
            quarantine_reason=m.quarantine_reason,
            rfc_message_id=m.rfc_message_id,
            in_reply_to=m.in_reply_to,
            references=list(m.references),
            delivered_to=m.delivered_to,
            envelope=None
            if env is None
            else EnvelopeOut(
                mail_from=env.mail_from,
                rcpt_to=list(env.rcpt_to),
                client_ip=env.client_ip,
                helo=env.helo,
                tls=env.tls,
            ),
            raw_size=m.raw_size,
            raw_url=f"{base}/raw",
        )


class ThreadOut(Out):
    id: str
    identity_id: str
    subject: str = Field(description="The subject of the first message.")
    message_count: int
    unread_count: int
    participants: list[PersonOut]
    first_at: str
    last_at: str
    archived: bool
    labels: list[str] = Field(description="Every label any message of the thread carries.")
    snippet: str | None = Field(description="The snippet of the latest message.")

    @classmethod
    def fields_of(cls, t: ThreadView) -> dict[str, Any]:
        return {
            "id": t.id,
            "identity_id": t.identity_id,
            "subject": t.subject,
            "message_count": t.message_count,
            "unread_count": t.unread_count,
            "participants": _people(t.participants),
            "first_at": time_req(t.first_at),
            "last_at": time_req(t.last_at),
            "archived": t.archived,
            "labels": list(t.labels),
            "snippet": t.snippet,
        }

    @classmethod
    def of(cls, t: ThreadView) -> ThreadOut:
        return cls(**cls.fields_of(t))


class ThreadDetailOut(ThreadOut):
    messages: list[MessageSummaryOut] = Field(
        description="In the order received; parent_id draws the reply tree."
    )
    messages_truncated: bool = Field(description="True when only the first 1000 are shown.")

    @classmethod
    def of_detail(cls, d: ThreadDetail) -> ThreadDetailOut:
        return cls(
            **cls.fields_of(d.thread),
            messages=[MessageSummaryOut.of(m) for m in d.messages],
            messages_truncated=d.truncated,
        )


class MailUpdate(Model):
    """A change to a message or a whole thread; fields left out are kept."""

    read: bool | None = None
    archived: bool | None = None
    labels_add: LabelList | None = None
    labels_remove: LabelList | None = None


class SearchHitOut(Out):
    model_config = ConfigDict(populate_by_name=True)

    message_id: str
    thread_id: str
    identity_id: str
    subject: str | None
    from_: PersonOut | None = Field(alias="from")
    received_at: str
    score: float = Field(
        description="Relevance; higher is better; compare within one search (0 with sort=date)."
    )
    snippet: str = Field(
        description="HTML: escaped text of the passage that matches best, matched words in <mark>."
    )
    snippet_text: str = Field(
        description="The same passage as plain text, matched words between ** and **."
    )
    thread_hits: int | None = Field(
        description="With group=thread: how many of the thread's messages match; else null."
    )

    @classmethod
    def of(cls, hit: SearchHit) -> SearchHitOut:
        fields: dict[str, Any] = {
            "message_id": hit.message_id,
            "thread_id": hit.thread_id,
            "identity_id": hit.identity_id,
            "subject": hit.subject,
            "from_": None if hit.sender is None else PersonOut.of(hit.sender),
            "received_at": time_req(hit.received_at),
            "score": hit.score,
            "snippet": hit.snippet,
            "snippet_text": hit.snippet_text,
            "thread_hits": hit.thread_hits,
        }
        return cls(**fields)


class SearchPageOut(Out):
    """A page of search hits with the bounded total."""

    data: list[SearchHitOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` (with the same q, sort and group) to get the next page;"
        " null on the last page."
    )
    total: int | Literal["10000+"] = Field(
        description='Hits (threads with group=thread), exact up to 10,000, then "10000+".'
    )
    fuzzy: bool = Field(
        description="True when the exact query found nothing and these hits come from the"
        " trigram fallback (typos in subjects, participants and refs)."
    )

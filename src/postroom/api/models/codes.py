"""Shapes of verification codes and links (``codes.wait``, ``codes.list``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from postroom.api.models.common import Out, time_req
from postroom.store.verifications import VerificationRow


class Sender(Out):
    address: str
    name: str | None


class VerificationOut(Out):
    """A one-time code or a confirmation link found in a message of the inbox."""

    kind: Literal["code", "link"]
    value: str = Field(description="The code without separators, or the https URL.")
    sender_domain: str = Field(
        description="Organisational domain of the sender (`mail.example.com` → `example.com`)."
    )
    message_id: str
    thread_id: str
    received_at: str
    subject: str | None
    from_: Sender | None = Field(alias="from")

    @classmethod
    def of(cls, row: VerificationRow) -> VerificationOut:
        sender = (
            None
            if row.from_address is None
            else Sender(name=row.from_name, address=row.from_address)
        )
        return cls.model_validate(
            {
                "kind": row.kind,
                "value": row.value,
                "sender_domain": row.sender_domain,
                "message_id": row.message_id,
                "thread_id": row.thread_id,
                "received_at": time_req(row.received_at),
                "subject": row.subject,
                "from": sender,
            }
        )


class RecentVerificationOut(VerificationOut):
    """A verification as listed: with when it expires and whether a wait released it."""

    expires_at: str
    consumed: bool = Field(description="A wait has released it.")
    consumed_at: str | None

    @classmethod
    def of(cls, row: VerificationRow) -> RecentVerificationOut:
        return cls.model_validate(
            {
                **VerificationOut.of(row).model_dump(by_alias=True),
                "expires_at": time_req(row.expires_at),
                "consumed": row.consumed_at is not None,
                "consumed_at": None if row.consumed_at is None else time_req(row.consumed_at),
            }
        )

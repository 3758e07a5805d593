"""Shapes of IMAP accounts (``imap_accounts.*`` routes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from postroom.api.models.common import Model, Out, time_of, time_req
from postroom.store.imap import Account
from postroom.sync.mutations import Mutation

Folder = Annotated[str, Field(min_length=1, max_length=512)]


class ImapAccountCreate(Model):
    host: str = Field(min_length=1, max_length=253, examples=["imap.example.com"])
    port: int | None = Field(default=None, ge=1, le=65535, description="Default 993 / 143.")
    tls_mode: Literal["implicit", "starttls", "none"] = Field(
        default="implicit",
        description="`none` only to a loopback host with `allow_plaintext: true`.",
    )
    allow_plaintext: bool = False
    username: str = Field(min_length=1, max_length=320)
    password: str | None = Field(default=None, min_length=1, max_length=8192)
    access_token: str | None = Field(
        default=None, min_length=1, max_length=8192, description="OAuth2 (XOAUTH2) instead."
    )
    folders: Annotated[list[Folder], Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="Folders to mirror; default every selectable one."
    )
    include_trash: bool = False
    include_junk: bool = False
    remote_delete: Literal["tombstone", "erase"] = Field(
        default="tombstone",
        description="What a message expunged on the server becomes here: a tombstone "
        "(kept, marked) or erased.",
    )
    sync_interval_seconds: int | None = Field(default=None, ge=5, le=86_400)


class ImapAccountUpdate(Model):
    password: str | None = Field(default=None, min_length=1, max_length=8192)
    access_token: str | None = Field(default=None, min_length=1, max_length=8192)
    folders: Annotated[list[Folder], Field(min_length=1, max_length=200)] | None = None
    include_trash: bool | None = None
    include_junk: bool | None = None
    remote_delete: Literal["tombstone", "erase"] | None = None
    paused: bool | None = None
    sync_interval_seconds: int | None = Field(default=None, ge=5, le=86_400)


class ImapAccountOut(Out):
    id: str = Field(examples=["imp_01JD7ZC9X4K2M5N6P8Q0R1S2T3"])
    identity_id: str
    host: str
    port: int
    tls_mode: str
    username: str
    auth: Literal["password", "xoauth2"]
    folders: list[str] | None
    include_trash: bool
    include_junk: bool
    remote_delete: str
    status: Literal[
        "pending", "ok", "auth_failed", "tls_failed", "unreachable", "throttled", "error"
    ]
    status_reason: str | None
    status_changed_at: str
    last_synced_at: str | None
    next_sync_at: str
    sync_interval_seconds: int
    paused: bool
    created_at: str

    @classmethod
    def of(cls, a: Account) -> ImapAccountOut:
        return cls(
            id=a.id,
            identity_id=a.identity_id,
            host=a.host,
            port=a.port,
            tls_mode=a.tls_mode,
            username=a.username,
            auth=a.auth_kind,  # type: ignore[arg-type]
            folders=a.folders,
            include_trash=bool(a.include_trash),
            include_junk=bool(a.include_junk),
            remote_delete=a.remote_delete,
            status=a.status,  # type: ignore[arg-type]
            status_reason=a.status_reason,
            status_changed_at=time_req(a.status_changed_at),
            last_synced_at=time_of(a.last_synced_at),
            next_sync_at=time_req(a.next_sync_at),
            sync_interval_seconds=a.sync_interval_seconds,
            paused=bool(a.paused),
            created_at=time_req(a.created_at),
        )


class ImapChangeCreate(Model):
    action: Literal[
        "seen",
        "unseen",
        "flag",
        "unflag",
        "keywords_add",
        "keywords_remove",
        "keywords_replace",
        "move",
        "copy",
        "delete",
    ]
    keywords: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=64)] | None = (
        None
    )
    folder: str | None = Field(default=None, min_length=1, max_length=512)


class ImapChangeOut(Out):
    id: str = Field(examples=["mut_01JD7ZC9X4K2M5N6P8Q0R1S2T3"])
    account_id: str
    action: str
    folder: str | None = Field(description="The destination of a move or copy.")
    stage: Literal[
        "recorded",
        "placement_issued",
        "placement_confirmed",
        "source_flagged_deleted",
        "completed",
        "abandoned",
    ]
    outcome_unknown: bool = Field(
        description="The placement went out and its answer was never read (code 25002): "
        "never retried automatically."
    )
    last_failure_code: str | None
    attempt_count: int
    recorded_at: str

    @classmethod
    def of(cls, m: Mutation) -> ImapChangeOut:
        return cls(
            id=m.id,
            account_id=m.account_id,
            action=m.mutation,
            folder=m.destination_path,
            stage=m.stage,  # type: ignore[arg-type]
            outcome_unknown=m.last_failure_code == "25002",
            last_failure_code=m.last_failure_code,
            attempt_count=m.attempt_count,
            recorded_at=time_req(m.recorded_at),
        )

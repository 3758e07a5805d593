"""Shapes shared by every resource: the strict base model, pages, list parameters."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

from postroom.clock import to_rfc3339

T = TypeVar("T")


class Model(BaseModel):
    """Request bodies: unknown fields are refused (422 ``validation_failed``)."""

    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    """Response bodies."""


class Page(Out, Generic[T]):
    data: list[T]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page."
    )


Limit = Annotated[int, Query(ge=1, le=200, description="Items per page (1-200).")]
Cursor = Annotated[
    str | None, Query(max_length=2048, description="`next_cursor` of the previous page.")
]
DEFAULT_LIMIT = 50


def time_of(ms: int | None) -> str | None:
    """Unix milliseconds as RFC 3339 UTC (``2026-11-30T01:02:03.456Z``)."""
    return to_rfc3339(ms)


def time_req(ms: int) -> str:
    text = to_rfc3339(ms)
    assert text is not None
    return text

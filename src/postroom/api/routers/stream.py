"""The live event stream: ``GET /v1/events/stream``, Server-Sent Events.

Each event is sent as ``id: <evt id>``, ``event: <type>``, ``data: <event JSON>`` (the
object ``GET /v1/events/{event_id}`` answers), within the key's reach exactly like
``events.list``. A client resumes with ``Last-Event-ID``: the events after that one are
replayed in order, then the stream goes live (:mod:`postroom.events.stream` says how no
event is skipped). A comment line is sent when nothing else was for ``heartbeat``
seconds; ``max_seconds`` ends the stream (tests, tooling). Without ``Last-Event-ID`` a
stream starts at ``since`` (replaying from that time), else with the events from now on.

The handler is ``async``: every database read runs on a worker thread, and the
response watches ``receive`` for the client's ``http.disconnect`` itself (whatever
ASGI version the server speaks), so a hang-up stops the polling at once.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import anyio
import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from postroom.api.core import Caller, app_of, endpoint
from postroom.api.errors import ApiError
from postroom.api.models.events import EventOut
from postroom.api.models.query import Since, is_plain_id, rfc3339_ms
from postroom.api.routers.events import reach_of
from postroom.events.stream import BATCH, EventFollower, StreamFilter, resume_position
from postroom.store.events import Event, EventQuery

router = APIRouter(tags=["events"])

POLL_INTERVAL_S = 0.25
DEFAULT_HEARTBEAT_S = 15
RETRY_MS = 3000  # the reconnection delay an EventSource client is told to use

_TYPE = r"(\*|[A-Za-z0-9_.:\-]+\*?)"

Types = Annotated[
    str | None,
    Query(
        max_length=1000,
        pattern=rf"^{_TYPE}(,{_TYPE})*$",
        description="Comma-separated event types, each exact (`message.received`) or a "
        "prefix ending in `*` (`message.*`); default every type.",
    ),
]


def _frame(event: Event) -> bytes:
    body = json.dumps(
        EventOut.of(event).model_dump(mode="json"), separators=(",", ":"), ensure_ascii=False
    )
    return f"id: {event.id}\nevent: {event.type}\ndata: {body}\n\n".encode()


class EventStreamResponse(Response):
    """A ``text/event-stream`` answer fed by an :class:`EventFollower`."""

    media_type = "text/event-stream"

    def __init__(
        self,
        follower: EventFollower | None = None,
        *,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        max_seconds: float | None = None,
        status_code: int = 200,  # read by FastAPI's OpenAPI generation
    ) -> None:
        # No body and so no Content-Length (what Response.__init__ would declare).
        self.status_code = status_code
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.follower = follower
        self.heartbeat_s = heartbeat_s
        self.max_seconds = max_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        gone = False
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                await self._pump(send)
            except OSError:  # the client went away mid-send (ASGI 2.4 servers)
                gone = True
            group.cancel_scope.cancel()
        if not gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pump(self, send: Send) -> None:
        assert self.follower is not None
        follower = self.follower
        started = time.monotonic()
        deadline = None if self.max_seconds is None else started + self.max_seconds

        async def emit(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        await emit(f"retry: {RETRY_MS}\n\n".encode())
        quiet_since = time.monotonic()
        while True:
            events = await anyio.to_thread.run_sync(follower.poll)
            now = time.monotonic()
            if events:
                await emit(b"".join(_frame(event) for event in events))
                quiet_since = now
            elif now - quiet_since >= self.heartbeat_s:
                await emit(b": heartbeat\n\n")
                quiet_since = now
            if deadline is not None and now >= deadline:
                return
            if len(events) < BATCH:  # a full batch: more are waiting, read on at once
                pause = POLL_INTERVAL_S
                if deadline is not None:
                    pause = min(pause, max(deadline - now, 0))
                await anyio.sleep(pause)


@endpoint(
    router,
    "events.stream",
    response_class=EventStreamResponse,
    responses={
        200: {
            "description": "An endless `text/event-stream` (ended by `max_seconds`): "
            "`id: <evt id>`, `event: <type>`, `data: <the event as GET /v1/events/{id}>`, "
            "and `: heartbeat` comment lines.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def stream_events(
    request: Request,
    caller: Caller,
    types: Types = None,
    identity_id: Annotated[
        str | None,
        Query(max_length=64, pattern=r"^[A-Za-z0-9_\-]+$", description="Only this identity's."),
    ] = None,
    heartbeat: Annotated[
        int,
        Query(ge=1, le=300, description="Seconds of silence before a heartbeat comment."),
    ] = DEFAULT_HEARTBEAT_S,
    since: Since = None,
    max_seconds: Annotated[
        float | None,
        Query(gt=0, le=86_400, description="End the stream after this many seconds."),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=200,
            description="The id of the last event received: replay what came after it.",
        ),
    ] = None,
) -> EventStreamResponse:
    app = app_of(request)
    reach = reach_of(caller)
    after = None
    if last_event_id:
        event_id = last_event_id.strip()
        if is_plain_id(event_id):
            after = await anyio.to_thread.run_sync(resume_position, app, event_id, reach)
        if after is None:
            raise ApiError(
                f"Last-Event-ID {event_id[:64]!r} names no event this key can see (unknown,"
                " purged or out of reach); reconnect without it, with since=<a time> to"
                " replay from that time",
                code="invalid_last_event_id",
            )
    elif since is not None:
        after = (rfc3339_ms(since), "")  # every event at or after that time
    patterns = tuple(types.split(",")) if types else ()
    selection = StreamFilter(reach, EventQuery(identity_id=identity_id, any_type=patterns))
    follower = await anyio.to_thread.run_sync(EventFollower.open, app, selection, after)
    return EventStreamResponse(follower, heartbeat_s=heartbeat, max_seconds=max_seconds)

"""The live event stream (``GET /v1/events/stream``) on real uvicorn: Server-Sent Events
in order, resumed with Last-Event-ID without losing one, within each key's reach,
filtered, with heartbeats, stragglers handed out late, and hang-ups stopping the work."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from postroom.store.events import insert_event
from postroom.store.tenancy import get_default_tenant
from postroom.testing.api import ApiWorld
from postroom.testing.mail import deliver, make_message

STREAM = "/v1/events/stream"


@dataclass
class Frame:
    """One dispatched SSE event."""

    id: str
    event: str
    data: dict[str, Any]


@dataclass
class Reader:
    """Reads an open ``text/event-stream`` line by line (the SSE parsing rules, for the
    fields the stream uses)."""

    response: httpx.Response
    lines: Iterator[str] = field(init=False)
    comments: list[str] = field(default_factory=list)
    retry: int | None = None

    def __post_init__(self) -> None:
        self.lines = self.response.iter_lines()

    def next(self, deadline_s: float = 15.0) -> Frame | None:
        """The next event, or None when the stream ended."""
        fields: dict[str, str] = {}
        stop = time.monotonic() + deadline_s
        for line in self.lines:
            assert time.monotonic() < stop, "no event in time"
            if line == "":
                if "data" in fields:
                    return Frame(fields["id"], fields["event"], json.loads(fields["data"]))
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "retry":
                self.retry = int(value)
            else:
                assert name not in fields, f"{name} twice in one event"
                fields[name] = value
        return None

    def take(self, count: int) -> list[Frame]:
        frames = []
        for _ in range(count):
            frame = self.next()
            assert frame is not None, f"the stream ended after {len(frames)} of {count}"
            frames.append(frame)
        return frames

    def rest(self) -> list[Frame]:
        frames = []
        while (frame := self.next()) is not None:
            frames.append(frame)
        return frames


@contextmanager
def stream(
    server: Any,
    headers: dict[str, str],
    *,
    last_event_id: str | None = None,
    **params: Any,
) -> Iterator[Reader]:
    sent = dict(headers)
    if last_event_id is not None:
        sent["Last-Event-ID"] = last_event_id
    params.setdefault("heartbeat", 1)
    with (
        httpx.Client(timeout=10) as client,
        client.stream("GET", server.url + STREAM, params=params, headers=sent) as response,
    ):
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        yield Reader(response)


def receive(api: ApiWorld, address: str, n: int) -> str:
    (message_id,) = deliver(
        api.app,
        make_message(subject=f"n{n}", to=address, message_id=f"{uuid.uuid4().hex}@s.example"),
        address,
    )
    return message_id


def add_event(
    api: ApiWorld,
    event_type: str,
    *,
    tenant_id: str | None,
    identity_id: str | None = None,
    ago_ms: int = 0,
) -> str:
    with api.app.db.write() as tx:
        event = insert_event(
            tx,
            event_type=event_type,
            tenant_id=tenant_id,
            identity_id=identity_id,
            data={},
            now=api.app.clock.now_ms() - ago_ms,
        )
    return event.id


def first_event_of(api: ApiWorld, identity: str) -> str:
    with api.app.db.read() as tx:
        event_id: str = tx.fetchval(
            "SELECT id FROM events WHERE identity_id = %s AND identity_seq = 1", (identity,)
        )
    return event_id


def test_a_client_that_reconnects_with_last_event_id_misses_nothing(
    api: ApiWorld, api_server: Any
) -> None:
    identity, address = api.identity("resume")
    created = first_event_of(api, identity)  # identity.created
    headers = api.headers()
    filters = {"types": "message.received", "identity_id": identity}
    received: list[Frame] = []
    messages = [receive(api, address, n) for n in range(2)]  # before any connection
    with stream(api_server, headers, last_event_id=created, **filters) as first:
        received += first.take(2)  # replayed
        messages.append(receive(api, address, 2))
        received += first.take(1)  # live
        messages += [receive(api, address, n) for n in (3, 4)]
        received += first.take(1)  # the client hangs up after the first of them
        assert first.retry == 3000
    messages += [receive(api, address, n) for n in (5, 6)]  # while disconnected
    with stream(api_server, headers, last_event_id=received[-1].id, **filters) as second:
        received += second.take(3)  # 4 (sent, but not read before the hang-up), 5, 6
        messages.append(receive(api, address, 7))
        received += second.take(1)
    assert [f.data["data"]["message_id"] for f in received] == messages
    listed = api.client.get(
        "/v1/events", params={"identity_id": identity, "type": "message.received"}, headers=headers
    ).json()["data"]
    assert [f.data for f in received] == listed  # the same objects as the list, in order
    assert all(f.id == f.data["id"] and f.event == "message.received" for f in received)
    assert [f.data["sequence"] for f in received] == list(range(2, 10))


def test_each_key_level_streams_only_the_events_in_its_reach(
    api: ApiWorld, api_server: Any
) -> None:
    partner = api.partner()
    partner_tenant = api.tenant("sse-p", partner_id=partner)
    other_tenant = api.tenant("sse-o")
    mine, _ = api.identity("sse-mine", tenant_id=other_tenant)
    sibling, _ = api.identity("sse-sib", tenant_id=other_tenant)
    keys = {
        "platform": api.headers(),
        "partner": api.headers("partner", partner_id=partner),
        "tenant": api.headers("tenant", tenant_id=other_tenant),
        "identity": api.headers("identity", tenant_id=other_tenant, identity_id=mine),
    }
    got: dict[str, list[str]] = {}
    opened = threading.Barrier(len(keys) + 1, timeout=20)

    def follow(level: str) -> None:
        with stream(api_server, keys[level], max_seconds=3, types="test.*") as reader:
            opened.wait()
            got[level] = [frame.id for frame in reader.rest()]

    threads = [threading.Thread(target=follow, args=(level,)) for level in keys]
    for thread in threads:
        thread.start()
    opened.wait()
    in_partner = add_event(api, "test.partner", tenant_id=partner_tenant)
    in_tenant = add_event(api, "test.tenant", tenant_id=other_tenant)
    of_mine = add_event(api, "test.mine", tenant_id=other_tenant, identity_id=mine)
    of_sibling = add_event(api, "test.sibling", tenant_id=other_tenant, identity_id=sibling)
    for thread in threads:
        thread.join(timeout=20)
    assert got == {
        "platform": [in_partner, in_tenant, of_mine, of_sibling],
        "partner": [in_partner],
        "tenant": [in_tenant, of_mine, of_sibling],
        "identity": [of_mine],
    }


def test_types_and_identity_filters_and_replay_from_an_event(api: ApiWorld) -> None:
    with api.app.db.read() as tx:
        tenant = get_default_tenant(tx)
    assert tenant is not None
    one, _ = api.identity("filter-one")
    two, _ = api.identity("filter-two")
    start = add_event(api, "test.start", tenant_id=tenant.id, ago_ms=5000)
    made = [
        add_event(api, name, tenant_id=tenant.id, identity_id=who, ago_ms=4000 - n)
        for n, (name, who) in enumerate(
            [
                ("message.received", one),
                ("message.sent", two),
                ("messages.other", one),
                ("identity.deleted", one),
                ("domain.verified", None),
                ("message.bounced", one),
            ]
        )
    ]

    def replay(**params: Any) -> list[str]:
        response = api.client.get(
            STREAM,
            params={"max_seconds": 0.3, **params},
            headers={**api.headers(), "Last-Event-ID": start},
        )
        assert response.status_code == 200, response.text
        return [
            line.removeprefix("id: ") for line in response.text.splitlines() if line[:3] == "id:"
        ]

    created = [first_event_of(api, one), first_event_of(api, two)]  # identity.created, now
    time.sleep(0.6)  # every event settled (events.stream.SETTLE_MS)
    assert replay() == made + created  # every type, in order (in-process, bounded)
    assert replay(types="message.*") == [made[0], made[1], made[5]]
    assert replay(types="message.*,identity.deleted", identity_id=one) == [
        made[0],
        made[3],
        made[5],
    ]
    assert replay(types="domain.verified,*") == made + created
    assert replay(identity_id=two) == [made[1], created[1]]
    # Without Last-Event-ID, `since` replays from a time (inclusive); Last-Event-ID wins.
    at = api.client.get(f"/v1/events/{made[3]}", headers=api.headers()).json()["occurred_at"]
    since = api.client.get(
        STREAM,
        params={"max_seconds": 0.3, "since": at, "types": "message.*,identity.*"},
        headers=api.headers(),
    )
    assert [line[4:] for line in since.text.splitlines() if line[:3] == "id:"] == [
        made[3],
        made[5],
        *created,
    ]
    assert replay(since=at) == made + created
    for bad in ("message.%", "a,,b", "mes*age", "x" * 1001):
        response = api.client.get(STREAM, params={"types": bad}, headers=api.headers())
        assert response.status_code == 422, bad
        assert response.json()["errors"][0]["field"] == "query.types"


def test_a_bad_last_event_id_is_refused_with_a_problem(api: ApiWorld) -> None:
    other_tenant = api.tenant("sse-bad")
    theirs = add_event(api, "test.theirs", tenant_id=other_tenant)
    with api.app.db.read() as tx:
        tenant = get_default_tenant(tx)
    assert tenant is not None
    mine = api.headers("tenant", tenant_id=tenant.id)
    for value in ("evt_01HZZZZZZZZZZZZZZZZZZZZZZZ", "not an id", theirs, "x" * 100):
        response = api.client.get(STREAM, headers={**mine, "Last-Event-ID": value})
        assert response.status_code == 400, value
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "invalid_last_event_id"
    too_long = api.client.get(STREAM, headers={**mine, "Last-Event-ID": "x" * 201})
    assert too_long.status_code == 422
    refused = api.client.get(
        STREAM, headers=api.headers("tenant", tenant_id=tenant.id, permissions=["tenants:read"])
    )
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    for params in (
        {"heartbeat": 0},
        {"max_seconds": 0},
        {"identity_id": "a b"},
        {"since": "yesterday"},
    ):
        assert api.client.get(STREAM, params=params, headers=mine).status_code == 422, params


def test_stragglers_are_handed_out_late_within_the_lookback(api: ApiWorld, api_server: Any) -> None:
    """An event that commits long after its occurred_at (a writer that waited) is behind
    the stream's position when it appears: the sweep still hands it out."""
    with api.app.db.read() as tx:
        tenant = get_default_tenant(tx)
    assert tenant is not None
    before = add_event(api, "test.before", tenant_id=tenant.id, ago_ms=3000)
    with stream(api_server, api.headers(), max_seconds=3, types="test.*") as reader:
        late = add_event(api, "test.late", tenant_id=tenant.id, ago_ms=5000)
        ancient = add_event(api, "test.ancient", tenant_id=tenant.id, ago_ms=120_000)
        live = add_event(api, "test.live", tenant_id=tenant.id)
        seen = [frame.id for frame in reader.rest()]
    assert set(seen) == {late, live}
    assert before not in seen and ancient not in seen  # before the connection; too old
    assert len(seen) == 2


def test_heartbeats_flow_and_a_hang_up_stops_the_stream(api: ApiWorld, api_server: Any) -> None:
    tasks = api_server._server.server_state.tasks
    with stream(api_server, api.headers()) as reader:
        started = time.monotonic()
        for _line in reader.lines:
            if reader.comments or _line.startswith(":"):
                break
        assert time.monotonic() - started < 3  # heartbeat=1
        assert len(tasks) == 1  # the open stream
    deadline = time.monotonic() + 3
    while tasks and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not tasks  # the server stopped serving the hung-up stream


def test_the_openapi_document_describes_the_stream(api: ApiWorld) -> None:
    operation = api.client.get("/openapi.json").json()["paths"][STREAM]["get"]
    assert list(operation["responses"]["200"]["content"]) == ["text/event-stream"]
    names = {p["name"] for p in operation["parameters"]}
    assert names == {
        "types",
        "identity_id",
        "heartbeat",
        "since",
        "max_seconds",
        "Last-Event-ID",
    }

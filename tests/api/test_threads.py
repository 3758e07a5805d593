"""Threads over the API: list with filters, get in thread order, merges, change, reach."""

from __future__ import annotations

import time
import uuid
from typing import Any

from postroom.testing.api import ApiWorld
from postroom.testing.mail import deliver, make_message


def mid() -> str:
    return f"{uuid.uuid4().hex}@sender.example"


def send(api: ApiWorld, to: str, **kwargs: Any) -> str:
    kwargs.setdefault("message_id", mid())
    ids = deliver(api.app, make_message(to=to, **kwargs), to)
    time.sleep(0.003)  # distinct received_at, so "newest first" is well defined
    return ids[0]


def thread_of(api: ApiWorld, message_id: str) -> str:
    return str(
        api.client.get(f"/v1/messages/{message_id}", headers=api.headers()).json()["thread_id"]
    )


def test_list_and_get_in_thread_order(api: ApiWorld) -> None:
    identity, address = api.identity("alice")
    root_mid, reply_mid = mid(), mid()
    root = send(api, address, subject="Trip plans", body="Where to?", message_id=root_mid)
    other = send(api, address, subject="Lunch", body="Noon?", sender="Bo <bo@else.example>")
    reply = send(
        api,
        address,
        subject="Re: Trip plans",
        body="Lisbon!",
        message_id=reply_mid,
        in_reply_to=root_mid,
        sender="Cy <cy@third.example>",
    )
    nested = send(api, address, subject="Re: Trip plans", body="Yes.", in_reply_to=reply_mid)
    headers = api.headers()
    listed = api.client.get(f"/v1/identities/{identity}/threads", headers=headers)
    assert listed.status_code == 200, listed.text
    data = listed.json()["data"]
    assert len(data) == 2
    trip, lunch = data
    assert lunch["id"] == thread_of(api, other)
    assert trip["subject"] == "Trip plans" and trip["message_count"] == 3
    assert trip["unread_count"] == 3 and trip["snippet"] == "Yes."
    addresses = {p["address"] for p in trip["participants"]}
    assert {"ann@sender.example", "cy@third.example", address} <= addresses
    assert trip["first_at"] < trip["last_at"] and trip["archived"] is False
    got = api.client.get(f"/v1/threads/{trip['id']}", headers=headers)
    assert got.status_code == 200, got.text
    detail = got.json()
    assert [m["id"] for m in detail["messages"]] == [root, reply, nested]
    assert [m["parent_id"] for m in detail["messages"]] == [None, root, reply]
    assert detail["messages_truncated"] is False and detail["message_count"] == 3


def test_merged_threads_are_not_listed_and_resolve_to_the_survivor(api: ApiWorld) -> None:
    identity, address = api.identity("bob")
    a_mid, b_mid = mid(), mid()
    a = send(api, address, subject="Part A", message_id=a_mid)
    b = send(api, address, subject="Part B", message_id=b_mid)
    folded_id = thread_of(api, b)
    survivor_id = thread_of(api, a)
    assert folded_id != survivor_id
    send(
        api,
        address,
        subject="Re: both",
        in_reply_to=b_mid,
        extra_headers={"References": f"<{a_mid}> <{b_mid}>"},
    )
    headers = api.headers()
    data = api.client.get(f"/v1/identities/{identity}/threads", headers=headers).json()["data"]
    assert [t["id"] for t in data] == [survivor_id]
    assert data[0]["message_count"] == 3
    via_folded = api.client.get(f"/v1/threads/{folded_id}", headers=headers)
    assert via_folded.status_code == 200 and via_folded.json()["id"] == survivor_id
    patched = api.client.patch(f"/v1/threads/{folded_id}", json={"read": True}, headers=headers)
    assert patched.status_code == 200 and patched.json()["id"] == survivor_id
    assert patched.json()["unread_count"] == 0


def test_filters(api: ApiWorld) -> None:
    identity, address = api.identity("carol")
    headers = api.headers()
    old = thread_of(api, send(api, address, subject="Old one"))
    mid_thread = thread_of(api, send(api, address, subject="Middle", sender="Dee <dee@x.example>"))
    new = thread_of(api, send(api, address, subject="New one"))
    url = f"/v1/identities/{identity}/threads"

    def ids(**params: Any) -> list[str]:
        response = api.client.get(url, params=params, headers=headers)
        assert response.status_code == 200, response.text
        return [t["id"] for t in response.json()["data"]]

    assert ids() == [new, mid_thread, old]
    assert ids(participant="DEE@x.example") == [mid_thread]
    assert ids(participant="nobody@x.example") == []
    api.client.patch(f"/v1/threads/{old}", json={"labels_add": ["keep"]}, headers=headers)
    assert ids(label="keep") == [old]
    api.client.patch(f"/v1/threads/{new}", json={"read": True}, headers=headers)
    assert ids(unread="false") == [new]
    assert ids(unread="true") == [mid_thread, old]
    api.client.patch(f"/v1/threads/{mid_thread}", json={"archived": True}, headers=headers)
    assert ids() == [new, old]
    assert ids(archived="true") == [mid_thread]
    middle_at = api.client.get(f"/v1/threads/{mid_thread}", headers=headers).json()["last_at"]
    assert ids(since=middle_at) == [new]
    assert ids(until=middle_at) == [old]
    assert ids(since=middle_at, archived="true") == [mid_thread]
    page = api.client.get(url, params={"limit": 1}, headers=headers).json()
    assert [t["id"] for t in page["data"]] == [new] and page["next_cursor"]
    rest = api.client.get(
        url, params={"limit": 1, "cursor": page["next_cursor"]}, headers=headers
    ).json()
    assert [t["id"] for t in rest["data"]] == [old] and rest["next_cursor"] is None


def test_update_applies_to_every_message(api: ApiWorld) -> None:
    identity, address = api.identity("dave")
    root_mid = mid()
    one = send(api, address, subject="Budget", message_id=root_mid)
    two = send(api, address, subject="Re: Budget", in_reply_to=root_mid)
    thread = thread_of(api, one)
    headers = api.headers()
    response = api.client.patch(
        f"/v1/threads/{thread}",
        json={"read": True, "archived": True, "labels_add": ["finance", "q3"]},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["unread_count"] == 0 and body["archived"] is True
    assert body["labels"] == ["finance", "q3"]
    for message in (one, two):
        m = api.client.get(f"/v1/messages/{message}", headers=headers).json()
        assert m["read"] is True and m["archived"] is True and m["labels"] == ["finance", "q3"]
    again = api.client.patch(
        f"/v1/threads/{thread}",
        json={"read": False, "archived": False, "labels_remove": ["q3"]},
        headers=headers,
    ).json()
    assert again["unread_count"] == 2 and again["archived"] is False
    assert again["labels"] == ["finance"]
    with api.app.db.read() as tx:
        rows = tx.fetchall(
            "SELECT * FROM audit_log WHERE action = 'thread.update' AND target_id = %s", (thread,)
        )
        count = tx.fetchval("SELECT unread_count FROM threads WHERE id = %s", (thread,))
    assert count == 2 and len(rows) == 2
    assert all(address not in str(r) and "Budget" not in str(r) for r in rows)
    identity_key = api.headers("identity", identity_id=identity)
    own = api.client.patch(f"/v1/threads/{thread}", json={"read": True}, headers=identity_key)
    assert own.status_code == 200


def test_bad_input_and_reach(api: ApiWorld) -> None:
    identity, address = api.identity("erin")
    other, _ = api.identity("frank")
    thread = thread_of(api, send(api, address))
    headers = api.headers()
    for body in (
        {"labels_add": ["UPPER"]},
        {"labels_remove": [""]},
        {"labels_add": ["ok"] * 33},
        {"archived": "yes please"},
        {"unknown": 1},
    ):
        response = api.client.patch(f"/v1/threads/{thread}", json=body, headers=headers)
        assert response.status_code == 422, (body, response.text)
    url = f"/v1/identities/{identity}/threads"
    for params in ({"since": "not a time"}, {"label": "Bad!"}, {"limit": 0}, {"limit": 10**9}):
        assert api.client.get(url, params=params, headers=headers).status_code == 422, params
    assert api.client.get(url, params={"cursor": "x"}, headers=headers).status_code == 400
    for key in (
        api.headers("tenant", tenant_id=api.tenant("elsewhere")),
        api.headers("identity", identity_id=other),
    ):
        for method in ("GET", "PATCH"):
            response = api.client.request(
                method, f"/v1/threads/{thread}", json={"read": True}, headers=key
            )
            assert response.status_code == 404 and response.json()["code"] == "thread_not_found"
        listed = api.client.get(url, headers=key)
        assert listed.status_code == 404 and listed.json()["code"] == "identity_not_found"
    missing = api.client.get("/v1/threads/thr_missing", headers=headers)
    assert missing.status_code == 404 and missing.json()["code"] == "thread_not_found"
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT unread_count FROM threads WHERE id = %s", (thread,)) == 1


def test_a_reply_brings_an_archived_thread_back_to_the_inbox(api: ApiWorld) -> None:
    identity, address = api.identity("arch")
    root_mid = mid()
    root = send(api, address, subject="Old talk", body="Done.", message_id=root_mid)
    thread = thread_of(api, root)
    headers = api.headers()
    archived = api.client.patch(f"/v1/threads/{thread}", json={"archived": True}, headers=headers)
    assert archived.status_code == 200 and archived.json()["archived"] is True
    inbox = f"/v1/identities/{identity}/threads"
    assert api.client.get(inbox, headers=headers).json()["data"] == []
    reply = send(api, address, subject="Re: Old talk", body="One more thing", in_reply_to=root_mid)
    assert thread_of(api, reply) == thread
    listed = api.client.get(inbox, headers=headers).json()["data"]
    assert [t["id"] for t in listed] == [thread] and listed[0]["archived"] is False
    messages = api.client.get(f"/v1/threads/{thread}", headers=headers).json()["messages"]
    assert [m["archived"] for m in messages] == [True, False]

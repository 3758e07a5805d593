"""Messages over the API: list, get, change, raw and attachment downloads, reach."""

from __future__ import annotations

import time
import uuid
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any

from postroom.testing.api import ApiWorld
from postroom.testing.mail import deliver, make_message

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
HTML_PAGE = b"<html><body><script>alert(1)</script>hello</body></html>"
PASSWD = b"root:x:0:0:root:/root:/bin/sh\n"


def mid() -> str:
    return f"{uuid.uuid4().hex}@sender.example"


def send(api: ApiWorld, to: str, **kwargs: Any) -> str:
    kwargs.setdefault("message_id", mid())
    ids = deliver(api.app, make_message(to=to, **kwargs), to)
    assert len(ids) == 1
    return ids[0]


def with_attachments(to: str) -> bytes:
    msg = EmailMessage(policy=SMTP)
    msg["From"] = "Ann Sender <ann@sender.example>"
    msg["To"] = to
    msg["Subject"] = "Files for you"
    msg["Message-ID"] = f"<{mid()}>"
    msg["Date"] = "Mon, 30 Nov 2026 10:00:00 +0000"
    msg.set_content("Here are the files.\n")
    msg.add_attachment(PASSWD, maintype="text", subtype="plain", filename="../../etc/passwd")
    msg.add_attachment(HTML_PAGE, maintype="text", subtype="html", filename="page.html")
    msg.add_attachment(PNG, maintype="image", subtype="png", filename='we"ird\u00e9.png')
    return msg.as_bytes()


def test_list_is_newest_first_and_get_shows_every_field(api: ApiWorld) -> None:
    identity, address = api.identity("alice")
    first_mid = mid()
    first = send(
        api, address, subject="Order 123", body="Your order shipped.", message_id=first_mid
    )
    time.sleep(0.003)
    reply = send(api, address, subject="Re: Order 123", body="Thanks!", in_reply_to=first_mid)
    headers = api.headers()
    listed = api.client.get(f"/v1/identities/{identity}/messages", headers=headers)
    assert listed.status_code == 200, listed.text
    data = listed.json()["data"]
    assert [m["id"] for m in data] == [reply, first]
    assert data[0]["parent_id"] == first and data[1]["parent_id"] is None
    assert data[0]["thread_id"] == data[1]["thread_id"]
    got = api.client.get(f"/v1/messages/{first}", headers=headers)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["from"] == {"address": "ann@sender.example", "name": "Ann Sender"}
    assert body["to"] == [{"address": address, "name": None}]
    assert body["subject"] == "Order 123" and body["text"].strip() == "Your order shipped."
    assert body["rfc_message_id"] == first_mid and body["references"] == []
    assert body["envelope"]["mail_from"] == "ann@sender.example"
    assert body["envelope"]["rcpt_to"] == [address]
    assert body["delivered_to"] == address and body["direction"] == "inbound"
    assert body["read"] is False and body["archived"] is False and body["labels"] == []
    assert body["verdict"] is None and body["spam_score"] is None and body["attachments"] == []
    assert body["raw_url"] == f"/v1/messages/{first}/raw"
    assert body["received_at"].endswith("Z") and body["snippet"] == "Your order shipped."


def test_filters_and_pages(api: ApiWorld) -> None:
    identity, address = api.identity("bob")
    ids = []
    for n in range(5):
        ids.append(send(api, address, subject=f"Note {n}", body=f"number {n}"))
        time.sleep(0.003)
    headers = api.headers()
    url = f"/v1/identities/{identity}/messages"
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get(url, params=params, headers=headers).json()
        seen += [m["id"] for m in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    patched = api.client.patch(
        f"/v1/messages/{ids[1]}",
        json={"labels_add": ["work", "a:b"], "read": True},
        headers=headers,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["labels"] == ["a:b", "work"] and patched.json()["read"] is True
    labelled = api.client.get(url, params={"label": "work"}, headers=headers).json()["data"]
    assert [m["id"] for m in labelled] == [ids[1]]
    unread = api.client.get(url, params={"unread": "true"}, headers=headers).json()["data"]
    assert ids[1] not in [m["id"] for m in unread] and len(unread) == 4
    read = api.client.get(url, params={"unread": "false"}, headers=headers).json()["data"]
    assert [m["id"] for m in read] == [ids[1]]
    middle = api.client.get(f"/v1/messages/{ids[2]}", headers=headers).json()["received_at"]
    since = api.client.get(url, params={"since": middle}, headers=headers).json()["data"]
    assert [m["id"] for m in since] == [ids[4], ids[3], ids[2]]
    until = api.client.get(url, params={"until": middle}, headers=headers).json()["data"]
    assert [m["id"] for m in until] == [ids[1], ids[0]]
    thread = api.client.get(f"/v1/messages/{ids[0]}", headers=headers).json()["thread_id"]
    in_thread = api.client.get(url, params={"thread_id": thread}, headers=headers).json()["data"]
    assert [m["id"] for m in in_thread] == [ids[0]]
    nowhere = api.client.get(url, params={"thread_id": "thr_nope"}, headers=headers).json()
    assert nowhere["data"] == []


def test_update_keeps_thread_counters_and_writes_an_audit_row(api: ApiWorld) -> None:
    identity, address = api.identity("carol")
    root_mid = mid()
    one = send(api, address, subject="Plans", message_id=root_mid)
    two = send(api, address, subject="Re: Plans", in_reply_to=root_mid)
    headers = api.headers()
    thread = api.client.get(f"/v1/messages/{one}", headers=headers).json()["thread_id"]

    def state() -> dict[str, Any]:
        return api.client.get(f"/v1/threads/{thread}", headers=headers).json()  # type: ignore[no-any-return]

    assert state()["unread_count"] == 2
    api.client.patch(f"/v1/messages/{one}", json={"read": True}, headers=headers)
    assert state()["unread_count"] == 1
    api.client.patch(f"/v1/messages/{one}", json={"archived": True}, headers=headers)
    assert state()["archived"] is False
    done = api.client.patch(f"/v1/messages/{two}", json={"archived": True}, headers=headers)
    assert done.status_code == 200 and done.json()["archived"] is True
    assert state()["archived"] is True
    api.client.patch(
        f"/v1/messages/{one}", json={"archived": False, "read": False}, headers=headers
    )
    after = state()
    assert after["archived"] is False and after["unread_count"] == 2
    with api.app.db.read() as tx:
        rows = tx.fetchall(
            "SELECT * FROM audit_log WHERE action = 'message.update' AND target_id = %s", (one,)
        )
    assert len(rows) == 3
    assert all(address not in str(r) and "Plans" not in str(r) for r in rows)
    assert rows[0]["actor_key_id"] and rows[0]["target_type"] == "message"


def test_bad_bodies_are_refused(api: ApiWorld) -> None:
    _identity, address = api.identity("dave")
    message = send(api, address)
    headers = api.headers()
    url = f"/v1/messages/{message}"
    for body in (
        {"labels_add": ["Bad Label"]},
        {"labels_add": ["-starts-with-dash"]},
        {"labels_add": ["x" * 65]},
        {"labels_remove": ["ok\n"]},
        {"colour": "red"},
        {"read": "maybe"},
    ):
        response = api.client.patch(url, json=body, headers=headers)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["code"] == "validation_failed"
    both = api.client.patch(
        url, json={"labels_add": ["x"], "labels_remove": ["x"]}, headers=headers
    )
    assert both.status_code == 422 and both.json()["code"] == "labels_conflict"
    bad_label_filter = api.client.get(
        f"/v1/identities/{_identity}/messages", params={"label": "NO WAY"}, headers=headers
    )
    assert bad_label_filter.status_code == 422
    bad_time = api.client.get(
        f"/v1/identities/{_identity}/messages", params={"since": "yesterday"}, headers=headers
    )
    assert bad_time.status_code == 422
    bad_cursor = api.client.get(
        f"/v1/identities/{_identity}/messages", params={"cursor": "abc.def"}, headers=headers
    )
    assert bad_cursor.status_code == 400 and bad_cursor.json()["code"] == "invalid_cursor"


def test_mail_out_of_reach_is_not_found(api: ApiWorld) -> None:
    identity, address = api.identity("erin")
    other_identity, _ = api.identity("frank")
    message = send(api, address)
    other_tenant = api.tenant("elsewhere")
    keys = {
        "other tenant": api.headers("tenant", tenant_id=other_tenant),
        "other identity": api.headers("identity", identity_id=other_identity),
    }
    for why, headers in keys.items():
        for method, url in (
            ("GET", f"/v1/messages/{message}"),
            ("GET", f"/v1/messages/{message}/raw"),
            ("GET", f"/v1/messages/{message}/attachments/att_x"),
            ("PATCH", f"/v1/messages/{message}"),
        ):
            response = api.client.request(method, url, json={"read": True}, headers=headers)
            assert response.status_code == 404, (why, url)
            assert response.json()["code"] == "message_not_found", (why, url)
        listed = api.client.get(f"/v1/identities/{identity}/messages", headers=headers)
        assert listed.status_code == 404 and listed.json()["code"] == "identity_not_found"
    own = api.headers("identity", identity_id=identity)
    assert api.client.get(f"/v1/messages/{message}", headers=own).status_code == 200
    with api.app.db.read() as tx:
        read = tx.fetchval("SELECT read FROM messages WHERE id = %s", (message,))
    assert read == 0
    # NUL never reaches a query (400 invalid_character or 404); odd ids are 404.
    for odd in ("msg_%00x", "%00", "x" * 300, "msg_\u00e9", "msg_%0a"):
        for url in (f"/v1/messages/{odd}", f"/v1/identities/{odd}/messages"):
            response = api.client.get(url, headers=api.headers())
            assert response.status_code in (400, 404), (odd, url)
            assert response.status_code == 404 or "%0" in odd


def test_raw_download_streams_the_stored_mime(api: ApiWorld) -> None:
    _identity, address = api.identity("gina")
    raw = make_message(to=address, subject="Raw", body="raw body", message_id=mid())
    message = deliver(api.app, raw, address)[0]
    response = api.client.get(f"/v1/messages/{message}/raw", headers=api.headers())
    assert response.status_code == 200
    assert response.headers["content-type"] == "message/rfc822"
    assert response.headers["content-disposition"].startswith(
        f'attachment; filename="{message}.eml"'
    )
    assert response.content.endswith(raw)


def test_attachments_download_safely(api: ApiWorld) -> None:
    _identity, address = api.identity("hank")
    message = deliver(api.app, with_attachments(address), address)[0]
    headers = api.headers()
    body = api.client.get(f"/v1/messages/{message}", headers=headers).json()
    assert body["attachment_count"] == 3
    by_name = {a["filename"]: a for a in body["attachments"]}
    assert set(by_name) == {"passwd", "page.html", 'we"ird\u00e9.png'}
    expected = {"passwd": PASSWD, "page.html": HTML_PAGE, 'we"ird\u00e9.png': PNG}
    for name, attachment in by_name.items():
        assert attachment["url"] == f"/v1/messages/{message}/attachments/{attachment['id']}"
        response = api.client.get(attachment["url"], headers=headers)
        assert response.status_code == 200, response.text
        assert response.content == expected[name]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-security-policy"] == "sandbox"
        disposition = response.headers["content-disposition"]
        assert disposition.startswith('attachment; filename="')
        plain = disposition.split('filename="', 1)[1].split('"', 1)[0]
        assert "/" not in plain and "\\" not in plain and ".." not in plain
        assert "filename*=UTF-8''" in disposition
        assert "text/html" not in response.headers["content-type"]
        assert int(response.headers["content-length"]) == len(expected[name])
    html = api.client.get(by_name["page.html"]["url"], headers=headers)
    assert html.headers["content-type"] == "application/octet-stream"
    png = api.client.get(by_name['we"ird\u00e9.png']["url"], headers=headers)
    assert png.headers["content-type"] == "image/png"
    assert "filename*=UTF-8''we%22ird%C3%A9.png" not in png.headers["content-disposition"]
    assert "filename*=UTF-8''weird%C3%A9.png" in png.headers["content-disposition"]
    passwd = api.client.get(by_name["passwd"]["url"], headers=headers)
    assert passwd.headers["content-type"].startswith("text/plain")
    missing = api.client.get(f"/v1/messages/{message}/attachments/att_nope", headers=headers)
    assert missing.status_code == 404 and missing.json()["code"] == "attachment_not_found"
    other = send(api, address)
    foreign = api.client.get(
        f"/v1/messages/{other}/attachments/{by_name['passwd']['id']}", headers=headers
    )
    assert foreign.status_code == 404 and foreign.json()["code"] == "attachment_not_found"


def test_bytes_that_are_gone_are_not_found_not_wrong(api: ApiWorld) -> None:
    _identity, address = api.identity("ivy")
    message = deliver(api.app, with_attachments(address), address)[0]
    headers = api.headers()
    attachment = api.client.get(f"/v1/messages/{message}", headers=headers).json()["attachments"][0]
    with api.app.db.write() as tx:
        tx.execute("UPDATE attachments SET sha256 = %s WHERE id = %s", ("0" * 64, attachment["id"]))
        key = tx.fetchval("SELECT raw_blob_key FROM messages WHERE id = %s", (message,))
    changed = api.client.get(attachment["url"], headers=headers)
    assert changed.status_code == 404 and changed.json()["code"] == "attachment_unavailable"
    api.app.blobs.delete(key)
    raw = api.client.get(f"/v1/messages/{message}/raw", headers=headers)
    assert raw.status_code == 404 and raw.json()["code"] == "raw_not_found"
    gone = api.client.get(f"/v1/messages/{message}", headers=headers)
    assert gone.status_code == 200 and gone.json()["attachment_count"] == 3

"""Search over the API: the query language, ranked hits with marked snippets, totals,
fuzzy fallback, hostile and malformed queries (422 with the position), reach."""

from __future__ import annotations

import time
import uuid
from typing import Any

from postroom.testing.api import ApiWorld
from postroom.testing.mail import deliver, make_message


def send(api: ApiWorld, to: str, **kwargs: Any) -> str:
    kwargs.setdefault("message_id", f"{uuid.uuid4().hex}@sender.example")
    ids = deliver(api.app, make_message(to=to, **kwargs), to)
    time.sleep(0.002)
    return ids[0]


def hits(api: ApiWorld, url: str, headers: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    response = api.client.get(url, params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["data"]  # type: ignore[no-any-return]


def test_words_are_found_ranked_and_marked(api: ApiWorld) -> None:
    identity, address = api.identity("alice")
    in_subject = send(api, address, subject="Invoice for March", body="Please pay soon.")
    in_body = send(api, address, subject="Hello", body="The invoice <b>is</b> attached & due.")
    send(api, address, subject="Other", body="Nothing to see here.")
    url = f"/v1/identities/{identity}/search"
    found = hits(api, url, api.headers(), q="invoice")
    assert [h["message_id"] for h in found] == [in_subject, in_body]
    assert found[0]["score"] >= found[1]["score"]
    body_hit = found[1]
    assert body_hit["snippet"] == (
        "The <mark>invoice</mark> &lt;b&gt;is&lt;/b&gt; attached &amp; due."
    )
    assert body_hit["from"] == {"address": "ann@sender.example", "name": "Ann Sender"}
    assert body_hit["subject"] == "Hello" and body_hit["received_at"].endswith("Z")
    assert body_hit["thread_id"].startswith("thr_") and body_hit["identity_id"] == identity
    assert "<mark>Invoice</mark>" in found[0]["snippet"]
    both = hits(api, url, api.headers(), q="INVOICE attached")
    assert [h["message_id"] for h in both] == [in_body]


def test_diacritics_fold_and_hostile_queries_never_fail(api: ApiWorld) -> None:
    identity, address = api.identity("bob")
    cafe = send(api, address, subject="Café near the station", body="A and B meet")
    url = f"/v1/identities/{identity}/search"
    headers = api.headers()
    found = hits(api, url, headers, q="cafe")
    assert [h["message_id"] for h in found] == [cafe]
    assert "<mark>Café</mark>" in found[0]["snippet"]
    assert "**Café**" in found[0]["snippet_text"]
    for q in (
        '"a" AND (NEAR',
        "near(a b)",
        "a* OR b^ -c + NOT d:e",
        '""""',
        "café) AND NOT (",
        "{subject}: x",
        "' OR 1=1 --",
        "\u0000x",
        "x" * 999,
        "from:\"' OR 1=1",
        "subject:(a OR b)",
        "ref:::",
        "larger:99999999999999999999",
    ):
        response = api.client.get(url, params={"q": q}, headers=headers)
        assert response.status_code in (200, 400, 422), (q, response.text)
        if response.status_code != 200:
            assert response.json()["code"] in ("invalid_query", "invalid_character"), q
    assert [h["message_id"] for h in hits(api, url, headers, q='"a" AND NEAR')] == [cafe]
    for q, position in (("", 0), ("   ", 0), ("!!! ... ((", 9), ("*", 0), ("in:nowhere", 3)):
        response = api.client.get(url, params={"q": q}, headers=headers)
        assert response.status_code == 422, q
        body = response.json()
        assert body["code"] == "invalid_query" and body["position"] == position, (q, body)
        assert f"position {position}" in body["detail"]
    missing = api.client.get(url, headers=headers)
    assert missing.status_code == 422
    too_many = api.client.get(
        url, params={"q": " ".join(f"w{n}" for n in range(33))}, headers=headers
    )
    assert too_many.status_code == 422 and too_many.json()["code"] == "invalid_query"


def test_language_sort_group_total_and_fuzzy(api: ApiWorld) -> None:
    identity, address = api.identity("dora")
    first = send(api, address, subject="Invoice 7", body="first", message_id="i7@x.example")
    answer = send(api, address, subject="Re: Invoice 7", body="paid", in_reply_to="i7@x.example")
    other = send(api, address, subject="Holiday plans", body="invoice later")
    url = f"/v1/identities/{identity}/search"
    page = api.client.get(url, params={"q": "invoice"}, headers=api.headers()).json()
    assert page["total"] == 3 and page["fuzzy"] is False
    assert {h["thread_hits"] for h in page["data"]} == {None}
    by_date = hits(api, url, api.headers(), q="invoice", sort="date")
    assert [h["message_id"] for h in by_date] == [other, answer, first]
    grouped = api.client.get(
        url, params={"q": "invoice", "group": "thread"}, headers=api.headers()
    ).json()
    assert grouped["total"] == 2
    assert sorted(h["thread_hits"] for h in grouped["data"]) == [1, 2]
    narrowed = hits(api, url, api.headers(), q="subject:invoice -paid")
    assert [h["message_id"] for h in narrowed] == [first]
    fuzzy = api.client.get(url, params={"q": "holdiay"}, headers=api.headers()).json()
    assert fuzzy["fuzzy"] is True and [h["message_id"] for h in fuzzy["data"]] == [other]
    bad = api.client.get(url, params={"q": "x", "sort": "size"}, headers=api.headers())
    assert bad.status_code == 422 and bad.json()["code"] == "validation_failed"


def test_pages_of_hits(api: ApiWorld) -> None:
    identity, address = api.identity("carol")
    made = {send(api, address, subject=f"Report {n}", body="quarterly report") for n in range(5)}
    url = f"/v1/identities/{identity}/search"
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"q": "report", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get(url, params=params, headers=api.headers()).json()
        seen += [h["message_id"] for h in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(made) and len(seen) == 5
    first = api.client.get(url, params={"q": "report", "limit": 2}, headers=api.headers()).json()
    assert first["total"] == 5
    reused = api.client.get(
        url, params={"q": "quarterly", "limit": 2, "cursor": first["next_cursor"]},
        headers=api.headers(),
    )  # fmt: skip
    assert reused.status_code == 400 and reused.json()["code"] == "invalid_cursor"


def test_reach_of_identity_and_tenant_search(api: ApiWorld) -> None:
    alice, alice_address = api.identity("alice")
    bob, bob_address = api.identity("bob")
    to_alice = send(api, alice_address, subject="Zebra crossing")
    to_bob = send(api, bob_address, subject="Zebra stripes")
    partner = api.partner()
    other_tenant = api.tenant("zoo", partner_id=partner)
    with api.app.db.read() as tx:
        home = tx.fetchval("SELECT tenant_id FROM identities WHERE id = %s", (alice,))
    alice_key = api.headers("identity", identity_id=alice)
    outsider = api.headers("tenant", tenant_id=other_tenant)
    own = hits(api, f"/v1/identities/{alice}/search", alice_key, q="zebra")
    assert [h["message_id"] for h in own] == [to_alice]
    denied = api.client.get(
        f"/v1/identities/{bob}/search", params={"q": "zebra"}, headers=alice_key
    )
    assert denied.status_code == 404 and denied.json()["code"] == "identity_not_found"
    hidden = api.client.get(
        f"/v1/identities/{alice}/search", params={"q": "zebra"}, headers=outsider
    )
    assert hidden.status_code == 404
    assert [h["message_id"] for h in hits(api, "/v1/search", alice_key, q="zebra")] == [to_alice]
    tenant_key = api.headers("tenant", tenant_id=home)
    everyone = {h["message_id"] for h in hits(api, "/v1/search", tenant_key, q="zebra")}
    assert everyone == {to_alice, to_bob}
    assert hits(api, "/v1/search", outsider, q="zebra") == []
    wrong = api.client.get("/v1/search", params={"q": "zebra", "tenant_id": home}, headers=outsider)
    assert wrong.status_code == 404 and wrong.json()["code"] == "tenant_not_found"
    required = api.client.get("/v1/search", params={"q": "zebra"}, headers=api.headers())
    assert required.status_code == 422 and required.json()["code"] == "tenant_required"
    platform = hits(api, "/v1/search", api.headers(), q="zebra", tenant_id=home)
    assert {h["message_id"] for h in platform} == {to_alice, to_bob}
    partner_key = api.headers("partner", partner_id=partner)
    assert hits(api, "/v1/search", partner_key, q="zebra", tenant_id=other_tenant) == []
    out = api.client.get(
        "/v1/search", params={"q": "zebra", "tenant_id": home}, headers=partner_key
    )
    assert out.status_code == 404 and out.json()["code"] == "tenant_not_found"
    blank = api.client.get(
        "/v1/search", params={"q": " ", "tenant_id": home}, headers=api.headers()
    )
    assert blank.status_code == 422 and blank.json()["code"] == "invalid_query"

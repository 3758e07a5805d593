"""Search over the API: ranked words, marked snippets, hostile queries, reach."""

from __future__ import annotations

import time
import uuid
from typing import Any

from postroom.mailbox.search import highlight, query_terms
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
    ):
        response = api.client.get(url, params={"q": q}, headers=headers)
        assert response.status_code in (200, 400, 422), (q, response.text)
    near = hits(api, url, headers, q='"a" AND (NEAR')
    assert [h["message_id"] for h in near] == [cafe]
    for q in ("", "   ", "!!! ... ((", "*"):
        response = api.client.get(url, params={"q": q}, headers=headers)
        assert response.status_code == 422, q
        assert response.json()["code"] == "invalid_query"
    missing = api.client.get(url, headers=headers)
    assert missing.status_code == 422
    too_many = api.client.get(
        url, params={"q": " ".join(f"w{n}" for n in range(17))}, headers=headers
    )
    assert too_many.status_code == 422 and too_many.json()["code"] == "invalid_query"


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


def test_query_words_and_snippets_are_plain_functions() -> None:
    assert query_terms('"a" AND (NEAR b*') == ["a", "AND", "NEAR", "b"]
    assert query_terms("x x X") == ["x"]
    text = "<script>alert('x')</script> the order 42 & more " + "word " * 100
    marked = highlight(text, ["order"])
    assert marked is not None
    assert marked.startswith("&lt;script&gt;") and "<mark>order</mark>" in marked
    assert "<script>" not in marked and marked.endswith("…")
    assert highlight("nothing here", ["absent"]) is None
    far = highlight("lead " * 100 + "needle tail", ["needle"])
    assert far is not None and far.startswith("…") and "<mark>needle</mark> tail" in far

"""Verification codes over the API: the long-poll wait (real uvicorn, many waiters at
once, mail arriving while they poll) and the list of recent codes."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from postroom.clock import ManualClock, SystemClock
from postroom.store.tenancy import get_default_tenant
from postroom.testing.api import ApiWorld
from postroom.testing.mail import deliver, make_message

SENDER = "Acme Accounts <no-reply@mail.acme.example>"
MAGIC = "https://app.acme.example/auth/magic?token=Xk2pQ9zLm4Rt7Vw1"


def code_mail(code: str, to: str, *, sender: str = SENDER, link: bool = False) -> bytes:
    body = f"Your verification code is {code}. It expires in 10 minutes."
    if link:
        body += f"\n\nOr sign in with this link:\n{MAGIC}\n"
    return make_message(
        subject="Your Acme sign-in",
        body=body,
        sender=sender,
        to=to,
        message_id=f"{uuid.uuid4().hex}@mail.acme.example",
    )


def until_metric(api: ApiWorld, name: str, ok: Callable[[float], bool]) -> None:
    """Wait (at most 30 s) until the App's metric ``name`` satisfies ``ok``."""
    deadline = time.monotonic() + 30
    while True:
        value = api.app.metrics.registry.get_sample_value(name) or 0.0
        if ok(value):
            return
        assert time.monotonic() < deadline, f"{name} stayed at {value}"
        time.sleep(0.05)


@pytest.fixture
def past(api: ApiWorld) -> Iterator[Any]:
    """Deliver mail as if received ``ago_ms`` before now."""

    def deliver_ago(ago_ms: int, raw: bytes, to: str) -> list[str]:
        api.app.clock = ManualClock(SystemClock().now_ms() - ago_ms)
        try:
            return deliver(api.app, raw, to)
        finally:
            api.app.clock = SystemClock()

    yield deliver_ago
    api.app.clock = SystemClock()


def wait(api: ApiWorld, identity: str, headers: dict[str, str], **params: Any) -> Any:
    return api.client.get(f"/v1/identities/{identity}/codes/wait", params=params, headers=headers)


def test_a_code_reaches_exactly_the_twenty_waiters_it_matches(
    api: ApiWorld, api_server: Any
) -> None:
    identity, address = api.identity("signup")
    url = f"{api_server.url}/v1/identities/{identity}/codes/wait"
    headers = api.headers()
    # (sender_domain filter, timeout): 10 for the sender (its organisational domain, a
    # subdomain, another case), 5 unfiltered, 5 for another sender with a short timeout.
    plans: list[tuple[str | None, int]] = (
        [("acme.example", 20)] * 4
        + [("MAIL.Acme.Example", 20)] * 3
        + [("login.acme.example", 20)] * 3
        + [(None, 20)] * 5
        + [("other.example", 3)] * 5
    )
    results: list[Any] = [None] * len(plans)
    sent = threading.Barrier(len(plans) + 1)

    def waiter(n: int, domain: str | None, timeout: int) -> None:
        params: dict[str, Any] = {"timeout": timeout}
        if domain is not None:
            params["sender_domain"] = domain
        try:
            with httpx.Client(timeout=40) as client:
                sent.wait()
                response = client.get(url, params=params, headers=headers)
                results[n] = (response.status_code, response.json())
        except Exception as exc:  # recorded, asserted below
            results[n] = exc

    threads = [
        threading.Thread(target=waiter, args=(n, domain, timeout))
        for n, (domain, timeout) in enumerate(plans)
    ]
    for thread in threads:
        thread.start()
    sent.wait()
    # Mail that beats a wait is released to one waiter only, so deliver once all twenty
    # are polling (a fixed sleep lost this race on a loaded CI machine).
    until_metric(api, "postroom_code_waits_started_total", lambda v: v >= len(plans))
    [message_id] = deliver(api.app, code_mail("482913", address), address)
    for thread in threads:
        thread.join(timeout=40)
    matched = [
        r for (domain, _), r in zip(plans, results, strict=True) if domain != "other.example"
    ]
    others = [r for (domain, _), r in zip(plans, results, strict=True) if domain == "other.example"]
    assert len(matched) == 15 and len(others) == 5
    for result in matched:
        assert isinstance(result, tuple), result
        status, body = result
        assert status == 200, body
        assert body["kind"] == "code" and body["value"] == "482913"
        assert body["sender_domain"] == "acme.example" and body["message_id"] == message_id
        assert body["from"] == {"name": "Acme Accounts", "address": "no-reply@mail.acme.example"}
        assert body["subject"] == "Your Acme sign-in" and body["thread_id"].startswith("thr_")
    for result in others:
        assert isinstance(result, tuple), result
        assert result[0] == 408 and result[1]["code"] == "wait_timeout"
    listed = api.client.get(f"/v1/identities/{identity}/codes", headers=headers).json()
    assert [(c["value"], c["consumed"]) for c in listed["data"]] == [("482913", True)]


def test_a_code_from_a_minute_ago_is_released_once(api: ApiWorld, past: Any) -> None:
    identity, address = api.identity("early")
    headers = api.headers()
    [message_id] = past(60_000, code_mail("731904", address), address)
    first = wait(api, identity, headers, timeout=1)
    assert first.status_code == 200, first.text
    assert first.json()["value"] == "731904" and first.json()["message_id"] == message_id
    again = wait(api, identity, headers, timeout=1)
    assert again.status_code == 408 and again.json()["code"] == "wait_timeout"
    assert again.headers["content-type"] == "application/problem+json"


def test_a_code_older_than_five_minutes_is_not_released(api: ApiWorld, past: Any) -> None:
    identity, address = api.identity("late")
    headers = api.headers()
    past(6 * 60_000, code_mail("552211", address), address)
    assert wait(api, identity, headers, timeout=1).status_code == 408
    listed = api.client.get(f"/v1/identities/{identity}/codes", headers=headers).json()["data"]
    assert [(c["value"], c["consumed"], c["consumed_at"]) for c in listed] == [
        ("552211", False, None)
    ]


def test_another_identitys_codes_are_never_released(api: ApiWorld, past: Any) -> None:
    mine, _ = api.identity("mine")
    theirs, their_address = api.identity("theirs")
    past(30_000, code_mail("918273", their_address), their_address)
    own_key = api.headers("identity", tenant_id=api_default_tenant(api), identity_id=mine)
    assert wait(api, mine, own_key, timeout=1).status_code == 408
    hidden = wait(api, theirs, own_key, timeout=1)
    assert hidden.status_code == 404 and hidden.json()["code"] == "identity_not_found"
    assert wait(api, theirs, api.headers(), timeout=1).json()["value"] == "918273"


def api_default_tenant(api: ApiWorld) -> str:
    with api.app.db.read() as tx:
        tenant = get_default_tenant(tx)
    assert tenant is not None
    return tenant.id


def test_timeout_bounds_and_reach(api: ApiWorld) -> None:
    identity, _ = api.identity("bounds")
    headers = api.headers()
    for bad in (0, 301, -5):
        response = wait(api, identity, headers, timeout=bad)
        assert response.status_code == 422, (bad, response.text)
        assert response.json()["errors"][0]["field"] == "query.timeout"
    assert wait(api, identity, headers, kind="sms").status_code == 422
    assert wait(api, identity, headers, sender_domain="bad domain").status_code == 422
    other_tenant = api.tenant("elsewhere")
    outsider = api.headers("tenant", tenant_id=other_tenant)
    for key, target in (
        (outsider, identity),
        (headers, "idn_01HZZZZZZZZZZZZZZZZZZZZZZZ"),
        (headers, "idn_" + "x" * 100),
        (headers, "idn%20with%20spaces"),
    ):
        response = wait(api, target, key, timeout=1)
        assert response.status_code == 404 and response.json()["code"] == "identity_not_found"
    listed = api.client.get(f"/v1/identities/{identity}/codes", headers=outsider)
    assert listed.status_code == 404


def test_lower_max_wait_setting_caps_the_timeout(api: ApiWorld) -> None:
    identity, _ = api.identity("capped")
    settings = api.app.settings
    api.app.settings = dataclasses.replace(settings, http_max_wait_seconds=5)
    try:
        response = wait(api, identity, api.headers(), timeout=6)
    finally:
        api.app.settings = settings
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == (
        "query.timeout"
    )


def test_kind_filter_picks_the_link_or_the_code(api: ApiWorld, past: Any) -> None:
    identity, address = api.identity("links")
    headers = api.headers()
    past(10_000, code_mail("640128", address, link=True), address)
    link = wait(api, identity, headers, timeout=1, kind="link")
    assert link.json()["kind"] == "link" and link.json()["value"] == MAGIC
    code = wait(api, identity, headers, timeout=1, kind="any")
    assert code.json()["kind"] == "code" and code.json()["value"] == "640128"
    assert wait(api, identity, headers, timeout=1).status_code == 408
    listed = api.client.get(f"/v1/identities/{identity}/codes", headers=headers).json()["data"]
    assert {(c["kind"], c["consumed"]) for c in listed} == {("code", True), ("link", True)}


def test_list_is_newest_first_and_pages(api: ApiWorld, past: Any) -> None:
    identity, address = api.identity("history")
    headers = api.headers()
    for n, code in enumerate(("111222", "333444", "555666")):
        past((3 - n) * 60_000, code_mail(code, address), address)
    past(25 * 3_600_000, code_mail("999000", address), address)  # expired
    other = "Other <hi@other.example>"
    past(1_000, code_mail("777888", address, sender=other), address)
    url = f"/v1/identities/{identity}/codes"
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, "sender_domain": "acme.example"}
        if cursor:
            params["cursor"] = cursor
        page = api.client.get(url, params=params, headers=headers).json()
        seen += [c["value"] for c in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["555666", "333444", "111222"]
    everything = api.client.get(url, headers=headers).json()["data"]
    assert [c["value"] for c in everything] == ["777888", "555666", "333444", "111222"]
    first = everything[0]
    assert first["sender_domain"] == "other.example" and not first["consumed"]
    assert first["expires_at"] > first["received_at"]
    forged = api.client.get(url, params={"cursor": "abc.def"}, headers=headers)
    assert forged.status_code == 400 and forged.json()["code"] == "invalid_cursor"


def test_a_client_that_hangs_up_stops_waiting(api: ApiWorld, api_server: Any) -> None:
    identity, address = api.identity("gone")
    url = f"{api_server.url}/v1/identities/{identity}/codes/wait"
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=0.5) as client:
        client.get(url, params={"timeout": 20}, headers=api.headers())
    until_metric(api, "postroom_code_waits_started_total", lambda v: v == 1)
    until_metric(api, "postroom_code_waits", lambda v: v == 0)  # the server noticed
    deliver(api.app, code_mail("246810", address), address)
    time.sleep(0.8)  # a wait still polling would release (consume) the code now
    listed = api.client.get(f"/v1/identities/{identity}/codes", headers=api.headers()).json()
    assert [(c["value"], c["consumed"]) for c in listed["data"]] == [("246810", False)]

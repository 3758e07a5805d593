"""Idempotency-Key under load, over real HTTP: many identical POSTs racing with one key
make one resource; the rest are replays or ``request_in_progress``."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import httpx

from postroom.api.idempotency import fingerprint
from postroom.testing.api import ApiWorld

RACERS = 50


def _race(url: str, headers: dict[str, str], body: dict[str, Any], n: int) -> list[httpx.Response]:
    """``n`` threads POST the same request at the same moment; their answers."""
    barrier = threading.Barrier(n)
    answers: list[httpx.Response] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def post() -> None:
        try:
            with httpx.Client(timeout=30) as client:
                barrier.wait(timeout=30)
                answer = client.post(url, json=body, headers=headers)
            with lock:
                answers.append(answer)
        except BaseException as exc:  # reported below
            with lock:
                failures.append(exc)

    threads = [threading.Thread(target=post) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    assert len(answers) == n
    return answers


def _classify(answers: list[httpx.Response]) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for answer in answers:
        if answer.status_code == 201:
            replayed = answer.headers.get("idempotent-replayed") == "true"
            kinds["replay" if replayed else "original"] += 1
        else:
            assert answer.status_code == 409, answer.text
            assert answer.json()["code"] == "request_in_progress", answer.text
            kinds["in progress"] += 1
    return kinds


def test_fifty_racing_posts_with_one_key_create_one_tenant(api: ApiWorld, api_server: Any) -> None:
    headers = {**api.auth(api.platform), "Idempotency-Key": "race-1"}
    answers = _race(f"{api_server.url}/v1/tenants", headers, {"slug": "raced"}, RACERS)
    kinds = _classify(answers)
    assert kinds["original"] == 1, kinds
    ids = {a.json()["id"] for a in answers if a.status_code == 201}
    assert len(ids) == 1
    with api.app.db.read() as tx:
        count = tx.fetchval("SELECT COUNT(*) FROM tenants WHERE slug = 'raced'")
        audits = tx.fetchval(
            "SELECT COUNT(*) FROM audit_log WHERE action = 'tenant.create' AND target_id = %s",
            (next(iter(ids)),),
        )
    assert count == 1 and audits == 1
    # After the race every retry is a replay of the one tenant.
    again = httpx.post(f"{api_server.url}/v1/tenants", json={"slug": "raced"}, headers=headers)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] in ids
    # The same key with another body is a conflict, not a second tenant.
    other = httpx.post(f"{api_server.url}/v1/tenants", json={"slug": "raced-2"}, headers=headers)
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT COUNT(*) FROM tenants WHERE slug LIKE 'raced%%'") == 1


def test_racing_key_creation_shows_the_secret_once(api: ApiWorld, api_server: Any) -> None:
    tenant = api.tenant("acme")
    headers = {**api.auth(api.platform), "Idempotency-Key": "race-key"}
    body = {"level": "tenant", "tenant_id": tenant, "name": "raced"}
    answers = _race(f"{api_server.url}/v1/keys", headers, body, 20)
    kinds = _classify(answers)
    assert kinds["original"] == 1, kinds
    secrets = [a.json()["secret"] for a in answers if "secret" in a.json()]
    assert len(secrets) == 1
    assert all(
        a.json()["secret_replayed"] is False
        for a in answers
        if a.headers.get("idempotent-replayed") == "true"
    )
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT COUNT(*) FROM api_keys WHERE name = 'raced'") == 1


def test_a_stale_request_in_progress_is_taken_over(api: ApiWorld) -> None:
    from postroom.store import idempotency as records
    from postroom.tenancy.api_keys import verify

    platform = verify(api.app, api.platform)
    headers = {**api.auth(api.platform), "Idempotency-Key": "died"}
    body = {"slug": "stale"}
    now = api.app.clock.now_ms()
    # A request that began and died without completing (its process was killed).
    with api.app.db.write() as tx:
        assert records.begin(
            tx,
            scope="platform",
            key_id=platform.id,
            idem_key="died",
            method="POST",
            path="/v1/tenants",
            fingerprint=fingerprint("POST", "/v1/tenants", body),
            now=now,
            expires_at=now + 86_400_000,
        )
    busy = api.client.post("/v1/tenants", json=body, headers=headers)
    assert busy.status_code == 409 and busy.json()["code"] == "request_in_progress"
    different = api.client.post("/v1/tenants", json={"slug": "other"}, headers=headers)
    assert different.status_code == 409 and different.json()["code"] == "idempotency_conflict"
    with api.app.db.write() as tx:
        tx.execute(
            "UPDATE idempotency_records SET created_at = %s WHERE idem_key = 'died'",
            (now - 61_000,),
        )
    taken = api.client.post("/v1/tenants", json=body, headers=headers)
    assert taken.status_code == 201, taken.text
    assert "idempotent-replayed" not in taken.headers
    with api.app.db.read() as tx:
        record = records.get(tx, "platform", platform.id, "died")
        assert tx.fetchval("SELECT COUNT(*) FROM tenants WHERE slug = 'stale'") == 1
    assert record is not None and record.status == "completed"
    replay = api.client.post("/v1/tenants", json=body, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == taken.json()

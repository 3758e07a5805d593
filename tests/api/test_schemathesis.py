"""Property-based conformance of the whole API to its own OpenAPI document (schemathesis).

For every operation of ``/openapi.json`` schemathesis generates requests, valid ones and
invalid ones (odd strings, NUL bytes, huge numbers, wrong types, missing fields), sends
them in-process (ASGI) with a platform key, and checks each answer: never a 5xx, its
status code documented, its content type documented, its body valid against the
documented schema. Path parameters are half the time real ids of a small world (a tenant
with an inbox, a delivered message with an attachment, a domain, an alias, a key), so
success responses are checked too, not only 404s.

Bounded and reproducible: derandomized, no example database, no shrinking, a fixed
number of examples per operation. Operations run reads first and deletes last, so the
world's objects exist while they are read.
"""

from __future__ import annotations

import email.message
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from postroom.api.routes import ROUTES, RouteSpec

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
EXAMPLES = {GenerationMode.POSITIVE: 15, GenerationMode.NEGATIVE: 10}
# The long poll (codes.wait) waits up to its timeout for a code that never comes: it
# runs with a few examples and the smallest timeout, one second. The live event stream
# (events.stream) never ends by itself: it runs with a few examples, each bounded by
# max_seconds.
SLOW = {"codes.wait": 2, "events.stream": 3}
STREAM_SECONDS = 0.5
ORDER = {"GET": 0, "POST": 1, "PATCH": 2, "DELETE": 3}
OPERATIONS = sorted(ROUTES.values(), key=lambda spec: ORDER[spec.method])


@dataclass
class Target:
    app: Any
    schema: Any
    headers: dict[str, str]
    ids: dict[str, str]


def _message(to: str) -> bytes:
    message = email.message.EmailMessage()
    message["From"] = "Sign-up <noreply@service.example>"
    message["To"] = to
    message["Subject"] = "Your verification code"
    message["Message-ID"] = "<schemathesis-1@service.example>"
    message["Date"] = "Mon, 02 Nov 2026 10:00:00 +0000"
    message.set_content("Your verification code is 482913.\n")
    message.add_attachment(b"%PDF-1.4 x", maintype="application", subtype="pdf", filename="a.pdf")
    return message.as_bytes()


def _world(app: Any, client: Any) -> tuple[str, dict[str, str]]:
    from postroom.tenancy import api_keys, service
    from postroom.tenancy.bootstrap import initialize
    from postroom.testing.mail import deliver

    initialize(app)
    _key, platform = api_keys.create_key(app, "platform", name="schemathesis")
    tenant = service.create_tenant(app, "fuzzed").id
    made = service.create_identity(app, "fuzzy", tenant=tenant)
    service.add_alias(app, made.identity.id, "fuzzalias")
    (message_id,) = deliver(app, _message(made.address.address), made.address.address)
    domain = client.post(
        "/v1/domains",
        json={"name": "fuzzed.example", "method": "dns_records", "tenant_id": tenant},
        headers={"Authorization": f"Bearer {platform}"},
    )
    assert domain.status_code == 201, domain.text
    key, _ = api_keys.create_key(app, "tenant", tenant_id=tenant, name="fuzzed key")
    with app.db.read() as tx:
        ids: dict[str, str] = {
            "tenant_id": tenant,
            "identity_id": made.identity.id,
            "message_id": message_id,
            "key_id": key.id,
            "thread_id": tx.fetchval("SELECT thread_id FROM messages WHERE id = %s", (message_id,)),
            "attachment_id": tx.fetchval(
                "SELECT a.id FROM attachments a JOIN messages m ON m.rowid = a.message_rowid"
                " WHERE m.id = %s",
                (message_id,),
            ),
            "address_id": tx.fetchval(
                "SELECT id FROM addresses WHERE identity_id = %s AND role = 'alias'",
                (made.identity.id,),
            ),
            "event_id": tx.fetchval(
                "SELECT id FROM events WHERE identity_id = %s", (made.identity.id,)
            ),
        }
    ids["domain_id"] = domain.json()["id"]
    hook = client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.fuzzed.example/in", "tenant_id": tenant},
        headers={"Authorization": f"Bearer {platform}"},
    )
    assert hook.status_code == 201, hook.text
    ids["webhook_id"] = hook.json()["id"]
    headers = {"Authorization": f"Bearer {platform}"}
    draft = client.post(
        f"/v1/identities/{made.identity.id}/drafts", json={"subject": "Fuzz"}, headers=headers
    )
    assert draft.status_code == 201, draft.text
    ids["draft_id"] = draft.json()["id"]
    later = client.post(
        f"/v1/identities/{made.identity.id}/messages",
        json={
            "to": [{"address": "later@fuzzed.example"}],
            "text": "Later",
            "send_at": datetime.fromtimestamp(app.clock.now_ms() / 1000 + 30 * 86_400, UTC)
            .isoformat()
            .replace("+00:00", "Z"),
        },
        headers=headers,
    )
    assert later.status_code == 202, later.text
    ids["outbox_id"] = later.json()["id"]
    blocked = client.post(
        "/v1/suppressions",
        json={"address": "blocked@fuzzed.example", "tenant_id": tenant},
        headers=headers,
    )
    assert blocked.status_code == 201, blocked.text
    ids["suppression_id"] = blocked.json()["id"]
    from postroom.sync import accounts as imap_accounts

    ids["account_id"] = imap_accounts.create_account(
        app,
        made.identity.id,
        imap_accounts.NewAccount(
            host="127.0.0.1",
            port=1,
            tls_mode="none",
            allow_plaintext=True,
            username="fuzz",
            password="secret",
        ),
        test=False,
    ).id
    from postroom.sync import mutations
    from postroom.testing.imap import bind_synced

    bind_synced(app, ids["account_id"], message_id)
    ids["change_id"] = mutations.record(app, message_id, "seen").id
    assert all(ids.values()), ids
    return platform, ids


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    from fastapi.testclient import TestClient

    from postroom.api.app import create_api
    from postroom.app import build_app
    from postroom.config import load_settings
    from postroom.keyring import create_key_files
    from postroom.store import apply_migrations

    engine = str(request.param)
    data: Path = tmp_path_factory.mktemp(f"schemathesis-{engine}") / "data"
    data.mkdir()
    server = None
    if engine == "sqlite":
        url = f"sqlite:///{data / 'postroom.db'}"
        apply_migrations(url, now_ms=0)
    else:
        server = request.getfixturevalue("pg_server")
        url = server.new_database(migrated=True)
    settings = load_settings(
        env={},
        overrides={"data_dir": str(data), "database_url": url, "http.rate_limit_per_minute": 0},
        cwd=data.parent,
    )
    create_key_files(settings)
    app = build_app(settings, apply_migrations=True)
    try:
        api = create_api(app)
        with TestClient(api, raise_server_exceptions=False) as client:
            platform, ids = _world(app, client)
            schema = schemathesis.openapi.from_asgi("/openapi.json", api)
            headers = {"Authorization": f"Bearer {platform}"}
            yield Target(app, schema, headers, ids)
    finally:
        app.close()
        if server is not None:
            server.drop(url)


def _strategy(target: Target, spec: RouteSpec, mode: GenerationMode) -> Any:
    operation = target.schema[spec.path][spec.method]
    free = operation.as_strategy(mode)
    names = [part[1:-1] for part in spec.path.split("/") if part.startswith("{")]
    if not names:
        return free.map(lambda case: _real_filters(target, case))
    real = operation.as_strategy(mode, path_parameters={n: target.ids[n] for n in names})
    return st.one_of(real, free).map(lambda case: _real_filters(target, case))


def _real_filters(target: Target, case: Any) -> Any:
    """Query filters naming a tenant or an identity name the world's, when generated."""
    if isinstance(case.query, dict):
        for name in ("tenant_id", "identity_id"):
            if isinstance(case.query.get(name), str) and len(case.query[name]) % 2:
                case.query[name] = target.ids[name]
    return case


@pytest.mark.parametrize(
    ("spec", "mode"),
    [
        pytest.param(spec, mode, id=f"{spec.name}-{mode.value}")
        for spec in OPERATIONS
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    ],
)
def test_operation_conforms_to_the_schema(
    target: Target, spec: RouteSpec, mode: GenerationMode
) -> None:
    examples = SLOW.get(spec.name, EXAMPLES[mode])

    @hypothesis.settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=_strategy(target, spec, mode))
    def check(case: Any) -> None:
        if spec.name == "codes.wait":
            case.query = {**(case.query or {}), "timeout": 1}
        if spec.name == "imap_accounts.create" and isinstance(case.body, dict):
            # Never let generated hosts reach the network: a closed loopback port answers.
            case.body.update(host="127.0.0.1", port=1)
        if spec.name == "events.stream":
            case.query = {**(case.query or {}), "max_seconds": STREAM_SECONDS}
        response = case.call(headers=target.headers)
        case.validate_response(response, checks=CHECKS)

    try:
        check()
    except hypothesis.errors.Unsatisfiable:
        # Nothing of the operation can be made invalid (say only a free-form string in
        # its path): there is no negative case to send.
        assert mode is GenerationMode.NEGATIVE
        pytest.skip("no invalid request can be generated for this operation")

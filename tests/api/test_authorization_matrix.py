"""The authorization matrix, generated from the route table (postroom.api.routes.ROUTES).

One world per engine: tenant A (owned by partner P1) with two identities, a delivered
message with an attachment and a verification code, its thread and event, an alias
address, a domain, a key and audit rows; tenant B (owned by partner P2). Every route
that needs a permission is called with A's real object ids in its path and must:

* answer 401 with no key, a malformed key, a revoked key and an expired key;
* answer 403 ``permission_denied`` to a key lacking the route's permission;
* answer 404 for an object of A to an identity key of A's other identity (403 when the
  identity level cannot hold the permission), to B's tenant key and to P2's partner key;
* for lists, show B's tenant key (and P2's partner key) nothing of A;
* refuse mutating calls before anything changes (the database is compared);
* leave an ``auth.denied`` audit row for every 403.
"""

from __future__ import annotations

import email.message
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from postroom.api.routes import ROUTES, RouteSpec
from postroom.tenancy.permissions import ALLOWED

GUARDED = [spec for spec in ROUTES.values() if spec.permission is not None]
MUTATING = {"POST", "PATCH", "DELETE"}

# A valid-looking body for each route that takes one, so that a refusal is the
# authorization's and not the validation's.
BODIES: dict[str, dict[str, Any]] = {
    "tenants.create": {"slug": "matrix-new"},
    "tenants.update": {"name": "Renamed"},
    "tenants.policy.update": {"max_identities": 10},
    "identities.create": {"username": "matrixnew"},
    "identities.update": {"display_name": "Renamed"},
    "addresses.create": {"local_part": "matrixalias2"},
    "domains.create": {"name": "matrix-new.example", "method": "dns_records"},
    "keys.create": {"level": "tenant", "permissions": ["messages:read"]},
    "keys.rotate": {"overlap_seconds": 0},
    "threads.update": {"read": True, "archived": True},
    "messages.update": {"read": True, "archived": True},
    "webhooks.create": {"url": "https://hooks.matrix.example/new"},
    "webhooks.update": {"description": "Renamed"},
    "webhooks.replay": {"since": "2026-01-01T00:00:00Z"},
    "messages.send": {"to": [{"address": "someone@matrix.example"}], "text": "Hello"},
    "messages.reply": {"text": "Thanks"},
    "messages.reply_all": {"text": "Thanks all"},
    "messages.forward": {"to": [{"address": "someone@matrix.example"}]},
    "drafts.create": {"subject": "Draft"},
    "drafts.update": {"subject": "Draft 2"},
    "outbox.resolve": {"resolution": "delivered"},
    "suppressions.create": {"address": "new@matrix.example"},
    "imap_accounts.create": {
        "host": "127.0.0.1",
        "port": 1,
        "tls_mode": "none",
        "allow_plaintext": True,
        "username": "matrix",
        "password": "secret",
    },
    "imap_accounts.update": {"paused": True},
    "imap_changes.create": {"action": "flag"},
}
# Query parameters a route needs (the long poll waits at most a second).
QUERIES: dict[str, dict[str, Any]] = {
    "codes.wait": {"timeout": 1},
    "search.identity": {"q": "verification"},
    "search.tenant": {"q": "verification"},
    # The stream shows only new events unless told where to start; it ends after a second.
    "events.stream": {"since": "2000-01-01T00:00:00Z", "max_seconds": 1},
    "suppressions.check": {"address": "blocked@matrix.example"},
}
# Tables a refused call must leave as they were; api_keys minus last_used_at (written on
# every authenticated call), audit_log gets the denials.
UNCHANGED_TABLES = (
    "partners",
    "tenants",
    "domains",
    "identities",
    "addresses",
    "address_tombstones",
    "idempotency_records",
    "threads",
    "thread_identifiers",
    "messages",
    "attachments",
    "labels",
    "refs",
    "contacts",
    "verifications",
    "events",
    "webhook_endpoints",
    "suppressions",
    "sender_lists",
    "jobs",
    "outgoing_emails",
    "outgoing_email_recipients",
    "deliveries",
    "mail_drafts",
    "counters",
    "imap_accounts",
    "mailbox_mutations",
)
KEY_COLUMNS = "id, hash, prev_hash, prev_expires_at, name, permissions_json, expires_at, revoked_at"
CODE = "482913"


@dataclass
class World:
    engine: str
    app: Any
    client: Any
    platform: str
    ids: dict[str, str]  # path parameter name -> A's object
    tenant_a: str
    tenant_b: str
    secrets: dict[str, str] = field(default_factory=dict)
    key_ids: dict[str, str] = field(default_factory=dict)
    schema: dict[str, Any] = field(default_factory=dict)

    def mint(self, name: str, level: str, **scope: Any) -> dict[str, str]:
        """Headers for a key made once per world under ``name``."""
        if name not in self.secrets:
            from postroom.tenancy.api_keys import create_key

            key, secret = create_key(self.app, level, name=f"matrix {name}", **scope)
            self.secrets[name], self.key_ids[name] = secret, key.id
        return {"Authorization": f"Bearer {self.secrets[name]}"}

    def lacking(self, permission: str) -> dict[str, str]:
        held = sorted(ALLOWED["platform"] - {permission})
        return self.mint(f"lacking {permission}", "platform", permissions=held)

    def call(
        self,
        spec: RouteSpec,
        headers: dict[str, str],
        body: dict[str, Any] | None = None,
        **params: str,
    ) -> Any:
        path = spec.path.format(**self.ids)
        query = {**QUERIES.get(spec.name, {}), **params}
        kwargs: dict[str, Any] = {"headers": headers, "params": query}
        if body is not None or spec.name in BODIES:
            kwargs["json"] = body if body is not None else BODIES[spec.name]
        return self.client.request(spec.method, path, **kwargs)

    def operation(self, spec: RouteSpec) -> dict[str, Any]:
        if not self.schema:
            self.schema.update(self.client.get("/openapi.json").json())
        operation: dict[str, Any] = self.schema["paths"][spec.path][spec.method.lower()]
        return operation

    def snapshot(self) -> dict[str, list[str]]:
        state: dict[str, list[str]] = {}
        with self.app.db.read() as tx:
            for table in UNCHANGED_TABLES:
                state[table] = sorted(
                    repr(sorted(r.items())) for r in tx.fetchall(f"SELECT * FROM {table}")
                )
            keys = tx.fetchall(f"SELECT {KEY_COLUMNS} FROM api_keys")
            state["api_keys"] = sorted(repr(sorted(r.items())) for r in keys)
        return state

    def denials(self, key_name: str, route: str) -> int:
        with self.app.db.read() as tx:
            return int(
                tx.fetchval(
                    "SELECT COUNT(*) FROM audit_log WHERE action = 'auth.denied'"
                    " AND actor_key_id = %s AND target_id = %s",
                    (self.key_ids[key_name], route),
                )
            )

    def tenant_a_traces(self) -> set[str]:
        """Every id of A's objects, A's addresses and its verification code."""
        a = self.tenant_a
        traces = {a, CODE}
        with self.app.db.read() as tx:
            tables = (
                "identities",
                "domains",
                "api_keys",
                "threads",
                "messages",
                "events",
                "outgoing_emails",
                "mail_drafts",
                "imap_accounts",
            )
            for table in (*tables, "webhook_endpoints"):
                traces |= {
                    r["id"]
                    for r in tx.fetchall(f"SELECT id FROM {table} WHERE tenant_id = %s", (a,))
                }
            traces |= {
                r["id"] for r in tx.fetchall("SELECT id FROM audit_log WHERE tenant_id = %s", (a,))
            }
            for row in tx.fetchall("SELECT id, address FROM addresses WHERE tenant_id = %s", (a,)):
                traces |= {row["id"], row["address"]}
            traces |= {
                r["id"]
                for r in tx.fetchall(
                    "SELECT a.id FROM attachments a JOIN messages m ON m.rowid = a.message_rowid"
                    " WHERE m.tenant_id = %s",
                    (a,),
                )
            }
        return traces


def _settings(data: Path, database_url: str) -> Any:
    from postroom.config import load_settings
    from postroom.keyring import create_key_files

    data.mkdir(exist_ok=True)
    loaded = load_settings(
        env={},
        overrides={
            "data_dir": str(data),
            "database_url": database_url,
            "http.rate_limit_per_minute": 0,
        },
        cwd=data.parent,
    )
    create_key_files(loaded)
    return loaded


def _message_with_attachment(to: str, code: str) -> bytes:
    message = email.message.EmailMessage()
    message["From"] = "Sign-up <noreply@service.example>"
    message["To"] = to
    message["Subject"] = "Your verification code"
    message["Message-ID"] = f"<matrix-{code}@service.example>"
    message["Date"] = "Mon, 02 Nov 2026 10:00:00 +0000"
    message.set_content(f"Your verification code is {code}.\nIt expires in 10 minutes.\n")
    message.add_attachment(
        b"%PDF-1.4 matrix", maintype="application", subtype="pdf", filename="terms.pdf"
    )
    return message.as_bytes()


def _build(app: Any, client: Any, engine: str) -> World:
    from postroom.ids import new_id
    from postroom.tenancy import api_keys, service
    from postroom.tenancy.bootstrap import initialize
    from postroom.testing.mail import deliver

    initialize(app)
    _key, platform = api_keys.create_key(app, "platform", name="matrix platform")
    headers = {"Authorization": f"Bearer {platform}"}
    partners = []
    now = app.clock.now_ms()
    with app.db.write() as tx:
        for name in ("P1", "P2"):
            partners.append(new_id("ptn"))
            tx.execute(
                "INSERT INTO partners (id, name, created_at, updated_at) VALUES (%s, %s, %s, %s)",
                (partners[-1], name, now, now),
            )
    tenant_a = service.create_tenant(app, "matrix-a", partner_id=partners[0]).id
    tenant_b = service.create_tenant(app, "matrix-b", partner_id=partners[1]).id
    alice = service.create_identity(app, "matrixalice", tenant=tenant_a)
    other = service.create_identity(app, "matrixother", tenant=tenant_a)
    bob = service.create_identity(app, "matrixbob", tenant=tenant_b)
    service.add_alias(app, alice.identity.id, "matrixalias")
    domain = client.post(
        "/v1/domains",
        json={"name": "matrix-a.example", "method": "dns_records", "tenant_id": tenant_a},
        headers=headers,
    )
    assert domain.status_code == 201, domain.text
    alice_address, bob_address = alice.address.address, bob.address.address
    (message_id,) = deliver(app, _message_with_attachment(alice_address, CODE), alice_address)
    deliver(app, _message_with_attachment(bob_address, "731064"), bob_address)
    a_key, _ = api_keys.create_key(app, "tenant", tenant_id=tenant_a, name="A's key")
    from postroom.webhooks.endpoints import PLATFORM, NewEndpoint
    from postroom.webhooks.endpoints import create as create_webhook

    webhook, _secret = create_webhook(
        app, PLATFORM, NewEndpoint(url="https://hooks.matrix-a.example/in", tenant_id=tenant_a)
    )
    from postroom.outbound import compose, drafts, policy
    from postroom.outbound import service as outbox

    draft = drafts.create(app, tenant_a, alice.identity.id, {"subject": "Matrix draft"})
    queued = outbox.record_send(
        app,
        alice.identity.id,
        outbox.SendInput(
            to=(compose.Address("later@matrix.example"),),
            subject="Later",
            text="Scheduled",
            send_at=app.clock.now_ms() + 86_400_000,
        ),
        outbox.Requester("api", None),
    )
    with app.db.write() as tx:
        policy.suppress_in(
            tx,
            app,
            tenant_a,
            "blocked@matrix.example",
            "manual",
            now=now,
            source_message_id=message_id,
        )
    suppression = app.keys().address_hash("blocked@matrix.example")
    from postroom.sync import accounts as imap_accounts

    imap_account = imap_accounts.create_account(
        app,
        alice.identity.id,
        imap_accounts.NewAccount(
            host="127.0.0.1",
            port=1,
            tls_mode="none",
            allow_plaintext=True,
            username="alice",
            password="secret",
        ),
        test=False,
    )
    from postroom.sync import mutations
    from postroom.testing.imap import bind_synced

    bind_synced(app, imap_account.id, message_id)
    change = mutations.record(app, message_id, "seen")
    with app.db.read() as tx:
        message = tx.fetchone("SELECT rowid, thread_id FROM messages WHERE id = %s", (message_id,))
        assert message is not None
        attachment = tx.fetchval(
            "SELECT id FROM attachments WHERE message_rowid = %s", (message["rowid"],)
        )
        alias = tx.fetchval(
            "SELECT id FROM addresses WHERE identity_id = %s AND role = 'alias'",
            (alice.identity.id,),
        )
        event = tx.fetchval(
            "SELECT id FROM events WHERE identity_id = %s ORDER BY id", (alice.identity.id,)
        )
    world = World(
        engine=engine,
        app=app,
        client=client,
        platform=platform,
        ids={
            "tenant_id": tenant_a,
            "identity_id": alice.identity.id,
            "address_id": alias,
            "domain_id": domain.json()["id"],
            "key_id": a_key.id,
            "thread_id": message["thread_id"],
            "message_id": message_id,
            "attachment_id": attachment,
            "event_id": event,
            "webhook_id": webhook.id,
            "draft_id": draft.id,
            "outbox_id": queued.id,
            "suppression_id": suppression,
            "account_id": imap_account.id,
            "change_id": change.id,
        },
        tenant_a=tenant_a,
        tenant_b=tenant_b,
    )
    assert all(world.ids.values()), world.ids
    world.mint(
        "other identity of A",
        "identity",
        identity_id=other.identity.id,
        permissions=sorted(ALLOWED["identity"]),
    )
    world.mint("tenant B", "tenant", tenant_id=tenant_b)
    world.mint("partner P2", "partner", partner_id=partners[1])
    world.mint("revoked", "tenant", tenant_id=tenant_a)
    api_keys.revoke(app, world.key_ids["revoked"])
    world.mint("expired", "tenant", tenant_id=tenant_a)
    with app.db.write() as tx:
        tx.execute(
            "UPDATE api_keys SET expires_at = %s WHERE id = %s",
            (app.clock.now_ms() - 1000, world.key_ids["expired"]),
        )
    return world


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    from fastapi.testclient import TestClient

    from postroom.api.app import create_api
    from postroom.app import build_app
    from postroom.store import apply_migrations

    engine = str(request.param)
    tmp = tmp_path_factory.mktemp(f"matrix-{engine}")
    data = tmp / "data"
    server = None
    if engine == "sqlite":
        data.mkdir()
        url = f"sqlite:///{data / 'postroom.db'}"
        apply_migrations(url, now_ms=0)
    else:
        server = request.getfixturevalue("pg_server")
        url = server.new_database(migrated=True)
    app = build_app(_settings(data, url), apply_migrations=True)
    try:
        with TestClient(create_api(app), raise_server_exceptions=False) as client:
            yield _build(app, client, engine)
    finally:
        app.close()
        if server is not None:
            server.drop(url)


def _ids(specs: list[RouteSpec]) -> list[Any]:
    return [pytest.param(spec, id=spec.name) for spec in specs]


def _addresses_object(spec: RouteSpec) -> bool:
    return "{" in spec.path


def _is_list(spec: RouteSpec) -> bool:
    return spec.method == "GET" and not _addresses_object(spec)


@pytest.mark.parametrize("spec", _ids(GUARDED))
def test_unauthenticated_calls_get_401(world: World, spec: RouteSpec) -> None:
    before = world.snapshot() if spec.method in MUTATING else None
    presented: dict[str, dict[str, str]] = {
        "no key": {},
        "malformed key": {"Authorization": "Bearer pr_live_not-a-key"},
        "not bearer": {"Authorization": f"Basic {world.platform}"},
        "revoked key": world.mint("revoked", "tenant"),
        "expired key": world.mint("expired", "tenant"),
    }
    for what, headers in presented.items():
        answer = world.call(spec, headers)
        assert answer.status_code == 401, (what, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == "invalid_api_key", what
        assert answer.headers["www-authenticate"].startswith("Bearer")
    if before is not None:
        assert world.snapshot() == before


@pytest.mark.parametrize("spec", _ids(GUARDED))
def test_a_key_lacking_the_permission_gets_403(world: World, spec: RouteSpec) -> None:
    assert spec.permission is not None
    headers = world.lacking(spec.permission)
    before = world.snapshot() if spec.method in MUTATING else None
    answer = world.call(spec, headers)
    assert answer.status_code == 403, answer.text
    assert answer.json()["code"] == "permission_denied"
    assert spec.permission in answer.json()["detail"]
    assert world.denials(f"lacking {spec.permission}", spec.name) >= 1
    if before is not None:
        assert world.snapshot() == before


@pytest.mark.parametrize("spec", _ids([s for s in GUARDED if _addresses_object(s)]))
def test_objects_of_another_tenant_or_identity_are_not_found(world: World, spec: RouteSpec) -> None:
    assert spec.permission is not None
    before = world.snapshot() if spec.method in MUTATING else None
    callers = {
        "other identity of A": "identity",
        "tenant B": "tenant",
        "partner P2": "partner",
    }
    for name, level in callers.items():
        denied_before = world.denials(name, spec.name)
        answer = world.call(spec, world.mint(name, level))
        if spec.permission in ALLOWED[level]:
            assert answer.status_code == 404, (name, answer.text)
            assert answer.json()["code"].endswith("_not_found"), (name, answer.json())
        else:
            assert answer.status_code == 403, (name, answer.text)
            assert answer.json()["code"] == "permission_denied"
            assert world.denials(name, spec.name) == denied_before + 1
    if before is not None:
        assert world.snapshot() == before


# Lists where platform and partner keys must name the tenant (``tenant_id``).
TENANT_NAMED = {"search.tenant", "outbox.list", "suppressions.list", "suppressions.check"}


@pytest.mark.parametrize("spec", _ids([s for s in GUARDED if _is_list(s)]))
def test_lists_show_nothing_of_another_tenant(world: World, spec: RouteSpec) -> None:
    traces = world.tenant_a_traces()
    operation = world.operation(spec)
    filters = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
    for name, level in (("tenant B", "tenant"), ("partner P2", "partner")):
        headers = world.mint(name, level)
        named = (
            {"tenant_id": world.tenant_b} if spec.name in TENANT_NAMED and level != "tenant" else {}
        )
        answer = world.call(spec, headers, **named)
        assert answer.status_code == 200, (name, answer.text)
        leaked = {trace for trace in traces if trace in answer.text}
        assert not leaked, (name, leaked)
        if "tenant_id" in filters:
            # Naming A's tenant does not open it either.
            aimed = world.call(spec, headers, tenant_id=world.tenant_a)
            assert aimed.status_code in (200, 404), (name, aimed.text)
            if aimed.status_code == 404:  # its detail echoes the id asked for
                assert aimed.json()["code"] == "tenant_not_found"
            else:
                leaked = {trace for trace in traces if trace in aimed.text}
                assert not leaked, (name, "tenant_id=A", leaked)
    # The same list with a platform key does show A: the check above can fail.
    named = {"tenant_id": world.tenant_a} if spec.name in TENANT_NAMED else {}
    seen = world.call(spec, {"Authorization": f"Bearer {world.platform}"}, **named)
    assert seen.status_code == 200, seen.text
    if spec.name != "audit.list":  # newest first: A's rows are behind the denials
        assert any(trace in seen.text for trace in traces), spec.name


# Requests a route refuses for the key's level although the key holds the permission:
# tenant keys of A, with every permission a tenant key may hold.
LEVEL_REFUSALS = [
    ("tenants.create", {"slug": "matrix-level"}),
    ("tenants.update", {"status": "suspended"}),
    ("tenants.policy.update", {"max_identities": 1}),
    ("keys.create", {"level": "platform"}),
    ("keys.create", {"level": "partner", "partner_id": "ptn_01JD3M0Q8W5T2N6B4K7R9X1Y3Z"}),
]


@pytest.mark.parametrize(
    ("name", "body"),
    [pytest.param(name, body, id=f"{name}-{n}") for n, (name, body) in enumerate(LEVEL_REFUSALS)],
)
def test_refusals_for_the_level_are_403_and_audited(
    world: World, name: str, body: dict[str, Any]
) -> None:
    spec = ROUTES[name]
    headers = world.mint("tenant A", "tenant", tenant_id=world.tenant_a)
    before, denied = world.snapshot(), world.denials("tenant A", name)
    answer = world.call(spec, headers, body)
    assert answer.status_code == 403, answer.text
    assert answer.json()["code"] == "permission_denied"
    assert world.snapshot() == before
    assert world.denials("tenant A", name) == denied + 1, "403 without an auth.denied row"


def test_every_403_left_an_audit_row(world: World) -> None:
    """Run last in the module: every auth.denied row names a key and a route."""
    with world.app.db.read() as tx:
        rows = tx.fetchall("SELECT * FROM audit_log WHERE action = 'auth.denied'")
    assert rows
    assert all(r["actor_key_id"] and r["target_id"] in ROUTES for r in rows)


def _flatten(routes: list[Any]) -> Iterator[Any]:
    """Every route, descending into included routers (FastAPI >= 0.165 keeps them nested)."""
    for route in routes:
        nested = getattr(route, "original_router", None)
        if nested is not None:
            yield from _flatten(nested.routes)
        else:
            yield route


def test_every_route_is_registered_once_as_the_table_says(world: World) -> None:
    registered: dict[str, list[tuple[str, str]]] = {}
    for route in _flatten(world.client.app.routes):
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                registered.setdefault(route.name, []).append((method, route.path))
    missing = [name for name in ROUTES if name not in registered]
    assert not missing, f"routes not registered: {missing}"
    for name, spec in ROUTES.items():
        assert registered[name] == [(spec.method, spec.path)], name
    table = {(spec.method, spec.path) for spec in ROUTES.values()}
    served = [(m, p) for pairs in registered.values() for m, p in pairs if p.startswith("/v1/")]
    assert len(served) == len(set(served)) and set(served) <= table
    # The OpenAPI document names each /v1 operation once, by the route's name.
    schema = world.client.get("/openapi.json").json()
    operations = {
        (method.upper(), path): operation["operationId"]
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }
    for name, spec in ROUTES.items():
        if spec.path.startswith("/v1/"):
            assert operations.get((spec.method, spec.path)) == name.replace(".", "_"), name


def test_every_mutating_route_with_a_body_has_a_valid_looking_one(world: World) -> None:
    schema = world.client.get("/openapi.json").json()
    for spec in GUARDED:
        operation = schema["paths"].get(spec.path, {}).get(spec.method.lower())
        if operation is None:
            continue  # reported by the registration test
        body = operation.get("requestBody")
        if body is not None and body.get("required"):
            assert spec.name in BODIES, spec.name

"""The event catalogue: every type Postroom emits today is written by a real action in
the transaction of its change, carries ids and metadata only, and validates against the
JSON Schema docs/events.md publishes for it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
import pytest

from postroom.errors import Conflict, InvalidInput
from postroom.events import CATALOGUE, validate_data
from postroom.events.catalogue import IdentityCreated
from postroom.tenancy import api_keys, service
from postroom.testing.mail import deliver, make_message

SUBJECT = "Quarterly numbers for Acme"
BODY = "The secret figure is 4815162342."
ENVELOPE = {"id", "type", "occurred_at", "tenant_id", "identity_id", "data"}


@dataclass
class Made:
    """What an action did: the identity whose events to read (None: the tenant's events
    that belong to no identity), and what must not leak."""

    identity_id: str | None
    secrets: list[str]
    tenant_id: str | None = None


def _identity(app: Any, username: str) -> tuple[str, str]:
    made = service.create_identity(app, username, client_id=f"client-{username}")
    return made.identity.id, made.address.address


def received(app: Any) -> Made:
    identity, address = _identity(app, "cat-recv")
    raw = make_message(subject=SUBJECT, body=BODY, to=address, sender="Ann <ann@leak.example>")
    deliver(app, raw, address)
    return Made(identity, [address, SUBJECT, "4815162342", "ann@leak.example"])


def created(app: Any) -> Made:
    identity, address = _identity(app, "cat-made")
    return Made(identity, [address])


def updated(app: Any) -> Made:
    identity, address = _identity(app, "cat-upd")
    service.update_identity(app, identity, {"display_name": "Zed Secretname", "status": "paused"})
    service.update_identity(app, identity, {"metadata": {"k": "hidden-value"}})
    return Made(identity, [address, "Zed Secretname", "hidden-value"])


def deleted(app: Any) -> Made:
    identity, address = _identity(app, "cat-del")
    service.add_alias(app, identity, "cat-alias")
    api_keys.create_key(app, "identity", identity_id=identity, tenant_id=_tenant_of(app, identity))
    service.delete_identity(app, identity)
    return Made(identity, [address, "cat-alias"])


def _endpoint(app: Any, url: str) -> Any:
    from postroom.webhooks.endpoints import PLATFORM, NewEndpoint, create

    tenant = service.create_tenant(app, url.split("//")[1].split(".")[0]).id
    endpoint, _secret = create(app, PLATFORM, NewEndpoint(url=url, tenant_id=tenant))
    return endpoint


def webhook_tested(app: Any) -> Made:
    from postroom.webhooks.endpoints import PLATFORM, send_test

    endpoint = _endpoint(app, "https://hooktest.example/in?token=s3cret")
    send_test(app, PLATFORM, endpoint.id)
    return Made(None, ["s3cret", "hooktest.example"], tenant_id=endpoint.tenant_id)


def webhook_disabled(app: Any) -> Made:
    from postroom.webhooks.delivery import disable_for_failure

    endpoint = _endpoint(app, "https://hookgone.example/in?token=s3cret")
    with app.db.write() as tx:
        disable_for_failure(app, tx, endpoint, "gone", app.clock.now_ms())
    return Made(None, ["s3cret", "hookgone.example"], tenant_id=endpoint.tenant_id)


def _tenant_of(app: Any, identity: str) -> str:
    with app.db.read() as tx:
        tenant: str = tx.fetchval("SELECT tenant_id FROM identities WHERE id = %s", (identity,))
    return tenant


class _Stopper:
    """Stops a peer when the app closes (App.close closes its services)."""

    def __init__(self, peer: Any) -> None:
        self.peer = peer

    def close(self) -> None:
        self.peer.stop()


def _outbound(app: Any, username: str, peer_rule: dict[str, Any] | None) -> tuple[Any, Made]:
    """Send SUBJECT/BODY to a recipient through a real SMTP peer (or the sink) and run
    one attempt."""
    import dataclasses

    from postroom.outbound import compose, engine
    from postroom.outbound import service as outbox
    from postroom.testing.smtp_peer import SmtpPeer

    identity, address = _identity(app, username)
    if peer_rule is not None:
        peer = SmtpPeer().start()
        app.services.setdefault("test.peers", {})[username] = _Stopper(peer)
        peer.on("*", **peer_rule)
        app.settings = dataclasses.replace(
            app.settings,
            outbound_transport="smtp_relay",
            outbound_relay_host="127.0.0.1",
            outbound_relay_port=peer.port,
            outbound_relay_tls="none",
            outbound_timeout_seconds=5.0,
        )
        app.services.pop("outbound.transports", None)
    made = outbox.record_send(
        app,
        identity,
        outbox.SendInput(to=(compose.Address("reader@leak.example"),), subject=SUBJECT, text=BODY),
        outbox.Requester("api", None),
    )
    engine.attempt(app, made.id, "catalogue")
    return made, Made(identity, [address, SUBJECT, "4815162342"])


def sent(app: Any) -> Made:
    return _outbound(app, "cat-sent", None)[1]


def deferred(app: Any) -> Made:
    return _outbound(app, "cat-defer", {"rcpt": "452 4.2.2 Mailbox full"})[1]


def bounced(app: Any) -> Made:
    return _outbound(app, "cat-bounce", {"rcpt": "550 5.1.1 No such user"})[1]


def uncertain(app: Any) -> Made:
    return _outbound(app, "cat-unsure", {"drop": "data"})[1]


def complained(app: Any) -> Made:
    from postroom.outbound.bounces import apply_report

    made, what = _outbound(app, "cat-complain", None)
    with app.db.read() as tx:
        rfc_id = tx.fetchval("SELECT rfc_message_id FROM outgoing_emails WHERE id = %s", (made.id,))
        address = tx.fetchval(
            "SELECT address FROM addresses WHERE identity_id = %s", (made.identity_id,)
        )
    report = (
        "From: feedback@isp.example\r\nTo: " + address + "\r\nSubject: FW: report\r\n"
        "Message-ID: <fbl-1@isp.example>\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=feedback-report; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain\r\n\r\nAbuse report.\r\n"
        "--b\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\n"
        "Version: 1\r\nOriginal-Rcpt-To: <reader@leak.example>\r\n"
        "--b\r\nContent-Type: text/rfc822-headers\r\n\r\n"
        f"Message-ID: <{rfc_id}>\r\nTo: reader@leak.example\r\n--b--\r\n"
    ).encode()
    (stored,) = deliver(app, report, address)
    assert apply_report(app, stored) == 1
    return what


def imap_status(app: Any) -> Made:
    from postroom.sync import accounts
    from postroom.sync.engine import sync_account

    identity, address = _identity(app, "cat-imap")
    account = accounts.create_account(
        app,
        identity,
        accounts.NewAccount(
            host="127.0.0.1",
            port=1,  # nothing listens: the sync finds the server unreachable
            tls_mode="none",
            allow_plaintext=True,
            username="secret-user",
            password="hunter2-secret",
        ),
        test=False,
    )
    assert sync_account(app, account.id).status == "unreachable"
    return Made(identity, [address, "secret-user", "hunter2-secret"])


ACTIONS: dict[str, Callable[[Any], Made]] = {
    "imap_account.status_changed": imap_status,
    "message.sent": sent,
    "message.delivered": sent,
    "message.deferred": deferred,
    "message.bounced": bounced,
    "message.send_uncertain": uncertain,
    "message.complained": complained,
    "message.received": received,
    "identity.created": created,
    "identity.updated": updated,
    "identity.deleted": deleted,
    "webhook.test": webhook_tested,
    "webhook.disabled": webhook_disabled,
}


def _events(
    app: Any, identity: str | None, event_type: str | None = None, *, tenant: str | None = None
) -> list[dict[str, Any]]:
    with app.db.read() as tx:
        if identity is not None:
            rows = tx.fetchall(
                "SELECT type, identity_seq, payload_json FROM events WHERE identity_id = %s"
                " ORDER BY identity_seq",
                (identity,),
            )
        else:
            rows = tx.fetchall(
                "SELECT type, identity_seq, payload_json FROM events"
                " WHERE tenant_id = %s AND identity_id IS NULL ORDER BY occurred_at, id",
                (tenant,),
            )
    return [
        {**json.loads(r["payload_json"]), "_seq": r["identity_seq"]}
        for r in rows
        if event_type is None or r["type"] == event_type
    ]


def test_every_type_emitted_today_has_an_action_in_this_table() -> None:
    assert set(ACTIONS) == {name for name, spec in CATALOGUE.items() if spec.available}


@pytest.mark.parametrize("event_type", sorted(ACTIONS))
def test_a_real_action_emits_the_type_valid_against_its_schema(
    ready_app: Any, event_type: str
) -> None:
    made = ACTIONS[event_type](ready_app)
    events = _events(ready_app, made.identity_id, event_type, tenant=made.tenant_id)
    assert events, f"no {event_type} event"
    validator = jsonschema_rs.validator_for(CATALOGUE[event_type].json_schema())
    tenant = made.tenant_id
    if made.identity_id is not None:
        with ready_app.db.read() as tx:
            tenant = tx.fetchval(
                "SELECT tenant_id FROM identities WHERE id = %s", (made.identity_id,)
            )
    for event in events:
        seq = event.pop("_seq")
        assert set(event) == ENVELOPE
        assert event["type"] == event_type and event["id"].startswith("evt_")
        assert event["identity_id"] == made.identity_id and event["tenant_id"] == tenant
        # A per-identity sequence exists only for identity events.
        assert (seq is not None and seq >= 1) == (made.identity_id is not None)
        errors = [str(e) for e in validator.iter_errors(event["data"])]
        assert errors == [], errors
        validate_data(event_type, event["data"])
        text = json.dumps(event).lower()
        for secret in made.secrets:
            assert secret.lower() not in text, f"{event_type} carries {secret!r}"


def test_identity_events_carry_what_changed_in_sequence(ready_app: Any) -> None:
    identity, _address = _identity(ready_app, "cat-seq")
    service.update_identity(ready_app, identity, {"display_name": "New name"})
    service.update_identity(ready_app, identity, {"status": "paused"})
    service.update_identity(ready_app, identity, {"status": "active", "signature_text": "--"})
    service.delete_identity(ready_app, identity)
    events = _events(ready_app, identity)
    assert [(e["type"], e["_seq"]) for e in events] == [
        ("identity.created", 1),
        ("identity.updated", 2),
        ("identity.updated", 3),
        ("identity.updated", 4),
        ("identity.deleted", 5),
    ]
    assert [e["data"] for e in events[1:4]] == [
        {"fields": ["display_name"], "status": "active", "status_changed": False},
        {"fields": [], "status": "paused", "status_changed": True},
        {"fields": ["signature_text"], "status": "active", "status_changed": True},
    ]
    assert events[0]["data"]["client_id"] == "client-cat-seq"
    assert events[4]["data"]["keys_revoked"] == 0
    assert events[4]["data"]["address_ids"] == [events[0]["data"]["address_id"]]


def test_a_change_that_fails_or_changes_nothing_writes_no_event(ready_app: Any) -> None:
    identity, _address = _identity(ready_app, "cat-none")
    before = _events(ready_app, identity)

    def total() -> int:
        with ready_app.db.read() as tx:
            return int(tx.fetchval("SELECT COUNT(*) FROM events"))

    count = total()
    with pytest.raises(Conflict):
        service.create_identity(ready_app, "cat-none")  # the username is taken
    with pytest.raises(Conflict):
        service.create_identity(ready_app, "cat-other", client_id="client-cat-none")
    service.update_identity(ready_app, identity, {})  # nothing to change
    with pytest.raises(InvalidInput):
        service.update_identity(ready_app, identity, {"display_name": ""})
    service.delete_identity(ready_app, identity)
    with pytest.raises(Exception, match="no identity"):
        service.delete_identity(ready_app, identity)  # deleted already
    assert [e["type"] for e in _events(ready_app, identity)] == [
        *(e["type"] for e in before),
        "identity.deleted",
    ]
    assert total() == count + 1


@pytest.mark.parametrize("event_type", sorted(CATALOGUE))
def test_each_catalogue_example_validates_and_the_schema_is_strict(event_type: str) -> None:
    spec = CATALOGUE[event_type]
    schema = spec.json_schema()
    validator = jsonschema_rs.validator_for(schema)
    assert validator.is_valid(dict(spec.example))
    assert schema["title"] == f"{event_type} v{spec.version}"
    assert schema["additionalProperties"] is False
    assert not validator.is_valid({**spec.example, "body": "the message text"})
    for required in schema["required"]:
        without = {k: v for k, v in spec.example.items() if k != required}
        assert not validator.is_valid(without), required


def test_data_is_checked_against_the_catalogue() -> None:
    with pytest.raises(InvalidInput) as unknown:
        validate_data("message.teleported", {})
    assert unknown.value.code == "unknown_event_type"
    with pytest.raises(InvalidInput) as invalid:
        validate_data("identity.created", {"address_id": "adr_1"})
    assert invalid.value.code == "invalid_event_data"
    with pytest.raises(ValueError):
        IdentityCreated.model_validate(
            {"address_id": "a", "domain_id": "d", "client_id": None, "extra": 1}
        )

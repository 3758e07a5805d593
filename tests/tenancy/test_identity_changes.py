"""The identity services behind the REST API, on both engines: idempotent create by
client_id, metadata bounds, the identity limit, update, delete with tombstones, aliases
and their retirement."""

from __future__ import annotations

import pytest

from postroom.app import App
from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.inbound.directory import UNKNOWN, Route, route_recipient
from postroom.store import tenancy as directory
from postroom.tenancy import service, tenants


def _route(app: App, address: str) -> object:
    with app.db.read() as tx:
        return route_recipient(tx, app.keys(), address)


def test_client_id_replays_the_same_body_only(ready_app: App) -> None:
    first = service.create_identity(ready_app, "ann", client_id="c-1", metadata={"a": "1"})
    assert not first.existing
    again = service.create_identity(ready_app, "ann", client_id="c-1", metadata={"a": "1"})
    assert again.existing and again.identity.id == first.identity.id
    assert again.address.id == first.address.id
    # The display name defaults to the username: naming it explicitly is the same body.
    same = service.create_identity(
        ready_app, "ann", client_id="c-1", display_name="ann", metadata={"a": "1"}
    )
    assert same.existing
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "ann", client_id="c-1", metadata={"a": "2"})
    assert caught.value.code == "client_id_conflict"
    # client_ids are per tenant.
    service.create_tenant(ready_app, "acme")
    other = service.create_identity(
        ready_app, "ann", client_id="c-1", metadata={"a": "1"}, tenant="acme"
    )
    assert not other.existing and other.identity.id != first.identity.id
    with ready_app.db.read() as tx:
        detail = directory.get_identity_detail(tx, first.identity.id)
    assert detail is not None and detail.client_id == "c-1"
    assert detail.client_fingerprint == service.identity_fingerprint(
        "ann", "localhost", "ann", {"a": "1"}
    )


@pytest.mark.parametrize("client_id", ["", "x" * 129, "caf\u00e9", "new\nline"])
def test_bad_client_ids(ready_app: App, client_id: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        service.create_identity(ready_app, "ann", client_id=client_id)
    assert caught.value.code == "invalid_client_id"


@pytest.mark.parametrize(
    "metadata",
    [
        {f"k{n}": "v" for n in range(17)},
        {"k": "x" * 513},
        {"k": "\u00e9" * 257},
        {"": "v"},
        {"k" * 65: "v"},
        {"k": "\ud800"},
    ],
)
def test_bad_metadata(ready_app: App, metadata: dict[str, str]) -> None:
    with pytest.raises(InvalidInput) as caught:
        service.create_identity(ready_app, "ann", metadata=metadata)
    assert caught.value.code == "invalid_metadata"


def test_identity_limit_counts_identities_not_deleted(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    tenants.update_policy(ready_app, acme.id, {"max_identities": 2}, actor_key_id=None)
    one = service.create_identity(ready_app, "one", tenant="acme")
    service.create_identity(ready_app, "two", tenant="acme")
    # Other tenants do not count.
    service.create_identity(ready_app, "three")
    with pytest.raises(Conflict) as caught:
        service.create_identity(ready_app, "three", tenant="acme")
    assert caught.value.code == "identity_limit"
    service.delete_identity(ready_app, one.identity.id)
    assert service.create_identity(ready_app, "three", tenant="acme").identity.username == "three"


def test_update_pauses_and_resumes(ready_app: App) -> None:
    made = service.create_identity(ready_app, "pat")
    paused = service.update_identity(
        ready_app, made.identity.id, {"status": "paused", "signature_text": "-- \nPat"}
    )
    assert (paused.identity.status, paused.pause_reason) == ("paused", "manual")
    assert paused.signature_text == "-- \nPat"
    resumed = service.update_identity(ready_app, made.identity.id, {"status": "active"})
    assert (resumed.identity.status, resumed.pause_reason) == ("active", None)
    with pytest.raises(InvalidInput) as bad:
        service.update_identity(ready_app, made.identity.id, {"status": "deleted"})
    assert bad.value.code == "invalid_identity_status"
    with pytest.raises(InvalidInput):
        service.update_identity(ready_app, made.identity.id, {"username": "x"})
    with ready_app.db.write() as tx:
        tx.execute(
            "UPDATE identities SET status = 'paused', pause_reason = 'tenant_suspended'"
            " WHERE id = %s",
            (made.identity.id,),
        )
    with pytest.raises(Conflict) as locked:
        service.update_identity(
            ready_app, made.identity.id, {"status": "active"}, actor_level="tenant"
        )
    assert locked.value.code == "pause_not_manual"


def test_delete_moves_every_address_to_the_tombstones(ready_app: App) -> None:
    made = service.create_identity(ready_app, "dee")
    alias = service.add_alias(ready_app, made.identity.id, "dee-alias")
    retired = service.add_alias(ready_app, made.identity.id, "dee-old")
    assert service.retire_alias(ready_app, made.identity.id, retired.address.id)
    service.delete_identity(ready_app, made.identity.id)
    keys = ready_app.keys()
    with ready_app.db.read() as tx:
        assert directory.list_identity_addresses(tx, made.identity.id) == []
        for address in ("dee@localhost", alias.address.address, retired.address.address):
            assert directory.is_tombstoned(tx, keys.address_hash(address))
            assert route_recipient(tx, keys, address) == UNKNOWN
        identity = directory.get_identity(tx, made.identity.id)
    assert identity is not None and identity.status == "deleted"
    with pytest.raises(NotFound) as again:
        service.delete_identity(ready_app, made.identity.id)
    assert again.value.code == "identity_not_found"
    with pytest.raises(Conflict) as reuse:
        service.create_identity(ready_app, "dee")
    assert reuse.value.code == "address_unavailable"


def test_delete_ends_a_catch_all_into_the_identity(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    from postroom.ids import new_id

    now = ready_app.clock.now_ms()
    with ready_app.db.write() as tx:
        domain = directory.insert_domain(
            tx,
            domain_id=new_id("dom"),
            tenant_id=acme.id,
            name="acme.example",
            kind="external",
            method="dns_records",
            routing_mode="literal",
            receiving=True,
            sending=True,
            state="healthy",
            now=now,
        )
    assert domain is not None
    made = service.create_identity(ready_app, "catch", tenant="acme", domain="acme.example")
    with ready_app.db.write() as tx:
        directory.set_catch_all(tx, domain.id, made.identity.id, now)
    assert isinstance(_route(ready_app, "anything@acme.example"), Route)
    service.delete_identity(ready_app, made.identity.id)
    assert _route(ready_app, "anything@acme.example") == UNKNOWN
    with ready_app.db.read() as tx:
        found = directory.get_domain(tx, domain.id)
    assert found is not None and found.routing_mode == "literal"


def test_aliases_carry_the_suffix_on_the_platform_domain(ready_app: App) -> None:
    service.create_tenant(ready_app, "acme")
    made = service.create_identity(ready_app, "al", tenant="acme")
    alias = service.add_alias(ready_app, made.identity.id, "Help")
    assert (alias.address.address, alias.address.role) == ("help.acme@localhost", "alias")
    routed = _route(ready_app, "help.acme@localhost")
    assert isinstance(routed, Route) and routed.identity_id == made.identity.id
    with pytest.raises(Conflict) as primary:
        service.retire_alias(ready_app, made.identity.id, made.address.id)
    assert primary.value.code == "primary_address"
    assert service.retire_alias(ready_app, made.identity.id, alias.address.id)
    assert not service.retire_alias(ready_app, made.identity.id, alias.address.id)
    assert _route(ready_app, "help.acme@localhost") == UNKNOWN
    with pytest.raises(Conflict) as taken:
        service.add_alias(ready_app, made.identity.id, "help")
    assert taken.value.code == "address_unavailable"
    with pytest.raises(InvalidInput) as bad:
        service.add_alias(ready_app, made.identity.id, "no spaces")
    assert bad.value.code == "invalid_local_part"

"""API keys on both engines: format, verification, rotation, revocation, last use, scope."""

from __future__ import annotations

import dataclasses
import secrets

import pytest

from postroom.app import App
from postroom.clock import ManualClock
from postroom.errors import Conflict, InvalidInput, NotFound
from postroom.ids import new_id
from postroom.store import audit as audit_rows
from postroom.store import tenancy as directory
from postroom.tenancy import api_keys, service
from postroom.tenancy.api_keys import (
    ALPHABET,
    ApiKey,
    Unauthenticated,
    create_key,
    format_secret,
    parse_secret,
    revoke,
    rotate,
    touch_last_used,
    verify,
)
from postroom.tenancy.permissions import DEFAULT_PERMISSIONS


def _refusal(app: App, presented: str) -> Unauthenticated:
    with pytest.raises(Unauthenticated) as caught:
        verify(app, presented)
    assert caught.value.code == "invalid_api_key"
    return caught.value


def _stored_hash(app: App, key_id: str) -> str:
    with app.db.read() as tx:
        value = tx.fetchval("SELECT hash FROM api_keys WHERE id = %s", (key_id,))
    assert isinstance(value, str)
    return value


# --- format ---------------------------------------------------------------------------


def test_secret_format_round_trips(ready_app: App) -> None:
    key, secret = create_key(ready_app, "platform", name="ops")
    parsed = parse_secret(secret)
    assert parsed is not None
    assert parsed.mode == "live" == key.mode
    assert parsed.lookup == key.lookup
    assert len(parsed.lookup) == 12 and len(parsed.secret) == 32
    assert set(parsed.lookup + parsed.secret) <= set(ALPHABET)
    assert format_secret(parsed.mode, parsed.lookup, parsed.secret) == secret
    assert secret.startswith(key.prefix + "_")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "pr_live_",
        "Bearer pr_live_abc",
        "pr_prod_0123456789ab_0123456789abcdefghjkmnpqrstvwxyz",
        "pr_live_0123456789AB_0123456789abcdefghjkmnpqrstvwxyz",  # upper case
        "pr_live_0123456789ai_0123456789abcdefghjkmnpqrstvwxyz",  # i is not in the alphabet
        "pr_live_0123456789ab_0123456789abcdefghjkmnpqrstvwxy",  # one short
        "pr_live_0123456789ab_0123456789abcdefghjkmnpqrstvwxyz\n",
    ],
)
def test_parse_refuses_malformed(value: str) -> None:
    assert parse_secret(value) is None


def test_secrets_differ_every_time(ready_app: App) -> None:
    drawn = {create_key(ready_app, "platform")[1] for _ in range(5)}
    assert len(drawn) == 5


# --- verify ---------------------------------------------------------------------------


def test_verify_accepts_the_right_secret(ready_app: App) -> None:
    key, secret = create_key(ready_app, "platform", name="ops")
    found = verify(ready_app, secret)
    assert found.id == key.id
    assert found.permissions == key.permissions


def test_wrong_secret_and_unknown_lookup_are_refused_alike(ready_app: App) -> None:
    key, secret = create_key(ready_app, "platform")
    parsed = parse_secret(secret)
    assert parsed is not None
    wrong_secret = format_secret("live", key.lookup, "0" * 32)
    unknown_lookup = format_secret("live", "zzzzzzzzzzzz", parsed.secret)
    wrong = _refusal(ready_app, wrong_secret)
    unknown = _refusal(ready_app, unknown_lookup)
    # Nothing in the answer tells a guesser which lookups exist.
    assert wrong.message == unknown.message == "invalid API key"


def test_the_mode_is_part_of_what_is_hashed(ready_app: App) -> None:
    _key, secret = create_key(ready_app, "platform")
    _refusal(ready_app, secret.replace("pr_live_", "pr_test_", 1))


@pytest.mark.parametrize("value", ["", "pr_live_x", "not a key at all", "pr_live_" + "a" * 500])
def test_verify_refuses_malformed(ready_app: App, value: str) -> None:
    assert _refusal(ready_app, value).message == "invalid API key"


def test_revoked_key_is_refused_and_revoking_twice_changes_nothing(ready_app: App) -> None:
    key, secret = create_key(ready_app, "platform")
    revoked = revoke(ready_app, key.id)
    assert revoked.revoked_at is not None
    assert "revoked" in _refusal(ready_app, secret).message
    again = revoke(ready_app, key.id)
    assert again.revoked_at == revoked.revoked_at
    with ready_app.db.read() as tx:
        entries = audit_rows.list_entries(tx, action="key.revoke")
    assert [e.target_id for e in entries] == [key.id]


def test_revoke_unknown_key(ready_app: App) -> None:
    with pytest.raises(NotFound) as caught:
        revoke(ready_app, new_id("key"))
    assert caught.value.code == "key_not_found"


def test_expired_key_is_refused(clocked_app: App, clock: ManualClock) -> None:
    key, secret = create_key(clocked_app, "platform", expires_at=clock.now_ms() + 1000)
    assert verify(clocked_app, secret).id == key.id
    clock.advance(999)
    assert verify(clocked_app, secret).id == key.id
    clock.advance(1)
    assert "expired" in _refusal(clocked_app, secret).message


def test_expiry_must_be_in_the_future(clocked_app: App, clock: ManualClock) -> None:
    with pytest.raises(InvalidInput) as caught:
        create_key(clocked_app, "platform", expires_at=clock.now_ms())
    assert caught.value.code == "invalid_expiry"


# --- storage --------------------------------------------------------------------------


def test_the_database_holds_a_peppered_hash_not_the_secret(ready_app: App) -> None:
    key, secret = create_key(ready_app, "platform")
    parsed = parse_secret(secret)
    assert parsed is not None
    stored = _stored_hash(ready_app, key.id)
    assert stored != secret and parsed.secret not in stored
    assert stored == ready_app.keys().api_key_hash(secret)
    with ready_app.db.read() as tx:
        row = tx.fetchone("SELECT * FROM api_keys WHERE id = %s", (key.id,))
    assert row is not None
    assert not any(isinstance(v, str) and parsed.secret in v for v in row.values())
    # Under another pepper the same secret hashes differently, and no longer verifies.
    other = dataclasses.replace(ready_app.keys(), pepper=secrets.token_bytes(32))
    assert other.api_key_hash(secret) != stored
    elsewhere = dataclasses.replace(ready_app, keyring=other)
    _refusal(elsewhere, secret)


def test_records_and_listings_carry_no_hash_or_secret(ready_app: App) -> None:
    _key, secret = create_key(ready_app, "platform")
    field_names = {f.name for f in dataclasses.fields(ApiKey)}
    assert not field_names & {"hash", "prev_hash", "secret"}
    listed = api_keys.list_keys(ready_app)
    assert len(listed) == 2  # the bootstrap key and this one
    parsed = parse_secret(secret)
    assert parsed is not None
    assert parsed.secret not in repr(listed)


# --- rotation -------------------------------------------------------------------------


def test_rotation_keeps_the_old_secret_until_the_overlap_ends(
    clocked_app: App, clock: ManualClock
) -> None:
    key, old = create_key(clocked_app, "platform")
    rotated, new = rotate(clocked_app, key.id, overlap_ms=60_000)
    assert new != old
    assert rotated.lookup == key.lookup
    assert rotated.prev_expires_at == clock.now_ms() + 60_000
    assert verify(clocked_app, old).id == key.id
    assert verify(clocked_app, new).id == key.id
    clock.advance(59_999)
    assert verify(clocked_app, old).id == key.id
    clock.advance(1)
    _refusal(clocked_app, old)
    assert verify(clocked_app, new).id == key.id


def test_rotation_without_overlap_ends_the_old_secret_at_once(clocked_app: App) -> None:
    key, old = create_key(clocked_app, "platform")
    rotated, new = rotate(clocked_app, key.id, overlap_ms=0)
    assert rotated.prev_expires_at is None
    _refusal(clocked_app, old)
    assert verify(clocked_app, new).id == key.id


def test_rotating_again_ends_the_oldest_secret(clocked_app: App) -> None:
    key, first = create_key(clocked_app, "platform")
    _key, second = rotate(clocked_app, key.id, overlap_ms=60_000)
    _key, third = rotate(clocked_app, key.id, overlap_ms=60_000)
    _refusal(clocked_app, first)
    assert verify(clocked_app, second).id == key.id
    assert verify(clocked_app, third).id == key.id


def test_revoked_or_expired_keys_cannot_be_rotated(clocked_app: App, clock: ManualClock) -> None:
    key, _secret = create_key(clocked_app, "platform")
    revoke(clocked_app, key.id)
    with pytest.raises(Conflict) as caught:
        rotate(clocked_app, key.id, overlap_ms=1000)
    assert caught.value.code == "key_revoked"
    short, _secret = create_key(clocked_app, "platform", expires_at=clock.now_ms() + 10)
    clock.advance(10)
    with pytest.raises(Conflict) as caught:
        rotate(clocked_app, short.id, overlap_ms=1000)
    assert caught.value.code == "key_expired"


def test_rotation_overlap_is_bounded(ready_app: App) -> None:
    key, _secret = create_key(ready_app, "platform")
    for overlap in (-1, api_keys.MAX_ROTATION_OVERLAP_MS + 1):
        with pytest.raises(InvalidInput):
            rotate(ready_app, key.id, overlap_ms=overlap)


def test_revoking_ends_a_rotation_overlap_too(clocked_app: App) -> None:
    key, old = create_key(clocked_app, "platform")
    _key, new = rotate(clocked_app, key.id, overlap_ms=60_000)
    revoke(clocked_app, key.id)
    _refusal(clocked_app, old)
    _refusal(clocked_app, new)


# --- last use -------------------------------------------------------------------------


def test_last_used_is_written_at_most_once_a_minute(clocked_app: App, clock: ManualClock) -> None:
    created, secret = create_key(clocked_app, "platform")
    start = clock.now_ms()
    assert touch_last_used(clocked_app, verify(clocked_app, secret))
    assert verify(clocked_app, secret).last_used_at == start
    clock.advance(30_000)
    # The freshly verified key shows the recent use: no write is attempted.
    assert not touch_last_used(clocked_app, verify(clocked_app, secret))
    # A stale record (as a concurrent request would hold) is stopped by the UPDATE's guard.
    assert created.last_used_at is None
    assert not touch_last_used(clocked_app, created)
    assert verify(clocked_app, secret).last_used_at == start
    clock.advance(30_000)
    assert not touch_last_used(clocked_app, created)
    clock.advance(1)
    assert touch_last_used(clocked_app, created)
    assert verify(clocked_app, secret).last_used_at == start + 60_001


# --- scope ----------------------------------------------------------------------------


def test_tenant_key_takes_the_tenant_mode(ready_app: App) -> None:
    sandbox = service.create_tenant(ready_app, "sandbox", mode="test")
    key, secret = create_key(ready_app, "tenant", tenant_id=sandbox.id)
    assert key.mode == "test" and secret.startswith("pr_test_")
    assert set(key.permissions) == DEFAULT_PERMISSIONS["tenant"]
    assert verify(ready_app, secret).tenant_id == sandbox.id


def test_identity_key_must_belong_to_the_given_tenant(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    beta = service.create_tenant(ready_app, "beta")
    alice = service.create_identity(ready_app, "alice", tenant="acme").identity
    with pytest.raises(NotFound) as caught:
        create_key(ready_app, "identity", tenant_id=beta.id, identity_id=alice.id)
    assert caught.value.code == "identity_not_found"
    key, _secret = create_key(ready_app, "identity", tenant_id=acme.id, identity_id=alice.id)
    assert (key.tenant_id, key.identity_id) == (acme.id, alice.id)
    assert set(key.permissions) == DEFAULT_PERMISSIONS["identity"]
    # Without a tenant, the identity's own tenant is used.
    key, _secret = create_key(ready_app, "identity", identity_id=alice.id)
    assert key.tenant_id == acme.id


def test_identity_key_cannot_be_given_tenants_write(ready_app: App) -> None:
    alice = service.create_identity(ready_app, "alice").identity
    with pytest.raises(InvalidInput) as caught:
        create_key(ready_app, "identity", identity_id=alice.id, permissions=["tenants:write"])
    assert caught.value.code == "permission_not_allowed"
    assert "tenants:write" in caught.value.message


def test_tenant_key_needs_an_existing_active_tenant(ready_app: App) -> None:
    with pytest.raises(NotFound) as caught:
        create_key(ready_app, "tenant", tenant_id=new_id("ten"))
    assert caught.value.code == "tenant_not_found"
    acme = service.create_tenant(ready_app, "acme")
    with ready_app.db.write() as tx:
        tx.execute("UPDATE tenants SET status = 'suspended' WHERE id = %s", (acme.id,))
    with pytest.raises(Conflict) as conflict:
        create_key(ready_app, "tenant", tenant_id=acme.id)
    assert conflict.value.code == "tenant_not_active"


@pytest.mark.parametrize(
    ("level", "scope"),
    [
        ("platform", {"tenant_id": "ten_x"}),
        ("tenant", {}),
        ("tenant", {"identity_id": "idn_x", "tenant_id": "ten_x"}),
        ("identity", {}),
        ("partner", {}),
        ("partner", {"partner_id": "ptn_x", "tenant_id": "ten_x"}),
    ],
)
def test_level_and_scope_must_agree(ready_app: App, level: str, scope: dict[str, str]) -> None:
    with pytest.raises(InvalidInput) as caught:
        create_key(ready_app, level, **scope)
    assert caught.value.code == "invalid_key_scope"


def test_partner_key(ready_app: App) -> None:
    with pytest.raises(NotFound) as caught:
        create_key(ready_app, "partner", partner_id=new_id("ptn"))
    assert caught.value.code == "partner_not_found"
    with ready_app.db.write() as tx:
        partner = directory.insert_partner(
            tx, partner_id=new_id("ptn"), name="Integrator", now=ready_app.clock.now_ms()
        )
    key, secret = create_key(ready_app, "partner", partner_id=partner.id)
    assert key.partner_id == partner.id and key.tenant_id is None
    assert "partners:manage" not in key.permissions
    assert verify(ready_app, secret).level == "partner"


def test_bad_key_names_are_refused(ready_app: App) -> None:
    for name in ("", "   ", "x" * 101, "line\nbreak"):
        with pytest.raises(InvalidInput):
            create_key(ready_app, "platform", name=name)


def test_key_creation_is_audited_without_the_secret(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    key, secret = create_key(ready_app, "tenant", tenant_id=acme.id, created_by_key_id="key_x")
    with ready_app.db.read() as tx:
        entries = audit_rows.list_entries(tx, tenant_id=acme.id, action="key.create")
    assert len(entries) == 1
    entry = entries[0]
    assert (entry.target_id, entry.actor_key_id, entry.actor) == (key.id, "key_x", None)
    assert entry.details is not None and entry.details["level"] == "tenant"
    assert secret not in repr(entry)


def test_get_key_in_another_tenant_is_not_found(ready_app: App) -> None:
    acme = service.create_tenant(ready_app, "acme")
    beta = service.create_tenant(ready_app, "beta")
    key, _secret = create_key(ready_app, "tenant", tenant_id=acme.id)
    assert api_keys.get_key(ready_app, key.id, tenant_id=acme.id).id == key.id
    with pytest.raises(NotFound):
        api_keys.get_key(ready_app, key.id, tenant_id=beta.id)
    with pytest.raises(NotFound):
        revoke(ready_app, key.id, tenant_id=beta.id)
    assert [k.id for k in api_keys.list_keys(ready_app, tenant_id=acme.id)] == [key.id]
    assert api_keys.list_keys(ready_app, tenant_id=beta.id) == []

"""The permission table: what each key level may hold and gets by default."""

from __future__ import annotations

import re

import pytest

from postroom.errors import InvalidInput
from postroom.tenancy.permissions import (
    ALLOWED,
    BY_NAME,
    DEFAULT_PERMISSIONS,
    LEVELS,
    PERMISSIONS,
    check_level,
    grants,
    may_hold,
    resolve_permissions,
)


def test_names_are_unique_and_well_formed() -> None:
    names = [p.name for p in PERMISSIONS]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z]+:[a-z]+", name) for name in names)
    assert set(BY_NAME) == set(names)


def test_every_permission_is_held_by_some_level_and_only_known_levels() -> None:
    for permission in PERMISSIONS:
        assert permission.levels, permission.name
        assert permission.levels <= set(LEVELS), permission.name


@pytest.mark.parametrize("level", LEVELS)
def test_defaults_are_allowed_for_their_level(level: str) -> None:
    defaults = DEFAULT_PERMISSIONS[level]
    assert defaults
    assert defaults <= ALLOWED[level]
    assert all(may_hold(level, name) for name in defaults)
    # What a key without a list gets is exactly the defaults, in table order.
    resolved = resolve_permissions(level, None)
    assert set(resolved) == defaults
    assert list(resolved) == [p.name for p in PERMISSIONS if p.name in defaults]


def test_platform_may_hold_everything_and_only_platform_operates() -> None:
    assert ALLOWED["platform"] == frozenset(BY_NAME)
    for level in ("partner", "tenant", "identity"):
        assert not may_hold(level, "platform:ops")
        assert not may_hold(level, "partners:manage")


def test_identity_keys_cannot_get_tenants_write() -> None:
    assert not may_hold("identity", "tenants:write")
    with pytest.raises(InvalidInput) as caught:
        resolve_permissions("identity", ["messages:read", "tenants:write"])
    assert caught.value.code == "permission_not_allowed"
    assert "tenants:write" in caught.value.message


@pytest.mark.parametrize("level", ["tenant", "identity"])
def test_levels_below_partner_cannot_manage_partners(level: str) -> None:
    with pytest.raises(InvalidInput, match="partners:manage"):
        resolve_permissions(level, ["partners:manage"])


def test_identity_defaults_are_narrower_than_tenant_defaults() -> None:
    assert DEFAULT_PERMISSIONS["identity"] < DEFAULT_PERMISSIONS["tenant"]
    assert "keys:manage" not in DEFAULT_PERMISSIONS["identity"]


def test_unknown_permission_is_named() -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_permissions("platform", ["messages:teleport"])
    assert caught.value.code == "unknown_permission"
    assert "messages:teleport" in caught.value.message


def test_an_empty_list_is_refused_and_duplicates_collapse() -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_permissions("tenant", [])
    assert caught.value.code == "no_permissions"
    assert resolve_permissions("tenant", ["messages:send", "messages:read", "messages:send"]) == (
        "messages:read",
        "messages:send",
    )


def test_unknown_level_is_refused() -> None:
    with pytest.raises(InvalidInput) as caught:
        check_level("galaxy")
    assert caught.value.code == "invalid_key_level"
    with pytest.raises(InvalidInput):
        resolve_permissions("galaxy", None)


def test_grants() -> None:
    assert grants(["messages:read"], "messages:read")
    assert not grants(["messages:read"], "messages:send")
    with pytest.raises(ValueError):
        grants(["messages:read"], "messages:teleport")

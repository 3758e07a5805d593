"""What an API key may do: the permission vocabulary and which key levels may hold each.

A key has a level (seed 000 api_keys) that fixes its reach:

* ``platform`` — the whole installation (the operator);
* ``partner`` — the tenants its partner created;
* ``tenant`` — one tenant and all of its identities;
* ``identity`` — one identity (inbox) of one tenant.

and a set of permissions that fixes what it may do within that reach. :data:`PERMISSIONS`
is the one table: each row names a permission, says what it allows and which levels may
hold it. A key created without a list gets :data:`DEFAULT_PERMISSIONS` for its level;
asking for a permission the level may not hold is refused. The REST API's route table
names, for each route, the one permission from this table it needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from postroom.errors import InvalidInput

LEVELS: Final = ("platform", "partner", "tenant", "identity")

_ALL: Final = frozenset(LEVELS)
_OPERATORS: Final = frozenset({"platform", "partner", "tenant"})
_PLATFORM: Final = frozenset({"platform"})


@dataclass(frozen=True)
class Permission:
    name: str
    allows: str
    levels: frozenset[str]


# The table. Order is the order permissions are stored and shown in.
PERMISSIONS: Final[tuple[Permission, ...]] = (
    Permission("tenants:read", "read tenants in reach and their settings", _OPERATORS),
    Permission("tenants:write", "create, change, suspend and erase tenants in reach", _OPERATORS),
    Permission("partners:manage", "create, change and delete partners", _PLATFORM),
    Permission("identities:read", "read identities (inboxes) and their addresses", _ALL),
    Permission(
        "identities:write", "create, change and delete identities and addresses", _OPERATORS
    ),
    Permission("domains:read", "read domains and the DNS records they need", _OPERATORS),
    Permission("domains:write", "add, verify and remove domains", _OPERATORS),
    Permission("keys:manage", "create, list, rotate and revoke API keys in reach", _OPERATORS),
    Permission("messages:read", "list, search and read messages and threads", _ALL),
    Permission("messages:write", "label, archive, mark read and delete messages", _ALL),
    Permission("messages:send", "send, reply and forward mail", _ALL),
    Permission("webhooks:manage", "create, change and replay webhook endpoints", _OPERATORS),
    Permission("events:read", "read the event stream and event history", _ALL),
    Permission("audit:read", "read the audit log", _OPERATORS),
    Permission(
        "platform:ops", "operate the installation: jobs, dead letters, signing keys", _PLATFORM
    ),
)

BY_NAME: Final[Mapping[str, Permission]] = {p.name: p for p in PERMISSIONS}

# What each level may hold, derived from the table.
ALLOWED: Final[Mapping[str, frozenset[str]]] = {
    level: frozenset(p.name for p in PERMISSIONS if level in p.levels) for level in LEVELS
}

# What a key gets when its creator names no permissions. Operator levels get all they
# may hold; an identity key, usually handed to an agent, gets what working one inbox
# needs and no more.
DEFAULT_PERMISSIONS: Final[Mapping[str, frozenset[str]]] = {
    "platform": ALLOWED["platform"],
    "partner": ALLOWED["partner"],
    "tenant": ALLOWED["tenant"],
    "identity": frozenset(
        {"identities:read", "messages:read", "messages:write", "messages:send", "events:read"}
    ),
}


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise InvalidInput(
            f"unknown key level {level!r} (one of {', '.join(LEVELS)})", code="invalid_key_level"
        )
    return level


def may_hold(level: str, permission: str) -> bool:
    """Whether a key of ``level`` may be given ``permission``."""
    return permission in ALLOWED.get(level, frozenset())


def resolve_permissions(level: str, requested: Iterable[str] | None) -> tuple[str, ...]:
    """The permissions to store for a new key, in table order.

    ``None`` means the level's defaults. An unknown permission, or one the level may not
    hold, is refused with InvalidInput naming it.
    """
    check_level(level)
    if requested is None:
        wanted = set(DEFAULT_PERMISSIONS[level])
    else:
        wanted = set()
        for name in requested:
            if name not in BY_NAME:
                raise InvalidInput(f"unknown permission {name!r}", code="unknown_permission")
            if not may_hold(level, name):
                raise InvalidInput(
                    f"a {level} key cannot hold the permission {name!r}",
                    code="permission_not_allowed",
                )
            wanted.add(name)
        if not wanted:
            raise InvalidInput("a key needs at least one permission", code="no_permissions")
    return tuple(p.name for p in PERMISSIONS if p.name in wanted)


def grants(held: Iterable[str], needed: str) -> bool:
    """Whether a key holding ``held`` may do what ``needed`` allows."""
    if needed not in BY_NAME:
        raise ValueError(f"unknown permission {needed!r}")
    return needed in set(held)

"""Outbound transports: how a message leaves (or stays), behind one interface.

========== ====================================================== ===========
name       what it does                                           provider
========== ====================================================== ===========
sink       development: everything captured in the sink inbox     ``sink``
smtp_relay one smarthost (``outbound.relay_*``), pooled per thread ``smtp``
direct     MX lookup per recipient domain, opportunistic TLS      ``smtp``
local      recipients hosted here, through the inbound pipeline   ``local``
========== ====================================================== ===========

:func:`build_transport` makes one from the settings; the interface is in
:mod:`postroom.outbound.transports.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postroom.errors import ConfigError
from postroom.outbound.transports.base import (
    Connection,
    Reply,
    Route,
    Transport,
    TransportError,
)
from postroom.outbound.transports.direct import DirectTransport
from postroom.outbound.transports.local import LocalTransport, is_local_recipient
from postroom.outbound.transports.relay import RelayTransport
from postroom.outbound.transports.sink import SinkTransport

if TYPE_CHECKING:
    from postroom.app import App

TRANSPORT_NAMES = ("sink", "smtp_relay", "direct", "local")


def build_transport(app: App, name: str) -> Transport:
    """The transport called ``name``; ConfigError for an unknown name or bad settings."""
    if name == "sink":
        return SinkTransport(app)
    if name == "smtp_relay":
        return RelayTransport(app.settings)
    if name == "direct":
        return DirectTransport(app.settings)
    if name == "local":
        return LocalTransport(app)
    raise ConfigError(
        f"unknown outbound transport {name!r} (expected one of {', '.join(TRANSPORT_NAMES)})"
    )


__all__ = [
    "TRANSPORT_NAMES",
    "Connection",
    "DirectTransport",
    "LocalTransport",
    "RelayTransport",
    "Reply",
    "Route",
    "SinkTransport",
    "Transport",
    "TransportError",
    "build_transport",
    "is_local_recipient",
]

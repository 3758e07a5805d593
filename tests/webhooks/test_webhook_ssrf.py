"""SSRF protection: no webhook reaches a forbidden address, however it is spelled.

The receiver listens on 127.0.0.1, so every spelling of loopback below would reach it
if the client let it through: each case asserts that the receiver accepted no
connection and that no socket was connected (no peer address). Names go through a
stand-in resolver (a fixed table, as DNS would answer for other domains). The rules are
the deployment's defaults (loopback refused) with http allowed, so that only the
address decides.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
import trustme
from webhook_receiver import Receiver

from postroom.webhooks.addresses import ForbiddenUrl, check_url, forbidden_reason
from postroom.webhooks.client import DeliveryClient, StaticResolver

NAMES = {
    "localhost": ["127.0.0.1"],
    "loopback6.test": ["::1"],
    "metadata.test": ["169.254.169.254"],
    "private.test": ["10.0.0.7"],
    "cgnat.test": ["100.64.1.1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "nat64.test": ["64:ff9b::7f00:1"],
    "mixed.test": ["93.184.216.34", "127.0.0.1"],  # one bad answer spoils the lot
    "ula.test": ["fd12:3456::1"],
    "zero.test": ["0.0.0.0"],
}

# (host as written in the URL, where the refusal happens: "url" or "address")
FORMS = [
    ("127.0.0.1", "url"),
    ("127.0.0.2", "url"),
    ("2130706433", "url"),  # decimal
    ("0x7f000001", "url"),  # hex
    ("017700000001", "url"),  # octal
    ("0177.0.0.1", "url"),  # octal dotted
    ("0x7f.0.0.1", "url"),  # hex dotted
    ("127.1", "url"),  # short form
    ("127.0.1", "url"),
    ("[::1]", "url"),
    ("[0:0:0:0:0:0:0:1]", "url"),
    ("[::ffff:127.0.0.1]", "url"),  # IPv4-mapped
    ("[::ffff:7f00:1]", "url"),
    ("[::127.0.0.1]", "url"),  # IPv4-compatible
    ("[64:ff9b::127.0.0.1]", "url"),  # NAT64
    ("[2002:7f00:1::]", "url"),  # 6to4
    ("0.0.0.0", "url"),
    ("[::]", "url"),
    ("10.1.2.3", "url"),
    ("172.16.0.1", "url"),
    ("192.168.1.1", "url"),
    ("169.254.169.254", "url"),  # cloud metadata
    ("100.64.0.1", "url"),  # CGNAT
    ("224.0.0.1", "url"),  # multicast
    ("255.255.255.255", "url"),  # broadcast
    ("[fc00::1]", "url"),
    ("[fe80::1]", "url"),
    ("[ff02::1]", "url"),
    ("[::ffff:169.254.169.254]", "url"),
    ("localhost", "address"),
    ("LocalHost.", "address"),
    ("loopback6.test", "address"),
    ("metadata.test", "address"),
    ("private.test", "address"),
    ("cgnat.test", "address"),
    ("mapped.test", "address"),
    ("nat64.test", "address"),
    ("mixed.test", "address"),
    ("ula.test", "address"),
    ("zero.test", "address"),
]


@pytest.fixture
def settings(settings: Any) -> Any:
    """The defaults, with http allowed: only the address decides."""
    return dataclasses.replace(settings, webhooks_allow_insecure=True)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def _client(**kwargs: Any) -> DeliveryClient:
    options: dict[str, Any] = {
        "allow_insecure": True,
        "allow_loopback": False,
        "timeout_s": 2.0,
        "resolver": StaticResolver(NAMES),
    }
    options.update(kwargs)
    return DeliveryClient(**options)


@pytest.mark.parametrize(("host", "refused_at"), FORMS, ids=[f[0] for f in FORMS])
def test_forbidden_address_forms_make_no_connection(
    receiver: Receiver, host: str, refused_at: str
) -> None:
    url = f"http://{host}:{receiver.port}/hook"
    if refused_at == "url":
        with pytest.raises(ForbiddenUrl):
            check_url(url, allow_insecure=True, allow_loopback=False)
    else:
        check_url(url, allow_insecure=True, allow_loopback=False)  # a name passes the URL check
    outcome = _client().post(url, b"{}", {"webhook-id": "evt_x"})
    assert not outcome.ok
    assert outcome.error == ("invalid_url" if refused_at == "url" else "forbidden_address")
    assert outcome.peer is None  # no socket was connected
    assert receiver.connections == []
    assert receiver.requests == []


def test_the_table_covers_at_least_twenty_forms() -> None:
    assert len(FORMS) >= 20


def test_loopback_allowed_for_development_reaches_the_receiver(receiver: Receiver) -> None:
    """The same client with webhooks.allow_loopback connects: the refusals above were the
    rules', not an unreachable receiver's."""
    before = len(receiver.connections)
    outcome = _client(allow_loopback=True).post(
        f"http://localhost:{receiver.port}/hook", b"{}", {"webhook-id": "evt_ok"}
    )
    assert outcome.ok and outcome.http_status == 200
    assert outcome.peer == "127.0.0.1"
    assert receiver.connections[before:] == ["127.0.0.1"]
    assert receiver.requests[-1].headers["host"] == f"localhost:{receiver.port}"
    # Every other private form stays refused even then.
    refused = _client(allow_loopback=True).post(
        f"http://private.test:{receiver.port}/hook", b"{}", {}
    )
    assert refused.error == "forbidden_address"
    receiver.requests.clear()
    receiver.connections.clear()


def test_the_resolved_address_is_pinned_against_rebinding(receiver: Receiver) -> None:
    # First answer allowed (development: loopback), every later one private: the client
    # looks up once and connects to what it checked.
    resolver = StaticResolver({"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
    client = _client(allow_loopback=True, resolver=resolver)
    outcome = client.post(f"http://rebind.test:{receiver.port}/hook", b"{}", {})
    assert outcome.ok and outcome.peer == "127.0.0.1"
    assert resolver.lookups == {"rebind.test": 1}
    # The other way round: a first answer that is refused makes no connection at all.
    resolver = StaticResolver({"rebind.test": [["10.0.0.1"], ["127.0.0.1"]]})
    before = len(receiver.connections)
    outcome = _client(allow_loopback=True, resolver=resolver).post(
        f"http://rebind.test:{receiver.port}/hook", b"{}", {}
    )
    assert outcome.error == "forbidden_address" and outcome.peer is None
    assert len(receiver.connections) == before
    receiver.requests.clear()
    receiver.connections.clear()


def test_https_connects_to_the_pinned_address_with_the_name_as_sni_and_host() -> None:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("hooks.test").configure_cert(server)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    with Receiver(tls=server) as tls_receiver:
        client = _client(
            allow_insecure=False, allow_loopback=True, resolver=resolver, ssl_context=trusting
        )
        outcome = client.post(f"https://hooks.test:{tls_receiver.port}/in", b"{}", {})
        assert outcome.ok, outcome
        assert tls_receiver.server_names == ["hooks.test"]
        assert tls_receiver.requests[0].headers["host"] == f"hooks.test:{tls_receiver.port}"
        # A certificate for another name is refused.
        wrong = client.post(f"https://other.test:{tls_receiver.port}/in", b"{}", {})
        assert wrong.error == "tls"
        assert len(tls_receiver.requests) == 1
        # http is refused unless the deployment allows it.
        plain = client.post(f"http://hooks.test:{tls_receiver.port}/in", b"{}", {})
        assert plain.error == "invalid_url"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.example.com/x?y=1", True),
        ("https://93.184.216.34/x", True),
        ("https://[2606:4700::1111]/x", True),
        ("https://user:pw@hooks.example.com/", False),
        ("ftp://hooks.example.com/", False),
        ("https:///nohost", False),
        ("https://hooks example.com/", False),
        ("https://hooks.example.com:0/", False),
        ("https://hooks.example.com:99999/", False),
        ("javascript:alert(1)", False),
        ("https://-bad-.example/", False),
        ("https://" + "a" * 2050 + ".example/", False),
        ("https://[fe80::1%25eth0]/", False),
    ],
)
def test_url_rules(url: str, allowed: bool) -> None:
    if allowed:
        assert check_url(url, allow_insecure=False, allow_loopback=False).scheme == "https"
    else:
        with pytest.raises(ForbiddenUrl):
            check_url(url, allow_insecure=False, allow_loopback=False)


@pytest.mark.parametrize(
    ("address", "forbidden"),
    [
        ("8.8.8.8", False),
        ("::ffff:8.8.8.8", False),
        ("64:ff9b::808:808", False),
        ("2002:808:808::", False),
        ("2606:4700::1111", False),
        ("127.0.0.1", True),
        ("::ffff:10.0.0.1", True),
        ("64:ff9b::a9fe:a9fe", True),
        ("2002:a00:1::", True),
        ("::8.8.8.8", True),  # IPv4-compatible: deprecated, refused
        ("198.18.0.1", True),
        ("192.0.2.1", True),
        ("240.0.0.1", True),
        ("2001:db8::1", True),
    ],
)
def test_address_rules(address: str, forbidden: bool) -> None:
    reason = forbidden_reason(ipaddress.ip_address(address))
    assert (reason is not None) == forbidden, reason


def test_a_stored_endpoint_pointing_at_a_name_of_a_forbidden_address_is_never_called(
    receiver: Receiver, ready_app: Any
) -> None:
    """The whole path: an endpoint whose name passes the URL check, an event, the job
    handler with the stand-in resolver: the attempt fails as forbidden_address."""
    from postroom.jobs.handlers import HandlerRegistry
    from postroom.jobs.worker import Worker
    from postroom.store import webhooks as rows
    from postroom.tenancy.service import create_identity
    from postroom.webhooks.delivery import deliver_handler
    from postroom.webhooks.dispatch import dispatch_pending
    from postroom.webhooks.endpoints import DELIVER_JOB, PLATFORM, NewEndpoint, create

    app = ready_app
    endpoint, _ = create(
        app, PLATFORM, NewEndpoint(url=f"http://metadata.test:{receiver.port}/latest")
    )
    create_identity(app, "ssrf")
    dispatch_pending(app)
    registry = HandlerRegistry()
    registry.register(DELIVER_JOB, deliver_handler(_client()))
    assert Worker(app, registry).run_once()
    with app.db.read() as tx:
        log = rows.list_deliveries(tx, endpoint.id)
    assert [(d.status, d.error, d.http_status) for d in log] == [
        ("failed", "forbidden_address", None)
    ]
    assert receiver.connections == [] and receiver.requests == []

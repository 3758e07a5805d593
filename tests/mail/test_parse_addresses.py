"""Address lists as real mail writes them (table-driven)."""

from __future__ import annotations

import pytest

from postroom.mail.addresses import normalise_address, parse_address_list, parse_mailbox
from postroom.mail.message import Mailbox

M = Mailbox


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Marcel Holtmann <marcel@holtmann.org>", [M("marcel@holtmann.org", "Marcel Holtmann")]),
        ("John.Doe@Example.COM", [M("john.doe@example.com")]),
        ('"Doe, John" <john@example.com>', [M("john@example.com", "Doe, John")]),
        # An unquoted display name with a comma belongs to the next mailbox.
        ("Doe, John <john@example.com>", [M("john@example.com", "Doe, John")]),
        (
            "a@example.com, b@example.com (Bee)",
            [M("a@example.com"), M("b@example.com", "Bee")],
        ),
        # Groups: members kept; an empty group gives nothing (policy.default raises here).
        ("unlisted-recipients:;", []),
        ("undisclosed-recipients: ;", []),
        (
            "Team: a@example.com, B <b@example.com>;, c@example.com",
            [M("a@example.com"), M("b@example.com", "B"), M("c@example.com")],
        ),
        # Comments, nested, also inside the address.
        (
            "Pete(A nice \\) chap) <pete(his account)@silly.test(his host)>",
            [M("pete@silly.test", "Pete")],
        ),
        ("<@relay1,@relay2:user@example.com>", [M("user@example.com")]),  # route
        ("=?utf-8?q?J=C3=B6rg?= <j@example.com>", [M("j@example.com", "Jörg")]),
        ('"=?utf-8?q?J=C3=B6rg?=" <j@example.com>', [M("j@example.com", "Jörg")]),
        ("Jörg <jörg@bücher.example>", [M("jörg@xn--bcher-kva.example", "Jörg")]),  # IDNA
        ('"john doe"@example.com', [M('"john doe"@example.com')]),
        ('"john"@example.com', [M("john@example.com")]),  # needless quotes go
        ("foo <bar@example.com", [M("bar@example.com", "foo")]),  # missing ">"
        ("John Doe john@example.com", [M("john@example.com", "John Doe")]),
        ("user@[192.0.2.1]", [M("user@[192.0.2.1]")]),
        ("<>", []),
        ("not an address", []),
        ("x@", []),
        ("@example.com", []),
        ("a@bad_domain..com", []),
        ("", []),
        ("a@example.com.", [M("a@example.com")]),  # trailing dot of the root
    ],
)
def test_address_lists(value: str, expected: list[Mailbox]) -> None:
    assert list(parse_address_list(value)) == expected


def test_over_bound_address_is_dropped_and_reported() -> None:
    long_local = "a" * 400
    found = parse_address_list(f"ok@example.com, {long_local}@example.com")
    assert list(found) == [M("ok@example.com")]
    assert found.dropped


def test_field_bound_keeps_header_order() -> None:
    found = parse_address_list(", ".join(f"u{i}@example.com" for i in range(300)))
    assert len(found) == 256
    assert found[0].address == "u0@example.com"
    assert found.dropped


def test_display_name_over_bound_is_dropped_address_kept() -> None:
    (mailbox,) = parse_address_list('"' + "n" * 300 + '" <a@example.com>')
    assert mailbox == M("a@example.com", None)


def test_mailbox_of_a_single_address_field() -> None:
    assert parse_mailbox("A <a@example.com>, B <b@example.com>") == (M("a@example.com", "A"), False)
    assert parse_mailbox(None) == (None, False)


@pytest.mark.parametrize(
    ("local", "domain", "expected"),
    [
        ("User", "EXAMPLE.com", "user@example.com"),
        ("user", "münchen.de", "user@xn--mnchen-3ya.de"),
        ("with space", "example.com", '"with space"@example.com'),
        ("ctl\x01", "example.com", None),
        ("user", "-bad-.com", None),
    ],
)
def test_normalise_address(local: str, domain: str, expected: str | None) -> None:
    assert normalise_address(local, domain) == expected

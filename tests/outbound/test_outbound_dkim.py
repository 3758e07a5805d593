"""DKIM signing of outgoing mail, checked with dkimpy's verifier against the TXT record
the domain publishes (answered locally instead of by DNS)."""

from __future__ import annotations

import re
from collections.abc import Callable

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from postroom.errors import InvalidInput
from postroom.mail.parse import parse_message
from postroom.outbound.compose import Address, Composition, compose
from postroom.outbound.dkim import SIGNED_HEADERS, dns_txt_value, sign
from postroom.tenancy.domains import DKIM_SELECTOR, _dkim_key_pair

DOMAIN = "example.com"


@pytest.fixture(scope="module")
def key_pair() -> tuple[bytes, str]:
    return _dkim_key_pair()


def _dns(records: dict[str, str]) -> Callable[..., bytes | None]:
    """A resolver answering TXT queries from ``records`` (name -> value), as DNS would."""

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        value = records.get(name.decode("ascii").rstrip(".").lower())
        return value.encode("ascii") if value is not None else None

    return lookup


@pytest.fixture(scope="module")
def dnsfunc(key_pair: tuple[bytes, str]) -> Callable[..., bytes | None]:
    return _dns({f"{DKIM_SELECTOR}._domainkey.{DOMAIN}": dns_txt_value(key_pair[1])})


@pytest.fixture(scope="module")
def message() -> bytes:
    c = Composition(
        from_=Address("alice@example.com", "Alice"),
        to=(Address("bob@example.org", "Bob"),),
        cc=(Address("carol@example.org"),),
        subject="Signed – with ünïcode",
        text="Hello Bob,\n\nthis is signed.\n",
        html="<p>Hello Bob</p>",
        kind="marketing",
        list_unsubscribe=("https://example.com/u/1",),
    )
    return compose(
        c, message_id="01HF00000000000000000000AA@example.com", date_ms=1_700_000_000_000
    )


def _signed(message: bytes, key_pair: tuple[bytes, str]) -> bytes:
    return sign(message, domain=DOMAIN, selector=DKIM_SELECTOR, private_key_pem=key_pair[0])


def _tags(signed: bytes) -> dict[str, str]:
    field = signed.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
    value = field[0]
    for line in field[1:]:
        if not line.startswith((" ", "\t")):
            break
        value += line
    value = value.split(":", 1)[1]
    return {
        k.strip(): "".join(v.split())
        for k, v in (tag.split("=", 1) for tag in value.split(";") if "=" in tag)
    }


def test_signed_message_verifies(
    message: bytes, key_pair: tuple[bytes, str], dnsfunc: Callable[..., bytes | None]
) -> None:
    signed = _signed(message, key_pair)
    assert signed.startswith(b"DKIM-Signature: ")
    assert signed.endswith(message)
    assert dkim.verify(signed, dnsfunc=dnsfunc)
    tags = _tags(signed)
    assert (tags["a"], tags["c"], tags["d"], tags["s"]) == (
        "rsa-sha256",
        "relaxed/relaxed",
        DOMAIN,
        DKIM_SELECTOR,
    )
    signed_fields = set(tags["h"].lower().split(":"))
    assert {"from", "to", "cc", "subject", "date", "message-id"} <= signed_fields
    assert {"list-unsubscribe", "list-unsubscribe-post", "mime-version"} <= signed_fields
    assert signed_fields <= {name.decode() for name in SIGNED_HEADERS}
    # The signature does not disturb reading the message.
    assert parse_message(signed).subject == "Signed – with ünïcode"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda raw: raw.replace(b"this is signed.", b"this is forged."),
        lambda raw: raw.replace(b"Hello Bob</p>", b"Hello Eve</p>"),
        lambda raw: raw + b"appended\r\n",
        lambda raw: raw.replace(b"To: Bob <bob@example.org>", b"To: Eve <eve@example.net>"),
        lambda raw: raw.replace(b"From: Alice", b"From: Mallory"),
        lambda raw: raw.replace(b"<https://example.com/u/1>", b"<https://evil.example/u/1>"),
    ],
    ids=["text_body", "html_body", "appended", "to", "from", "list_unsubscribe"],
)
def test_modified_message_fails_verification(
    message: bytes,
    key_pair: tuple[bytes, str],
    dnsfunc: Callable[..., bytes | None],
    tamper: Callable[[bytes], bytes],
) -> None:
    signed = _signed(message, key_pair)
    tampered = tamper(signed)
    assert tampered != signed
    assert not dkim.verify(tampered, dnsfunc=dnsfunc)


def test_relaxed_canonicalisation_survives_refolding(
    message: bytes, key_pair: tuple[bytes, str], dnsfunc: Callable[..., bytes | None]
) -> None:
    signed = _signed(message, key_pair)
    # Relays may refold headers and change whitespace; relaxed/relaxed still verifies.
    refolded = signed.replace(b"To: Bob <bob@example.org>", b"To:   Bob\r\n\t<bob@example.org>")
    assert refolded != signed
    assert dkim.verify(refolded, dnsfunc=dnsfunc)


def test_a_different_published_key_fails(message: bytes, key_pair: tuple[bytes, str]) -> None:
    other = _dkim_key_pair()
    wrong = _dns({f"{DKIM_SELECTOR}._domainkey.{DOMAIN}": dns_txt_value(other[1])})
    assert not dkim.verify(_signed(message, key_pair), dnsfunc=wrong)


def test_pkcs1_keys_and_idn_domains_sign(key_pair: tuple[bytes, str]) -> None:
    key = serialization.load_pem_private_key(key_pair[0], password=None)
    pkcs1 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    raw = compose(
        Composition(from_=Address("info@bücher.example"), to=(Address("b@example.org"),), text="x"),
        message_id="01HF00000000000000000000AB@xn--bcher-kva.example",
        date_ms=1_700_000_000_000,
    )
    signed = sign(raw, domain="Bücher.example", selector="Sel1", private_key_pem=pkcs1)
    assert _tags(signed)["d"] == "xn--bcher-kva.example" and _tags(signed)["s"] == "sel1"
    records = {"sel1._domainkey.xn--bcher-kva.example": dns_txt_value(key_pair[1])}
    assert dkim.verify(signed, dnsfunc=_dns(records))


def test_dns_txt_value_matches_the_published_record(key_pair: tuple[bytes, str]) -> None:
    public_b64 = key_pair[1]
    value = dns_txt_value(public_b64)
    # The same text tenancy.domains.dns_records publishes.
    assert value == f"v=DKIM1; k=rsa; p={public_b64}"
    key = serialization.load_pem_private_key(key_pair[0], password=None)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert dns_txt_value(pem) == value
    assert dns_txt_value(pem.decode()) == value
    assert re.fullmatch(r"v=DKIM1; k=rsa; p=[A-Za-z0-9+/]+=*", value)


def _ec_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"private_key_pem": b"not a key"}, "invalid_dkim_key"),
        ({"private_key_pem": b""}, "invalid_dkim_key"),
        ({"private_key_pem": "ec"}, "invalid_dkim_key"),
        ({"selector": "a;b"}, "invalid_dkim_key"),
        ({"selector": "pr1\r\nX-Evil: 1"}, "invalid_dkim_key"),
        ({"selector": ""}, "invalid_dkim_key"),
        ({"domain": "exa mple.com"}, "invalid_dkim_key"),
        ({"domain": "example.com; t=y"}, "invalid_dkim_key"),
    ],
    ids=[
        "garbage",
        "empty",
        "ec_key",
        "semicolon",
        "crlf",
        "no_selector",
        "space_domain",
        "tag_injection",
    ],
)
def test_bad_signing_input_is_refused(
    message: bytes, key_pair: tuple[bytes, str], changes: dict[str, object], code: str
) -> None:
    arguments: dict[str, object] = {
        "domain": DOMAIN,
        "selector": DKIM_SELECTOR,
        "private_key_pem": key_pair[0],
        **changes,
    }
    if arguments["private_key_pem"] == "ec":
        arguments["private_key_pem"] = _ec_pem()
    with pytest.raises(InvalidInput) as caught:
        sign(message, **arguments)  # type: ignore[arg-type]
    assert caught.value.code == code


def test_empty_message_is_refused(key_pair: tuple[bytes, str]) -> None:
    with pytest.raises(InvalidInput):
        sign(b"", domain=DOMAIN, selector=DKIM_SELECTOR, private_key_pem=key_pair[0])


@pytest.mark.parametrize("public_key", ["", "not base64!", "aGVsbG8=", b"\xff\xfe"])
def test_bad_public_keys_are_refused(public_key: str | bytes) -> None:
    with pytest.raises(InvalidInput):
        dns_txt_value(public_key)


def test_ec_public_key_is_refused() -> None:
    public = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(InvalidInput):
        dns_txt_value(public)

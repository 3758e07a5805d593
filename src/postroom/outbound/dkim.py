"""DKIM signatures (RFC 6376) for outgoing mail, with dkimpy.

:func:`sign` prepends a ``DKIM-Signature`` field (rsa-sha256, relaxed/relaxed) covering
:data:`SIGNED_HEADERS` that the message carries, and the whole body. The key is the
domain's own: an RSA private key in PEM, PKCS#8 as
:func:`postroom.tenancy.domains.dkim_private_key` returns it, or PKCS#1. The public half
is published as the TXT record :func:`dns_txt_value` writes, at
``{selector}._domainkey.{domain}``.

Signing is pure (bytes in, bytes out); verification of inbound mail is elsewhere.
"""

from __future__ import annotations

import base64
import binascii
import re

import idna
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from postroom.errors import InvalidInput

__all__ = ["SIGNED_HEADERS", "dns_txt_value", "sign"]

SIGNED_HEADERS: tuple[bytes, ...] = (
    b"from",
    b"to",
    b"cc",
    b"subject",
    b"date",
    b"message-id",
    b"reply-to",
    b"in-reply-to",
    b"references",
    b"mime-version",
    b"content-type",
    b"list-unsubscribe",
    b"list-unsubscribe-post",
)

_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_PEM_BODY = re.compile(r"-----BEGIN [A-Z ]+-----(.*?)-----END [A-Z ]+-----", re.S)


def _domain(value: str, what: str) -> str:
    """A DNS name as A-labels, lower case; InvalidInput when it is not one."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"the DKIM {what} is empty", code="invalid_dkim_key")
    text = value.strip().rstrip(".").lower()
    if not text.isascii():
        try:
            text = idna.encode(text, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            raise InvalidInput(
                f"the DKIM {what} {value!r} is not a DNS name", code="invalid_dkim_key"
            ) from None
    if len(text) > 253 or not all(_LABEL.match(label) for label in text.split(".")):
        raise InvalidInput(f"the DKIM {what} {value!r} is not a DNS name", code="invalid_dkim_key")
    return text


def _rsa_pkcs1(private_key_pem: bytes) -> bytes:
    """The key as PKCS#1 PEM, the form dkimpy reads; InvalidInput for anything else."""
    try:
        key = serialization.load_pem_private_key(private_key_pem, password=None)
    except (ValueError, TypeError):
        raise InvalidInput(
            "the DKIM private key is not an unencrypted PEM key", code="invalid_dkim_key"
        ) from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise InvalidInput("the DKIM private key is not an RSA key", code="invalid_dkim_key")
    if key.key_size < 1024:
        raise InvalidInput(
            "the DKIM private key is shorter than 1024 bits", code="invalid_dkim_key"
        )
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def sign(raw: bytes, *, domain: str, selector: str, private_key_pem: bytes) -> bytes:
    """``raw`` with a ``DKIM-Signature`` field prepended (relaxed/relaxed, rsa-sha256).

    Only fields of :data:`SIGNED_HEADERS` the message carries are signed. ``raw`` should
    use CRLF line endings (as :func:`postroom.outbound.compose.compose` writes).
    """
    if not isinstance(raw, bytes) or not raw:
        raise InvalidInput("the message to sign is empty", code="invalid_message")
    signing_domain = _domain(domain, "domain")
    signing_selector = _domain(selector, "selector")
    key = _rsa_pkcs1(private_key_pem)
    import dkim  # dkimpy pulls in dnspython: imported when a message is signed

    try:
        field = dkim.sign(
            raw,
            signing_selector.encode("ascii"),
            signing_domain.encode("ascii"),
            key,
            canonicalize=(b"relaxed", b"relaxed"),
            signature_algorithm=b"rsa-sha256",
            include_headers=list(SIGNED_HEADERS),
        )
    except dkim.DKIMException as exc:
        raise InvalidInput(f"DKIM signing failed: {exc}", code="dkim_sign_failed") from None
    if not isinstance(field, bytes) or not field.startswith(b"DKIM-Signature:"):
        raise InvalidInput("DKIM signing produced no signature", code="dkim_sign_failed")
    return field + raw


def dns_txt_value(public_key: str | bytes) -> str:
    """The DKIM TXT record value, ``v=DKIM1; k=rsa; p=...``, for a public key given as
    the stored base64 DER SubjectPublicKeyInfo (``domains.dkim_public``) or as PEM."""
    text = public_key.decode("ascii", "replace") if isinstance(public_key, bytes) else public_key
    if not isinstance(text, str):
        raise InvalidInput("the DKIM public key must be text", code="invalid_dkim_key")
    armoured = _PEM_BODY.search(text)
    body = "".join((armoured.group(1) if armoured else text).split())
    try:
        der = base64.b64decode(body, validate=True)
        key = serialization.load_der_public_key(der)
    except (binascii.Error, ValueError):
        raise InvalidInput(
            "the DKIM public key is not a base64 DER or PEM public key", code="invalid_dkim_key"
        ) from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise InvalidInput("the DKIM public key is not an RSA key", code="invalid_dkim_key")
    return f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode('ascii')}"

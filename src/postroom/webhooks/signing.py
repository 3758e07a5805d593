"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

A secret is ``whsec_`` + base64 of 32 random bytes; the HMAC key is those bytes. Each
request carries::

    webhook-id:        the event id (the same on every retry)
    webhook-timestamp: Unix seconds of this attempt
    webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">

During a rotation's overlap the signature header holds one ``v1,`` entry per secret,
space-separated, the new secret's first: a receiver holding either secret verifies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def _key(secret: str) -> bytes:
    if not secret.startswith(PREFIX):
        raise ValueError("a webhook secret starts with whsec_")
    return base64.b64decode(secret[len(PREFIX) :])


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` entry."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def headers(
    secrets_in_use: Sequence[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with every secret in use."""
    if not secrets_in_use:
        raise ValueError("at least one secret signs")
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, message_id, timestamp, body) for secret in secrets_in_use
        ),
    }

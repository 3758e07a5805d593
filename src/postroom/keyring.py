"""Key material kept outside the database, and what Postroom derives from it.

Three files, created by ``postroom init`` with mode 0600 (settings ``master_key_file``,
``key_pepper_file`` and ``hash_key_file``), each holding 32 random bytes as one line of
base64:

* the **master key** seals secrets at rest (webhook secrets, relay passwords, DKIM
  keys, IMAP credentials) with AES-256-GCM; it can be rotated, because sealed values can
  be opened and sealed again;
* the **pepper** keys the HMAC that API-key secrets are stored as, so a copy of the
  database alone cannot test guesses;
* the **hash key** keys the one-way address hashes (tombstones, suppressions). It is a
  key of its own because those hashes cannot be recomputed: rotating it would forget
  every tombstone, so it never rotates with the master key.

A sealed value is ``pr1.{kid}.{nonce}.{ciphertext}`` (base64url, no padding) with
associated data ``pr1|{table}|{column}|{row id}``: a value copied to another row or
column does not open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from postroom.config import Settings
from postroom.errors import KeyFileError, PostroomError

KEY_BYTES = 32
ENVELOPE_VERSION = "pr1"


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def create_key_file(path: Path) -> bool:
    """Write 32 random bytes to ``path`` (mode 0600) unless it exists; True if written."""
    if path.exists():
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise KeyFileError(f"cannot create key file {path}: {exc.strerror}") from None
    try:
        os.write(fd, base64.b64encode(secrets.token_bytes(KEY_BYTES)) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def read_key_file(path: Path, what: str) -> bytes:
    """The 32 bytes in a key file, or KeyFileError naming what is wrong."""
    try:
        info = path.stat()
        raw = path.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(
            f"{what} file {path} is missing; `postroom init` creates it (restore it from "
            "your backup if this data folder was initialised before)"
        ) from None
    except PermissionError:
        raise KeyFileError(f"{what} file {path} is not readable by this user") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"{what} file {path} is readable by other users (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); run: chmod 600 {path}"
        )
    try:
        key = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"{what} file {path} is not one line of base64") from None
    if len(key) != KEY_BYTES:
        raise KeyFileError(f"{what} file {path} holds {len(key)} bytes, expected {KEY_BYTES}")
    return key


def key_files(settings: Settings) -> list[tuple[Path, str]]:
    """The key files a data folder needs, with what each is called in messages."""
    return [
        (settings.master_key_file, "master key"),
        (settings.key_pepper_file, "key pepper"),
        (settings.hash_key_file, "address hash key"),
    ]


def create_key_files(settings: Settings) -> list[Path]:
    """Create whichever key files are missing; returns those created."""
    return [path for path, _what in key_files(settings) if create_key_file(path)]


class SealError(PostroomError):
    code = "seal_error"


@dataclass(frozen=True)
class Keyring:
    master_key: bytes
    pepper: bytes
    hash_key: bytes

    @classmethod
    def load(cls, settings: Settings) -> Keyring:
        master, pepper, hash_key = (read_key_file(path, what) for path, what in key_files(settings))
        return cls(master, pepper, hash_key)

    @property
    def kid(self) -> str:
        """Names the master key a value was sealed under (for rotation)."""
        return hashlib.sha256(b"postroom kid\x00" + self.master_key).hexdigest()[:8]

    def _subkey(self, purpose: str) -> bytes:
        return hmac.new(
            self.master_key, b"postroom subkey\x00" + purpose.encode(), "sha256"
        ).digest()

    def seal(self, plaintext: bytes, table: str, column: str, row_id: str) -> str:
        nonce = secrets.token_bytes(12)
        aad = f"{ENVELOPE_VERSION}|{table}|{column}|{row_id}".encode()
        ciphertext = AESGCM(self.master_key).encrypt(nonce, plaintext, aad)
        return f"{ENVELOPE_VERSION}.{self.kid}.{_b64u(nonce)}.{_b64u(ciphertext)}"

    def open(self, sealed: str, table: str, column: str, row_id: str) -> bytes:
        parts = sealed.split(".")
        if len(parts) != 4 or parts[0] != ENVELOPE_VERSION:
            raise SealError(f"{table}.{column} of {row_id} is not a sealed value")
        if parts[1] != self.kid:
            raise SealError(f"{table}.{column} of {row_id} was sealed under another master key")
        aad = f"{ENVELOPE_VERSION}|{table}|{column}|{row_id}".encode()
        try:
            return AESGCM(self.master_key).decrypt(_unb64u(parts[2]), _unb64u(parts[3]), aad)
        except (InvalidTag, ValueError, binascii.Error):
            raise SealError(
                f"{table}.{column} of {row_id} does not open (tampered or moved)"
            ) from None

    def address_hash(self, address: str) -> str:
        """Keyed hash of a normalised address (tombstones, suppressions)."""
        return hmac.new(self.hash_key, address.encode(), "sha256").hexdigest()

    def api_key_hash(self, secret: str) -> str:
        """HMAC-SHA256(pepper, secret) as stored in api_keys.hash."""
        return hmac.new(self.pepper, secret.encode(), "sha256").hexdigest()

"""Key files and what is derived from them: sealing, address hashes, API-key hashes."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from postroom.config import load_settings
from postroom.errors import KeyFileError
from postroom.keyring import Keyring, SealError, create_key_file, create_key_files, read_key_file


def _keyring(tmp_path: Path, name: str = "a") -> Keyring:
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / name)}, cwd=tmp_path)
    created = create_key_files(settings)
    assert [p.name for p in created] == ["master.key", "key-pepper", "hash-key"]
    assert create_key_files(settings) == []
    return Keyring.load(settings)


def test_key_files_are_created_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "master.key"
    assert create_key_file(path)
    first = path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not create_key_file(path)
    assert path.read_bytes() == first
    assert len(read_key_file(path, "master key")) == 32


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (None, 0o600, "is missing"),
        (b"not base64!!\n", 0o600, "not one line of base64"),
        (base64.b64encode(b"short") + b"\n", 0o600, "holds 5 bytes, expected 32"),
        (base64.b64encode(bytes(range(32))) + b"\n", 0o644, "readable by other users"),
    ],
    ids=["missing", "not-base64", "short", "readable-by-others"],
)
def test_bad_key_files_are_named(
    tmp_path: Path, content: bytes | None, mode: int, message: str
) -> None:
    path = tmp_path / "master.key"
    if content is not None:
        path.write_bytes(content)
        path.chmod(mode)
    with pytest.raises(KeyFileError) as info:
        read_key_file(path, "master key")
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_seal_round_trip_binds_table_column_and_row(tmp_path: Path) -> None:
    keyring = _keyring(tmp_path)
    sealed = keyring.seal(b"whsec_secret", "webhook_endpoints", "secret_enc", "whk_1")
    assert b"whsec_secret" not in sealed.encode()
    assert sealed.startswith(f"pr1.{keyring.kid}.")
    assert keyring.open(sealed, "webhook_endpoints", "secret_enc", "whk_1") == b"whsec_secret"
    with pytest.raises(SealError, match="does not open"):
        keyring.open(sealed, "webhook_endpoints", "secret_enc", "whk_2")
    with pytest.raises(SealError, match="does not open"):
        keyring.open(sealed, "webhook_endpoints", "prev_secret_enc", "whk_1")
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(SealError):
        keyring.open(tampered, "webhook_endpoints", "secret_enc", "whk_1")
    with pytest.raises(SealError, match="another master key"):
        _keyring(tmp_path, "b").open(sealed, "webhook_endpoints", "secret_enc", "whk_1")
    with pytest.raises(SealError, match="not a sealed value"):
        keyring.open("plain text", "webhook_endpoints", "secret_enc", "whk_1")


def test_hashes_are_keyed_and_stable(tmp_path: Path) -> None:
    a, b = _keyring(tmp_path, "a"), _keyring(tmp_path, "b")
    assert a.address_hash("bob@example.com") == a.address_hash("bob@example.com")
    assert a.address_hash("bob@example.com") != b.address_hash("bob@example.com")
    assert a.address_hash("bob@example.com") != a.address_hash("bob2@example.com")
    assert a.api_key_hash("s3cret") != b.api_key_hash("s3cret")
    # The address hash does not depend on the master key (which may be rotated).
    import dataclasses

    rotated = dataclasses.replace(a, master_key=b.master_key)
    assert rotated.address_hash("bob@example.com") == a.address_hash("bob@example.com")
    assert len(a.api_key_hash("s3cret")) == 64

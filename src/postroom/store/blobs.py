"""The blob store: raw MIME and other large objects, by key.

Keys follow seed 000 §4 (``t/{ten}/i/{idn}/m/{msg}/raw.eml``,
``t/{ten}/i/{idn}/m/{msg}/a/{att}``, ``t/{ten}/i/{idn}/out/{msg}.eml`` ...). A key is a
``/``-separated path of segments made of ``[A-Za-z0-9._-]``; ``.``/``..`` segments,
empty segments, a leading ``/`` and anything that would resolve outside the root are
refused.

:class:`BlobStore` is the seam; :class:`FilesystemBlobStore` is the default backend.
S3-compatible and in-database backends implement the same protocol.

A filesystem ``put`` is atomic and durable before it returns: write to a temporary file
in the destination folder, fsync it, rename it over the key, fsync the folder (and the
folders it had to create), so a crash leaves either the old object or the new one.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, Protocol

from postroom.errors import BlobError, BlobNotFound

MAX_KEY_LENGTH = 1024
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
_TMP_PREFIX = ".tmp-"


def check_key(key: str) -> str:
    """Return the key if it is acceptable, else raise BlobError saying why."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise BlobError(f"blob key must be 1-{MAX_KEY_LENGTH} characters")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise BlobError(f"blob key {key[:80]!r} is not a relative key")
    for segment in key.split("/"):
        if segment in ("", ".", "..") or not _SEGMENT_RE.match(segment):
            raise BlobError(f"blob key {key[:80]!r} has an invalid segment {segment[:40]!r}")
        if segment.startswith(_TMP_PREFIX):
            raise BlobError(f"blob key {key[:80]!r} uses the reserved prefix {_TMP_PREFIX!r}")
    return key


def message_raw_key(tenant_id: str, identity_id: str, message_id: str) -> str:
    return f"t/{tenant_id}/i/{identity_id}/m/{message_id}/raw.eml"


def attachment_key(tenant_id: str, identity_id: str, message_id: str, attachment_id: str) -> str:
    return f"t/{tenant_id}/i/{identity_id}/m/{message_id}/a/{attachment_id}"


def outbound_key(tenant_id: str, identity_id: str, message_id: str) -> str:
    return f"t/{tenant_id}/i/{identity_id}/out/{message_id}.eml"


class BlobStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...

    def put_chunks(self, key: str, chunks: Iterable[bytes]) -> int: ...

    def get(self, key: str) -> bytes: ...

    def open(self, key: str) -> BinaryIO: ...

    def delete(self, key: str) -> bool: ...

    def exists(self, key: str) -> bool: ...

    def check_writable(self) -> None: ...


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesystemBlobStore:
    """Blobs as files under one root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / check_key(key)).resolve()
        # A symlink inside the root could still point elsewhere; refuse what escapes.
        if not path.is_relative_to(self.root):
            raise BlobError(f"blob key {key[:80]!r} resolves outside the blob store")
        return path

    def _make_parents(self, folder: Path) -> None:
        missing: list[Path] = []
        probe = folder
        while not probe.exists():
            missing.append(probe)
            probe = probe.parent
        if not missing:
            return
        folder.mkdir(parents=True, exist_ok=True)
        # Make each new directory entry durable: fsync the folder that gained it.
        for created in reversed(missing):
            _fsync_dir(created.parent)

    def put(self, key: str, data: bytes) -> None:
        self.put_chunks(key, (data,))

    def put_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        path = self._path(key)
        try:
            self._make_parents(path.parent)
            tmp = path.with_name(f"{_TMP_PREFIX}{secrets.token_hex(8)}")
            size = 0
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "wb", closefd=False) as fh:
                    for chunk in chunks:
                        fh.write(chunk)
                        size += len(chunk)
                    fh.flush()
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            os.close(fd)
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise BlobError(f"cannot write blob {key}: {exc.strerror or exc}") from exc
        return size

    def get(self, key: str) -> bytes:
        with self.open(key) as fh:
            return fh.read()

    def open(self, key: str) -> BinaryIO:
        try:
            return self._path(key).open("rb")
        except (FileNotFoundError, IsADirectoryError):
            raise BlobNotFound(f"no blob {key}") from None

    def delete(self, key: str) -> bool:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        _fsync_dir(path.parent)
        return True

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def check_writable(self) -> None:
        """Raise BlobError unless a blob can be written and removed (readiness checks)."""
        key = f"_probe/{secrets.token_hex(8)}"
        self.put(key, b"ok")
        self.delete(key)

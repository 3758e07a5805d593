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

Many objects at once (group commit): ``put_unsynced`` writes atomically but does not
wait for the disk, and ``sync(keys)`` then makes all of them durable together — on Linux
with one ``syncfs(2)`` of the blob store's filesystem (one flush instead of three fsyncs
per object), elsewhere by fsyncing each file and each folder involved.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import stat
import sys
import threading
from collections.abc import Callable, Iterable
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

    def put_unsynced(self, key: str, data: bytes) -> None: ...

    def sync(self, keys: Iterable[str]) -> None: ...

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


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs: Callable[[int], int] = libc.syncfs
    except (OSError, AttributeError):
        return None
    return syncfs


_SYNCFS = _load_syncfs()


class FilesystemBlobStore:
    """Blobs as files under one root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        # Folders created by put_unsynced whose parents must be fsynced by sync() when
        # syncfs is not available.
        self._new_dirs: set[Path] = set()
        self._new_dirs_lock = threading.Lock()
        self._checked: set[str] = set()

    def _path(self, key: str) -> Path:
        path = self.root / check_key(key)
        # Keys cannot name "..", so only a symlink inside the root could lead out of it.
        # Folders already checked are remembered; below the first folder that does not
        # exist yet, nothing exists, and what this store creates there is no symlink.
        folder = path.parent
        unchecked: list[Path] = []
        while folder != self.root and str(folder) not in self._checked:
            unchecked.append(folder)
            folder = folder.parent
        for candidate in reversed(unchecked):
            try:
                info = os.lstat(candidate)
            except FileNotFoundError:
                return path
            if stat.S_ISLNK(info.st_mode):
                raise BlobError(f"blob key {key[:80]!r} resolves outside the blob store")
            if not stat.S_ISDIR(info.st_mode):
                raise BlobError(f"blob key {key[:80]!r} does not lead to a folder in the store")
            if len(self._checked) > 100_000:
                self._checked.clear()
            self._checked.add(str(candidate))
        if os.path.islink(path):
            raise BlobError(f"blob key {key[:80]!r} resolves outside the blob store")
        return path

    def _make_parents(self, folder: Path, *, durable: bool = True) -> list[Path]:
        """Create ``folder`` and missing ancestors; returns the folders created."""
        missing: list[Path] = []
        probe = folder
        while True:
            try:
                os.mkdir(probe, 0o700)
            except FileExistsError:
                break
            except FileNotFoundError:
                missing.append(probe)
                probe = probe.parent
                continue
            missing.append(probe)
            break
        created: list[Path] = []
        for path in reversed(missing):
            if path != probe:
                try:
                    os.mkdir(path, 0o700)
                except FileExistsError:
                    continue
            created.append(path)
        if durable:
            # Make each new directory entry durable: fsync the folder that gained it.
            for path in created:
                _fsync_dir(path.parent)
        return created

    def _write_atomically(self, path: Path, chunks: Iterable[bytes], *, durable: bool) -> int:
        tmp = path.with_name(f"{_TMP_PREFIX}{secrets.token_hex(8)}")
        size = 0
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb", closefd=False) as fh:
                for chunk in chunks:
                    fh.write(chunk)
                    size += len(chunk)
                fh.flush()
            if durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(tmp, path)
        return size

    def put(self, key: str, data: bytes) -> None:
        self.put_chunks(key, (data,))

    def put_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        try:
            path = self._path(key)
            self._make_parents(path.parent)
            size = self._write_atomically(path, chunks, durable=True)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise BlobError(f"cannot write blob {key}: {exc.strerror or exc}") from exc
        return size

    def put_unsynced(self, key: str, data: bytes) -> None:
        """Write atomically without waiting for the disk; ``sync`` makes it durable."""
        try:
            path = self._path(key)
            created = self._make_parents(path.parent, durable=False)
            self._write_atomically(path, (data,), durable=False)
        except OSError as exc:
            raise BlobError(f"cannot write blob {key}: {exc.strerror or exc}") from exc
        if created and _SYNCFS is None:
            with self._new_dirs_lock:
                self._new_dirs.update(created)

    def sync(self, keys: Iterable[str]) -> None:
        """Make objects written by ``put_unsynced`` durable, all at once."""
        paths = [self._path(key) for key in keys]
        if not paths:
            return
        try:
            if _SYNCFS is not None:
                fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    if _SYNCFS(fd) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, os.strerror(err))
                finally:
                    os.close(fd)
                return
            folders: set[Path] = set()
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                folders.add(path.parent)
            with self._new_dirs_lock:
                created, self._new_dirs = self._new_dirs, set()
            folders.update(d.parent for d in created)
            for folder in folders:
                _fsync_dir(folder)
        except OSError as exc:
            raise BlobError(f"cannot make blobs durable: {exc.strerror or exc}") from exc

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

"""The filesystem blob store: atomic durable writes, keys that cannot escape the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from postroom.errors import BlobError, BlobNotFound
from postroom.store.blobs import FilesystemBlobStore, check_key, message_raw_key


@pytest.fixture
def blobs(tmp_path: Path) -> FilesystemBlobStore:
    return FilesystemBlobStore(tmp_path / "blobs")


def test_put_get_open_exists_delete(blobs: FilesystemBlobStore) -> None:
    key = message_raw_key("ten_A", "idn_B", "msg_C")
    assert key == "t/ten_A/i/idn_B/m/msg_C/raw.eml"
    assert not blobs.exists(key)
    blobs.put(key, b"Subject: hi\r\n\r\nbody\r\n")
    assert blobs.exists(key)
    assert blobs.get(key) == b"Subject: hi\r\n\r\nbody\r\n"
    with blobs.open(key) as fh:
        assert fh.read(8) == b"Subject:"
    blobs.put(key, b"replaced")
    assert blobs.get(key) == b"replaced"
    assert blobs.delete(key)
    assert not blobs.delete(key)
    with pytest.raises(BlobNotFound):
        blobs.get(key)


def test_streamed_put_and_no_temporary_files_left(blobs: FilesystemBlobStore) -> None:
    size = blobs.put_chunks("a/b/big.bin", (bytes([n]) * 65536 for n in range(16)))
    assert size == 16 * 65536
    assert blobs.get("a/b/big.bin")[65536] == 1
    leftovers = [p for p in blobs.root.rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_a_failed_write_leaves_the_old_object(blobs: FilesystemBlobStore) -> None:
    blobs.put("k/obj", b"old")

    def chunks() -> object:
        yield b"new-partial"
        raise RuntimeError("disk went away")

    with pytest.raises(RuntimeError):
        blobs.put_chunks("k/obj", chunks())  # type: ignore[arg-type]
    assert blobs.get("k/obj") == b"old"
    assert [p.name for p in (blobs.root / "k").iterdir()] == ["obj"]


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/etc/passwd",
        "../outside",
        "a/../../outside",
        "a/./b",
        "a//b",
        "a/b/",
        "C:\\Windows\\x",
        "a\x00b",
        "a/.tmp-123",
        "spaces are bad",
        "x" * 1025,
    ],
)
def test_keys_that_could_escape_or_confuse_are_refused(
    blobs: FilesystemBlobStore, key: str
) -> None:
    with pytest.raises(BlobError):
        check_key(key)
    with pytest.raises(BlobError):
        blobs.put(key, b"x")
    assert not (blobs.root.parent / "outside").exists()


def test_a_symlink_out_of_the_root_is_refused(blobs: FilesystemBlobStore, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    blobs.root.mkdir(parents=True)
    os.symlink(outside, blobs.root / "link")
    with pytest.raises(BlobError, match="outside"):
        blobs.put("link/file", b"x")
    assert list(outside.iterdir()) == []


def test_unwritable_root_is_a_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores permissions; a file where the folder should be fails the same way.
        (tmp_path / "blobs").write_text("not a folder")
    else:
        (tmp_path / "blobs").mkdir(mode=0o500)
    store = FilesystemBlobStore(tmp_path / "blobs")
    with pytest.raises(BlobError, match="cannot write blob"):
        store.check_writable()


@pytest.mark.parametrize("use_syncfs", [True, False])
def test_unsynced_writes_become_durable_together(
    blobs: FilesystemBlobStore, monkeypatch: pytest.MonkeyPatch, use_syncfs: bool
) -> None:
    import postroom.store.blobs as module

    if not use_syncfs:
        monkeypatch.setattr(module, "_SYNCFS", None)
    elif module._SYNCFS is None:
        pytest.skip("syncfs(2) is Linux-only")
    fsynced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsynced.append(fd), real_fsync(fd))[1])
    keys = [f"t/ten_A/i/idn_B/m/msg_{n}/raw.eml" for n in range(5)]
    for n, key in enumerate(keys):
        blobs.put_unsynced(key, f"message {n}".encode())
    assert fsynced == []  # nothing waited for the disk yet
    assert blobs.get(keys[3]) == b"message 3"  # but every object is complete and readable
    blobs.sync(keys)
    if use_syncfs:
        assert fsynced == []  # one syncfs, not an fsync per file
    else:
        # Each file, each message folder, and the folder that gained them.
        assert len(fsynced) >= len(keys) * 2 + 1
    assert [blobs.get(k) for k in keys] == [f"message {n}".encode() for n in range(5)]
    assert [p for p in blobs.root.rglob(".tmp-*")] == []

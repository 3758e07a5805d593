"""What an attachment's bytes are, read from its magic numbers and container structure.

A small table of our own rather than libmagic: it is pure Python, deterministic across
machines and covers what matters for mail risk. Bytes are fed in chunks
(:class:`ByteInspector`) so a 100 MB attachment is never held whole: the inspector
keeps the first 64 KB, and for ZIP archives the last 4 MB, where the central directory
is; OLE and PDF files are searched chunk by chunk for the few names that matter
(``_VBA_PROJECT``, ``EncryptedPackage``, ``/Encrypt``).

ZIP archives are judged from the central directory only, never by decompressing:
declared sizes, the encryption flag of each entry, and entry names.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = ["ByteInspector", "ContainerFacts", "sniff_type"]

HEAD_BYTES = 64 * 1024
ZIP_TAIL_BYTES = 4 * 1024 * 1024

# Declared totals past these are not mail: a zip bomb, or an archive we will not open.
BOMB_TOTAL_BYTES = 1 << 30  # 1 GiB uncompressed in total
BOMB_RATIO = 100  # uncompressed / compressed over the archive, when the total is large
BOMB_RATIO_MIN_BYTES = 100 * 1024 * 1024
BOMB_ENTRY_RATIO = 1100  # deflate cannot exceed ~1032:1; more is another trick
BOMB_ENTRIES = 10_000

_MAGIC: tuple[tuple[int, bytes, str], ...] = (
    (0, b"%PDF-", "application/pdf"),
    (0, b"\x89PNG\r\n\x1a\n", "image/png"),
    (0, b"\xff\xd8\xff", "image/jpeg"),
    (0, b"GIF87a", "image/gif"),
    (0, b"GIF89a", "image/gif"),
    (0, b"II*\x00", "image/tiff"),
    (0, b"MM\x00*", "image/tiff"),
    (0, b"PK\x03\x04", "application/zip"),
    (0, b"PK\x05\x06", "application/zip"),
    (0, b"PK\x07\x08", "application/zip"),
    (0, b"Rar!\x1a\x07", "application/vnd.rar"),
    (0, b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
    (0, b"\x1f\x8b", "application/gzip"),
    (0, b"BZh", "application/x-bzip2"),
    (0, b"\xfd7zXZ\x00", "application/x-xz"),
    (0, b"(\xb5/\xfd", "application/zstd"),
    (0, b"MSCF", "application/vnd.ms-cab-compressed"),
    (0, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/x-ole-storage"),
    (0, b"\x7fELF", "application/x-executable"),
    (0, b"\xfe\xed\xfa\xce", "application/x-mach-binary"),
    (0, b"\xfe\xed\xfa\xcf", "application/x-mach-binary"),
    (0, b"\xce\xfa\xed\xfe", "application/x-mach-binary"),
    (0, b"\xcf\xfa\xed\xfe", "application/x-mach-binary"),
    (0, b"L\x00\x00\x00\x01\x14\x02\x00", "application/x-ms-shortcut"),
    (0, b"ITSF", "application/vnd.ms-htmlhelp"),
    (0, b"{\\rtf", "application/rtf"),
    (0, b"%!PS", "application/postscript"),
    (0, b"ID3", "audio/mpeg"),
    (0, b"OggS", "audio/ogg"),
    (0, b"fLaC", "audio/flac"),
    (0, b"wOFF", "font/woff"),
    (0, b"wOF2", "font/woff2"),
    (0, b"BEGIN:VCALENDAR", "text/calendar"),
    (0, b"BEGIN:VCARD", "text/vcard"),
    (257, b"ustar", "application/x-tar"),
)

_FTYP = {
    b"heic": "image/heic",
    b"heix": "image/heic",
    b"mif1": "image/heif",
    b"avif": "image/avif",
    b"qt  ": "video/quicktime",
    b"M4A ": "audio/mp4",
}

_OLE_NAMES = {
    "WordDocument": "application/msword",
    "Workbook": "application/vnd.ms-excel",
    "Book": "application/vnd.ms-excel",
    "PowerPoint Document": "application/vnd.ms-powerpoint",
    "__substg1.0_": "application/vnd.ms-outlook",
}
_OLE_MACRO = ("_VBA_PROJECT", "Macros")
_OLE_ENCRYPTED = ("EncryptedPackage",)


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-le")


def sniff_type(head: bytes) -> str | None:
    """The type the first bytes announce, or None when they announce nothing known."""
    for offset, magic, mime in _MAGIC:
        if head.startswith(magic, offset):
            return mime
    if head.startswith(b"MZ") and _is_pe(head):
        return "application/x-dosexec"
    if head.startswith(b"\xca\xfe\xba\xbe") and len(head) >= 8:
        # Mach-O universal binaries and Java classes share a magic; a universal binary
        # holds a handful of architectures, a class file's version is far larger.
        count = struct.unpack(">I", head[4:8])[0]
        return "application/x-mach-binary" if count < 20 else "application/java-vm"
    if head[4:8] == b"ftyp":
        return _FTYP.get(head[8:12], "video/mp4")
    if head.startswith(b"RIFF") and len(head) >= 12:
        return {b"WEBP": "image/webp", b"WAVE": "audio/wav", b"AVI ": "video/x-msvideo"}.get(
            head[8:12]
        )
    if head.startswith(b"BM") and len(head) >= 14 and head[6:10] == b"\x00\x00\x00\x00":
        return "image/bmp"
    if head.startswith((b"\xff\xfb", b"\xff\xf3", b"\xff\xf2")):
        return "audio/mpeg"
    if len(head) > 0x8005 and head[0x8001:0x8006] == b"CD001":
        return "application/x-iso9660-image"
    start = head[:1024].find(b"%PDF-")
    if start > 0:
        return "application/pdf"
    return None


def _is_pe(head: bytes) -> bool:
    if len(head) < 64:
        return len(head) >= 2 and b"This program" in head
    offset = struct.unpack("<I", head[60:64])[0]
    if offset + 4 <= len(head):
        return head[offset : offset + 4] == b"PE\x00\x00"
    return b"This program cannot be run in DOS mode" in head[:512]


@dataclass(slots=True)
class ZipEntry:
    name: str
    compressed: int
    uncompressed: int
    encrypted: bool
    offset: int


@dataclass(slots=True)
class ContainerFacts:
    """What the inspection found beyond the magic number."""

    refined_type: str | None = None
    entries: list[ZipEntry] = field(default_factory=list)
    zip_inspected: bool = False
    zip_bomb: bool = False
    encrypted_archive: bool = False
    macro: bool = False
    encrypted_document: bool = False


class ByteInspector:
    """Fed decoded bytes in order; keeps only what sniffing and risk checks need."""

    __slots__ = ("_head", "_tail", "_tail_len", "_size", "_kind", "_needles", "_found", "_carry")

    def __init__(self) -> None:
        self._head = bytearray()
        self._tail: list[bytes] = []
        self._tail_len = 0
        self._size = 0
        self._kind: str | None = None
        self._needles: dict[str, bytes] = {}
        self._found: set[str] = set()
        self._carry = b""

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._size += len(chunk)
        if len(self._head) < HEAD_BYTES:
            self._head += chunk[: HEAD_BYTES - len(self._head)]
        if self._kind is None and len(self._head) >= 16:
            self._decide()
        if self._kind == "zip":
            self._tail.append(chunk)
            self._tail_len += len(chunk)
            while self._tail and self._tail_len - len(self._tail[0]) >= ZIP_TAIL_BYTES:
                self._tail_len -= len(self._tail.pop(0))
        if self._needles:
            # Search across chunk edges: keep the end of the previous chunk.
            window = self._carry + chunk
            for name, needle in self._needles.items():
                if name not in self._found and needle in window:
                    self._found.add(name)
            self._carry = window[-64:]

    def _decide(self) -> None:
        head = bytes(self._head)
        if head.startswith(b"PK"):
            self._kind = "zip"
        elif head.startswith(b"\xd0\xcf\x11\xe0"):
            self._kind = "ole"
            names = (*_OLE_NAMES, *_OLE_MACRO, *_OLE_ENCRYPTED)
            self._needles = {name: _utf16(name) for name in names}
        elif b"%PDF-" in head[:1024]:
            self._kind = "pdf"
            self._needles = {"/Encrypt": b"/Encrypt"}
        else:
            self._kind = "other"

    @property
    def size(self) -> int:
        return self._size

    def finish(self) -> tuple[str | None, ContainerFacts]:
        """The sniffed type and the container facts."""
        head = bytes(self._head)
        if self._kind is None:
            self._decide()
            if self._needles:
                self._carry = b""
                self.feed_search_only(head)
        sniffed = sniff_type(head)
        facts = ContainerFacts()
        if self._kind == "zip":
            _inspect_zip(b"".join(self._tail), self._size, head, facts)
        elif self._kind == "ole":
            for name, mime in _OLE_NAMES.items():
                if name in self._found:
                    facts.refined_type = mime
                    break
            facts.macro = any(name in self._found for name in _OLE_MACRO)
            facts.encrypted_document = any(name in self._found for name in _OLE_ENCRYPTED)
        elif self._kind == "pdf":
            facts.encrypted_document = "/Encrypt" in self._found
        return facts.refined_type or sniffed, facts

    def feed_search_only(self, data: bytes) -> None:
        for name, needle in self._needles.items():
            if needle in data:
                self._found.add(name)


_EOCD = b"PK\x05\x06"
_CENTRAL = b"PK\x01\x02"


def _inspect_zip(tail: bytes, total: int, head: bytes, facts: ContainerFacts) -> None:
    position = tail.rfind(_EOCD)
    while position >= 0 and len(tail) - position < 22:
        position = tail.rfind(_EOCD, 0, position)
    if position < 0:
        return
    entries_total, cd_size, cd_offset = struct.unpack("<10xHII", tail[position : position + 20])
    if entries_total == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        locator = tail.rfind(b"PK\x06\x06", 0, position)
        if locator >= 0 and locator + 56 <= len(tail):
            entries_total, cd_size, cd_offset = struct.unpack(
                "<QQQ", tail[locator + 32 : locator + 56]
            )
            position = locator
    if entries_total > BOMB_ENTRIES:
        facts.zip_bomb = True
    # The directory ends where the end record starts; data prepended to the archive
    # (self-extractors) shifts the recorded offset, so measure back from the end record.
    cd_start = position - cd_size
    if cd_start < 0:
        return
    facts.zip_inspected = True
    entries = facts.entries
    cursor = cd_start
    while (
        cursor + 46 <= position
        and tail.startswith(_CENTRAL, cursor)
        and len(entries) <= BOMB_ENTRIES
    ):
        (flags, compressed, uncompressed, name_len, extra_len, comment_len, local) = struct.unpack(
            "<8xH10xIIHHH8xI", tail[cursor : cursor + 46]
        )
        name = tail[cursor + 46 : cursor + 46 + name_len].decode("utf-8", "replace")
        extra = tail[cursor + 46 + name_len : cursor + 46 + name_len + extra_len]
        if 0xFFFFFFFF in (compressed, uncompressed, local):
            uncompressed, compressed, local = _zip64_sizes(extra, uncompressed, compressed, local)
        entries.append(ZipEntry(name, compressed, uncompressed, bool(flags & 1), local))
        cursor += 46 + name_len + extra_len + comment_len
    _judge_zip(facts, total)
    _refine_zip_type(facts, head)


def _zip64_sizes(
    extra: bytes, uncompressed: int, compressed: int, local: int
) -> tuple[int, int, int]:
    cursor = 0
    while cursor + 4 <= len(extra):
        tag, size = struct.unpack("<HH", extra[cursor : cursor + 4])
        if tag == 0x0001:
            values = extra[cursor + 4 : cursor + 4 + size]
            fields = [
                struct.unpack("<Q", values[i : i + 8])[0] for i in range(0, len(values) - 7, 8)
            ]
            index = 0
            if uncompressed == 0xFFFFFFFF and index < len(fields):
                uncompressed, index = fields[index], index + 1
            if compressed == 0xFFFFFFFF and index < len(fields):
                compressed, index = fields[index], index + 1
            if local == 0xFFFFFFFF and index < len(fields):
                local = fields[index]
            break
        cursor += 4 + size
    return uncompressed, compressed, local


def _judge_zip(facts: ContainerFacts, archive_size: int) -> None:
    entries = facts.entries
    total = sum(entry.uncompressed for entry in entries)
    facts.encrypted_archive = any(entry.encrypted for entry in entries)
    if total > BOMB_TOTAL_BYTES:
        facts.zip_bomb = True
    if total > BOMB_RATIO_MIN_BYTES and total > BOMB_RATIO * max(archive_size, 1):
        facts.zip_bomb = True
    for entry in entries:
        if entry.uncompressed > 10 * 1024 * 1024 and entry.uncompressed > BOMB_ENTRY_RATIO * max(
            entry.compressed, 1
        ):
            facts.zip_bomb = True
    # Overlapping entries (many directory records pointing at one compressed stream)
    # are how non-recursive zip bombs reach ratios of millions.
    offsets = [entry.offset for entry in entries]
    if len(offsets) > 1 and len(set(offsets)) < len(offsets):
        facts.zip_bomb = True
    facts.macro = any(entry.name.lower().endswith("vbaproject.bin") for entry in entries)


def _refine_zip_type(facts: ContainerFacts, head: bytes) -> None:
    names = {entry.name for entry in facts.entries}
    lowered = {name.lower() for name in names}
    if head.startswith(b"PK\x03\x04") and head[30:38] == b"mimetype" and head[8:10] == b"\x00\x00":
        extra = struct.unpack("<H", head[28:30])[0]
        size = struct.unpack("<I", head[18:22])[0]
        start = 30 + 8 + extra
        declared = head[start : start + min(size, 100)].decode("ascii", "replace").strip()
        if declared.startswith("application/"):
            facts.refined_type = declared
            return
    if "[Content_Types].xml" in names:
        if any(name.startswith("word/") for name in names):
            facts.refined_type = (
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
            )
        elif any(name.startswith("xl/") for name in names):
            facts.refined_type = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
        elif any(name.startswith("ppt/") for name in names):
            facts.refined_type = (
                "application/vnd.openxmlformats-officedocument.presentationml.presentation"
            )
    elif "androidmanifest.xml" in lowered and "classes.dex" in lowered:
        facts.refined_type = "application/vnd.android.package-archive"
    elif "meta-inf/manifest.mf" in lowered:
        facts.refined_type = "application/java-archive"

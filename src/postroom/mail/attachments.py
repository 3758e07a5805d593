"""Attachment metadata: safe file names, sniffed types, digests and risk.

Bytes are decoded in chunks (:func:`postroom.mail.mime.iter_decoded`) and fed to a
SHA-256 and a :class:`~postroom.mail.sniff.ByteInspector` at once, so the size and digest
of the decoded payload are exact while memory stays near one chunk. Attachment bytes are
not copied out of the message: :func:`extract_part` re-decodes one part from the stored
raw MIME by its part path (docs/adr/0006-attachment-bytes.md).

Risk, one value per attachment, the most serious first:

========================  ==============================================================
``executable``            PE/ELF/Mach-O/shortcut/JAR/APK by magic, a name Windows or a
                          shell would run (.exe .scr .bat .js .vbs .lnk ...), an
                          executable MIME type, or an archive listing such a name
``macro``                 .docm/.xlsm/..., OOXML with vbaProject.bin, OLE with VBA storage
``archive_bomb``          ZIP whose central directory declares over 1 GiB, over 100:1 for
                          the archive, an entry over 1,100:1, over 10,000 entries, or
                          overlapping entries (nothing is decompressed)
``encrypted_archive``     ZIP with an encrypted entry
``encrypted_document``    PDF with /Encrypt, OLE EncryptedPackage (password OOXML)
``type_mismatch``         declared type or file-name extension of another family than
                          the sniffed bytes
========================  ==============================================================
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator

from postroom.mail.headers import decode_words, fold_whitespace, parse_params
from postroom.mail.message import MAX_MESSAGE_ID_OCTETS, AttachmentInfo
from postroom.mail.mime import MimePart, iter_decoded, parse_tree
from postroom.mail.sniff import ByteInspector, ContainerFacts

__all__ = [
    "describe_part",
    "extract_part",
    "iter_part_bytes",
    "part_filename",
    "risk_of",
    "sanitize_filename",
]

MAX_FILENAME_BYTES = 255

_EXECUTABLE_EXTENSIONS = frozenset(
    [
        "exe",
        "scr",
        "com",
        "pif",
        "bat",
        "cmd",
        "cpl",
        "dll",
        "sys",
        "msi",
        "msp",
        "mst",
        "msc",
        "js",
        "jse",
        "vbs",
        "vbe",
        "wsf",
        "wsh",
        "wsc",
        "hta",
        "ps1",
        "ps1xml",
        "psm1",
        "psd1",
        "lnk",
        "reg",
        "scf",
        "inf",
        "jar",
        "apk",
        "app",
        "gadget",
        "chm",
        "application",
        "appref-ms",
        "action",
        "workflow",
        "command",
        "sh",
        "bash",
        "csh",
        "ksh",
        "run",
        "elf",
        "xll",
        "iqy",
        "slk",
        "url",
    ]
)
_MACRO_EXTENSIONS = frozenset(
    ["docm", "dotm", "xlsm", "xltm", "xlam", "pptm", "potm", "ppam", "ppsm", "sldm"]
)
_EXECUTABLE_TYPES = frozenset(
    {
        "application/x-dosexec",
        "application/x-msdownload",
        "application/x-msdos-program",
        "application/x-executable",
        "application/x-mach-binary",
        "application/x-ms-shortcut",
        "application/java-archive",
        "application/vnd.android.package-archive",
        "application/x-sharedlib",
        "application/hta",
    }
)
# Windows device names: a file called CON or NUL.txt cannot be saved there.
_RESERVED = frozenset(
    ["con", "prn", "aux", "nul"]
    + [f"com{i}" for i in range(1, 10)]
    + [f"lpt{i}" for i in range(1, 10)]
)
# Controls, and the bidirectional overrides that make "exe.pdf" read as "fdp.exe".
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")

_EXTENSION_TYPES = {
    "pdf": "application/pdf",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
    "tif": "image/tiff",
    "tiff": "image/tiff",
    "heic": "image/heic",
    "doc": "application/msword",
    "xls": "application/vnd.ms-excel",
    "ppt": "application/vnd.ms-powerpoint",
    "msg": "application/vnd.ms-outlook",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "odt": "application/vnd.oasis.opendocument.text",
    "ods": "application/vnd.oasis.opendocument.spreadsheet",
    "zip": "application/zip",
    "rar": "application/vnd.rar",
    "7z": "application/x-7z-compressed",
    "gz": "application/gzip",
    "tgz": "application/gzip",
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "mp4": "video/mp4",
    "mov": "video/quicktime",
    "rtf": "application/rtf",
}


def sanitize_filename(name: str | None) -> str | None:
    """A file name safe to show and to save: last path component, no controls, <= 255
    bytes of UTF-8 (the extension kept when cutting), None when nothing is left."""
    if not name:
        return None
    name = unicodedata.normalize("NFC", name)
    name = _UNSAFE.sub("", name)
    # Any path: POSIX, Windows (C:\..., \\server\share) or a drive-relative "C:name".
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    if len(name) >= 2 and name[1] == ":" and name[0].isalpha():
        name = name[2:]
    name = fold_whitespace(name).strip(" .")
    if not name:
        return None
    stem, dot, extension = name.rpartition(".")
    if not dot:
        stem, extension = name, ""
    if stem.lower() in _RESERVED or name.lower() in _RESERVED:
        name = "_" + name
        stem = "_" + stem
    if len(name.encode("utf-8")) > MAX_FILENAME_BYTES:
        suffix = ("." + extension) if dot and len(extension.encode("utf-8")) <= 16 else ""
        budget = MAX_FILENAME_BYTES - len(suffix.encode("utf-8"))
        base = stem if suffix else name
        base = base.encode("utf-8")[:budget].decode("utf-8", "ignore")
        name = base + suffix
    return name or None


def part_filename(part: MimePart) -> str | None:
    """The file name a part declares (Content-Disposition, then Content-Type name)."""
    raw: str | None = None
    disposition = part.headers.get_last("content-disposition")
    if disposition and ";" in disposition:
        params = parse_params(disposition.split(";", 1)[1])
        raw = params.get("filename") or params.get("name")
    if not raw:
        raw = part.params.get("name")
    if not raw:
        return None
    return sanitize_filename(decode_words(raw))


def _extension(filename: str | None) -> str:
    if not filename or "." not in filename:
        return ""
    return filename.rsplit(".", 1)[1].lower()


def _family(mime: str | None) -> str | None:
    """A coarse family for comparing types; None for 'could be anything'."""
    if not mime:
        return None
    if mime in _EXECUTABLE_TYPES:
        return "executable"
    if mime.startswith(("image/", "audio/", "video/", "font/")):
        return mime.split("/", 1)[0]
    if mime == "application/pdf":
        return "pdf"
    if mime.startswith(("application/vnd.openxmlformats", "application/vnd.oasis")) or mime in (
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
        "application/vnd.ms-outlook",
        "application/x-ole-storage",
        "application/epub+zip",
    ):
        return "document"
    if mime in ("application/zip", "application/x-zip-compressed", "application/x-zip"):
        return "zip"
    if mime in (
        "application/vnd.rar",
        "application/x-rar-compressed",
        "application/x-7z-compressed",
        "application/gzip",
        "application/x-gzip",
        "application/x-bzip2",
        "application/x-xz",
        "application/x-tar",
        "application/zstd",
    ):
        return "archive:" + mime
    return None


def _compatible(declared: str | None, sniffed: str | None) -> bool:
    a, b = _family(declared), _family(sniffed)
    if a is None or b is None or a == b:
        return True
    # Office files are ZIP (OOXML, ODF) or OLE containers; a plain-ZIP sniff of a
    # document is normal, and mail clients label one as the other.
    return {a, b} <= {"document", "zip"}


def risk_of(
    declared: str,
    sniffed: str | None,
    filename: str | None,
    facts: ContainerFacts,
) -> str | None:
    """The most serious risk of an attachment, or None."""
    extension = _extension(filename)
    archived_executable = any(
        _extension(entry.name.rsplit("/", 1)[-1]) in _EXECUTABLE_EXTENSIONS
        for entry in facts.entries
    )
    if (
        _family(sniffed) == "executable"
        or extension in _EXECUTABLE_EXTENSIONS
        or declared in _EXECUTABLE_TYPES
        or archived_executable
    ):
        return "executable"
    if facts.macro or extension in _MACRO_EXTENSIONS:
        return "macro"
    if facts.zip_bomb:
        return "archive_bomb"
    if facts.encrypted_archive:
        return "encrypted_archive"
    if facts.encrypted_document:
        return "encrypted_document"
    if sniffed is not None and (
        not _compatible(declared, sniffed)
        or not _compatible(_EXTENSION_TYPES.get(extension), sniffed)
    ):
        return "type_mismatch"
    return None


def _content_id(part: MimePart) -> str | None:
    value = part.headers.get("content-id")
    if not value:
        return None
    value = "".join(value.split()).strip("<>")
    if not value or len(value.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_ID_OCTETS:
        return None
    return value


def describe_part(part: MimePart, sink: bytearray | None = None) -> AttachmentInfo:
    """Stream one part's decoded bytes through the digest and the inspector.

    ``sink``, when given, receives the decoded bytes too (for :func:`extract_part`).
    """
    digest = hashlib.sha256()
    inspector = ByteInspector()
    for chunk in iter_decoded(part):
        digest.update(chunk)
        inspector.feed(chunk)
        if sink is not None:
            sink += chunk
    sniffed, facts = inspector.finish()
    filename = part_filename(part)
    declared = part.content_type
    return AttachmentInfo(
        part_path=part.path,
        filename=filename,
        content_type=declared,
        sniffed_type=sniffed,
        size=inspector.size,
        sha256=digest.hexdigest(),
        disposition=part.disposition,
        content_id=_content_id(part),
        risk=risk_of(declared, sniffed, filename, facts),
    )


def extract_part(
    raw: bytes, part_path: str, expected_sha256: str | None = None
) -> tuple[bytes, AttachmentInfo | None]:
    """The decoded bytes of one part of a stored message, and its metadata.

    With ``expected_sha256``, a part whose digest differs is looked for elsewhere in the
    tree (a later parser version may number malformed structures differently); when no
    part matches, ``(b"", None)`` is returned. An unknown path gives ``(b"", None)``.
    """
    tree = parse_tree(raw)
    part = tree.find(part_path)
    if part is not None:
        sink = bytearray()
        info = describe_part(part, sink)
        if expected_sha256 is None or info.sha256 == expected_sha256:
            return bytes(sink), info
    if expected_sha256 is not None:
        for candidate in tree.root.walk_all():
            if candidate.is_multipart:
                continue
            sink = bytearray()
            info = describe_part(candidate, sink)
            if info.sha256 == expected_sha256:
                return bytes(sink), info
    return b"", None


def iter_part_bytes(raw: bytes, part_path: str) -> Iterator[bytes] | None:
    """The decoded bytes of one part in chunks, for streaming a download; None when
    the path names no part."""
    part = parse_tree(raw).find(part_path)
    if part is None:
        return None
    return iter_decoded(part)

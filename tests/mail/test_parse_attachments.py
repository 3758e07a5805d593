"""Attachments: file names, sniffed types, risk, digests and re-extraction by part path."""

from __future__ import annotations

import base64
import hashlib
import io
import struct
import zipfile
from pathlib import Path

import pytest

from postroom.mail.attachments import extract_part, iter_part_bytes, sanitize_filename
from postroom.mail.parse import parse_message
from postroom.mail.sniff import sniff_type

DATA = Path(__file__).parents[1] / "data" / "mail"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        ("C:\\Windows\\System32\\evil.exe", "evil.exe"),
        ("C:evil.exe", "evil.exe"),
        ("\\\\server\\share\\x.doc", "x.doc"),
        ("a\x00b.txt", "ab.txt"),
        ("bell\x07name.txt", "bellname.txt"),
        ("invoice\u202egnp.exe", "invoicegnp.exe"),  # right-to-left override
        ("..", None),
        (".", None),
        ("", None),
        ("   ", None),
        (None, None),
        ("name.", "name"),
        (".hidden", "hidden"),
        ("CON.txt", "_CON.txt"),
        ("nul", "_nul"),
        ("e\u0301.txt", "é.txt"),  # NFC
        ("  spaced   name .txt ", "spaced name .txt"),
    ],
)
def test_filename_sanitising(name: str | None, expected: str | None) -> None:
    assert sanitize_filename(name) == expected


@pytest.mark.parametrize("name", ["x" * 300 + ".pdf", "é" * 200 + ".txt", "日本" * 100])
def test_long_filenames_are_cut_to_255_bytes(name: str) -> None:
    cleaned = sanitize_filename(name)
    assert cleaned is not None
    assert len(cleaned.encode("utf-8")) <= 255
    if "." in name:
        assert cleaned.endswith(name.rsplit(".", 1)[1])


# Building blocks for the risk table ------------------------------------------------


def _pe() -> bytes:
    header = bytearray(b"MZ" + bytes(62))
    header[60:64] = struct.pack("<I", 64)
    return bytes(header) + b"PE\x00\x00" + bytes(64)


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def _encrypted_zip() -> bytes:
    data = bytearray(_zip({"secret.txt": b"secret"}))
    # Set the "encrypted" flag in the local header and in the central directory record.
    data[6] |= 1
    central = data.find(b"PK\x01\x02")
    data[central + 8] |= 1
    return bytes(data)


def _declared_bomb() -> bytes:
    data = bytearray(_zip({"a.txt": b"a" * 1000}))
    central = data.find(b"PK\x01\x02")
    data[central + 24 : central + 28] = struct.pack("<I", 0xFFFFFFF0)  # ~4 GiB declared
    return bytes(data)


def _overlapping_bomb() -> bytes:
    data = bytearray(_zip({"a.txt": b"a" * 1000, "b.txt": b"b" * 1000}))
    second = data.find(b"PK\x01\x02", data.find(b"PK\x01\x02") + 4)
    data[second + 42 : second + 46] = struct.pack("<I", 0)  # points at the first entry
    return bytes(data)


def _ooxml(macro: bool) -> bytes:
    entries = {"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w:document/>"}
    if macro:
        entries["word/vbaProject.bin"] = b"\xd0\xcf\x11\xe0"
    return _zip(entries)


def _ole(*names: str) -> bytes:
    return (
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
        + bytes(504)
        + b"".join(name.encode("utf-16-le") + bytes(16) for name in names)
    )


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


RISKS = [
    ("plain text", "text/plain", "notes.txt", b"hello", None, None),
    ("png", "image/png", "a.png", PNG, "image/png", None),
    ("png declared jpeg: one family", "image/jpeg", "a.jpg", PNG, "image/png", None),
    ("pe by magic", "application/octet-stream", "update.bin", _pe(), "application/x-dosexec",
     "executable"),
    ("pe declared as text", "text/plain", "readme.txt", _pe(), "application/x-dosexec",
     "executable"),
    ("elf", "application/octet-stream", "tool", b"\x7fELF\x02\x01\x01" + bytes(57),
     "application/x-executable", "executable"),
    ("mach-o", "application/octet-stream", "tool", b"\xcf\xfa\xed\xfe" + bytes(60),
     "application/x-mach-binary", "executable"),
    ("exe by name", "application/octet-stream", "setup.exe", b"data", None, "executable"),
    ("scr by name", "application/octet-stream", "photo.scr", b"data", None, "executable"),
    ("js by name", "text/plain", "invoice.js", b"WScript.Run()", None, "executable"),
    ("vbs by name", "text/plain", "x.vbs", b"MsgBox 1", None, "executable"),
    ("bat by name", "text/plain", "run.bat", b"@echo off", None, "executable"),
    ("double extension", "application/pdf", "invoice.pdf.exe", b"%PDF-1.4", "application/pdf",
     "executable"),
    ("zip holding an exe", "application/zip", "files.zip", _zip({"setup.exe": b"MZ"}),
     "application/zip", "executable"),
    ("docm by name", DOCX, "report.docm", _ooxml(macro=False), DOCX, "macro"),
    ("ooxml with vbaProject.bin", DOCX, "report.docx", _ooxml(macro=True), DOCX, "macro"),
    ("ole with a vba project", "application/msword", "old.doc",
     _ole("WordDocument", "_VBA_PROJECT"), "application/msword", "macro"),
    ("clean docx", DOCX, "report.docx", _ooxml(macro=False), DOCX, None),
    ("docx labelled msword", "application/msword", "report.doc", _ooxml(macro=False), DOCX, None),
    ("encrypted zip", "application/zip", "secret.zip", _encrypted_zip(), "application/zip",
     "encrypted_archive"),
    ("declared 4 GiB", "application/zip", "big.zip", _declared_bomb(), "application/zip",
     "archive_bomb"),
    ("overlapping entries", "application/zip", "o.zip", _overlapping_bomb(), "application/zip",
     "archive_bomb"),
    ("clean zip", "application/zip", "a.zip", _zip({"a.txt": b"hello"}), "application/zip", None),
    ("encrypted pdf", "application/pdf", "locked.pdf",
     b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\ntrailer\n<< /Encrypt 5 0 R >>\n%%EOF",
     "application/pdf", "encrypted_document"),
    ("password ooxml", DOCX, "locked.docx", _ole("EncryptionInfo", "EncryptedPackage"),
     "application/x-ole-storage", "encrypted_document"),
    ("pdf declared, png inside", "application/pdf", "doc.pdf", PNG, "image/png", "type_mismatch"),
    ("jpg name, zip inside", "application/octet-stream", "photo.jpg", _zip({"a": b"b"}),
     "application/zip", "type_mismatch"),
    ("generic type, pdf inside", "application/octet-stream", "file", b"%PDF-1.4\n",
     "application/pdf", None),
]  # fmt: skip


def _with_attachment(content_type: str, filename: str, payload: bytes) -> bytes:
    encoded = base64.encodebytes(payload)
    return (
        b"From: a@example.com\r\nMessage-ID: <att@example.com>\r\n"
        b"Content-Type: multipart/mixed; boundary=B\r\n\r\n"
        b"--B\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n"
        b"--B\r\nContent-Type: " + content_type.encode() + b"\r\n"
        b'Content-Disposition: attachment; filename="' + filename.encode() + b'"\r\n'
        b"Content-Transfer-Encoding: base64\r\n\r\n" + encoded + b"--B--\r\n"
    )


@pytest.mark.parametrize(
    ("case", "content_type", "filename", "payload", "sniffed", "risk"),
    RISKS,
    ids=[case[0] for case in RISKS],
)
def test_attachment_risk(
    case: str,
    content_type: str,
    filename: str,
    payload: bytes,
    sniffed: str | None,
    risk: str | None,
) -> None:
    parsed = parse_message(_with_attachment(content_type, filename, payload))
    (attachment,) = parsed.attachments
    assert attachment.content_type == content_type
    assert attachment.sniffed_type == sniffed
    assert attachment.risk == risk
    assert attachment.size == len(payload)
    assert attachment.sha256 == hashlib.sha256(payload).hexdigest()
    assert attachment.part_path == "2"


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (b"GIF89a", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"\x00\x00\x00\x18ftypheic", "image/heic"),
        (b"\x00\x00\x00\x18ftypisom", "video/mp4"),
        (b"Rar!\x1a\x07\x01\x00", "application/vnd.rar"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04", "application/x-7z-compressed"),
        (b"\x1f\x8b\x08\x00", "application/gzip"),
        (b"{\\rtf1\\ansi", "application/rtf"),
        (b"\xca\xfe\xba\xbe\x00\x00\x00\x02", "application/x-mach-binary"),
        (b"\xca\xfe\xba\xbe\x00\x00\x00\x34", "application/java-vm"),
        (b"just some text", None),
    ],
)
def test_sniffing(head: bytes, mime: str | None) -> None:
    assert sniff_type(head) == mime


def test_fixture_attachments() -> None:
    raw = (DATA / "attachments.eml").read_bytes()
    parsed = parse_message(raw)
    chart, invoice, program = parsed.attachments
    assert (chart.part_path, chart.disposition, chart.content_id) == (
        "1.2",
        "inline",
        "chart@example.com",
    )
    assert chart.sniffed_type == "image/png"
    assert invoice.filename == "Rechnung März.pdf"
    assert invoice.sniffed_type == "application/pdf"
    assert program.filename == "report.exe"
    assert program.risk == "executable"
    assert parsed.html is not None and 'src="cid:chart@example.com"' in parsed.html


def test_extract_part_returns_the_decoded_bytes() -> None:
    raw = (DATA / "attachments.eml").read_bytes()
    parsed = parse_message(raw)
    for info in parsed.attachments:
        data, again = extract_part(raw, info.part_path)
        assert again == info
        assert hashlib.sha256(data).hexdigest() == info.sha256
        streamed = iter_part_bytes(raw, info.part_path)
        assert streamed is not None
        assert b"".join(streamed) == data
    assert extract_part(raw, "9.9") == (b"", None)
    assert iter_part_bytes(raw, "9.9") is None


def test_extract_part_finds_a_moved_part_by_its_digest() -> None:
    raw = (DATA / "attachments.eml").read_bytes()
    invoice = parse_message(raw).attachments[1]
    data, info = extract_part(raw, "3", expected_sha256=invoice.sha256)
    assert info is not None and info.part_path == invoice.part_path
    assert hashlib.sha256(data).hexdigest() == invoice.sha256
    assert extract_part(raw, "2", expected_sha256="0" * 64) == (b"", None)


def test_attached_message_parts_are_numbered_under_it() -> None:
    inner = (
        b"From: b@example.com\r\nContent-Type: multipart/mixed; boundary=I\r\n\r\n"
        b"--I\r\nContent-Type: text/plain\r\n\r\ninner text\r\n"
        b"--I\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=in.pdf"
        b"\r\n\r\n%PDF-1.4\r\n--I--\r\n"
    )
    raw = (
        b"From: a@example.com\r\nMessage-ID: <fwd@example.com>\r\n"
        b"Content-Type: multipart/mixed; boundary=O\r\n\r\n"
        b"--O\r\nContent-Type: text/plain\r\n\r\nforwarding\r\n"
        b"--O\r\nContent-Type: message/rfc822\r\n\r\n" + inner + b"\r\n--O--\r\n"
    )
    parsed = parse_message(raw)
    (attached,) = parsed.attachments
    assert attached.content_type == "message/rfc822"
    assert attached.part_path == "2"
    data, _ = extract_part(raw, "2.2")
    assert data == b"%PDF-1.4"
    data, _ = extract_part(raw, "2.1")
    assert data == b"inner text"

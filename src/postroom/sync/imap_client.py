"""A bounded IMAP4rev1 client that a hostile or broken server cannot hurt.

The stdlib ``imaplib`` reads a literal ``{N}`` with ``read(N)`` for any N, so one line
``{4294967295}`` makes it try to allocate 4 GB. This client owns its wire instead: a
socket with its own buffer, where every line is cut at :data:`MAX_LINE` bytes, every
literal is checked against ``max_literal`` *before* a byte of it is read, and every
command's whole response against a budget. A breach closes the connection and raises.

Long results stay under the line bound by construction: ``UID SEARCH`` runs over UID
windows (a window of 5,000 UIDs prints at most ~55 KB), and message bodies are fetched
in batches of at most :data:`BODY_BATCH_BYTES`.

The exception tree (every error has a stable ``code`` and a ``transient`` flag)::

    ImapError                 timeout, connection_lost, command_failed, move_unsupported,
    │                         qresync_unavailable, closed, rejected, ... (base)
    ├── ImapAuthError         auth_failed
    ├── ImapTlsError          tls_failed
    ├── ImapUnreachable       unreachable (DNS, refused, timeout while connecting; a
    │                         server answering [UNAVAILABLE], RFC 5530)
    ├── ImapThrottled         throttled: [LIMIT] (RFC 5530; Dovecot's per-user connection
    │                         limit) or [THROTTLED] (Gmail) on any command
    ├── ImapProtocolError     literal_too_large, malformed_literal, line_too_long,
    │                         response_too_large, bad_response
    └── ImapNoSuchFolder      folder_missing
"""

from __future__ import annotations

import base64
import contextlib
import re
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Literal, TypeAlias

from postroom.errors import PostroomError

__all__ = [
    "BODY_BATCH_BYTES",
    "MAX_LINE",
    "FetchedMessage",
    "FlagUpdate",
    "FolderInfo",
    "FolderStatus",
    "ImapAuthError",
    "ImapClient",
    "ImapError",
    "ImapNoSuchFolder",
    "ImapProtocolError",
    "ImapThrottled",
    "ImapTlsError",
    "ImapUnreachable",
    "decode_mutf7",
    "encode_mutf7",
]

MAX_LINE = 64 << 10
BODY_BATCH_BYTES = 32 << 20
# Beyond the largest literal, what one command's response may add (FETCH FLAGS over a
# million messages is ~80 MB); past it the server is streaming garbage at us.
_RESPONSE_SLACK = 256 << 20
_RECV_SIZE = 256 << 10
_META_CHUNK = 500
_MAX_SET_MEMBERS = 10_000_000
_SPECIAL_USE = ("\\All", "\\Archive", "\\Drafts", "\\Flagged", "\\Junk", "\\Sent", "\\Trash")
_TRANSIENT = frozenset({"timeout", "connection_lost", "unreachable", "rejected", "throttled"})
# Response codes that say "not now" rather than "no": a server refusing LOGIN with one of
# them has not judged the credentials.
_THROTTLE_CODES = frozenset({"LIMIT", "THROTTLED"})


class ImapError(PostroomError):
    """An IMAP operation failed; ``code`` says how, ``transient`` whether to retry later,
    ``answered`` whether the server refused the command with a tagged NO or BAD (so its
    outcome is known: a refused COPY or MOVE placed nothing) rather than the answer being
    lost or unreadable."""

    code = "imap_error"

    def __init__(
        self,
        code: str | None = None,
        detail: str = "",
        *,
        transient: bool | None = None,
        answered: bool = False,
    ) -> None:
        code = code or type(self).code
        super().__init__(f"{code}: {detail}" if detail else code, code=code)
        self.detail = detail
        self.transient = code in _TRANSIENT if transient is None else transient
        self.answered = answered


class ImapAuthError(ImapError):
    code = "auth_failed"


class ImapTlsError(ImapError):
    code = "tls_failed"


class ImapUnreachable(ImapError):
    code = "unreachable"


class ImapThrottled(ImapError):
    code = "throttled"


class ImapProtocolError(ImapError):
    code = "bad_response"


class ImapNoSuchFolder(ImapError):
    code = "folder_missing"


@dataclass(frozen=True)
class FolderInfo:
    name: str
    delimiter: str | None
    flags: frozenset[str]
    special_use: str | None
    selectable: bool


@dataclass(frozen=True)
class FolderStatus:
    name: str
    uidvalidity: int
    uidnext: int | None
    exists: int
    highestmodseq: int | None


@dataclass(frozen=True)
class FetchedMessage:
    uid: int
    flags: frozenset[str]
    size: int
    raw: bytes | None  # None when over the caller's size ceiling (envelope only)
    modseq: int | None
    internaldate_ms: int | None


@dataclass(frozen=True)
class FlagUpdate:
    uid: int
    flags: frozenset[str]
    modseq: int | None


# --- modified UTF-7 (RFC 3501 section 5.1.3) -------------------------------------------


def encode_mutf7(name: str) -> str:
    """A folder name as IMAP writes it on the wire."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            data = "".join(run).encode("utf-16-be")
            out.append("&" + base64.b64encode(data).decode().rstrip("=").replace("/", ",") + "-")
            run.clear()

    for char in name:
        if 0x20 <= ord(char) <= 0x7E:
            flush()
            out.append("&-" if char == "&" else char)
        else:
            run.append(char)
    flush()
    return "".join(out)


_MUTF7_RUN = re.compile(r"&([^-]*)-")


def decode_mutf7(name: str) -> str:
    """A wire folder name decoded; a name that is not valid modified UTF-7 stays as is."""

    def one(match: re.Match[str]) -> str:
        body = match.group(1)
        if not body:
            return "&"
        data = body.replace(",", "/")
        data += "=" * (-len(data) % 4)
        return base64.b64decode(data, validate=True).decode("utf-16-be")

    try:
        return _MUTF7_RUN.sub(one, name)
    except (ValueError, UnicodeDecodeError):
        return name


# --- the wire: a socket with a bounded buffer ------------------------------------------


class _Wire:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(_RECV_SIZE)
        except TimeoutError as exc:
            raise ImapError("timeout", "the server did not answer in time") from exc
        except OSError as exc:
            raise ImapError("connection_lost", str(exc)) from exc
        if not chunk:
            raise ImapError("connection_lost", "the server closed the connection")
        self.buf += chunk

    def readline(self) -> bytes:
        start = 0
        while True:
            end = self.buf.find(b"\n", start, MAX_LINE + 1)
            if end >= 0:
                line = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                return line
            if len(self.buf) > MAX_LINE:
                raise ImapProtocolError("line_too_long", f"a response line over {MAX_LINE} bytes")
            start = len(self.buf)
            self._fill()

    def read(self, size: int) -> bytes:
        while len(self.buf) < size:
            self._fill()
        with memoryview(self.buf) as view:
            data = bytes(view[:size])
        del self.buf[:size]
        return data

    def readable_within(self, seconds: float) -> bool:
        if self.buf:
            return True
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        ready, _, _ = select.select([self.sock], [], [], max(0.0, seconds))
        return bool(ready)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise ImapError("timeout", "the server did not accept data in time") from exc
        except OSError as exc:
            raise ImapError("connection_lost", str(exc)) from exc


# --- responses and their tokens ---------------------------------------------------------

_Value: TypeAlias = bytes | None | list["_Value"]
_LITERAL_TAIL = re.compile(rb"\{([^{}]*)\}$")
_LITERAL_SIZE = re.compile(rb"[0-9]+")
# What a literal size was meant to be: empty, signed, or starting with a digit.
_NUMERIC_ISH = re.compile(rb"(?:[-+\s]|[0-9]).*|", re.DOTALL)
_CODE = re.compile(rb"\[([^\]]*)\]")


def _bad(detail: str) -> ImapProtocolError:
    return ImapProtocolError("bad_response", detail)


@dataclass
class _Response:
    """One server response: ``kind`` is ``+``, ``*`` or the tag; literals cut the text."""

    kind: str
    texts: list[bytes]
    literals: list[bytes] = field(default_factory=list)
    number: int | None = None
    word: str = ""
    # Where the data after ``word`` begins in texts[0].
    offset: int = 0

    def parser(self) -> _Parser:
        return _Parser(self.texts, self.literals, self.offset)

    def code(self) -> tuple[str, bytes]:
        """The response code of a status response (``[APPENDUID 1 2]`` → APPENDUID, args)."""
        match = _CODE.match(self.texts[0], self.offset)
        if match is None:
            return "", b""
        name, _, args = match.group(1).partition(b" ")
        return name.decode("ascii", "replace").upper(), args

    def text(self) -> str:
        return self.texts[0][self.offset :].decode("utf-8", "replace")[:200]


class _Parser:
    def __init__(self, texts: list[bytes], literals: list[bytes], offset: int = 0) -> None:
        self.texts = texts
        self.literals = literals
        self.k = 0
        self.pos = offset

    def _skip(self) -> None:
        text = self.texts[self.k]
        while self.pos < len(text) and text[self.pos] == 0x20:
            self.pos += 1

    def at_end(self) -> bool:
        self._skip()
        return self.pos >= len(self.texts[self.k]) and self.k >= len(self.literals)

    def _at_list_end(self) -> bool:
        self._skip()
        text = self.texts[self.k]
        return self.pos < len(text) and text[self.pos] == 0x29

    def value(self, depth: int = 0) -> _Value:
        if depth > 32:
            raise _bad("lists nested too deep")
        self._skip()
        text = self.texts[self.k]
        if self.pos >= len(text):
            if self.k < len(self.literals):
                literal = self.literals[self.k]
                self.k += 1
                self.pos = 0
                return literal
            raise _bad("a response ended early")
        char = text[self.pos]
        if char == 0x28:  # (
            self.pos += 1
            items: list[_Value] = []
            while not self._at_list_end():
                items.append(self.value(depth + 1))
            self.pos += 1
            return items
        if char == 0x22:  # "
            return self._quoted(text)
        if char == 0x29:
            raise _bad("an unexpected ')'")
        return self._atom(text)

    def _quoted(self, text: bytes) -> bytes:
        out = bytearray()
        pos = self.pos + 1
        while pos < len(text):
            char = text[pos]
            if char == 0x5C and pos + 1 < len(text):  # backslash
                out.append(text[pos + 1])
                pos += 2
            elif char == 0x22:
                self.pos = pos + 1
                return bytes(out)
            else:
                out.append(char)
                pos += 1
        raise _bad("an unterminated quoted string")

    def _atom(self, text: bytes) -> bytes | None:
        start = pos = self.pos
        depth = 0
        while pos < len(text):
            char = text[pos]
            if char == 0x5B:  # [ : a section such as BODY[HEADER.FIELDS (A B)]
                depth += 1
            elif char == 0x5D:
                depth -= 1
            elif depth <= 0 and char in b" ()":
                break
            pos += 1
        self.pos = pos
        atom = text[start:pos]
        return None if atom.upper() == b"NIL" else atom


def _int(value: _Value, what: str) -> int:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bytes) and value.isdigit() and len(value) <= 20:
        return int(value)
    raise _bad(f"{what} is not a number")


def _str(value: _Value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ""


def _flags(value: _Value) -> frozenset[str]:
    if not isinstance(value, list):
        raise _bad("FLAGS is not a list")
    return frozenset(_str(f) for f in value if isinstance(f, bytes) and f != b"\\Recent")


def _pairs(value: _Value) -> dict[str, _Value]:
    if not isinstance(value, list) or len(value) % 2:
        raise _bad("FETCH data is not a list of pairs")
    out: dict[str, _Value] = {}
    for key, item in zip(value[::2], value[1::2], strict=True):
        if not isinstance(key, bytes):
            raise _bad("a FETCH item name is not an atom")
        out[key.decode("ascii", "replace").upper()] = item
    return out


def _expand_set(spec: bytes, *, star: int = 0xFFFFFFFF) -> list[int]:
    """A sequence set (``1:3,7``) as numbers; bounded, so a hostile range raises."""
    out: list[int] = []
    for part in spec.split(b","):
        first, _, last = part.partition(b":")
        low = star if first == b"*" else _int(first, "a set member")
        high = low if not last else (star if last == b"*" else _int(last, "a set member"))
        low, high = min(low, high), max(low, high)
        if len(out) + (high - low + 1) > _MAX_SET_MEMBERS:
            raise _bad("a UID set too large to expand")
        out.extend(range(low, high + 1))
    return out


def _uid_set(uids: Sequence[int]) -> bytes:
    """Sorted UIDs compressed into ranges: 1,2,3,7 → 1:3,7."""
    parts: list[str] = []
    ordered = sorted(set(uids))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}:{ordered[j]}")
        i = j + 1
    return ",".join(parts).encode()


_MONTHS = {
    m: i
    for i, m in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1
    )
}
_DATE = re.compile(r"\s*(\d{1,2})-([A-Za-z]{3})-(\d{4}) (\d\d):(\d\d):(\d\d) ([+-]\d{4})")


def _internaldate_ms(value: _Value) -> int | None:
    match = _DATE.fullmatch(_str(value))
    if match is None or match.group(2).upper() not in _MONTHS:
        return None
    day, mon, year, hh, mm, ss, zone = match.groups()
    try:
        when = datetime.strptime(
            f"{year}-{_MONTHS[mon.upper()]:02d}-{int(day):02d} {hh}:{mm}:{ss} {zone}",
            "%Y-%m-%d %H:%M:%S %z",
        )
    except ValueError:
        return None
    return int(when.timestamp() * 1000)


class _Literal:
    def __init__(self, data: bytes) -> None:
        self.data = data


_Arg: TypeAlias = bytes | _Literal
_ATOM_SAFE = re.compile(rb"[!#$&'+\-./0-9:;<=>?@A-Z^_`a-z|~]+")
_FLAG = re.compile(r"\\?[!#$&'+\-./0-9:;<=>?@A-Z^_`a-z|~]+")
_UID_RANGE = re.compile(r"(?:[0-9]+|\*)(?::(?:[0-9]+|\*))?(?:,(?:[0-9]+|\*)(?::(?:[0-9]+|\*))?)*")


def _astring(value: str) -> _Arg:
    data = value.encode("utf-8")
    if _ATOM_SAFE.fullmatch(data):
        return data
    if all(0x20 <= b < 0x7F for b in data):
        return b'"' + data.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
    return _Literal(data)


def _mailbox(name: str) -> _Arg:
    if not name or "\x00" in name:
        raise ValueError("a folder name must be a non-empty string without NUL")
    return _astring(encode_mutf7(name))


def _flag_list(flags: Sequence[str]) -> bytes:
    for flag in flags:
        if not _FLAG.fullmatch(flag):
            raise ValueError(f"not a valid IMAP flag: {flag!r}")
    return ("(" + " ".join(flags) + ")").encode("ascii")


def _check_uid(uid: int) -> int:
    if not isinstance(uid, int) or not 0 < uid <= 0xFFFFFFFF:
        raise ValueError(f"not a UID: {uid!r}")
    return uid


class ImapClient:
    """One IMAP connection; connects in the constructor, ``with`` logs out at the end."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: Literal["implicit", "starttls", "none"],
        timeout: float = 30.0,
        ca_file: str | None = None,
        verify: bool = True,
        max_literal: int = 64 << 20,
    ) -> None:
        if tls not in ("implicit", "starttls", "none"):
            raise ValueError(f"tls must be implicit, starttls or none, not {tls!r}")
        if not 0 < port < 65536:
            raise ValueError(f"not a TCP port: {port!r}")
        if max_literal < 0 or timeout <= 0:
            raise ValueError("max_literal must be >= 0 and timeout > 0")
        self.host = host
        self.max_literal = max_literal
        self._timeout = timeout
        self._tag = 0
        self._budget = 0
        self._caps: frozenset[str] = frozenset()
        self._qresync = False
        self._exists = 0
        self._uidnext: int | None = None
        self._closed = False
        self._context = ssl.create_default_context(cafile=ca_file) if tls != "none" else None
        if self._context is not None and not verify:
            self._context.check_hostname = False
            self._context.verify_mode = ssl.CERT_NONE
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except socket.gaierror as exc:
            raise ImapUnreachable(detail=f"cannot resolve {host}: {exc}") from exc
        except TimeoutError as exc:
            raise ImapUnreachable(detail=f"timed out connecting to {host}:{port}") from exc
        except OSError as exc:
            raise ImapUnreachable(detail=f"cannot connect to {host}:{port}: {exc}") from exc
        self._wire = _Wire(sock)
        try:
            if tls == "implicit":
                self._start_tls()
            self._greet()
            if tls == "starttls":
                if "STARTTLS" not in self._caps:
                    raise ImapTlsError(detail="the server does not offer STARTTLS")
                tagged, _ = self._run(b"STARTTLS")
                if tagged.word != "OK":
                    raise ImapTlsError(detail=f"STARTTLS refused: {tagged.text()}")
                if self._wire.buf:
                    raise ImapTlsError(detail="the server sent data before the TLS handshake")
                self._start_tls()
                self._refresh_capabilities()
        except BaseException:
            self._close()
            raise

    # -- connection plumbing --

    def _start_tls(self) -> None:
        assert self._context is not None
        try:
            self._wire.sock = self._context.wrap_socket(self._wire.sock, server_hostname=self.host)
        except TimeoutError as exc:
            raise ImapError("timeout", "the TLS handshake timed out") from exc
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise ImapTlsError(detail=str(exc)) from exc
        except OSError as exc:
            raise ImapTlsError(detail=f"the TLS handshake failed: {exc}") from exc

    def _greet(self) -> None:
        self._budget = MAX_LINE + 1
        greeting = self._read()
        if greeting.kind != "*" or greeting.word not in ("OK", "PREAUTH"):
            raise ImapError("rejected", f"the server greeted with {greeting.text()!r}")
        self._note_code(greeting)
        if not self._caps:
            self._refresh_capabilities()

    def _close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._wire.sock.close()

    def _read(self) -> _Response:
        """One whole response, literals included, within the line/literal/budget bounds."""
        texts: list[bytes] = []
        literals: list[bytes] = []
        while True:
            line = self._wire.readline()
            self._spend(len(line))
            body = line.rstrip(b"\r\n")
            tail = _LITERAL_TAIL.search(body)
            if tail is None:
                texts.append(body)
                break
            spec = tail.group(1)
            if not _LITERAL_SIZE.fullmatch(spec):
                if _NUMERIC_ISH.fullmatch(spec):
                    raise ImapProtocolError("malformed_literal", f"literal size {spec[:30]!r}")
                texts.append(body)
                break
            size = int(spec) if len(spec) <= 20 else self.max_literal + 1
            if size > self.max_literal:
                raise ImapProtocolError(
                    "literal_too_large", f"a {size}-byte literal over the {self.max_literal} limit"
                )
            self._spend(size)
            texts.append(body[: tail.start()])
            literals.append(self._wire.read(size))
        return self._classify(texts, literals)

    def _spend(self, size: int) -> None:
        self._budget -= size
        if self._budget < 0:
            raise ImapProtocolError("response_too_large", "the response exceeds its byte budget")

    @staticmethod
    def _classify(texts: list[bytes], literals: list[bytes]) -> _Response:
        first = texts[0]
        if first.startswith(b"+"):
            return _Response("+", texts, literals, offset=min(2, len(first)))
        tag, _, rest = first.partition(b" ")
        if not tag or not rest:
            raise _bad(f"a response without a tag and status: {first[:80]!r}")
        offset = len(tag) + 1
        word, _, after = rest.partition(b" ")
        number = None
        if tag == b"*" and word.isdigit() and len(word) <= 20:
            number = int(word)
            offset += len(word) + 1
            word, _, after = after.partition(b" ")
        offset += len(word) + (1 if after or first.endswith(b" ") else 0)
        return _Response(
            tag.decode("ascii", "replace"),
            texts,
            literals,
            number=number,
            word=word.decode("ascii", "replace").upper(),
            offset=min(offset, len(first)),
        )

    def _note(self, response: _Response) -> None:
        """State an untagged response changes: EXISTS, EXPUNGE, capabilities, codes."""
        if response.word == "EXISTS" and response.number is not None:
            self._exists = response.number
        elif response.word == "EXPUNGE":
            self._exists = max(0, self._exists - 1)
        elif response.word == "VANISHED" and not response.texts[0][response.offset :].startswith(
            b"("
        ):
            gone = len(_expand_set(response.texts[0][response.offset :].strip()))
            self._exists = max(0, self._exists - gone)
        elif response.word == "CAPABILITY":
            self._caps = frozenset(response.texts[0][response.offset :].decode().upper().split())
        elif response.word in ("OK", "NO", "BAD", "PREAUTH"):
            self._note_code(response)

    def _note_code(self, response: _Response) -> None:
        name, args = response.code()
        if name == "CAPABILITY":
            self._caps = frozenset(args.decode("ascii", "replace").upper().split())
        elif name == "UIDNEXT" and args.isdigit():
            self._uidnext = int(args)

    def _run(
        self, *args: _Arg, on_continue: Callable[[_Response], bytes] | None = None
    ) -> tuple[_Response, list[_Response]]:
        """Send one command; return its tagged response and the untagged ones before it."""
        if self._closed:
            raise ImapError("closed", "the connection is closed")
        self._tag += 1
        tag = f"P{self._tag:04d}"
        self._budget = self.max_literal + _RESPONSE_SLACK
        untagged: list[_Response] = []
        try:
            out = bytearray(tag.encode())
            for arg in args:
                out += b" "
                if isinstance(arg, bytes):
                    out += arg
                elif "LITERAL+" in self._caps:
                    out += b"{%d+}\r\n" % len(arg.data) + arg.data
                else:
                    out += b"{%d}\r\n" % len(arg.data)
                    self._wire.send(bytes(out))
                    out = bytearray()
                    refused = self._until_continuation(tag, untagged)
                    if refused is not None:
                        return refused, untagged
                    out += arg.data
            self._wire.send(bytes(out) + b"\r\n")
            while True:
                response = self._read()
                if response.kind == tag:
                    self._note_code(response)
                    return response, untagged
                if response.kind == "+":
                    if on_continue is None:
                        raise _bad("an unexpected continuation request")
                    self._wire.send(on_continue(response) + b"\r\n")
                elif response.kind == "*":
                    self._note(response)
                    untagged.append(response)
                else:
                    raise _bad(f"a response for an unknown tag {response.kind[:20]!r}")
        except ImapError:
            self._close()
            raise

    def _until_continuation(self, tag: str, untagged: list[_Response]) -> _Response | None:
        while True:
            response = self._read()
            if response.kind == "+":
                return None
            if response.kind == tag:
                return response
            self._note(response)
            untagged.append(response)

    def _ok(self, tagged: _Response, what: str) -> None:
        if tagged.word == "OK":
            return
        self._not_now(tagged, what)
        name, _ = tagged.code()
        if name in ("TRYCREATE", "NONEXISTENT"):
            raise ImapNoSuchFolder(detail=f"{what}: {tagged.text()}", answered=True)
        raise ImapError("command_failed", f"{what}: {tagged.word} {tagged.text()}", answered=True)

    @staticmethod
    def _not_now(tagged: _Response, what: str) -> None:
        """Raise when a refusal is the server's load or limits talking, not a verdict."""
        name, _ = tagged.code()
        if name in _THROTTLE_CODES:
            raise ImapThrottled(detail=f"{what}: {tagged.word} {tagged.text()}", answered=True)
        if name == "UNAVAILABLE":
            raise ImapUnreachable(detail=f"{what}: {tagged.word} {tagged.text()}", answered=True)

    def _refresh_capabilities(self) -> None:
        tagged, _ = self._run(b"CAPABILITY")
        self._ok(tagged, "CAPABILITY")

    # -- public API --

    @property
    def capabilities(self) -> frozenset[str]:
        return self._caps

    def login(self, username: str, password: str) -> None:
        if "LOGINDISABLED" in self._caps:
            raise ImapAuthError(detail="the server disabled LOGIN on this connection")
        tagged, _ = self._run(b"LOGIN", _astring(username), _astring(password))
        if tagged.word != "OK":
            self._not_now(tagged, "LOGIN")
            raise ImapAuthError(detail=tagged.text())
        if tagged.code()[0] != "CAPABILITY":
            self._refresh_capabilities()

    def authenticate_xoauth2(self, username: str, access_token: str) -> None:
        payload = f"user={username}\x01auth=Bearer {access_token}\x01\x01".encode()
        encoded = base64.b64encode(payload)
        sent = False

        def respond(_: _Response) -> bytes:
            nonlocal sent
            # The first challenge asks for the token; a later one carries the error
            # details and wants an empty answer before the tagged NO.
            if sent:
                return b""
            sent = True
            return encoded

        if "SASL-IR" in self._caps:
            sent = True
            tagged, _ = self._run(b"AUTHENTICATE", b"XOAUTH2", encoded, on_continue=respond)
        else:
            tagged, _ = self._run(b"AUTHENTICATE", b"XOAUTH2", on_continue=respond)
        if tagged.word != "OK":
            self._not_now(tagged, "AUTHENTICATE")
            raise ImapAuthError(detail=tagged.text())
        if tagged.code()[0] != "CAPABILITY":
            self._refresh_capabilities()

    def list_folders(self) -> list[FolderInfo]:
        if "SPECIAL-USE" in self._caps:
            tagged, untagged = self._run(b"LIST", b'""', b'"*"', b"RETURN", b"(SPECIAL-USE)")
        else:
            tagged, untagged = self._run(b"LIST", b'""', b'"*"')
        self._ok(tagged, "LIST")
        folders: list[FolderInfo] = []
        for response in untagged:
            if response.word != "LIST":
                continue
            parser = response.parser()
            flags_value, delimiter, name = parser.value(), parser.value(), parser.value()
            if not isinstance(flags_value, list) or not isinstance(name, bytes):
                raise _bad("a malformed LIST response")
            flags = frozenset(_str(f) for f in flags_value)
            lowered = {f.lower() for f in flags}
            special = next((s for s in _SPECIAL_USE if s.lower() in lowered), None)
            folders.append(
                FolderInfo(
                    name=decode_mutf7(_str(name)),
                    delimiter=_str(delimiter) if delimiter is not None else None,
                    flags=flags,
                    special_use=special,
                    selectable=not lowered & {"\\noselect", "\\nonexistent"},
                )
            )
        return folders

    def select(
        self, folder: str, *, readonly: bool = True, condstore: bool = False
    ) -> FolderStatus:
        args: list[_Arg] = [b"EXAMINE" if readonly else b"SELECT", _mailbox(folder)]
        if condstore and "CONDSTORE" in self._caps and not self._qresync:
            args.append(b"(CONDSTORE)")
        self._uidnext = None
        self._exists = 0
        tagged, untagged = self._run(*args)
        if tagged.word != "OK":
            self._not_now(tagged, "EXAMINE" if readonly else "SELECT")
            raise ImapNoSuchFolder(detail=f"{folder!r}: {tagged.text()}")
        uidvalidity: int | None = None
        highestmodseq: int | None = None
        for response in untagged:
            name, value = response.code()
            if name == "UIDVALIDITY":
                uidvalidity = _int(value, "UIDVALIDITY")
            elif name == "HIGHESTMODSEQ":
                highestmodseq = _int(value, "HIGHESTMODSEQ")
        if uidvalidity is None:
            raise _bad(f"SELECT {folder!r} gave no UIDVALIDITY")
        return FolderStatus(folder, uidvalidity, self._uidnext, self._exists, highestmodseq)

    def enable_qresync(self) -> bool:
        if "QRESYNC" not in self._caps:
            return False
        tagged, untagged = self._run(b"ENABLE", b"QRESYNC", b"CONDSTORE")
        self._ok(tagged, "ENABLE")
        for response in untagged:
            if response.word == "ENABLED" and b"QRESYNC" in response.texts[0].upper().split():
                self._qresync = True
        return self._qresync

    def _search(self, criteria: bytes, low: int) -> list[int]:
        esearch = "ESEARCH" in self._caps
        if esearch:
            tagged, untagged = self._run(b"UID", b"SEARCH", b"RETURN", b"(ALL)", criteria)
        else:
            tagged, untagged = self._run(b"UID", b"SEARCH", criteria)
        self._ok(tagged, "UID SEARCH")
        found: list[int] = []
        for response in untagged:
            if response.word == "SEARCH":
                parser = response.parser()
                while not parser.at_end():
                    item = parser.value()
                    if isinstance(item, bytes):  # skip a trailing (MODSEQ n)
                        found.append(_int(item, "a SEARCH result"))
            elif response.word == "ESEARCH" and esearch:
                parser = response.parser()
                while not parser.at_end():
                    item = parser.value()
                    if isinstance(item, bytes) and item.upper() == b"ALL":
                        members = parser.value()
                        if isinstance(members, bytes):
                            found.extend(_expand_set(members))
        return sorted({uid for uid in found if uid >= low})

    def uids_from(self, first_uid: int) -> list[int]:
        """UIDs >= ``first_uid`` in the selected folder, searched in windows of UIDs."""
        low = max(1, int(first_uid))
        width = 10_000 if "ESEARCH" in self._caps else 5_000
        if self._exists <= 5_000 or self._uidnext is None:
            return self._search(b"UID %d:*" % low, low)
        found: list[int] = []
        start = low
        while True:
            end = start + width - 1
            if end >= self._uidnext - 1:
                found.extend(self._search(b"UID %d:*" % start, start))
                return found
            found.extend(self._search(b"UID %d:%d" % (start, end), start))
            start = end + 1

    def uid_search_all(self) -> list[int]:
        return self.uids_from(1)

    def _fetch(
        self, uids: bytes, items: bytes, *modifiers: bytes
    ) -> tuple[list[dict[str, _Value]], list[_Response]]:
        tagged, untagged = self._run(b"UID", b"FETCH", uids, items, *modifiers)
        self._ok(tagged, "UID FETCH")
        found = [_pairs(r.parser().value()) for r in untagged if r.word == "FETCH"]
        return [attrs for attrs in found if "UID" in attrs], untagged

    def fetch_messages(self, uids: Sequence[int], *, max_size: int) -> Iterator[FetchedMessage]:
        """Flags, size and date of every UID, and the body (BODY.PEEK) of those <= max_size."""
        wanted = sorted({_check_uid(uid) for uid in uids})
        modseq = b" MODSEQ" if "CONDSTORE" in self._caps else b""
        for i in range(0, len(wanted), _META_CHUNK):
            chunk = wanted[i : i + _META_CHUNK]
            members = set(chunk)
            meta: dict[int, dict[str, _Value]] = {}
            items = b"(UID FLAGS RFC822.SIZE INTERNALDATE" + modseq + b")"
            for attrs in self._fetch(_uid_set(chunk), items)[0]:
                uid = _int(attrs["UID"], "UID")
                if uid in members and "RFC822.SIZE" in attrs and "FLAGS" in attrs:
                    meta[uid] = attrs
            group: list[int] = []
            group_bytes = 0
            for uid in sorted(meta):
                size = _int(meta[uid]["RFC822.SIZE"], "RFC822.SIZE")
                if size <= max_size:
                    if group_bytes and group_bytes + size > BODY_BATCH_BYTES:
                        yield from self._with_bodies(group, meta, max_size)
                        group, group_bytes = [], 0
                    group_bytes += size
                group.append(uid)
            yield from self._with_bodies(group, meta, max_size)

    def fetch_headers(self, uids: Sequence[int]) -> dict[int, bytes]:
        """The header section (BODY.PEEK[HEADER]) of each UID: for messages over the ceiling."""
        wanted = sorted({_check_uid(uid) for uid in uids})
        headers: dict[int, bytes] = {}
        for i in range(0, len(wanted), _META_CHUNK):
            chunk = wanted[i : i + _META_CHUNK]
            for attrs in self._fetch(_uid_set(chunk), b"(UID BODY.PEEK[HEADER])")[0]:
                head = attrs.get("BODY[HEADER]")
                uid = _int(attrs["UID"], "UID")
                if isinstance(head, bytes) and uid in chunk:
                    headers[uid] = head
        return headers

    def _with_bodies(
        self, group: list[int], meta: dict[int, dict[str, _Value]], max_size: int
    ) -> Iterator[FetchedMessage]:
        sizes = {uid: _int(meta[uid]["RFC822.SIZE"], "RFC822.SIZE") for uid in group}
        small = [uid for uid in group if sizes[uid] <= max_size]
        bodies: dict[int, bytes] = {}
        if small:
            for attrs in self._fetch(_uid_set(small), b"(UID BODY.PEEK[])")[0]:
                raw = attrs.get("BODY[]")
                if isinstance(raw, bytes):
                    bodies[_int(attrs["UID"], "UID")] = raw
        for uid in group:
            attrs = meta[uid]
            if sizes[uid] <= max_size and uid not in bodies:
                continue  # expunged between the two fetches
            yield FetchedMessage(
                uid=uid,
                flags=_flags(attrs["FLAGS"]),
                size=sizes[uid],
                raw=bodies.get(uid),
                modseq=_int(attrs["MODSEQ"], "MODSEQ") if "MODSEQ" in attrs else None,
                internaldate_ms=_internaldate_ms(attrs.get("INTERNALDATE")),
            )

    def fetch_flags(
        self, uid_range: str, *, changedsince: int | None = None, vanished: bool = False
    ) -> tuple[list[FlagUpdate], list[int]]:
        """Flags (and MODSEQ) over a UID range; with ``vanished`` (QRESYNC) expunged UIDs."""
        if not _UID_RANGE.fullmatch(uid_range):
            raise ValueError(f"not a UID range: {uid_range!r}")
        if vanished and (not self._qresync or changedsince is None):
            raise ImapError("qresync_unavailable", "VANISHED needs QRESYNC and CHANGEDSINCE")
        condstore = "CONDSTORE" in self._caps
        modifiers: list[bytes] = []
        if changedsince is not None:
            if not condstore:
                raise ImapError("condstore_unavailable", "CHANGEDSINCE needs CONDSTORE")
            modifiers.append(
                b"(CHANGEDSINCE %d%s)" % (int(changedsince), b" VANISHED" if vanished else b"")
            )
        items = b"(UID FLAGS MODSEQ)" if condstore else b"(UID FLAGS)"
        found, untagged = self._fetch(uid_range.encode(), items, *modifiers)
        updates = {
            _int(a["UID"], "UID"): FlagUpdate(
                uid=_int(a["UID"], "UID"),
                flags=_flags(a["FLAGS"]),
                modseq=_int(a["MODSEQ"], "MODSEQ") if "MODSEQ" in a else None,
            )
            for a in found
            if "FLAGS" in a
        }
        gone: set[int] = set()
        for response in untagged:
            if response.word == "VANISHED":
                parser = response.parser()
                item = parser.value()
                if isinstance(item, list):  # (EARLIER)
                    item = parser.value()
                if isinstance(item, bytes):
                    gone.update(_expand_set(item))
        return [updates[uid] for uid in sorted(updates)], sorted(gone)

    def store_flags(self, uid: int, op: Literal["+", "-", "="], flags: Sequence[str]) -> None:
        if op not in ("+", "-", "="):
            raise ValueError(f"op must be +, - or =, not {op!r}")
        item = b"FLAGS.SILENT" if op == "=" else op.encode() + b"FLAGS.SILENT"
        tagged, _ = self._run(b"UID", b"STORE", b"%d" % _check_uid(uid), item, _flag_list(flags))
        self._ok(tagged, "UID STORE")

    @staticmethod
    def _copyuid(uid: int, responses: Sequence[_Response]) -> int | None:
        for response in responses:
            name, args = response.code()
            if name != "COPYUID":
                continue
            parts = args.split()
            if len(parts) != 3:
                raise _bad("a malformed COPYUID")
            source, dest = _expand_set(parts[1]), _expand_set(parts[2])
            if len(source) == len(dest) and uid in source:
                return dest[source.index(uid)]
        return None

    def copy(self, uid: int, dest: str) -> int | None:
        tagged, untagged = self._run(b"UID", b"COPY", b"%d" % _check_uid(uid), _mailbox(dest))
        self._ok(tagged, f"UID COPY to {dest!r}")
        return self._copyuid(uid, [*untagged, tagged])

    def move(self, uid: int, dest: str) -> int | None:
        if "MOVE" not in self._caps:
            raise ImapError("move_unsupported", "the server does not offer MOVE")
        tagged, untagged = self._run(b"UID", b"MOVE", b"%d" % _check_uid(uid), _mailbox(dest))
        self._ok(tagged, f"UID MOVE to {dest!r}")
        return self._copyuid(uid, [*untagged, tagged])

    def expunge_uid(self, uid: int) -> None:
        """Mark the message \\Deleted and expunge it (without UIDPLUS: every \\Deleted one)."""
        self.store_flags(uid, "+", ["\\Deleted"])
        if "UIDPLUS" in self._caps:
            tagged, _ = self._run(b"UID", b"EXPUNGE", b"%d" % uid)
        else:
            tagged, _ = self._run(b"EXPUNGE")
        self._ok(tagged, "EXPUNGE")

    def append(self, folder: str, raw: bytes, flags: Sequence[str] = ()) -> int | None:
        if not raw:
            raise ValueError("cannot append an empty message")
        tagged, _ = self._run(b"APPEND", _mailbox(folder), _flag_list(flags), _Literal(raw))
        self._ok(tagged, f"APPEND to {folder!r}")
        name, args = tagged.code()
        parts = args.split()
        if name == "APPENDUID" and len(parts) == 2 and parts[1].isdigit():
            return int(parts[1])
        return None

    def idle(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the server to report a change; always ends with DONE."""
        if "IDLE" not in self._caps:
            time.sleep(max(0.0, seconds))
            return self._poll()
        if self._closed:
            raise ImapError("closed", "the connection is closed")
        self._tag += 1
        tag = f"P{self._tag:04d}"
        self._budget = self.max_literal + _RESPONSE_SLACK
        changed = False
        try:
            self._wire.send(tag.encode() + b" IDLE\r\n")
            untagged: list[_Response] = []
            refused = self._until_continuation(tag, untagged)
            changed = any(self._is_change(r) for r in untagged)
            if refused is not None:
                self._ok(refused, "IDLE")
                return changed
            deadline = time.monotonic() + seconds
            while not changed:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._wire.readable_within(remaining):
                    break
                response = self._read()
                if response.kind != "*":
                    raise _bad("a tagged or continuation response during IDLE")
                self._note(response)
                changed = self._is_change(response)
            self._wire.send(b"DONE\r\n")
            while True:
                response = self._read()
                if response.kind == tag:
                    self._ok(response, "IDLE")
                    return changed
                self._note(response)
                changed = changed or self._is_change(response)
        except ImapError:
            self._close()
            raise

    @staticmethod
    def _is_change(response: _Response) -> bool:
        return response.word in ("EXISTS", "EXPUNGE", "FETCH", "VANISHED")

    def _poll(self) -> bool:
        tagged, untagged = self._run(b"NOOP")
        self._ok(tagged, "NOOP")
        return any(self._is_change(r) for r in untagged)

    def noop(self) -> None:
        self._poll()

    def close(self) -> None:
        """Drop the connection at once, without LOGOUT (e.g. at shutdown)."""
        self._close()

    def logout(self) -> None:
        if self._closed:
            return
        try:
            self._run(b"LOGOUT")
        except ImapError:
            pass
        finally:
            self._close()

    def __enter__(self) -> ImapClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.logout()

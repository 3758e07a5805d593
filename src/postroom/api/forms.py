"""Composing requests as ``multipart/form-data``: files uploaded as they are, not base64.

The send, reply, reply-all, forward and draft create/update routes take, besides their
JSON body, a form (RFC 7578) with

* at most one part named ``message``: the JSON object the route takes as its body
  (without it the body is ``{}``, e.g. a draft holding only files);
* any number of file parts named ``attachment`` (or ``attachments``): each becomes an
  attachment, named by the part's ``filename`` (``filename*`` too), typed by the part's
  ``Content-Type`` (none, or ``application/octet-stream``: guessed from the name, as
  for JSON), after any the JSON itself lists.

The form is turned into that JSON body before the route sees it (the files
base64-encoded into ``attachments``), so validation, ``Idempotency-Key`` and the
stored message are exactly those of the JSON request. The parts are found with the
bounded MIME parser that reads mail (:mod:`postroom.mail.mime`): a hostile form cannot
make it recurse or copy more than the request's bytes.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import compile_path

from postroom.api.routes import ROUTES
from postroom.mail.attachments import sanitize_filename
from postroom.mail.headers import decode_words, parse_params
from postroom.mail.mime import MAX_PARTS, decode_body, parse_tree

__all__ = ["FORM_ROUTES", "FormRefused", "accepts_form", "form_to_json", "is_form"]

FORM_ROUTES = (
    "messages.send",
    "messages.reply",
    "messages.reply_all",
    "messages.forward",
    "drafts.create",
    "drafts.update",
)
_FILE_FIELDS = ("attachment", "attachments")
_GENERIC_TYPES = ("application/octet-stream", "")

# The same path matching the router uses (Starlette's compile_path).
_PATTERNS = tuple((ROUTES[name].method, compile_path(ROUTES[name].path)[0]) for name in FORM_ROUTES)


@dataclass
class FormRefused(Exception):
    """A form that cannot become the route's body: 400 (unreadable) or 422 (fields)."""

    status: int
    code: str
    detail: str
    errors: list[dict[str, str]] = field(default_factory=list)


def accepts_form(method: str, path: str) -> bool:
    """Whether the route at ``method path`` takes a composing form."""
    return any(method == m and pattern.match(path) for m, pattern in _PATTERNS)


def is_form(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "multipart/form-data"


def _invalid(field_name: str, message: str) -> FormRefused:
    return FormRefused(
        422,
        "validation_failed",
        f"invalid request: {field_name}",
        [{"field": field_name, "message": message}],
    )


def form_to_json(content_type: str, body: bytes) -> bytes:
    """The JSON body a form stands for; raises :class:`FormRefused`."""
    params = parse_params(content_type.split(";", 1)[1]) if ";" in content_type else {}
    boundary = params.get("boundary", "")
    if not boundary or len(boundary) > 70:
        raise FormRefused(400, "invalid_form", "a multipart/form-data body needs a boundary")
    head = f'Content-Type: multipart/form-data; boundary="{boundary}"\r\n\r\n'.encode()
    tree = parse_tree(head + body)
    parts = tree.root.children
    if not parts or tree.degraded or any(p.unterminated for p in parts):
        raise FormRefused(
            400,
            "invalid_form",
            "the multipart/form-data body could not be read (no parts, an unclosed part,"
            f" or more than {MAX_PARTS})",
        )
    message: dict[str, Any] | None = None
    files: list[dict[str, Any]] = []
    for part in parts:
        disposition = part.headers.get_last("content-disposition") or ""
        kind, _, rest = disposition.partition(";")
        given = parse_params(rest) if kind.strip().lower() == "form-data" else {}
        name = given.get("name", "")
        if not name:
            raise FormRefused(
                400, "invalid_form", "every part needs Content-Disposition: form-data; name=..."
            )
        label = f"form.{name[:64]}"
        if name == "message":
            if message is not None:
                raise _invalid(label, "only one message part")
            message = _message(decode_body(part, None)[0])
        elif name in _FILE_FIELDS:
            # filename (or RFC 2231 filename*), never the field's name.
            filename = sanitize_filename(decode_words(given.get("filename", "")))
            if not filename:
                raise _invalid(label, "a file part needs a filename")
            declared = part.content_type if part.headers.get("content-type") else ""
            content = decode_body(part, None)[0]
            upload: dict[str, Any] = {
                "filename": filename,
                "content": base64.b64encode(content).decode("ascii"),
            }
            if declared not in _GENERIC_TYPES:
                upload["content_type"] = declared
            files.append(upload)
        else:
            raise _invalid(label, "unknown form field (message, attachment)")
    out = message if message is not None else {}
    if files:
        listed = out.get("attachments")
        if listed is not None and not isinstance(listed, list):
            raise _invalid("attachments", "Input should be a valid list")
        out["attachments"] = [*(listed or []), *files]
    return json.dumps(out, separators=(",", ":")).encode()


def _message(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise FormRefused(400, "invalid_json", "the message part is not valid JSON") from None
    if not isinstance(value, dict):
        raise FormRefused(400, "invalid_json", "the message part is not a JSON object")
    return value

"""Composing with multipart/form-data uploads (both engines): the files arrive in the
sent message byte for byte, a form is the same request as its JSON twin, bad forms are
clear problems that store nothing, and oversized bodies are refused unread."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any

import httpx

from postroom.mail.parse import parse_message
from postroom.store import outbox as outbox_rows

# Bytes a text-minded parser would damage: NUL, bare CR and LF, CRLF, a boundary-like line.
BINARY = bytes(range(256)) + b"\r\n--not-the-boundary\r\n\x00\r" * 50
PDF = b"%PDF-1.4\n" + b"\x00\xff" * 3000


def _stored(api: Any, outbox_id: str) -> Any:
    with api.app.db.read() as tx:
        return parse_message(outbox_rows.mime(tx, outbox_id))


def _files(parsed: Any) -> dict[str, tuple[str, str]]:
    return {a.filename: (a.content_type, a.sha256) for a in parsed.attachments}


def test_a_form_send_carries_the_files_byte_for_byte(api: Any) -> None:
    inbox, _address = api.identity("formsender")
    message = {
        "to": [{"address": "ann@example.com"}],
        "subject": "Scans",
        "text": "Two files attached.",
        "attachments": [{"filename": "listed.txt", "content": base64.b64encode(b"hi").decode()}],
    }
    answer = api.client.post(
        f"/v1/identities/{inbox}/messages",
        data={"message": json.dumps(message)},
        files=[
            ("attachment", ("scan 1 – résumé.bin", BINARY, "image/x-scan")),
            ("attachment", ("contract.pdf", PDF, "application/octet-stream")),
        ],
        headers=api.headers(),
    )
    assert answer.status_code == 202, answer.text
    parsed = _stored(api, answer.json()["id"])
    assert parsed.subject == "Scans" and "Two files attached." in (parsed.text or "")
    assert _files(parsed) == {
        "listed.txt": ("text/plain", hashlib.sha256(b"hi").hexdigest()),
        "scan 1 – résumé.bin": ("image/x-scan", hashlib.sha256(BINARY).hexdigest()),
        # application/octet-stream says nothing: the type is guessed from the name.
        "contract.pdf": ("application/pdf", hashlib.sha256(PDF).hexdigest()),
    }


def test_a_form_and_its_json_twin_are_one_send_under_one_idempotency_key(api: Any) -> None:
    inbox, _address = api.identity("formtwin")
    headers = {**api.headers(), "Idempotency-Key": "upload-7"}
    message = {"to": [{"address": "bob@example.com"}], "subject": "Twin", "text": "x"}
    url = f"/v1/identities/{inbox}/messages"
    files = [("attachment", ("a.bin", b"\x00\x01", "application/x-thing"))]
    first = api.client.post(
        url, data={"message": json.dumps(message)}, files=files, headers=headers
    )
    assert first.status_code == 202, first.text
    # Another boundary, the same authored request.
    again = api.client.post(
        url, data={"message": json.dumps(message)}, files=files, headers=headers
    )
    assert again.json()["id"] == first.json()["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    twin = {
        **message,
        "attachments": [
            {
                "filename": "a.bin",
                "content": base64.b64encode(b"\x00\x01").decode(),
                "content_type": "application/x-thing",
            }
        ],
    }
    as_json = api.client.post(url, json=twin, headers=headers)
    assert as_json.json()["id"] == first.json()["id"]
    changed = api.client.post(
        url,
        data={"message": json.dumps(message)},
        files=[("attachment", ("a.bin", b"\x00\x02", "application/x-thing"))],
        headers=headers,
    )
    assert changed.status_code == 409 and changed.json()["code"] == "idempotency_conflict"
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM outgoing_emails") == 1


def test_drafts_take_forms_too(api: Any) -> None:
    inbox, _address = api.identity("formdraft")
    made = api.client.post(
        f"/v1/identities/{inbox}/drafts",
        files=[("attachment", ("only.txt", b"just a file", "text/plain"))],
        headers=api.headers(),
    )
    assert made.status_code == 201, made.text
    draft = made.json()
    assert [a["filename"] for a in draft["content"]["attachments"]] == ["only.txt"]
    changed = api.client.patch(
        f"/v1/drafts/{draft['id']}",
        data={"message": json.dumps({"to": [{"address": "c@example.com"}], "text": "see file"})},
        files=[("attachments", ("second.txt", b"another", "text/plain"))],
        headers=api.headers(),
    )
    assert changed.status_code == 200, changed.text
    sent = api.client.post(f"/v1/drafts/{draft['id']}/send", headers=api.headers())
    assert sent.status_code == 202, sent.text
    assert set(_files(_stored(api, sent.json()["id"]))) == {"second.txt"}


def _raw_form(api: Any, url: str, body: bytes, content_type: str) -> httpx.Response:
    response: httpx.Response = api.client.post(
        url, content=body, headers={**api.headers(), "Content-Type": content_type}
    )
    return response


def test_bad_forms_are_clear_problems_and_store_nothing(api: Any) -> None:
    inbox, _address = api.identity("formbad")
    url = f"/v1/identities/{inbox}/messages"
    ok_message = json.dumps({"to": [{"address": "a@example.com"}], "text": "x"})

    def form(*parts: tuple[str, str | None, bytes]) -> bytes:
        out = b""
        for name, filename, content in parts:
            disposition = f'form-data; name="{name}"'
            if filename is not None:
                disposition += f'; filename="{filename}"'
            out += f"--B\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + content + b"\r\n"
        return out + b"--B--\r\n"

    cases = [
        (_raw_form(api, url, b"--B--\r\n", "multipart/form-data"), 400, "invalid_form", None),
        (
            _raw_form(
                api,
                url,
                b"--B\r\nContent-Disposition: form-data\r\n\r\nx",
                "multipart/form-data; boundary=B",
            ),
            400,
            "invalid_form",
            None,
        ),
        (
            _raw_form(
                api, url, form(("message", None, b"{not json")), "multipart/form-data; boundary=B"
            ),
            400,
            "invalid_json",
            None,
        ),
        (
            _raw_form(
                api, url, form(("message", None, b"[1, 2]")), "multipart/form-data; boundary=B"
            ),
            400,
            "invalid_json",
            None,
        ),
        (
            _raw_form(
                api,
                url,
                form(("message", None, ok_message.encode()), ("cc", None, b"x")),
                "multipart/form-data; boundary=B",
            ),
            422,
            "validation_failed",
            "form.cc",
        ),
        (
            _raw_form(
                api,
                url,
                form(("message", None, ok_message.encode()), ("attachment", None, b"x")),
                "multipart/form-data; boundary=B",
            ),
            422,
            "validation_failed",
            "form.attachment",
        ),
        (
            _raw_form(
                api,
                url,
                form(("message", None, b"{}"), ("message", None, b"{}")),
                "multipart/form-data; boundary=B",
            ),
            422,
            "validation_failed",
            "form.message",
        ),
        # A well-formed form whose JSON is invalid gets the JSON route's own answer.
        (
            _raw_form(
                api,
                url,
                form(("message", None, b'{"text": "nobody to send to"}')),
                "multipart/form-data; boundary=B",
            ),
            422,
            api.client.post(url, json={"text": "nobody to send to"}, headers=api.headers()).json()[
                "code"
            ],
            "to",
        ),
    ]
    for answer, status, code, field in cases:
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        problem = answer.json()
        assert problem["code"] == code, problem
        if field is not None:
            assert field in [e["field"] for e in problem["errors"]], problem
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM outgoing_emails") == 0


def test_a_body_over_the_limit_is_refused_with_413(api: Any) -> None:
    api.app.settings = dataclasses.replace(api.app.settings, http_max_request_bytes=4096)
    inbox, _address = api.identity("formbig")
    url = f"/v1/identities/{inbox}/messages"
    big = api.client.post(
        url,
        data={"message": json.dumps({"to": [{"address": "a@example.com"}], "text": "x"})},
        files=[("attachment", ("big.bin", b"x" * 5000, "application/x-big"))],
        headers=api.headers(),
    )
    assert big.status_code == 413, big.text
    assert big.json()["code"] == "request_too_large"

    def chunked() -> Any:  # no Content-Length: counted while read
        yield b'{"to": [{"address": "a@example.com"}], "text": "'
        yield b"y" * 5000
        yield b'"}'

    streamed = api.client.post(
        url, content=chunked(), headers={**api.headers(), "Content-Type": "application/json"}
    )
    assert streamed.status_code == 413 and streamed.json()["code"] == "request_too_large"
    small = api.client.post(
        url, json={"to": [{"address": "a@example.com"}], "text": "fits"}, headers=api.headers()
    )
    assert small.status_code == 202, small.text
    with api.app.db.read() as tx:
        assert tx.fetchval("SELECT count(*) FROM outgoing_emails") == 1


def test_a_form_on_a_route_that_takes_none_is_not_read_as_one(api: Any) -> None:
    answer = api.client.post(
        "/v1/tenants", files=[("attachment", ("a.txt", b"x", "text/plain"))], headers=api.headers()
    )
    assert answer.status_code in (400, 422), answer.text
    assert answer.headers["content-type"] == "application/problem+json"


def test_the_openapi_document_declares_the_form_and_the_413(api: Any) -> None:
    schema = api.client.get("/openapi.json").json()
    send = schema["paths"]["/v1/identities/{identity_id}/messages"]["post"]
    assert set(send["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    form = send["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert set(form["properties"]) == {"message", "attachment"}
    assert send["responses"]["413"]["content"]["application/problem+json"]
    listing = schema["paths"]["/v1/identities/{identity_id}/messages"]["get"]
    assert "413" not in listing["responses"]
    tenants = schema["paths"]["/v1/tenants"]["post"]
    assert set(tenants["requestBody"]["content"]) == {"application/json"}

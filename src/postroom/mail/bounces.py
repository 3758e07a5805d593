"""Bounces, delay and delivery notices, complaints, and VERP return paths: bytes in, values out.

:func:`parse_bounce` reads one inbound message and says whether it reports on mail we
sent, and about whom. It never raises; None means "not a bounce, delivery notice or
complaint". Formats, tried in this order:

- ``arf``       RFC 5965 feedback report (multipart/report; report-type=feedback-report).
                Feedback-Type auth-failure (RFC 6591) and not-spam are not complaints: None.
- ``rfc3464``   a message/delivery-status part (Postfix, Sendmail, Gmail, Exim's DSNs...);
- ``exchange``  the same from Microsoft Exchange / Outlook.com, whose text part may carry
                the only diagnostic ("Remote Server returned '550 5.1.10 ...'");
- ``qmail``     "Hi. This is the qmail-send program" with ``<address>:`` paragraphs;
- ``exim``      "This message was created automatically by mail delivery software" with
                the failed (or not yet delivered) addresses indented below;
- ``sendmail``  "----- The following addresses had permanent fatal errors -----";
- ``heuristic`` a MAILER-DAEMON/postmaster message with a bounce-like subject, or one
                carrying X-Failed-Recipients.

Recipient addresses are normalised as everywhere in Postroom (lower case, IDNA domain,
:func:`~postroom.mail.addresses.normalise_address`). Of a DSN recipient, the
Original-Recipient (the address we sent to) wins over the Final-Recipient (where the
receiving site forwarded it); one that cannot be read falls back to the other. An
Action that cannot be read is taken from the status class (5 failed, 4 delayed, 2
delivered), else from the notice's text ("warning only" and the like: delayed).

The original message is named by the Message-ID of the returned message (a
message/rfc822 or text/rfc822-headers part, or a copy inline after "This is a copy of
the message" and the like), else by an X-Original-Message-ID or Original-Message-ID
field of the report or its header. Non-standard notices and reports whose fields cannot
be read take their recipients from ``<address>: reason`` paragraphs or X-Failed-Recipients.

Bounce type, per recipient (:func:`bounce_type`):

- ``delayed`` is soft; ``delivered``, ``relayed`` and ``expanded`` have none.
- ``failed`` is soft when the enhanced status is 4.x.x, or one of the permanent codes
  that say nothing against the address (5.2.2 mailbox full, 5.2.3 and 5.3.4 message too
  big), or, outside 5.1.x (bad address), when the diagnostic reads like a full mailbox or
  a retry period that ran out; hard when the status is any other 5.x.x; without a
  status, a 4xx reply code is soft and anything else hard (the notice says it gave up).

A complaint's recipient is the ARF Original-Rcpt-To, else the To of the returned message
when it names exactly one address (with several, nobody can tell who complained); its
action is ``delivered`` (the message arrived; the complaint is the report's kind).

Bounds: :data:`MAX_SCAN_BYTES` of the message are read, :data:`MAX_REPORT_RECIPIENTS`
recipients kept, diagnostics cut to :data:`MAX_DIAGNOSTIC_CHARS` on one line.

VERP: :func:`verp_address` writes ``local+bnc-<token>@domain``; :func:`verp_token` reads
the token back from the address a bounce was sent to.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from postroom.mail.addresses import normalise_address, parse_address_list
from postroom.mail.charsets import decode_text
from postroom.mail.fields import first_message_id
from postroom.mail.headers import Headers, decode_words, fold_whitespace, parse_header_block
from postroom.mail.mime import MimePart, decode_body, parse_tree

__all__ = [
    "MAX_DIAGNOSTIC_CHARS",
    "MAX_REPORT_RECIPIENTS",
    "MAX_SCAN_BYTES",
    "BounceReport",
    "BouncedRecipient",
    "bounce_type",
    "envelope_recipient_token",
    "parse_bounce",
    "verp_address",
    "verp_token",
]

MAX_SCAN_BYTES = 1 << 20
MAX_REPORT_RECIPIENTS = 256
MAX_DIAGNOSTIC_CHARS = 512
# How much of one report part or notification text is decoded.
_MAX_PART_BYTES = 512 * 1024
_MAX_HEADER_BYTES = 64 * 1024

Action = Literal["failed", "delayed", "delivered", "relayed", "expanded"]
BounceType = Literal["hard", "soft"]
ReportKind = Literal["bounce", "delay", "delivered", "complaint"]

_ACTIONS: dict[str, Action] = {
    "failed": "failed",
    "delayed": "delayed",
    "delivered": "delivered",
    "relayed": "relayed",
    "expanded": "expanded",
}


@dataclass(frozen=True)
class BouncedRecipient:
    """What a report says about one recipient."""

    address: str
    action: Action
    status: str | None  # enhanced status code, "5.1.1"
    smtp_code: int | None  # the reply code of the diagnostic, 550
    diagnostic: str | None  # one line, at most MAX_DIAGNOSTIC_CHARS
    bounce_type: BounceType | None


@dataclass(frozen=True)
class BounceReport:
    """A bounce, delay or delivery notice, or a complaint, about a message we sent."""

    kind: ReportKind
    original_message_id: str | None  # without angle brackets
    recipients: tuple[BouncedRecipient, ...]
    verp_token: str | None  # filled by the caller from the envelope recipient
    feedback_type: str | None  # ARF Feedback-Type, complaints only
    reporting_mta: str | None
    format: str  # arf | rfc3464 | exchange | qmail | exim | sendmail | heuristic


# Codes and their reading ------------------------------------------------------------

_STATUS = re.compile(r"([245])\.(\d{1,3})\.(\d{1,3})")
# An enhanced code in free text: not part of a dotted number (an IP address, a version).
_STATUS_IN_TEXT = re.compile(r"(?<![\w.])([245]\.\d{1,3}\.\d{1,3})(?!\.?\d)")
_REPLY_LEAD = re.compile(r"([2-5]\d\d)[ -](?:([245]\.\d{1,3}\.\d{1,3}) +)?")
_SMTP_PREFIX = re.compile(r"\s*([2-5]\d\d)(?=[\s-]|$)")
# A reply code in free text: 4xx/5xx cannot be an IPv4 octet, and a code stands alone.
_SMTP_IN_TEXT = re.compile(r"(?<![\w.\-/:\[])([45]\d\d)(?=[ -]|$)", re.M)
# Permanent codes that say nothing against the address itself.
_SOFT_PERMANENT = frozenset({"5.2.2", "5.2.3", "5.3.4"})
_SOFT_TEXT = re.compile(
    r"mailbox (?:is )?full|over ?quota|quota (?:exceeded|full)|exceeded (?:the |its )?"
    r"(?:storage|quota)|insufficient (?:system )?storage|retry time(?:out)? "
    r"(?:exceeded|not reached)|(?:too long|for too long) in the queue|"
    r"in the queue too long",
    re.I,
)


def bounce_type(
    action: str, status: str | None, smtp_code: int | None, diagnostic: str | None
) -> BounceType | None:
    """Hard or soft (the rules are in the module docstring)."""
    if action == "delayed":
        return "soft"
    if action != "failed":
        return None
    if status is not None:
        if status.startswith("4") or status in _SOFT_PERMANENT:
            return "soft"
        if status.startswith("5.1."):
            return "hard"
    if diagnostic and _SOFT_TEXT.search(diagnostic):
        return "soft"
    if status is not None and status.startswith("5"):
        return "hard"
    if smtp_code is not None and 400 <= smtp_code < 500:
        return "soft"
    return "hard"


def _status(value: str | None) -> str | None:
    """The enhanced status code at the start of a Status field, else None."""
    if not value:
        return None
    value = value.strip()
    match = _STATUS.match(value)
    if match is None or (match.end() < len(value) and value[match.end()] not in " (;"):
        return None
    return ".".join(str(int(group)) for group in match.groups())


def _status_in(text: str | None) -> str | None:
    if not text:
        return None
    match = _STATUS_IN_TEXT.search(text)
    return _status(match.group(1)) if match else None


def _smtp_code_in(text: str | None) -> int | None:
    if not text:
        return None
    match = _SMTP_IN_TEXT.search(text)
    return int(match.group(1)) if match else None


def _diagnostic(text: str | None) -> str | None:
    if not text:
        return None
    line = fold_whitespace(text[: MAX_DIAGNOSTIC_CHARS * 4])
    lead = _REPLY_LEAD.match(line)
    if lead is not None:
        # A multi-line reply repeats its codes on every line ("550-5.1.1 ..."): keep the
        # first, drop the repeats.
        repeat = (
            re.escape(lead.group(1)) + r"[ -]" + (re.escape(lead.group(2)) if lead.group(2) else "")
        )
        line = lead.group(0) + re.sub(
            r"(?:^|(?<=\s))" + repeat + r"(?: +|$)", "", line[lead.end() :]
        )
    line = line[:MAX_DIAGNOSTIC_CHARS].rstrip()
    return line or None


def _recipient(
    address: str, action: Action, status: str | None, smtp_code: int | None, text: str | None
) -> BouncedRecipient:
    diagnostic = _diagnostic(text)
    if status is None:
        status = _status_in(diagnostic)
    if smtp_code is None:
        smtp_code = _smtp_code_in(diagnostic)
    kind = bounce_type(action, status, smtp_code, diagnostic)
    return BouncedRecipient(address, action, status, smtp_code, diagnostic, kind)


_TRAILING_COMMENT = re.compile(r"\s+\([^()]*\)\s*$")


def _address(text: str | None) -> str | None:
    """A normalised address from ``user@example.com``, ``<...>`` or ``rfc822; ...``."""
    if not text or len(text) > 1000:
        return None
    kind, semicolon, value = text.partition(";")
    if semicolon:
        if kind.strip().lower() not in ("rfc822", "utf-8", ""):
            return None
        text = value
    text = _TRAILING_COMMENT.sub("", text).strip().rstrip(":,;.").strip()
    if text.startswith("<"):
        text = text[1:].split(">", 1)[0]
    local, at, domain = text.strip().rpartition("@")
    if not at or not local or any(char.isspace() for char in text.strip()):
        return None
    return normalise_address(local, domain)


def _report_kind(actions: Iterable[str]) -> ReportKind:
    found = set(actions)
    if "failed" in found or not found:
        return "bounce"
    if "delayed" in found:
        return "delay"
    return "delivered"


# Reading parts ----------------------------------------------------------------------


def _part_text(part: MimePart, limit: int = _MAX_PART_BYTES) -> str:
    body, cut = decode_body(part, limit)
    return decode_text(body, part.params.get("charset"), truncated=cut)


def _field_blocks(text: str) -> list[list[tuple[str, str]]]:
    """Header-like fields in blank-line separated blocks (a delivery-status body)."""
    blocks: list[list[tuple[str, str]]] = []
    current: list[tuple[str, list[str]]] = []

    def close() -> None:
        if current:
            blocks.append([(name, " ".join(parts).strip()) for name, parts in current])
            current.clear()

    for line in text.split("\n"):
        if not line.strip():
            close()
        elif line[0] in " \t":
            if current:
                current[-1][1].append(line.strip())
        else:
            name, colon, value = line.partition(":")
            name = name.strip().lower()
            if colon and name and len(name) <= 64 and not any(c.isspace() for c in name):
                current.append((name, [value.strip()]))
    close()
    return blocks


def _returned_headers(root: MimePart) -> Headers | None:
    """The header section of the returned message (message/rfc822 or the headers alone)."""
    for part in root.walk():
        if part is root:
            continue
        if part.content_type in ("message/rfc822", "message/global"):
            if part.embedded is not None and len(part.embedded.headers):
                return part.embedded.headers
        elif part.content_type in (
            "text/rfc822-headers",
            "text/rfc822-header",
            "message/global-headers",
        ):
            body = decode_body(part, _MAX_HEADER_BYTES)[0].lstrip(b"\r\n")
            headers = parse_header_block(body, 0, len(body))[0]
            if len(headers):
                return headers
    return None


def _message_id(headers: Headers | None) -> str | None:
    if headers is None:
        return None
    return first_message_id(headers.get("message-id"))[0]


def _notification_text(root: MimePart) -> str:
    """The human-readable part: the first text/plain outside any returned message, else
    the first text/html with its tags removed."""
    html_part: MimePart | None = None
    for part in root.walk():
        if part.content_type == "text/plain":
            return _part_text(part).replace("\r\n", "\n")
        if part.content_type == "text/html" and html_part is None:
            html_part = part
    if html_part is None:
        return ""
    source = re.sub(r"<br\s*/?>|</(?:p|div|tr)>", "\n", _part_text(html_part), flags=re.I)
    return html.unescape(re.sub(r"<[^<>]{0,4000}>", " ", source)).replace("\r\n", "\n")


def _mta(value: str | None) -> str | None:
    """``dns; mx.example.com`` -> ``mx.example.com``."""
    if not value:
        return None
    host = value.partition(";")[2] if ";" in value else value
    host = host.strip().split()[0] if host.strip() else ""
    return host.lower().rstrip(".")[:255] or None


# Complaints (ARF) -------------------------------------------------------------------

_NOT_COMPLAINTS = frozenset({"auth-failure", "not-spam"})


def _feedback_part(root: MimePart) -> tuple[bool, MimePart | None]:
    """Whether this is a feedback report, and its message/feedback-report part."""
    is_report = False
    for part in root.walk():
        if part.content_type == "multipart/report":
            if part.params.get("report-type", "").strip().lower() == "feedback-report":
                is_report = True
        elif part.content_type == "message/feedback-report":
            return True, part
    return is_report, None


def _complaint(root: MimePart, part: MimePart | None) -> BounceReport | None:
    fields: dict[str, list[str]] = {}
    if part is not None:
        for block in _field_blocks(_part_text(part, _MAX_HEADER_BYTES)):
            for name, value in block:
                fields.setdefault(name, []).append(value)
    feedback = (fields.get("feedback-type") or [""])[0].split(";")[0].strip().lower()
    if feedback in _NOT_COMPLAINTS:
        return None
    returned = _returned_headers(root)
    addresses = [_address(value) for value in fields.get("original-rcpt-to", [])]
    found = [address for address in addresses if address]
    if not found and returned is not None:
        to = parse_address_list(returned.get("to"))
        found = [to[0].address] if len(to) == 1 else []
    unique = list(dict.fromkeys(found))[:MAX_REPORT_RECIPIENTS]
    return BounceReport(
        kind="complaint",
        original_message_id=_message_id(returned),
        recipients=tuple(
            BouncedRecipient(address, "delivered", None, None, None, None) for address in unique
        ),
        verp_token=None,
        feedback_type=feedback[:64] or None,
        reporting_mta=_mta((fields.get("reporting-mta") or [""])[0]),
        format="arf",
    )


# Delivery status notifications (RFC 3464) -------------------------------------------

_DSN_TYPES = ("message/delivery-status", "message/global-delivery-status")
_RECIPIENT_FIELDS = frozenset(
    {
        "original-recipient",
        "final-recipient",
        "action",
        "status",
        "remote-mta",
        "diagnostic-code",
        "last-attempt-date",
        "final-log-id",
        "will-retry-until",
    }
)
_ORIGINAL_ID_FIELDS = ("x-original-message-id", "original-message-id")
_EXCHANGE_RETURNED = re.compile(
    r"^[ \t]*<?([^\s<>@]+@[^\s<>]+?)>?[ \t]*\n(?:[ \t]*\n)?[ \t]*"
    r"Remote Server returned '([^'\n]{1,1000})'",
    re.M | re.I,
)
_REMOTE_SERVER_RETURNED = re.compile(r"Remote Server returned '([^'\n]{1,1000})'", re.I)


def _dsn_records(
    blocks: list[list[tuple[str, str]]],
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Per-message fields and one record per recipient. A recipient field seen twice
    starts a new record, for reports that leave out the blank lines between them."""
    message: dict[str, str] = {}
    records: list[dict[str, str]] = []
    for block in blocks:
        current: dict[str, str] | None = None
        for name, value in block:
            if name not in _RECIPIENT_FIELDS:
                message.setdefault(name, value)
                continue
            if current is None or name in current:
                if len(records) >= MAX_REPORT_RECIPIENTS:
                    return message, records
                current = {}
                records.append(current)
            current[name] = value
    return message, records


def _record_action(record: dict[str, str], status: str | None) -> Action | None:
    words = re.findall(r"[a-z]+", record.get("action", "").lower())
    if words and words[0] in _ACTIONS:
        return _ACTIONS[words[0]]
    # An unreadable Action: the status class says what happened.
    status = status or _status_in(record.get("diagnostic-code"))
    if status is None:
        return None
    if status.startswith("5"):
        return "failed"
    return "delayed" if status.startswith("4") else "delivered"


def _is_exchange(headers: Headers, text: str, reporting_mta: str | None) -> bool:
    if any(name.startswith("x-ms-exchange") for name, _ in headers):
        return True
    if reporting_mta and reporting_mta.endswith(("outlook.com", "exchangelabs.com")):
        return True
    return bool(_REMOTE_SERVER_RETURNED.search(text)) or "Generating server:" in text


def _exchange_diagnostics(text: str) -> tuple[dict[str, str], str | None]:
    """Exchange's "Remote Server returned" lines by address, and the only one if one."""
    by_address: dict[str, str] = {}
    for match in _EXCHANGE_RETURNED.finditer(text[:_MAX_PART_BYTES]):
        address = _address(match.group(1))
        if address:
            by_address.setdefault(address, match.group(2))
    every = _REMOTE_SERVER_RETURNED.findall(text[:_MAX_PART_BYTES], 0)
    return by_address, (every[0] if len(every) == 1 else None)


def _dsn_recipient(
    record: dict[str, str], action: Action, fallback: str | None
) -> BouncedRecipient | None:
    address = _address(record.get("original-recipient")) or _address(record.get("final-recipient"))
    if address is None:
        return None
    code = record.get("diagnostic-code")
    smtp_code: int | None = None
    if code:
        kind, semicolon, detail = code.partition(";")
        if semicolon and kind.strip().lower() == "smtp":
            match = _SMTP_PREFIX.match(detail)
            smtp_code = int(match.group(1)) if match else None
            code = detail
        elif semicolon:
            code = detail
    text = code.strip() if code and code.strip() else fallback
    return _recipient(address, action, _status(record.get("status")), smtp_code, text)


def _dsn(root: MimePart, headers: Headers, subject: str, text: str) -> BounceReport | None:
    status_part = next((p for p in root.walk() if p.content_type in _DSN_TYPES), None)
    if status_part is None:
        return None
    message, records = _dsn_records(_field_blocks(_part_text(status_part).replace("\r", "")))
    reporting_mta = _mta(message.get("reporting-mta"))
    exchange = _is_exchange(headers, text, reporting_mta)
    by_address, only = _exchange_diagnostics(text) if exchange else ({}, None)
    default_action = _text_action(subject, text)
    # The human-readable part's account of each recipient, for records without a
    # Diagnostic-Code (Postfix writes "<address>: host ... said: 550 ...").
    described = {
        recipient.address: recipient.diagnostic
        for recipient in _angle_recipients(text, default_action)
        if recipient.diagnostic
    }
    recipients: list[BouncedRecipient] = []
    actions: list[Action] = []
    for record in records:
        action = _record_action(record, _status(record.get("status")))
        if action is None:
            if not (record.get("final-recipient") or record.get("original-recipient")):
                continue
            action = default_action
        actions.append(action)
        address = _address(record.get("original-recipient")) or _address(
            record.get("final-recipient")
        )
        fallback = by_address.get(address or "", only) or described.get(address or "")
        recipient = _dsn_recipient(record, action, fallback)
        if recipient is not None:
            recipients.append(recipient)
    if not recipients:
        # Nothing readable in the report (cut short, or no recipient fields): what the
        # human-readable part and the headers name.
        action = actions[0] if actions else default_action
        recipients = _text_recipients(headers, text, action)
        actions = actions or [action]
    original = _message_id(_returned_headers(root)) or _field_message_id(message, headers)
    return BounceReport(
        kind=_report_kind(actions),
        original_message_id=original,
        recipients=tuple(_unique(recipients)),
        verp_token=None,
        feedback_type=None,
        reporting_mta=reporting_mta,
        format="exchange" if exchange else "rfc3464",
    )


def _field_message_id(message: dict[str, str], headers: Headers) -> str | None:
    for name in _ORIGINAL_ID_FIELDS:
        found = first_message_id(message.get(name) or headers.get(name))[0]
        if found:
            return found
    return None


def _unique(recipients: list[BouncedRecipient]) -> list[BouncedRecipient]:
    seen: set[str] = set()
    kept: list[BouncedRecipient] = []
    for recipient in recipients:
        if recipient.address not in seen and len(kept) < MAX_REPORT_RECIPIENTS:
            seen.add(recipient.address)
            kept.append(recipient)
    return kept


# Non-standard notices ---------------------------------------------------------------

_QMAIL = re.compile(r"This is the qmail-send program at ([^\s.]+(?:\.[^\s.]+)*)", re.I)
_EXIM = re.compile(r"This message was created automatically by mail delivery software", re.I)
# Words of the line that introduces Exim's list (the line ends with a colon).
_EXIM_SECTION = re.compile(
    r"address(?:\(es\)|es)? failed|(?:has|have) not yet been delivered", re.I
)
_SENDMAIL_SECTION = re.compile(
    r"^[ \t]*-{3,} ?The following addresses had (permanent fatal|transient non-fatal) "
    r"errors ?-{3,}[ \t]*$",
    re.I | re.M,
)
_ANGLE_LINE = re.compile(r"^<([^<>\s]{3,320})>:?[ \t]*(.*)$")
_EXPANDED_FROM = re.compile(
    r"\((?:expanded|generated) from:? <?([^\s<>()]{1,320}@[^\s<>()]{1,255}?)>?\)", re.I
)
_COPY_MARKER = re.compile(
    r"^[ \t]*-{2,}[ \t]*(?:This is a copy of the message|Below this line is a copy of the "
    r"message|Original message follows|Message header follows|Undelivered message headers"
    r"|Original message headers|Returned message|Headers of the (?:original|returned) "
    r"message)[^\n]*$",
    re.I | re.M,
)
_DELAY_TEXT = re.compile(
    r"warning (?:message )?only|(?:has|have) not yet been delivered|still being retried|"
    r"will (?:be retried|continue|keep trying)|transient non-fatal|delivery (?:is )?delayed|"
    r"delayed mail|not been delivered yet|\(delay\)",
    re.I,
)
_DAEMON = re.compile(r"^(?:mailer[-_.]?daemon|postmaster)(?:[-+_.].*)?$", re.I)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|delivery (?:status notification|failure|has failed|failed|problem)|"
    r"returned (?:mail|to sender)|failure notice|mail delivery failed|non[- ]?delivery|"
    r"could not send|delayed mail|unzustellbar|nicht zustellbar|non remis|"
    r"no se pudo entregar",
    re.I,
)


def _text_action(subject: str, text: str) -> Action:
    notice = _notice(text)
    return "delayed" if _DELAY_TEXT.search(subject) or _DELAY_TEXT.search(notice) else "failed"


def _notice(text: str) -> str:
    """The notification alone, without the copy of the returned message."""
    marker = _COPY_MARKER.search(text)
    return text[: marker.start()] if marker else text


def _angle_recipients(text: str, action: Action) -> list[BouncedRecipient]:
    """qmail's (and Postfix's plain-text) paragraphs: ``<address>: reason...``."""
    found: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in _notice(text).split("\n"):
        match = _ANGLE_LINE.match(line)
        address = _address(match.group(1)) if match else None
        if match and address:
            if len(found) >= MAX_REPORT_RECIPIENTS:
                break
            current = [match.group(2)]
            found.append((address, current))
        elif not line.strip():
            current = None
        elif current is not None and len(current) < 64:
            current.append(line)
    return _described(found, action)


def _described(found: list[tuple[str, list[str]]], action: Action) -> list[BouncedRecipient]:
    """Recipients from (address, reason lines); "(expanded from <alias>)" in the reason
    names the address we sent to."""
    recipients: list[BouncedRecipient] = []
    for address, lines in found:
        reason = " ".join(lines)
        expanded = _EXPANDED_FROM.search(reason)
        original = _address(expanded.group(1)) if expanded else None
        recipients.append(_recipient(original or address, action, None, None, reason))
    return recipients


def _listed_recipients(text: str, start: int, action: Action) -> list[BouncedRecipient]:
    """Exim's and Sendmail's lists: an address on a line of its own (indented at most
    three spaces), its reason indented further below."""
    found: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text[start:].split("\n")[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" \t"))
        if current is not None and (indent >= 4 or line.startswith("\t")):
            if len(current) < 64:
                current.append(line)
            continue
        address = _address(line.strip()) if indent < 4 else None
        if address is None or len(found) >= MAX_REPORT_RECIPIENTS:
            break
        current = []
        found.append((address, current))
    return _described(found, action)


def _exim_section(text: str) -> int:
    """Where the line that introduces Exim's list of addresses starts, or -1."""
    position = 0
    while position < len(text):
        end = text.find("\n", position)
        end = len(text) if end < 0 else end
        line = text[position:end]
        if line.rstrip().endswith(":") and _EXIM_SECTION.search(line):
            return position
        position = end + 1
    return -1


def _header_recipients(headers: Headers, action: Action) -> list[BouncedRecipient]:
    found: list[BouncedRecipient] = []
    for value in headers.get_all("x-failed-recipients")[:MAX_REPORT_RECIPIENTS]:
        for mailbox in parse_address_list(value[:_MAX_HEADER_BYTES]):
            found.append(_recipient(mailbox.address, action, None, None, None))
    return found


def _text_recipients(headers: Headers, text: str, action: Action) -> list[BouncedRecipient]:
    return _angle_recipients(text, action) or _header_recipients(headers, action)


def _inline_message_id(text: str) -> str | None:
    """The Message-ID of a message returned inline, after a "copy of the message" line."""
    marker = _COPY_MARKER.search(text)
    if marker is None:
        return None
    rest = text[marker.end() : marker.end() + _MAX_HEADER_BYTES].lstrip("\r\n \t")
    data = rest.encode("utf-8", "replace")
    return _message_id(parse_header_block(data, 0, len(data))[0])


def _from_text(root: MimePart, headers: Headers, subject: str, text: str) -> BounceReport | None:
    action = _text_action(subject, text)
    reporting_mta: str | None = None
    recipients: list[BouncedRecipient]
    qmail = _QMAIL.search(text)
    sendmail = _SENDMAIL_SECTION.search(text)
    if qmail:
        format_ = "qmail"
        reporting_mta = qmail.group(1).lower()[:255]
        action = "delayed" if _DELAY_TEXT.search(_notice(text)) else "failed"
        recipients = _angle_recipients(text, action)
    elif _EXIM.search(text):
        format_ = "exim"
        section = _exim_section(text)
        recipients = _listed_recipients(text, section, action) if section >= 0 else []
        recipients = recipients or _header_recipients(headers, action)
    elif sendmail:
        format_ = "sendmail"
        action = "failed" if sendmail.group(1).lower().startswith("permanent") else "delayed"
        recipients = _listed_recipients(text, sendmail.start(), action)
    else:
        mailbox = parse_address_list(headers.get("from"))
        local = mailbox[0].address.rpartition("@")[0] if mailbox else ""
        daemon = bool(_DAEMON.match(local)) and bool(_BOUNCE_SUBJECT.search(subject))
        if not daemon and "x-failed-recipients" not in headers:
            return None
        format_ = "heuristic"
        recipients = _text_recipients(headers, text, action)
    original = (
        _message_id(_returned_headers(root))
        or _inline_message_id(text)
        or _field_message_id({}, headers)
    )
    return BounceReport(
        kind=_report_kind([action]),
        original_message_id=original,
        recipients=tuple(_unique(recipients)),
        verp_token=None,
        feedback_type=None,
        reporting_mta=reporting_mta,
        format=format_,
    )


def parse_bounce(raw: bytes) -> BounceReport | None:
    """What a bounce, delay/delivery notice or complaint reports, or None when the
    message is none of these. Never raises."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        return None
    tree = parse_tree(bytes(raw[:MAX_SCAN_BYTES]))
    root = tree.root
    is_feedback, feedback_part = _feedback_part(root)
    if is_feedback:
        return _complaint(root, feedback_part)
    headers = root.headers
    subject = decode_words(headers.get("subject") or "")[:1000]
    text = _notification_text(root)
    return _dsn(root, headers, subject, text) or _from_text(root, headers, subject, text)


# VERP -------------------------------------------------------------------------------

VERP_TAG = "+bnc-"
MAX_LOCAL_PART_OCTETS = 64
_TOKEN = re.compile(r"[a-z0-9]{1,40}")
_LOCAL_PART = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\x80-\U0010ffff-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~"
    r"\x80-\U0010ffff-]+)*"
)


def verp_address(local_part: str, domain: str, token: str) -> str | None:
    """``local+bnc-<token>@domain``, or None when it cannot be written: a local part
    over 64 octets with the tag, or a quoted local part. A token that is not 1 to 40
    characters of ``[a-z0-9]``, or an empty domain, is a ValueError (a caller's bug)."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise ValueError(f"a VERP token is 1-40 characters of [a-z0-9], not {token!r}")
    domain = domain.strip().lower()
    if not domain or "@" in domain or any(char.isspace() for char in domain):
        raise ValueError(f"not a domain for a VERP address: {domain!r}")
    if not _LOCAL_PART.fullmatch(local_part):
        return None
    local = f"{local_part}{VERP_TAG}{token}"
    if len(local.encode("utf-8", "surrogatepass")) > MAX_LOCAL_PART_OCTETS:
        return None
    return f"{local}@{domain}"


def verp_token(address: str) -> str | None:
    """The token of ``anything+bnc-<token>@domain`` (case-insensitive), else None."""
    if not isinstance(address, str) or len(address) > 1000:
        return None
    text = address.strip()
    if text.startswith("<") and text.endswith(">"):
        text = text[1:-1].strip()
    local, at, domain = text.rpartition("@")
    if not at or not domain:
        return None
    _, tag, token = local.lower().rpartition(VERP_TAG)
    return token if tag and _TOKEN.fullmatch(token) else None


def envelope_recipient_token(delivered_to: str | None) -> str | None:
    """The VERP token of the envelope recipient (RCPT TO, or Delivered-To), if any."""
    return verp_token(delivered_to) if delivered_to else None

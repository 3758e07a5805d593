"""Threading keys: the pure half of placing a message in a conversation (seed 003).

Three things are decided here, with no storage in sight:

* :func:`identifier_hash` — the key a ``thread_identifiers`` row is stored under: the
  lower-case hex SHA-256 of the identifier's UTF-8 bytes, nothing folded or trimmed,
  because the mail ecosystem compares identifiers octet for octet.
* :func:`thread_keys` — which identifiers bind a message to a conversation (its own
  Message-ID plus the In-Reply-To and References ancestors that look like message
  identifiers) and in which order a parent is looked for (In-Reply-To first, then the
  nearest reference).
* :func:`subject_key` / :func:`normalize_subject` — the comparison form of a subject:
  reply and forward prefixes in many languages (with counters and repetitions) and
  mailing-list tags stripped from the front, whitespace folded, case folded. Patch-series
  tags such as ``[PATCH v2 3/5]`` are kept: two patches of one series are different
  conversations, and so are two versions of one patch.

``docs/threading.md`` states the rules and the reasons for them.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

from postroom.mail.patterns import word_pattern

__all__ = [
    "FORWARD_PREFIXES",
    "MAX_ANCESTORS",
    "MAX_IDENTIFIER_OCTETS",
    "REPLY_PREFIXES",
    "SubjectKey",
    "ThreadKeys",
    "identifier_hash",
    "is_ancestor_identifier",
    "normalize_subject",
    "subject_key",
    "thread_keys",
]

# Seed 003 "Bounds on what a header may contribute": an identifier over 998 octets is
# dropped, and only the 64 ancestors nearest to the message are kept.
MAX_IDENTIFIER_OCTETS = 998
MAX_ANCESTORS = 64

# Reply prefixes as mail programs write them, case-folded. Sources: the prefixes Outlook,
# Thunderbird, Apple Mail, Gmail and Foxmail write in their localisations.
REPLY_PREFIXES: tuple[str, ...] = (
    "re",  # Latin, English and most others
    "aw",  # German "Antwort"
    "sv",  # Danish, Norwegian, Swedish, Icelandic "Svar"
    "vs",  # Finnish "Vastaus" (Norwegian and Danish forward "Videresendt", too)
    "antw",  # Dutch "Antwoord"
    "odp",  # Polish, Czech "Odpowiedź", "Odpověď"
    "odg",  # Croatian, Slovenian "Odgovor"
    "r",  # Italian Outlook
    "rif",  # Italian "Riferimento"
    "res",  # Portuguese "Resposta"
    "ynt",  # Turkish "Yanıt"
    "vá",  # Hungarian "Válasz"
    "atb",  # Latvian "Atbilde", Welsh "Ateb"
    "ats",  # Lithuanian "Atsakymas"
    "réf",  # French "Référence" (written "Réf. :")
    "ref",
    "απ",  # Greek
    "σχετ",  # Greek "Σχετικά"
    "отв",  # Russian "Ответ"
    "одг",  # Serbian
    "השב",  # Hebrew
    "回复",  # Chinese (simplified)
    "回覆",  # Chinese (traditional)
    "答复",  # Chinese (simplified)
    "答覆",  # Chinese (traditional)
    "返信",  # Japanese
    "회신",  # Korean
    "답장",  # Korean
)

FORWARD_PREFIXES: tuple[str, ...] = (
    "fwd",
    "fw",
    "wg",  # German "Weitergeleitet"
    "tr",  # French "Transféré"
    "vb",  # Swedish "Vidarebefordrat"
    "vl",  # Finnish "Välitetty"
    "rv",  # Spanish "Reenviado"
    "enc",  # Portuguese "Encaminhado"
    "pd",  # Polish "Przekaż dalej"
    "i",  # Italian Outlook "Inoltrato"
    "doorst",  # Dutch "Doorsturen"
    "fs",  # Icelandic "Framsent"
    "tov",  # Hungarian "Továbbítás"
    "ilt",  # Turkish "İlet" (re.IGNORECASE matches the dotted capital)
    "yml",  # Welsh "Ymlaen"
    "pārs",  # Latvian "Pārsūtīt"
    "πρθ",  # Greek
    "הועבר",  # Hebrew
    "转发",  # Chinese (simplified)
    "轉寄",  # Chinese (traditional)
    "转寄",
    "轉發",
    "転送",  # Japanese
    "전달",  # Korean
)


# A prefix is a known token, an optional counter ("Re[2]:", "Re(2):", "Re^2:"), and a
# colon. The colon is required: without it "Re" and "R" are ordinary words. "Réf."
# carries a full stop before its colon ("Réf. :"). The subject has been put through NFKC
# first, so the full-width colon of "回复：" is an ordinary colon here.
_PREFIX_RE = re.compile(
    rf"(?:{word_pattern(REPLY_PREFIXES + FORWARD_PREFIXES)})\.?"
    r"\s*(?:\[\s*\d+\s*\]|\(\s*\d+\s*\)|\^\s*\d+)?\s*:\s*",
    re.IGNORECASE,
)
_TAG_RE = re.compile(r"\[([^\[\]]{1,64})\]\s*")
# A list tag is one word naming a list ("[linux-bluetooth]", "[Pkg-emacsen-addons]"),
# starting with a letter. A tag with a space, a digit first, "#" or "/" in it is
# something else: a patch series, a ticket number, a commit hash.
_LIST_TAG_RE = re.compile(r"[^\W\d_][\w.+-]*")
# One-word tags that belong to a patch series rather than to a list, kept in place.
_PATCH_TAG_RE = re.compile(r"(?:patch|rfc|resend|pull|git|v\d+)\b.*|.*\bpatch\b.*", re.IGNORECASE)
_FWD_SUFFIX_RE = re.compile(r"\s*\(fwd\)\s*$", re.IGNORECASE)
_SPACE_RE = re.compile(r"\s+")
# A message identifier (RFC 5322 msg-id without its angle brackets) has an "@" with text
# on both sides and no white space, brackets or controls.
_BAD_ID_CHAR_RE = re.compile(r"[\s<>\x00-\x1f\x7f]")


@dataclass(frozen=True)
class SubjectKey:
    """A subject's comparison form and what was stripped to reach it."""

    normalized: str  # prefixes and list tags stripped, white space folded, case folded
    display: str  # the same without case folding, for showing
    reply_prefixed: bool  # a reply or forward prefix (or a "(fwd)" suffix) was stripped


def subject_key(subject: str | None) -> SubjectKey:
    """Strip reply/forward prefixes (repeated, with counters) and list tags from the front.

    Patch-series tags (``[PATCH v2 3/5]``, ``[RFC][PATCH 06/10]``) are kept, and so is
    everything after the first thing that is neither a prefix nor a list tag.
    """
    if not subject:
        return SubjectKey("", "", False)
    # NFKC folds full-width colons and brackets and compatibility forms, so "Ｒｅ：" and
    # "Re:" strip alike; folding white space first lets "Re:\t" and folded headers match.
    text = _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", subject)).strip()
    prefixed = False
    while text:
        match = _PREFIX_RE.match(text)
        if match is not None:
            text = text[match.end() :]
            prefixed = True
            continue
        tag = _TAG_RE.match(text)
        if tag is not None and _is_list_tag(tag.group(1)) and text[tag.end() :].strip():
            text = text[tag.end() :]
            continue
        break
    while True:
        suffix = _FWD_SUFFIX_RE.search(text)
        if suffix is None or suffix.start() == 0:
            break
        text = text[: suffix.start()]
        prefixed = True
    display = text.strip()
    return SubjectKey(display.casefold(), display, prefixed)


def _is_list_tag(content: str) -> bool:
    content = content.strip()
    return bool(_LIST_TAG_RE.fullmatch(content)) and not _PATCH_TAG_RE.fullmatch(content)


def normalize_subject(subject: str | None) -> str:
    """The comparison form of a subject (see :func:`subject_key`)."""
    return subject_key(subject).normalized


def identifier_hash(identifier: str) -> str:
    """Lower-case hex SHA-256 of the identifier exactly as stored (UTF-8, nothing folded)."""
    try:
        data = identifier.encode("utf-8")
    except UnicodeEncodeError:
        # A parser that decoded raw header bytes with surrogateescape hands back lone
        # surrogates; encoding them back restores the octets the sender wrote.
        try:
            data = identifier.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = identifier.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def _octets(identifier: str) -> int:
    return len(identifier.encode("utf-8", "surrogatepass"))


def is_ancestor_identifier(identifier: str | None) -> bool:
    """Whether an In-Reply-To/References value may bind a conversation.

    It must look like a message identifier: text on both sides of an "@", no white
    space, brackets or controls, at most 998 octets. Values such as ``yes`` (what
    ``git send-email`` writes when its In-Reply-To prompt is answered "yes") would
    otherwise glue every message that carries them into one conversation.
    """
    if not identifier or _BAD_ID_CHAR_RE.search(identifier):
        return False
    local, at, domain = identifier.rpartition("@")
    return bool(at and local and domain) and _octets(identifier) <= MAX_IDENTIFIER_OCTETS


@dataclass(frozen=True)
class ThreadKeys:
    """The identifiers that tie one message to a conversation."""

    own: str | None  # the message's Message-ID; None when empty or over the bound
    ancestors: tuple[str, ...]  # oldest first, nearest last; never the message's own
    parent_candidates: tuple[str, ...]  # In-Reply-To first, then references nearest first
    answers: bool  # the message carried an In-Reply-To or References at all

    @property
    def identifiers(self) -> tuple[str, ...]:
        """Own identifier first, then the ancestors: what ``thread_identifiers`` binds."""
        return ((self.own,) if self.own else ()) + self.ancestors


def thread_keys(
    rfc_message_id: str | None,
    in_reply_to: str | None,
    references: tuple[str, ...] | list[str],
) -> ThreadKeys:
    """Which identifiers bind a message and where its parent is looked for.

    The message's own identifier binds whatever its form (the parser vouches for it, and
    a synthetic one is unique); ancestors bind only when :func:`is_ancestor_identifier`
    accepts them. An ancestor equal to the message's own identifier is dropped, so a
    message naming itself is never its own parent. Repeated references keep their
    nearest position, and only the 64 nearest ancestors count.
    """
    own = rfc_message_id or None
    if own is not None and _octets(own) > MAX_IDENTIFIER_OCTETS:
        own = None
    answers = bool(in_reply_to) or bool(references)

    # In-Reply-To names the message answered, so it counts as the nearest ancestor of all
    # (and is never cut by the bound); then References from its nearest end, each
    # identifier at its first sighting.
    nearest_first: list[str] = []
    seen: set[str] = set()
    for identifier in (in_reply_to or "", *reversed(references)):
        if identifier == own or identifier in seen or not is_ancestor_identifier(identifier):
            continue
        seen.add(identifier)
        nearest_first.append(identifier)
        if len(nearest_first) == MAX_ANCESTORS:
            break
    return ThreadKeys(own, tuple(reversed(nearest_first)), tuple(nearest_first), answers)

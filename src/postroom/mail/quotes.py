"""The new content of a plain-text message: quoted replies and signatures removed.

Rules, applied in this order (docs/parsing.md has the table of examples):

1. A forwarded or replied-to original written out without ``>`` marks is cut to the end:
   ``-----Original Message-----`` in the common languages, an Outlook header block
   (``From:`` followed within a few lines by ``Sent:``/``Date:``, ``To:`` and
   ``Subject:``, in the common languages, optionally after a line of underscores), and an
   ``On <date>, <name> wrote:`` attribution that is followed by unmarked text. A block
   with nothing written above it is a plain forward and is kept.
2. Lines quoted with ``>`` are removed, together with the attribution line(s) right above
   a quoted block ("On ... wrote:", "Am ... schrieb ...:", "Le ... a écrit :",
   "... 写道：", mutt's "* Name <a@b> [date]:" ...): a line ending with a colon directly
   before the quote, that names a verb of writing, an address or a date.
3. The signature is cut at the first ``-- `` delimiter (also ``--`` whose trailing space a
   client ate) with at most 30 lines after it, at a mailing-list footer, and trailing
   "Sent from my iPhone"-style lines are dropped.

This is deliberately line-based and conservative: inline (interleaved) replies, as on
kernel lists, keep every unquoted line.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate
from operator import add

__all__ = ["extract_new_content"]

_ON_WROTE_OPENERS = r"On|Am|Le|El|Op|Il|Em|Den|Dne|W dniu|Dnia|Pe|Στις|В|\d{1,4}[./-]"
# Verbs that end an attribution, by language.
_WROTE = (
    r"wrote|writes|said|schrieb|a\s+écrit|a\s+ecrit|escribió|escribio|schreef|ha\s+scritto|"
    r"scrisse|escreveu|skrev|skrift|kirjoitti|napisał\(a\)|napisał|napisała|napsal\(a\)|"
    r"napsal|napsala|написал\(а\)|написал|написала|пишет|írta|yazdı|έγραψε|"
    r"wrote\s+on|写道|寫道|書きました|のメッセージ|작성|kirjutas|rašė|rakstīja|scrie"
)
_ATTRIBUTION_END = re.compile(rf"(?:{_WROTE})\s*[:：]\s*$", re.I)
_ON_WROTE = re.compile(rf"^\s*(?:{_ON_WROTE_OPENERS})\b.*(?:{_WROTE})\s*[:：]\s*$", re.I | re.S)
_OPENER = re.compile(rf"^\s*(?:{_ON_WROTE_OPENERS})\s", re.I)
_MUTT = re.compile(r"^\s*\*\s.+\[.+\]\s*:\s*$")
_CJK_ATTRIBUTION = re.compile(r"(写道|寫道|書きました|のメッセージ|작성)\s*[:：]?\s*$")

_ORIGINAL = re.compile(
    r"^\s*[-_=]{2,}\s*(?:Original\s+Message|Ursprüngliche\s+Nachricht|Originalnachricht|"
    r"Message\s+d'origine|Mensaje\s+original|Oorspronkelijk\s+bericht|Messaggio\s+originale|"
    r"Mensagem\s+original|Ursprungligt\s+meddelande|Oprindelig\s+meddelelse|"
    r"Opprinnelig\s+melding|Alkuperäinen\s+viesti|Wiadomość\s+oryginalna|"
    r"Původní\s+zpráva|Исходное\s+сообщение|Forwarded\s+message|Weitergeleitete\s+Nachricht|"
    r"Message\s+transféré|Mensaje\s+reenviado|原始邮件|原始郵件|元のメッセージ)"
    r"\s*[-_=]*\s*$",
    re.I,
)
_FROM_WORDS = (
    r"From|Von|De|Van|Da|Från|Fra|Od|От|Lähettäjä|Feladó|Kimden|Από|发件人|寄件者|差出人|送信者|"
    r"보낸\s*사람"
)
_HEADER_FROM = re.compile(rf"^\s*\*?(?:{_FROM_WORDS})\s*\*?\s*[:：]", re.I)
_HEADER_SENT = re.compile(
    r"^\s*\*?(?:Sent|Date|Gesendet|Datum|Envoyé|Date|Enviado|Fecha|Verzonden|Inviato|Data|"
    r"Skickat|Sendt|Lähetetty|Wysłano|Odesláno|Отправлено|Дата|Gönderildi|Tarih|发送时间|"
    r"日期|寄件日期|送信日時|日付|보낸\s*날짜)\s*\*?\s*[:：]",
    re.I,
)
_HEADER_TO = re.compile(
    r"^\s*\*?(?:To|An|À|A|Para|Aan|Till|Til|Do|Кому|Vastaanottaja|Címzett|Kime|Προς|收件人|"
    r"宛先|받는\s*사람)\s*\*?\s*[:：]",
    re.I,
)
_HEADER_SUBJECT = re.compile(
    r"^\s*\*?(?:Subject|Betreff|Objet|Asunto|Onderwerp|Oggetto|Assunto|Ämne|Emne|Temat|"
    r"Předmět|Тема|Aihe|Tárgy|Konu|Θέμα|主题|主旨|件名|제목)\s*\*?\s*[:：]",
    re.I,
)
_UNDERSCORES = re.compile(r"^\s*_{10,}\s*$")
_LIST_FOOTER = re.compile(r"mailing list|unsubscribe|listinfo|list info|mailman", re.I)
_MOBILE_SIGNATURE = re.compile(
    r"^\s*(?:Sent from my \w+|Sent from (?:Mail|Outlook|Yahoo Mail|Gmail)\b.*|"
    r"Get Outlook for \w+.*|Sent from my (?:iPhone|iPad|Android|BlackBerry|mobile).*|"
    r"Von meinem \w+ gesendet|Gesendet von meinem \w+.*|Envoyé de mon \w+.*|"
    r"Enviado desde mi \w+.*|Enviado do meu \w+.*|Verzonden vanaf mijn \w+.*|"
    r"Inviato da(?:l mio)? \w+.*|Skickat från min \w+.*|Sendt fra min \w+.*|"
    r"Отправлено с \w+.*|从我的\w+发送|iPhoneから送信)\s*$",
    re.I,
)
_SIGNATURE_MAX_LINES = 30
# Attributions are short; longer lines are never matched (which also keeps the regular
# expressions' backtracking bounded on hostile one-megabyte lines).
_MAX_ATTRIBUTION_CHARS = 400
_HEADER_BLOCK_LINES = 8

# Whole-text scans find the few lines worth a closer look, so that a 2,000-line patch
# costs a handful of regular-expression passes rather than Python work per line. Each
# pattern starts with a literal (the newline before a line, or the colon that ends it) so
# that the regular-expression engine can skip ahead instead of trying every position;
# the text is scanned with a newline added at both ends.
_QUOTE_LINE = re.compile(r"\n[ \t]*>")
_CUT_START = re.compile(rf"\n[ \t]*(?:[-_=]{{2,}}|\*?(?:{_FROM_WORDS})[ \t]*\*?[ \t]*[:：])", re.I)
_CUT_END = re.compile(r"[:：][ \t]*\n")
_SIGNATURE_CANDIDATE = re.compile(r"\n(?:--[ \t]?\n|[ \t]*_{10,}[ \t]*\n)")
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_BLANK_RUN = re.compile(r"\n{3,}")


class _Text:
    """The lines of a body and which of them are quoted (found by one scan)."""

    __slots__ = ("lines", "starts", "quoted")

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        lengths = accumulate(map(len, self.lines), initial=0)
        self.starts = list(map(add, lengths, range(len(self.lines) + 1)))
        # In "\n" + text, a match at p starts the line at offset p of the text.
        framed = "\n" + text
        self.quoted = {self.index(m.start()) for m in _QUOTE_LINE.finditer(framed)}

    def index(self, offset: int) -> int:
        return bisect_right(self.starts, offset) - 1

    def is_quote(self, index: int) -> bool:
        return index in self.quoted

    def blank(self, index: int) -> bool:
        return not self.lines[index].strip()

    def next_content(self, index: int) -> int | None:
        """The first non-blank line after ``index``."""
        for position in range(index + 1, len(self.lines)):
            if not self.blank(position):
                return position
        return None


def _is_outlook_block(lines: list[str], index: int) -> bool:
    if not _HEADER_FROM.match(lines[index]):
        return False
    window = lines[index + 1 : index + 1 + _HEADER_BLOCK_LINES]
    sent = any(_HEADER_SENT.match(line) for line in window)
    to = any(_HEADER_TO.match(line) for line in window)
    subject = any(_HEADER_SUBJECT.match(line) for line in window)
    return sent and subject and (to or len(window) < 3)


def _looks_like_attribution(text: str) -> bool:
    stripped = text.strip()
    if len(stripped) > _MAX_ATTRIBUTION_CHARS:
        return False
    if not stripped.endswith((":", "：")):
        return bool(_CJK_ATTRIBUTION.search(stripped))
    if _ATTRIBUTION_END.search(stripped) or _MUTT.match(stripped):
        return True
    return "@" in stripped or any(char.isdigit() for char in stripped)


def _attribution_start(body: _Text, index: int) -> int:
    """Where an attribution that ends at ``index`` begins (it may wrap over 3 lines)."""
    lines = body.lines
    if _OPENER.match(lines[index]):
        return index
    for back in (1, 2):
        previous = index - back
        if previous < 0 or body.blank(previous) or body.is_quote(previous):
            break
        if _OPENER.match(lines[previous]):
            return previous
    return index


def _joined_attribution(body: _Text, index: int) -> str:
    start = _attribution_start(body, index)
    return " ".join(line.strip() for line in body.lines[start : index + 1])


def _first_content(body: _Text) -> int | None:
    for index in range(len(body.lines)):
        if not body.blank(index) and not body.is_quote(index):
            return index
    return None


def _cut_original(body: _Text, text: str) -> int | None:
    """Rule 1: where an unmarked original starts (Outlook block, Original Message,
    On..wrote: followed by unmarked text), when something was written above it."""
    first = _first_content(body)
    if first is None:
        return None
    lines = body.lines
    framed = "\n" + text + "\n"
    starts = {body.index(m.start()) for m in _CUT_START.finditer(framed)}
    ends = {body.index(m.start() - 1) for m in _CUT_END.finditer(framed)}
    for index in sorted(starts | ends):
        if index < first or body.is_quote(index):
            continue
        line = lines[index]
        if _ORIGINAL.match(line) or _is_outlook_block(lines, index):
            if index == first:
                # Nothing written above the original: a plain forward, kept whole.
                return None
            if index > 0 and _UNDERSCORES.match(lines[index - 1]):
                index -= 1
            return index if index > first else None
        if line.rstrip().endswith((":", "：")) and len(line) <= _MAX_ATTRIBUTION_CHARS:
            joined = _joined_attribution(body, index)
            if len(joined) <= _MAX_ATTRIBUTION_CHARS and _ON_WROTE.match(joined):
                following = body.next_content(index)
                if following is not None and not body.is_quote(following):
                    start = _attribution_start(body, index)
                    if start > first:
                        return start
    return None


def _quote_drops(body: _Text, limit: int) -> set[int]:
    """Rule 2: ``>`` lines and the attribution right above each quoted block."""
    drop = {index for index in body.quoted if index < limit}
    for index in sorted(drop):
        if index - 1 in drop:
            continue
        # A block starts here (blank lines inside a block do not start a new one).
        above = index - 1
        while above >= 0 and body.blank(above):
            above -= 1
        if above < 0 or above in drop:
            continue
        if _looks_like_attribution(body.lines[above]) or _looks_like_attribution(
            _joined_attribution(body, above)
        ):
            drop.update(range(_attribution_start(body, above), above + 1))
    return drop


def _few_lines_after(kept: list[str], index: int) -> bool:
    """At most :data:`_SIGNATURE_MAX_LINES` non-blank lines follow ``index``."""
    count = 0
    for tail in kept[index + 1 :]:
        if tail.strip():
            count += 1
            if count > _SIGNATURE_MAX_LINES:
                return False
    return True


def _signature_cut(kept: list[str]) -> int | None:
    """Rule 3: where the signature or a list footer starts in the kept lines."""
    framed = "\n" + "\n".join(kept) + "\n"
    for match in _SIGNATURE_CANDIDATE.finditer(framed):
        index = framed.count("\n", 0, match.start())
        line = kept[index]
        if line.rstrip() == "--":
            if _few_lines_after(kept, index):
                return index
        elif len(kept) - index <= 10 and any(_LIST_FOOTER.search(t) for t in kept[index + 1 :]):
            return index
    return None


def _tidy(text: str) -> str:
    # The substitutions scan every character; the substring tests first are far cheaper.
    if " \n" in text or "\t\n" in text:
        text = _TRAILING_SPACE.sub("\n", text)
    text = text.strip()
    if "\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n", text)
    # Trailing "Sent from my iPhone" lines (a few at most).
    for _ in range(3):
        head, _newline, last = text.rpartition("\n")
        if not _MOBILE_SIGNATURE.match(last):
            break
        text = head.rstrip("\n")
    return text


def extract_new_content(text: str) -> str:
    """The part of a plain-text body its author wrote for this message."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    framed = "\n" + text + "\n"
    if (
        not _QUOTE_LINE.search(framed)
        and not _CUT_START.search(framed)
        and not _CUT_END.search(framed)
        and not _SIGNATURE_CANDIDATE.search(framed)
    ):
        return _tidy(text)
    body = _Text(text)
    limit = _cut_original(body, text)
    if limit is None:
        limit = len(body.lines)
    drop = _quote_drops(body, limit)
    kept = [line for index, line in enumerate(body.lines[:limit]) if index not in drop]
    cut = _signature_cut(kept)
    if cut is not None:
        kept = kept[:cut]
    return _tidy("\n".join(kept))

"""One-time codes and confirmation links in a message (the ``verifications`` table, read
by ``wait`` when an agent signs up somewhere and waits for the mail).

Pure: strings in, :class:`Verification` values out; no network, no ``store/``.
:func:`extract_verifications` never raises and does bounded, linear work on any input (the
subject, text and HTML are read up to :data:`MAX_SUBJECT_CHARS`, :data:`MAX_TEXT_CHARS`
and :data:`MAX_HTML_CHARS`).

Precision over recall. An agent that is handed a wrong code types it into a form and
fails, or worse, follows a wrong link; an agent handed nothing can still read the mail.
So a code counts only where the text *introduces* it:

    direct        "Your verification code is 482913", "Bestätigungscode: 482913"
    before        "482913 is your Slack confirmation code"
    own line      "Your sign-in code" followed, a line or two later, by a line "482913"

A number anywhere near the word "code" is not enough ("We sent a code to the phone
ending in 4321"), and a code must not look like part of something else: a phone number,
a price, a date, a time, a hex colour, a labelled order or ticket number, a year.

A link counts when it is https, carries a token (a long opaque path or query part), and
its anchor text, the text just before it, or (for a bare link) its path says verify,
confirm, activate, sign in, magic link or reset password — and nothing about it says
unsubscribe, preferences, privacy, terms, help or a social network.

Results come best first: the confidence of each finding is one of a few fixed levels
(see ``_Score``), and ties keep subject, text, HTML order and then reading order.
"""

from __future__ import annotations

import html as html_lib
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from postroom.mail.patterns import trie_pattern

__all__ = [
    "MAX_HTML_CHARS",
    "MAX_SUBJECT_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_VERIFICATIONS",
    "Verification",
    "extract_verifications",
]

MAX_SUBJECT_CHARS = 2_000
MAX_TEXT_CHARS = 100_000
MAX_HTML_CHARS = 300_000
MAX_VERIFICATIONS = 10
MAX_LINK_CHARS = 2_048

# Bounds on the work per text: keyword hits examined, URLs and anchors examined.
_MAX_KEYWORDS = 256
_MAX_LINKS = 256


@dataclass(frozen=True)
class Verification:
    """A one-time code or a confirmation link found in a message."""

    kind: str  # "code" | "link"
    value: str  # a code without separators ("123 456" -> "123456"), or the https URL


class _Score:
    """Confidence levels, high to low. A subject finding gets :data:`SUBJECT_BONUS`."""

    CODE_STRONG_DIRECT = 90  # strong keyword, then the code: "verification code: 482913"
    CODE_STRONG_OWN_LINE = 85  # strong keyword, the code alone on a following line
    LINK_LABELLED = 80  # anchor text says "Verify email" (+5 when the path agrees)
    CODE_WEAK_DIRECT = 80  # "Your code is 482913"
    LINK_IN_CONTEXT = 75  # text before the link says "verify" (+5 when the path agrees)
    CODE_WEAK_OWN_LINE = 75
    LINK_BY_PATH = 60  # bare link or "click here" whose path says /verify
    SUBJECT_BONUS = 5
    PATH_BONUS = 5


def extract_verifications(
    subject: str | None, text: str | None, html: str | None
) -> list[Verification]:
    """Return the codes and links of a message, the most confident first."""
    # (kind, value) -> its best sighting as a sort key: (-score, source rank, position).
    best: dict[tuple[str, str], tuple[int, int, int]] = {}

    def note(kind: str, value: str, score: int, rank: int, position: int) -> None:
        sighting = (-score, rank, position)
        if (kind, value) not in best or sighting < best[kind, value]:
            best[kind, value] = sighting

    if subject:
        prepared = _prepare(subject, MAX_SUBJECT_CHARS)
        for score, position, code in _codes(prepared):
            note("code", code, score + _Score.SUBJECT_BONUS, 0, position)
    if text:
        prepared = _prepare(text, MAX_TEXT_CHARS)
        for score, position, code in _codes(prepared):
            note("code", code, score, 1, position)
        for score, position, url in _text_links(prepared):
            note("link", url, score, 1, position)
    if html:
        rendered, anchors = _render_html(html[:MAX_HTML_CHARS])
        for score, position, code in _codes(rendered):
            note("code", code, score, 2, position)
        for score, position, url in _anchor_links(rendered, anchors):
            note("link", url, score, 2, position)
        for score, position, url in _text_links(rendered):
            note("link", url, score, 2, position)
    ranked = sorted(best, key=best.__getitem__)
    return [Verification(kind, value) for kind, value in ranked[:MAX_VERIFICATIONS]]


def _prepare(raw: str, limit: int) -> str:
    # NFKC can lengthen a string, hence the second cut.
    return _fold(raw[:limit])[:limit]


def _fold(raw: str) -> str:
    # NFKC folds full-width digits ("１２３４５６" in Japanese mail), no-break spaces and
    # compatibility letters to plain ones, so one set of ASCII patterns reads them all.
    # The full-width comma is kept apart first: "验证码是 902213，5分钟内有效" must not
    # read as the decimal 902213,5.
    return unicodedata.normalize("NFKC", raw.translate(_CJK_COMMA))


_CJK_COMMA = {0xFF0C: "、"}


# ---------------------------------------------------------------------------------------
# Codes

# Phrases that name a one-time code on their own. Spaces match a space, a hyphen or
# nothing ("sign-in code", "sign in code", "signin code").
_STRONG_PHRASES = (
    # English
    "verification code", "verify code", "confirmation code", "security code",
    "sign in code", "login code", "log in code", "one time code", "one time passcode",
    "one time password", "one time pin", "single use code", "authentication code",
    "auth code", "2fa code", "two factor code", "two factor authentication code",
    "2 step verification code", "activation code", "temporary code", "magic code",
    "otp", "passcode",
    # German
    "bestätigungscode", "verifizierungscode", "verifikationscode", "sicherheitscode",
    "anmeldecode", "einmalcode", "einmalpasswort", "aktivierungscode", "freischaltcode",
    # French
    "code de vérification", "code de confirmation", "code de sécurité",
    "code de connexion", "code à usage unique", "code d'activation", "code de validation",
    # Spanish, Portuguese
    "código de verificación", "código de confirmación", "código de seguridad",
    "código de acceso", "código de inicio de sesión", "código de activación",
    "código de verificação", "código de confirmação", "código de segurança",
    "código de acesso",
    # Italian, Dutch
    "codice di verifica", "codice di conferma", "codice di sicurezza", "codice di accesso",
    "codice monouso", "verificatiecode", "bevestigingscode", "beveiligingscode", "inlogcode",
    # Nordic, Finnish, Polish, Czech, Turkish
    "verifieringskod", "bekräftelsekod", "säkerhetskod", "engångskod", "bekreftelseskode",
    "sikkerhetskode", "bekræftelseskode", "verifikationskode", "engangskode",
    "vahvistuskoodi", "varmennuskoodi", "kod weryfikacyjny", "kod potwierdzający",
    "kod bezpieczeństwa", "kod jednorazowy", "ověřovací kód", "potvrzovací kód",
    "doğrulama kodu", "onay kodu", "güvenlik kodu",
    # Russian, Ukrainian
    "код подтверждения", "проверочный код", "код проверки", "код безопасности",
    "одноразовый код", "код для входа", "код підтвердження",
    # Japanese, Chinese, Korean
    "認証コード", "確認コード", "ワンタイムパスワード", "セキュリティコード", "認証番号",
    "ログインコード", "验证码", "驗證碼", "校验码", "动态码", "动态密码",
    "인증번호", "인증 번호", "인증코드", "인증 코드", "보안 코드",
    # Others
    "mã xác minh", "mã xác nhận", "mã otp", "kode verifikasi", "kode otp", "รหัสยืนยัน",
    "رمز التحقق", "رمز التأكيد", "קוד אימות", "κωδικός επαλήθευσης",
    "सत्यापन कोड",
)  # fmt: skip
# Words that name a code only in a tight pattern ("your code is", "Code: 482913") and
# only when not qualified as another kind of code (see _OTHER_CODES).
_WEAK_WORDS = (
    "code", "código", "codigo", "codice", "kod", "kód", "код", "kode", "kodu",
    "koodi", "コード", "코드",
)  # fmt: skip
# "promo code", "zip code", "QR code", ...: the word before "code" says it is no
# one-time code.
_OTHER_CODES = frozenset(
    {
        "promo", "promotional", "promotion", "discount", "coupon", "voucher", "gift",
        "referral", "invite", "invitation", "postal", "post", "zip", "pin", "area",
        "country", "dialing", "dialling", "source", "qr", "dress", "error", "status",
        "tracking", "product", "booking", "reservation", "offer", "sale", "bar", "reference",
        "ref", "customer", "account", "client", "sort", "swift", "bank", "tax", "vat",
        "course", "event", "ticket", "color", "colour", "html", "css", "embed", "iso",
        "airport", "backup", "recovery", "rabatt", "gutschein", "aktions", "réduction",
        "descuento", "cupón", "sconto", "korting", "скидочный", "промокод", "exit",
        "response", "hs", "sic",
    }
)  # fmt: skip
# A line that speaks of a promotion or a booking gives "code" and "confirmation code"
# another meaning: "Use code SAVE20 for 20% off", "Flight confirmation code: XKJ4PQ".
_OTHER_PURPOSE = re.compile(
    r"%|\boff\b|discount|coupon|promo|checkout|\bsave\b|\bsale\b|voucher|rabatt|gutschein"
    r"|réduction|remise|descuento|cupón|sconto|korting|скидк|割引|优惠|折扣"
    r"|flight|booking|reservation|itinerary|\bpnr\b|check-in|hotel|airline|boarding|buchung"
    r"|réservation|reserva|vuelo|prenotazione",
    re.IGNORECASE,
)
# Strong phrases that booking mail uses too.
_AMBIGUOUS_PHRASES = (
    "confirmation",
    "code de confirmation",
    "código de confirmación",
    "código de confirmação",
    "codice di conferma",
)
_NOT_CODE_CONTEXT = frozenset({"of", "review", "reviews", "snippet", "editor", "base", "block"})


def _atoms(phrase: str) -> list[str]:
    # Typographic and straight apostrophes both occur ("code d’activation"); a space
    # matches a space, a hyphen or nothing.
    atoms: list[str] = []
    for n, word in enumerate(phrase.split(" ")):
        if n:
            atoms.append(r"[\s\-]?")
        atoms += ["['’]" if char == "'" else re.escape(char) for char in word]
    return atoms


def _keyword_key(matched: str) -> str:
    # What a phrase and every way of writing it have in common.
    return _SEPARATORS.sub("", matched).replace("’", "'")


_SEPARATORS = re.compile(r"[\s\-]")
_STRONG_KEYS = frozenset(_keyword_key(phrase) for phrase in _STRONG_PHRASES)


# Matched against the lower-cased text, without re.IGNORECASE and without look-behinds:
# both would stop the engine from skipping quickly over text that cannot start a keyword,
# which costs ten times more on a long body. Word boundaries are checked afterwards
# (_at_word_boundaries). One trie of strong and weak keywords: the longest wins, so
# "code de vérification" is read as the strong phrase, not the weak "code".
_KEYWORD = re.compile(trie_pattern(_atoms(phrase) for phrase in _STRONG_PHRASES + _WEAK_WORDS))

# A code: 4-10 digits or upper-case letters and digits, or two groups of 3-5 split by a
# space (digits only, "123 456") or a hyphen ("ABC-DEF", "123-456").
_TOKEN = re.compile(
    r"""
    (?<![0-9A-Za-z])
    (?:
        (?P<spaced>[0-9]{3,5}[ ][0-9]{3,5})
      | (?P<dashed>[0-9A-Z]{3,5}-[0-9A-Z]{3,5})
      | (?P<plain>[0-9A-Z]{4,10}+)
    )
    (?![0-9A-Za-z])
    """,
    re.VERBOSE,
)

# What may stand between a keyword and the code it introduces, on one line:
# "Your code is 482913", "Bestätigungscode lautet: 482913", "code for Acme: 482913".
_CONNECTORS = frozenset(
    {
        "is", "ist", "lautet", "est", "es", "é", "è", "er", "är", "on", "jest", "je", "это",
        "là", "adalah", "คือ",
    }
)  # fmt: skip
_CJK_CONNECTORS = ("は", "为", "為", "是", "는", "은", "が")
_QUOTES = " \t\"'“”‘’«»„*_[](){}<>"
# "482913 is your Slack verification code": what may stand between a code and the
# keyword after it.
_BEFORE_GAP = re.compile(
    r"""^[\s"'“”«»*\])]{0,3}
    (?:
        (?:is|est|ist|es|é|è|är|er)\s+
        (?:(?:your|the|a|an|votre|ton|ta|ihr|dein|deine|tu|su|seu|sua|o\ seu|a\ sua|
           il\ tuo|la\ tua|uw|je|din|ваш|твой)\b[^\n.!?;]{0,30})?
      | [:\-–—|][ \t]*(?:your\b[^\n.!?;]{0,30})?
      | (?:是|为|為|は)(?:您的|你的|您|你|あなたの)?
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
_YEAR = re.compile(r"(?:19|20)[0-9]{2}")
# What a number right before a code says it is ("Order 123456", "ticket #48213").
_LABEL_WORDS = frozenset(
    {
        "order", "invoice", "ticket", "case", "ref", "reference", "booking", "reservation",
        "account", "acct", "customer", "member", "id", "phone", "tel", "fax", "call",
        "mobile", "zip", "postcode", "plz", "room", "suite", "apt", "flight", "seat", "gate",
        "page", "version", "v", "no", "nr", "number", "tracking", "item", "sku", "model",
        "serial", "transaction", "txn", "receipt", "ending", "ends", "bestellnummer",
        "bestellung", "rechnung", "kundennummer", "auftrag", "commande", "facture",
        "pedido", "factura", "ordine", "fattura", "step", "year", "box", "unit", "floor",
    }
)  # fmt: skip
_UNIT_WORDS = frozenset(
    {
        "minutes", "minute", "mins", "min", "hours", "hour", "hrs", "hr", "seconds",
        "second", "secs", "sec", "days", "day", "px", "pt", "em", "points", "pts", "items",
        "kb", "mb", "gb", "usd", "eur", "gbp", "euro", "euros", "dollars", "minuten",
        "stunden", "minutos", "minuti", "минут", "street", "st", "avenue", "ave", "road",
        "rd", "parkway", "blvd", "lane", "strasse", "straße", "rue", "calle", "via",
    }
)  # fmt: skip
_STICKY_BEFORE = frozenset("#$€£¥₹₩₽+@&/\\=_%©®™§№~^")
_STICKY_AFTER = frozenset("%‰°€£$¥₹/@+_=")
_PREVIOUS_WORD = re.compile(r"([^\W\d_]+)[\s:#.\-]*$")
_NEXT_WORD = re.compile(r"^[ \t]*([^\W\d_]+)")


def _codes(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield (score, position, code) for every code the text introduces."""
    # "İ" is the one character whose lower case is two code points; offsets must agree.
    lowered = text.replace("\u0130", "i").lower()
    for count, keyword in enumerate(_KEYWORD.finditer(lowered)):
        if count >= _MAX_KEYWORDS:
            return
        if not _at_word_boundaries(text, keyword.start(), keyword.end()):
            continue
        strong = _keyword_key(keyword[0]) in _STRONG_KEYS
        if not strong and not _names_one_time_code(text, keyword.start(), keyword.end()):
            continue
        ambiguous = not strong or lowered.startswith(_AMBIGUOUS_PHRASES, keyword.start())
        line = _line_around(text, keyword.start(), keyword.end())
        if ambiguous and _OTHER_PURPOSE.search(line):
            continue
        yield from _codes_after(text, keyword.end(), strong)
        yield from _codes_before(text, keyword.start(), strong)


def _at_word_boundaries(text: str, start: int, end: int) -> bool:
    """Whether a keyword stands as a word of its own: "code" is no keyword inside
    "barcode" or "Unicode". Only for scripts written with spaces between words; Chinese,
    Japanese and Korean keywords run into the words around them."""
    first, last = text[start], text[end - 1]
    if start > 0 and _spaced_letter(first) and text[start - 1].isalpha():
        return False
    return not (end < len(text) and _spaced_letter(last) and text[end].isalpha())


def _spaced_letter(char: str) -> bool:
    # Latin, Greek and Cyrillic (the scripts before Armenian), Arabic, Hebrew, Thai and
    # Vietnamese's Latin all separate words with spaces; CJK and Hangul do not.
    return char.isalpha() and not ("\u3040" <= char <= "\u9fff" or "\uac00" <= char <= "\ud7af")


def _line_around(text: str, start: int, end: int) -> str:
    # The line the keyword is on, at most 100 characters either side.
    line_start = max(text.rfind("\n", max(0, start - 100), start) + 1, start - 100)
    line_end = text.find("\n", end, end + 100)
    return text[line_start : line_end if line_end != -1 else end + 100]


def _names_one_time_code(text: str, start: int, end: int) -> bool:
    before = text[max(0, start - 30) : start].rpartition("\n")[2]
    previous = _PREVIOUS_WORD.search(before)
    if previous and previous[1].lower() in _OTHER_CODES:
        return False
    following = _NEXT_WORD.match(text, end, min(len(text), end + 20))
    return not (following and following[1].lower() in _NOT_CODE_CONTEXT)


def _codes_after(text: str, end: int, strong: bool) -> Iterator[tuple[int, int, str]]:
    window_end = min(len(text), end + 200)
    for token in _TOKEN.finditer(text, end, window_end):
        gap = text[end : token.start()]
        if "\n" not in gap:
            if _is_direct(gap) and _is_code(text, token):
                score = _Score.CODE_STRONG_DIRECT if strong else _Score.CODE_WEAK_DIRECT
                yield score, token.start(), _normalise(token[0])
        elif _is_own_line(text, gap, token) and _is_code(text, token):
            score = _Score.CODE_STRONG_OWN_LINE if strong else _Score.CODE_WEAK_OWN_LINE
            yield score, token.start(), _normalise(token[0])
        # Only the first code-shaped token after a keyword is the one it introduces.
        if _is_code(text, token):
            return


def _codes_before(text: str, start: int, strong: bool) -> Iterator[tuple[int, int, str]]:
    line_start = text.rfind("\n", max(0, start - 60), start) + 1
    window_start = max(line_start, start - 60)
    tokens = list(_TOKEN.finditer(text, window_start, start))
    if not tokens:
        return
    token = tokens[-1]
    if _BEFORE_GAP.match(text[token.end() : start]) and _is_code(text, token):
        score = _Score.CODE_STRONG_DIRECT if strong else _Score.CODE_WEAK_DIRECT
        yield score, token.start(), _normalise(token[0])


def _is_direct(gap: str) -> bool:
    if len(gap) > 48 or "?" in gap or "!" in gap or ". " in gap:
        return False
    stripped = gap.strip(_QUOTES)
    if not stripped:
        return True
    if stripped[-1] in ":：=-–—":
        return True
    if stripped.endswith(_CJK_CONNECTORS):
        return True
    last_word = stripped.rsplit(None, 1)[-1].lower()
    return last_word in _CONNECTORS


def _is_own_line(text: str, gap: str, token: re.Match[str]) -> bool:
    lines = gap.split("\n")
    rest_of_keyword_line = lines[0]
    # "Didn't request a verification code? Contact us" asks about a code; it does not
    # introduce one.
    if "?" in rest_of_keyword_line or len(rest_of_keyword_line) > 80:
        return False
    if sum(1 for line in lines[1:-1] if line.strip(_QUOTES)) > 1:
        return False
    line_end = text.find("\n", token.end())
    line = text[token.start() - len(lines[-1]) : line_end if line_end != -1 else len(text)]
    return line.strip(_QUOTES) == token[0]


def _is_code(text: str, token: re.Match[str]) -> bool:
    raw = token[0]
    value = _normalise(raw)
    if not 4 <= len(value) <= 10:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_letter = any(c.isalpha() for c in value)
    if has_letter and not has_digit:
        # Upper-case words ("CODE", "FREE") are not codes; letters-only codes are
        # accepted only in the split form "ABC-DEF".
        if token["dashed"] is None:
            return False
    elif has_letter and len(value) < 5:
        return False
    if value.isdigit() and len(value) == 4 and _YEAR.fullmatch(value):
        return False
    return _context_allows(text, token.start(), token.end())


def _context_allows(text: str, start: int, end: int) -> bool:
    before = text[max(0, start - 2) : start]
    after = text[end : end + 2]
    if before:
        b1 = before[-1]
        b2 = before[0] if len(before) == 2 else ""
        if b1 in _STICKY_BEFORE:
            return False
        if b1 == ":" and b2.isdigit():
            return False  # a time: "10:30"
        if b1 in ".,-" and b2.isalnum():
            return False  # a decimal, a version or a longer identifier
        if b1 in " )" and (b2.isdigit() or b2 == ")"):
            return False  # one group of a phone number or a longer number
    if after:
        a1 = after[0]
        a2 = after[1] if len(after) == 2 else ""
        if a1.isascii() and a1.isalnum():
            return False  # the window cut a longer token
        if a1 in _STICKY_AFTER:
            return False
        if a1 in ".,:-" and a2.isalnum():
            return False
        if a1 == " " and a2.isdigit():
            return False
    previous = _PREVIOUS_WORD.search(text, max(0, start - 24), start)
    if previous and previous[1].lower() in _LABEL_WORDS:
        return False
    following = _NEXT_WORD.match(text, end, min(len(text), end + 16))
    if following and following[1].lower() in _UNIT_WORDS:
        return False
    return not _inside_url_or_address(text, start, end)


def _inside_url_or_address(text: str, start: int, end: int) -> bool:
    left = start
    while left > 0 and start - left < 300 and not text[left - 1].isspace():
        left -= 1
    right = end
    while right < len(text) and right - end < 300 and not text[right].isspace():
        right += 1
    word = text[left:right]
    return "://" in word or "@" in word or "www." in word.lower()


def _normalise(raw: str) -> str:
    return raw.replace(" ", "").replace("-", "")


# ---------------------------------------------------------------------------------------
# Links

_ACTION = re.compile(
    r"""
    (?<![^\W\d_])
    (?:verify|verification|confirm(?!ation)|activate|activation|validate
      |sign[\s\-]?in(?!g)|log[\s\-]?in|magic[\s\-]link|one[\s\-]click\ sign
      |reset\ (?:your\ |my\ )?password|password\ reset|set\ (?:a\ |your\ )?(?:new\ )?password
      |choose\ a\ (?:new\ )?password|create\ (?:a\ |your\ )?password
      |complete\ (?:your\ )?(?:registration|sign[\s\-]?up)
      |bestätig|verifizier|aktivier|anmelden|einloggen|passwort\ (?:zurücksetzen|festlegen)
      |confirmer|vérifier|activer|se\ connecter|connexion|réinitialiser
      |confirmar|verificar|activar|ativar|iniciar\ sesión|restablecer|redefinir
      |conferma|verifica|attiva|accedi|reimposta|bevestig|verifiëren|activeren|inloggen
      |подтверд|активир|войти|сбросить\ пароль)
    |確認|認証|ログイン|有効化|再設定|验证|激活|登录|登入|重置密码|인증|로그인
    """,
    re.IGNORECASE | re.VERBOSE,
)
_EXCLUDED_LABEL = re.compile(
    r"""
    unsubscribe|opt[\s\-]?out|preferences|privacy|terms|view\ (?:it\ )?(?:in|on)\ (?:your\ )?browser
    |view\ online|web\ ?version|help|support|contact|faq|cookie|legal|report|feedback
    |not\ you|wasn'?t\ me|not\ me|secure\ your|sign\ out|log\ out|follow\ us|facebook|twitter
    |linkedin|instagram|youtube|tiktok|download|app\ store|google\ play
    |abmelden|abbestellen|datenschutz|impressum|agb|désabonner|désinscri|confidentialité
    |darse\ de\ baja|privacidad|cancelar\ suscripción|disiscriviti|uitschrijven|afmelden
    |отписаться|配信停止|退订|取消订阅
    """,
    re.IGNORECASE | re.VERBOSE,
)
_EXCLUDED_URL = re.compile(
    r"unsubscribe|/unsub|opt[\-_]?out|preferences|manage[\-_]subscription|/privacy|/terms"
    r"|/legal|/help|/support|/faq|/contact|/track/open|/open\b|pixel|beacon"
    r"|\.(?:gif|png|jpe?g|webp|svg|ico)(?:$|\?)"
)
_ACTION_PATH = re.compile(
    r"verif|confirm|activat|validat|magic|sign[\-_]?in|log[\-_]?in|auth|reset|password"
    r"|otp|token="
)
_GENERIC_LABEL = re.compile(
    r"^(?:(?:click|tap|press)\s+)?(?:here|this\s+link|the\s+link|link|button|below|hier"
    r"|ici|aquí|aqui|qui|здесь|こちら|这里|点击这里|点击此处)[.!:]?$",
    re.IGNORECASE,
)
_TOKEN_PART = re.compile(r"[A-Za-z0-9_\-~.%=+]{16,}+")
_SOCIAL_HOSTS = (
    "facebook.com", "fb.com", "twitter.com", "x.com", "t.co", "linkedin.com",
    "instagram.com", "youtube.com", "youtu.be", "tiktok.com", "pinterest.com", "reddit.com",
    "discord.gg", "threads.net", "whatsapp.com", "wa.me", "t.me", "apps.apple.com",
    "itunes.apple.com", "play.google.com",
)  # fmt: skip
_HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+(?:[a-z]{2,24}|xn--[a-z0-9\-]+)")
_TEXT_URL = re.compile(r"(?i:https)://[^\s<>\"'`{}|\\^\[\]]{3,2048}+")


def _text_links(text: str) -> Iterator[tuple[int, int, str]]:
    for count, match in enumerate(_TEXT_URL.finditer(text)):
        if count >= _MAX_LINKS:
            return
        url = _clean_url(match[0].rstrip(".,;:!?)'\"»>"))
        if url is None:
            continue
        context = _context_before(text, match.start())
        score = _link_score(url, "", context)
        if score is not None:
            yield score, match.start(), url


def _context_before(text: str, position: int) -> str:
    """The words that introduce a link: the start of its own line, or when the link is
    alone on its line, the nearest non-blank line above it."""
    before = text[max(0, position - 300) : position]
    lines = before.split("\n")
    if lines[-1].strip(_QUOTES + ":-–—→>"):
        return lines[-1]
    for line in reversed(lines[:-1]):
        if line.strip():
            return line
    return ""


def _anchor_links(text: str, anchors: list[_Anchor]) -> Iterator[tuple[int, int, str]]:
    for anchor in anchors[:_MAX_LINKS]:
        url = _clean_url(anchor.href)
        if url is None:
            continue
        label = " ".join([*text[anchor.start : anchor.end].split(), *anchor.alts])
        context = text[max(0, anchor.start - 200) : anchor.start]
        score = _link_score(url, label, context)
        if score is not None:
            yield score, anchor.start, url


def _clean_url(raw: str) -> str | None:
    url = raw.strip()
    if len(url) > MAX_LINK_CHARS or url[:8].lower() != "https://":
        return None
    if any(c.isspace() or ord(c) < 32 or c in "<>\"'`" for c in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    host = (parts.hostname or "").rstrip(".")
    if not _HOST.fullmatch(host):
        return None
    return "https://" + url[8:]


def _link_score(url: str, label: str, context: str) -> int | None:
    lowered = unquote(url).lower()
    if _EXCLUDED_URL.search(lowered) or _EXCLUDED_LABEL.search(label):
        return None
    parts = urlsplit(url)
    after_host = url[len(parts.scheme) + 3 + len(parts.netloc) :]
    if not any(_looks_like_token(m[0]) for m in _TOKEN_PART.finditer(after_host)):
        return None
    path_says = bool(_ACTION_PATH.search(after_host.lower()))
    bonus = _Score.PATH_BONUS if path_says else 0
    generic = (
        not label or bool(_GENERIC_LABEL.match(label)) or label.lower().startswith(("http", "www."))
    )
    if not generic and _ACTION.search(label):
        score = _Score.LINK_LABELLED + bonus
        labelled = True
    elif generic and _ACTION.search(context) and not _EXCLUDED_LABEL.search(context[-80:]):
        score = _Score.LINK_IN_CONTEXT + bonus
        labelled = False
    elif generic and path_says:
        score = _Score.LINK_BY_PATH
        labelled = False
    else:
        return None
    host = (parts.hostname or "").lower()
    social = any(host == s or host.endswith("." + s) for s in _SOCIAL_HOSTS)
    if social and not (labelled and path_says):
        return None
    return score


def _looks_like_token(part: str) -> bool:
    # An opaque token has a digit, or both cases; "verify-your-email-address" has neither.
    has_digit = any(c.isdigit() for c in part)
    mixed = any(c.islower() for c in part) and any(c.isupper() for c in part)
    return has_digit or mixed


# ---------------------------------------------------------------------------------------
# HTML to text, with anchors


@dataclass(frozen=True)
class _Anchor:
    href: str
    start: int  # offsets of the anchor text in the rendered text
    end: int
    alts: tuple[str, ...]  # alt text of images inside the anchor (image buttons)


_BLOCK_TAGS = frozenset(
    {
        "p", "div", "br", "tr", "td", "th", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5",
        "h6", "table", "tbody", "thead", "tfoot", "section", "article", "header", "footer",
        "blockquote", "pre", "hr", "title", "center", "dd", "dt", "dl", "address", "main",
        "nav", "aside", "form", "fieldset", "caption",
    }
)  # fmt: skip
_SKIPPED_TAGS = frozenset({"script", "style", "template", "xml"})
_TAG_NAME = re.compile(r"(/?)([A-Za-z][A-Za-z0-9:\-]{0,31})")
_CLOSERS = {name: re.compile(rf"</{name}\s*>", re.IGNORECASE) for name in _SKIPPED_TAGS}
_HREF = re.compile(r"""\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)
_ALT = re.compile(r"""\balt\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)
_SPACES = re.compile(r"[ \t\r\n\f]+")


def _attribute(pattern: re.Pattern[str], tag: str) -> str | None:
    match = pattern.search(tag)
    if match is None:
        return None
    value = next(group for group in match.groups() if group is not None)
    return html_lib.unescape(value).strip()


def _render_html(source: str) -> tuple[str, list[_Anchor]]:
    """Render HTML to text the way a reader sees it, in one linear pass.

    Block elements start a new line, inline ones add nothing (``<b>48</b>29`` reads
    ``4829``), source whitespace collapses, script and style contents are dropped and
    character references are decoded. Malformed markup never raises: an unterminated
    tag, comment or script ends the rendering there.
    """
    parts: list[str] = []
    length = 0
    anchors: list[_Anchor] = []
    open_anchor: tuple[str, int, list[str]] | None = None

    def emit(fragment: str) -> None:
        nonlocal length
        if fragment:
            parts.append(fragment)
            length += len(fragment)

    def emit_text(raw: str) -> None:
        if raw:
            emit(_fold(html_lib.unescape(_SPACES.sub(" ", raw))))

    def close_anchor() -> None:
        nonlocal open_anchor
        if open_anchor is not None:
            href, start, alts = open_anchor
            anchors.append(_Anchor(href, start, length, tuple(alts)))
            open_anchor = None

    position = 0
    next_gt = -1  # cached: the first ">" at or after the current "<"
    size = len(source)
    while position < size:
        lt = source.find("<", position)
        if lt == -1:
            emit_text(source[position:])
            break
        emit_text(source[position:lt])
        if source.startswith("<!--", lt):
            end = source.find("-->", lt + 4)
            if end == -1:
                break
            position = end + 3
            continue
        if next_gt < lt:
            next_gt = source.find(">", lt)
            if next_gt == -1:
                break
        tag = source[lt + 1 : next_gt]
        if tag.startswith(("!", "?")):
            position = next_gt + 1  # a doctype, CDATA or processing instruction
            continue
        name_match = _TAG_NAME.match(tag)
        if name_match is None:
            # "a < b" is text, not a tag.
            emit_text("<")
            position = lt + 1
            continue
        position = next_gt + 1
        closing, name = name_match[1] == "/", name_match[2].lower()
        if name in _SKIPPED_TAGS and not closing:
            closer = _CLOSERS[name].search(source, position)
            if closer is None:
                break
            position = closer.end()
            continue
        if name in _BLOCK_TAGS:
            emit("\n")
        elif name == "a":
            close_anchor()
            href = None if closing else _attribute(_HREF, tag)
            if href is not None and len(anchors) < _MAX_LINKS:
                open_anchor = (href, length, [])
        elif name == "img" and open_anchor is not None:
            alt = _attribute(_ALT, tag)
            if alt:
                open_anchor[2].append(alt)
    close_anchor()
    return "".join(parts), anchors

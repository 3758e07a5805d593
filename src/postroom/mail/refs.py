"""References a message mentions: order and invoice numbers, amounts, phone numbers,
tracking numbers, dates, domains and addresses (the ``refs`` table of the mailbox).

Pure: strings in, :class:`Ref` values out. Nothing here touches the network or ``store/``.
:func:`extract_refs` never raises and does bounded work on any input: the subject is read
up to :data:`MAX_SUBJECT_CHARS` and the body up to :data:`MAX_BODY_CHARS` (refs live near
the top of a message; the rest of a huge body is not looked at), every pattern is linear
(possessive quantifiers, no nested ambiguity), and at most :data:`MAX_REFS` refs of at most
:data:`MAX_VALUE_CHARS` characters come back.

Precision over recall: a wrong ref puts a message in the wrong search results and feeds
agents a false fact, a missing one only costs a keyword search. So every kind needs
evidence beyond "looks like a number": a label (``Order #``), a currency, a leading ``+``
or a phone label, a check digit, an explicit date format. See docs/refs-and-codes.md.

Kinds and normalised values::

    order     labelled order number, upper case             Order #ab-123  -> AB-123
    invoice   labelled invoice number, upper case           Invoice no. INV-2024-001
    amount    CUR:units with the currency's minor digits   £412.80 -> GBP:412.80
    phone     E.164, only numbers libphonenumber validates  +44 20 7946 0958 -> +442079460958
    tracking  carrier number, upper case without spaces     1Z 999 AA1 01 2345 678 4
    date      ISO 8601 YYYY-MM-DD                           1 May 2024 -> 2024-05-01
    domain    lower case, without "www."                    https://www.Example.com/x
    email     lower case                                    Alice@Example.COM
"""

from __future__ import annotations

import datetime
import functools
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import phonenumbers

from postroom.mail.patterns import word_pattern

__all__ = [
    "MAX_BODY_CHARS",
    "MAX_REFS",
    "MAX_SUBJECT_CHARS",
    "MAX_VALUE_CHARS",
    "REF_KINDS",
    "Ref",
    "extract_refs",
]

MAX_REFS = 64
MAX_VALUE_CHARS = 254  # the longest address RFC 5321 lets through a path
MAX_SUBJECT_CHARS = 2_000
MAX_BODY_CHARS = 100_000

REF_KINDS = ("order", "invoice", "amount", "phone", "tracking", "date", "domain", "email")

# Phone labels are looked up at most this many times per text: each lookup runs
# libphonenumber's matcher over a short window, which is the slow part of this module.
_MAX_PHONE_WINDOWS = 64


@dataclass(frozen=True)
class Ref:
    """One reference: what it is, its normalised value and where it was found."""

    kind: str  # one of REF_KINDS
    value: str  # normalised (see the module docstring)
    source: str  # "subject" | "body"; attachments will add "att:<att_id>"


def extract_refs(
    subject: str | None, text: str | None, *, default_region: str | None = None
) -> list[Ref]:
    """Return the refs of a message: subject first, then body, each in reading order.

    ``default_region`` (an ISO 3166 alpha-2 code such as ``"GB"``) lets phone numbers
    written in national form count, but only right after a phone label ("Tel:", "call
    us on"); without it only international numbers (``+44 …``) are read. The caller
    knows the mailbox's country; this module does not guess one.
    """
    region = _region(default_region)
    found: dict[tuple[str, str, str], Ref] = {}
    for source, raw, limit in (
        ("subject", subject, MAX_SUBJECT_CHARS),
        ("body", text, MAX_BODY_CHARS),
    ):
        if not raw:
            continue
        prepared = _prepare(raw, limit)
        hits = sorted(_scan(prepared, region), key=lambda hit: (hit[0], REF_KINDS.index(hit[1])))
        for _, kind, value in hits:
            if len(value) > MAX_VALUE_CHARS:
                continue
            found.setdefault((kind, value, source), Ref(kind, value, source))
            if len(found) >= MAX_REFS:
                return list(found.values())
    return list(found.values())


def _region(value: str | None) -> str | None:
    if value and len(value) == 2 and value.isascii() and value.isalpha():
        region = value.upper()
        if region in phonenumbers.SUPPORTED_REGIONS:
            return region
    return None


def _prepare(raw: str, limit: int) -> str:
    # NFKC folds full-width digits and letters (common in Japanese and Chinese mail), the
    # "№" sign and ligatures to their plain forms, so one set of ASCII patterns reads them.
    # It can lengthen a string, hence the second cut.
    return unicodedata.normalize("NFKC", raw[:limit])[:limit]


_Hit = tuple[int, str, str]  # (position, kind, normalised value)


def _scan(text: str, region: str | None) -> Iterator[_Hit]:
    # Case-insensitive patterns run on a lower-cased copy without re.IGNORECASE, which
    # is several times faster on long bodies. The copy must keep every offset: "İ" is
    # the one character whose lower case is two code points.
    lowered = text.replace("\u0130", "i").lower()
    passes: tuple[Iterator[_Hit], ...] = (
        _labelled_numbers(text, lowered),
        _amounts(text, _AMOUNT_PREFIX, keep_head=True),
        _amounts(text, _AMOUNT_SUFFIX, keep_head=False),
        _international_phones(text),
        _national_phones(text, lowered, region),
        _checked(text, _UPS, _ups_check),
        _checked(text, _S10, _s10_check),
        _checked(text, _USPS22, lambda value: _mod10_check(value, 3, 1)),
        _carrier_numbers(text, lowered),
        _labelled_tracking(text, lowered),
        *(_dates(lowered, pattern) for pattern in _DATE_PATTERNS),
        _emails(text),
        _url_domains(lowered),
        _bare_domains(text),
    )
    for hits in passes:
        yield from _first_unique(hits)


def _first_unique(hits: Iterator[_Hit]) -> Iterator[_Hit]:
    """Stop a pass after MAX_REFS distinct values.

    A pass yields in reading order, so its later values can never be among the first
    MAX_REFS refs of the text: stopping early bounds the work on a body made of, say,
    a hundred thousand prices without changing the result.
    """
    seen: set[str] = set()
    for hit in hits:
        if hit[2] in seen:
            continue  # the first sighting fixes the ref's place
        seen.add(hit[2])
        if len(seen) > MAX_REFS:
            return
        yield hit


# ---------------------------------------------------------------------------------------
# Order and invoice numbers: only after a label, never a bare number.

_ORDER_LABELS = (
    "purchase order",
    "order",
    "bestellnummer",
    "bestellung",
    "auftragsnummer",
    "auftrag",
    "numéro de commande",
    "n° de commande",
    "commande",
    "número de pedido",
    "pedido",
    "numero d'ordine",
    "numero ordine",
    "ordine",
    "bestelnummer",
    "bestelling",
    "ordernummer",
    "注文番号",
    "订单号",
)
_INVOICE_LABELS = (
    "invoice",
    "rechnungsnummer",
    "rechnung",
    "numéro de facture",
    "facture",
    "número de factura",
    "factura",
    "numero fattura",
    "fattura",
    "factuurnummer",
    "factuur",
    "請求書番号",
    "发票号",
)
_MARKER_WORDS = r"number|nummer|numéro|número|numero|num|nr|no|n°|id|ref|reference"


def _words(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


# Matched against the lower-cased text (see _scan).
_LABELLED = re.compile(
    rf"""
    (?<![a-zà-ÿ])
    (?:(?P<order>{word_pattern(_ORDER_LABELS)})|(?P<invoice>{word_pattern(_INVOICE_LABELS)}))
    (?![a-zà-ÿ])
    [ \t]{{0,3}}
    (?:(?:confirmation|bestätigung|confirmée|confirmé)[ \t]{{1,3}})?
    (?:(?P<word>{_MARKER_WORDS})\.?(?![a-z])[ \t]{{0,3}})?
    (?:(?:is|ist|lautet|est|es)[ \t]{{1,3}})?
    (?P<sign>[:#：]{{0,2}})
    [ \t]{{0,3}}
    (?P<value>[a-z0-9](?:[a-z0-9]|[-/](?=[a-z0-9])){{2,39}}+)
    (?![a-z0-9%]|[.,][0-9])
    """,
    re.VERBOSE,
)
_DATE_LIKE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{1,2}/[0-9]{1,2}/[0-9]{2,4}")


def _labelled_numbers(text: str, lowered: str) -> Iterator[_Hit]:
    for match in _LABELLED.finditer(lowered):
        value = text[match.start("value") : match.end("value")]
        # A number without its label's "#", "no." or ":" needs more digits before we
        # believe it: "order 12 items" must not become an order.
        minimum = 3 if match["word"] or match["sign"] else 5
        if len(value) < minimum or not any(c.isdigit() for c in value):
            continue
        if _DATE_LIKE.fullmatch(value):
            continue
        kind = "order" if match["order"] else "invoice"
        yield match.start("value"), kind, value.upper()


# ---------------------------------------------------------------------------------------
# Amounts: a number with a currency symbol or ISO code on either side.

_SYMBOLS = {
    "US$": "USD",
    "CA$": "CAD",
    "C$": "CAD",
    "AU$": "AUD",
    "A$": "AUD",
    "NZ$": "NZD",
    "HK$": "HKD",
    "S$": "SGD",
    "R$": "BRL",
    "MX$": "MXN",
    # A bare "$" is read as US dollars: the other dollar currencies are written with
    # their prefix (CA$, A$) in mail that crosses borders. Documented in the page.
    "$": "USD",
    "£": "GBP",
    "€": "EUR",
    # "¥" is also the renminbi's sign; Chinese mail writes "CN¥", "RMB" or "元".
    "¥": "JPY",
    "CN¥": "CNY",
    "₹": "INR",
    "₩": "KRW",
    "₽": "RUB",
    "₺": "TRY",
    "₪": "ILS",
    "₫": "VND",
    "฿": "THB",
    "₱": "PHP",
    "zł": "PLN",
    "Kč": "CZK",
    "元": "CNY",
}
_SUFFIX_ONLY = {"zł", "Kč", "元"}
_CODES = _words(
    "USD EUR GBP CHF JPY CNY CAD AUD NZD SEK NOK DKK PLN CZK HUF RON BGN INR BRL MXN ZAR SGD "
    "HKD KRW TRY RUB ILS AED SAR THB PHP IDR MYR VND TWD ARS CLP COP PEN UAH ISK NGN KES EGP "
    "RMB"
)
_MINOR_DIGITS = {"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0}

# A pattern that opens with a look-behind makes the engine run it at every position of
# the text; one that opens with a character class lets it skip to the characters that can
# start a match. So "not after a digit" is checked right after the first character:
# "9(?<![0-9]9)" rather than "(?<![0-9])9" (the same matches, three times faster).
_NUMBER_TAIL = r"(?:[0-9]|[.,'’\u00a0\u202f\u2009 ](?=[0-9])){0,24}+"
_NUMBER = rf"[0-9]{_NUMBER_TAIL}"
_PREFIX_SYMBOLS = word_pattern([s for s in _SYMBOLS if s not in _SUFFIX_ONLY])
_CODE_ALTERNATION = word_pattern(_CODES)
_AMOUNT_PREFIX = re.compile(
    rf"(?<![A-Za-z0-9])(?P<cur>{_PREFIX_SYMBOLS}|{_CODE_ALTERNATION})"
    # "$5M" and "£5k" are not five units.
    rf"[ \u00a0]?(?P<num>{_NUMBER})(?![0-9A-Za-z])"
)
_AMOUNT_SUFFIX = re.compile(
    rf"(?P<num>[0-9](?<![0-9.,][0-9]){_NUMBER_TAIL})[ \u00a0]?"
    rf"(?P<cur>{word_pattern(list(_SYMBOLS))}|{_CODE_ALTERNATION})(?![A-Za-z])"
)


def _amounts(text: str, pattern: re.Pattern[str], *, keep_head: bool) -> Iterator[_Hit]:
    for match in pattern.finditer(text):
        cur = _SYMBOLS.get(match["cur"], match["cur"])
        if cur == "RMB":
            cur = "CNY"
        value = _amount_value(match["num"], cur, keep_head)
        if value is not None:
            yield match.start(), "amount", value


# Newsletters repeat the same few prices many times; parsing each once is enough.
@functools.lru_cache(maxsize=1024)
def _amount_value(raw: str, currency: str, keep_head: bool) -> str | None:
    number = _parse_number(raw)
    if number is None and " " in raw:
        # "£5 10 items" or "Qty 3 12,50 €": the space was no digit group separator, so
        # keep the part next to the currency.
        part = raw.split(" ")[0] if keep_head else raw.rsplit(" ", 1)[-1]
        number = _parse_number(part)
    if number is None:
        return None
    minor = _MINOR_DIGITS.get(currency, 2)
    quantum = Decimal(1).scaleb(-minor)
    if number != number.quantize(quantum):
        return None
    return f"{currency}:{number.quantize(quantum)}"


def _parse_number(raw: str) -> Decimal | None:
    """Read "1,234.50", "1.234,50", "412,80", "1 234", "1'234.50" as a decimal.

    One "," or "." followed by exactly three digits is a thousands separator (the common
    reading in both English and German); followed by one or two it is the decimal mark.
    Digit groups must be of three, and a number with groups cannot start with 0.
    """
    separators = [(i, c) for i, c in enumerate(raw) if not c.isdigit()]
    marks = [(i, c) for i, c in separators if c in ".,"]
    decimal_at: int | None = None
    if marks:
        last_i, last_c = marks[-1]
        same = [i for i, c in marks if c == last_c]
        after = len(raw) - last_i - 1
        if len({c for _, c in marks}) == 2:
            # Both marks: the last one is the decimal mark, and it may appear only once.
            if len(same) != 1 or after > 2:
                return None
            decimal_at = last_i
        elif len(same) == 1 and after in (1, 2):
            decimal_at = last_i
    integer = raw if decimal_at is None else raw[:decimal_at]
    fraction = "" if decimal_at is None else raw[decimal_at + 1 :]
    groups = re.split(r"[.,'’\u00a0\u202f\u2009 ]", integer)
    if len(groups) > 1 and (
        not 1 <= len(groups[0]) <= 3
        or groups[0].startswith("0")
        or any(len(g) != 3 for g in groups[1:])
    ):
        return None
    digits = "".join(groups)
    if not digits.isdigit() or (fraction and not fraction.isdigit()):
        return None
    if len(digits) > 12 or (len(digits) > 1 and digits.startswith("0")):
        return None
    try:
        return Decimal(f"{digits}.{fraction or '0'}")
    except InvalidOperation:
        return None


# ---------------------------------------------------------------------------------------
# Phone numbers: libphonenumber decides validity; we only choose where it looks.

# A "+" and at least seven more digits, allowing the usual separators between them.
_INTERNATIONAL = re.compile(r"(?<![A-Za-z0-9+])\+[0-9](?:[ \-.()\u00a0/]{0,2}[0-9]){6,16}+")
_PHONE_LABEL = re.compile(  # matched against the lower-cased text
    r"(?<![a-z])(?:tel(?:ephone|efon|éfono|efono)?|phone|mobile|mobil|handy|cell|fax|call"
    r"|ring|téléphone|tél|portable|whatsapp|телефон|тел|電話|电话)(?![a-z])\.?"
)


def _international_phones(text: str) -> Iterator[_Hit]:
    for count, match in enumerate(_INTERNATIONAL.finditer(text)):
        if count >= _MAX_PHONE_WINDOWS:
            return
        yield from _match_phones(text, match.start(), match.end(), None, international=True)


def _national_phones(text: str, lowered: str, region: str | None) -> Iterator[_Hit]:
    if region is None:
        return
    for count, match in enumerate(_PHONE_LABEL.finditer(lowered)):
        if count >= _MAX_PHONE_WINDOWS:
            return
        # National numbers count only in the few characters after a phone label: an
        # order or account number is often also a valid national phone number.
        yield from _match_phones(text, match.end(), match.end() + 40, region, international=False)


def _match_phones(
    text: str, start: int, end: int, region: str | None, *, international: bool
) -> Iterator[_Hit]:
    window = text[start:end]
    try:
        matches = list(
            phonenumbers.PhoneNumberMatcher(window, region, leniency=phonenumbers.Leniency.VALID)
        )
    except Exception:  # a third-party parser must not break ingestion
        return
    for found in matches:
        if not international and found.raw_string.lstrip().startswith("+"):
            continue  # already read by the international pass
        if not international and found.start > 12:
            continue  # too far from the label to be what it labels
        number = found.number
        e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
        yield start + found.start, "phone", e164


# ---------------------------------------------------------------------------------------
# Tracking numbers: carrier formats with check digits, or a value after a tracking label.

_UPS = re.compile(r"1(?<![A-Za-z0-9]1)Z(?:[ ]?[A-Z0-9]){16}(?![A-Za-z0-9])")
_S10 = re.compile(
    r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z][ ]?(?:[0-9][ ]?){8}[0-9][ ]?[A-Z]{2}(?![A-Za-z0-9])"
)
_USPS22 = re.compile(r"9(?<![0-9]9)[1-5](?:[ ]?[0-9]){20}(?![0-9])")
_DIGIT_RUN = re.compile(r"(?<![0-9A-Za-z])(?:[0-9]{15}|[0-9]{12}|[0-9]{10})(?![0-9A-Za-z])")
_CARRIER = re.compile(r"(?<![a-z])(?P<name>fedex|dhl)(?![a-z])")  # on lowered text
_TRACKING_LABEL = re.compile(  # on lowered text
    r"""
    (?<![a-zà-ÿ])
    (?:tracking|sendungsnummer|sendungsverfolgungsnummer|track\ ?&\ ?trace|waybill|awb
       |numéro\ de\ suivi|número\ de\ seguimiento|número\ de\ rastreio|codice\ di\ tracciamento)
    (?![a-zà-ÿ])
    [ \t]{0,3}(?:(?:number|no\.?|nr\.?|id|code|\#)[ \t]{0,3})?(?:is[ \t]{1,3})?[:#]{0,2}[ \t]{0,3}
    (?P<value>[a-z0-9]{2,34}+(?:[ ][0-9]{2,6}+){0,10}+)
    (?![a-z0-9])
    """,
    re.VERBOSE,
)


def _checked(text: str, pattern: re.Pattern[str], check: Callable[[str], bool]) -> Iterator[_Hit]:
    for match in pattern.finditer(text):
        value = match[0].replace(" ", "")
        if check(value):
            yield match.start(), "tracking", value


def _carrier_numbers(text: str, lowered: str) -> Iterator[_Hit]:
    carriers = [(m.end(), m["name"]) for m in _CARRIER.finditer(lowered)][:64]
    if not carriers:
        return
    for match in _DIGIT_RUN.finditer(text):
        # Bare digit runs are everywhere; they count only shortly after the carrier's
        # name and with the carrier's check digit.
        near = {name for end, name in carriers if 0 <= match.start() - end <= 80}
        if _carrier_check(match[0], near):
            yield match.start(), "tracking", match[0]


def _labelled_tracking(text: str, lowered: str) -> Iterator[_Hit]:
    for match in _TRACKING_LABEL.finditer(lowered):
        value = text[match.start("value") : match.end("value")].replace(" ", "").upper()
        if sum(c.isdigit() for c in value) >= 6 and 8 <= len(value) <= 40:
            yield match.start("value"), "tracking", value


def _carrier_check(value: str, carriers: set[str]) -> bool:
    if "fedex" in carriers:
        if len(value) == 12 and _fedex_express_check(value):
            return True
        if len(value) == 15 and _mod10_check(value, 3, 1):
            return True
    # DHL Express waybills: ten digits, the last one the first nine modulo 7.
    return "dhl" in carriers and len(value) == 10 and int(value[:-1]) % 7 == int(value[-1])


def _ups_check(value: str) -> bool:
    body, check = value[2:-1], value[-1]
    if not check.isdigit():
        return False
    total = 0
    for i, c in enumerate(body):
        # UPS maps letters to digits as (ord - 3) mod 10: A=2, B=3, ...
        n = int(c) if c.isdigit() else (ord(c) - 3) % 10
        total += n * 2 if i % 2 else n
    return (10 - total % 10) % 10 == int(check)


def _s10_check(value: str) -> bool:
    # UPU S10 (postal items, Royal Mail's "AB123456785GB"): weights 8 6 4 2 3 5 9 7, mod 11.
    digits, check = value[2:10], int(value[10])
    total = sum(int(d) * w for d, w in zip(digits, (8, 6, 4, 2, 3, 5, 9, 7), strict=True))
    expected = 11 - total % 11
    expected = {10: 0, 11: 5}.get(expected, expected)
    return expected == check


def _mod10_check(value: str, even_weight: int, odd_weight: int) -> bool:
    # USPS and FedEx Ground: from the right of the payload, every other digit weighted.
    payload, check = value[:-1], int(value[-1])
    total = sum(
        int(d) * (even_weight if i % 2 == 0 else odd_weight)
        for i, d in enumerate(reversed(payload))
    )
    return (10 - total % 10) % 10 == check


def _fedex_express_check(value: str) -> bool:
    payload, check = value[:-1], int(value[-1])
    weights = (1, 3, 7)
    total = sum(int(d) * weights[i % 3] for i, d in enumerate(reversed(payload)))
    return total % 11 % 10 == check


# ---------------------------------------------------------------------------------------
# Dates: explicit formats only. A numeric date whose day and month could be swapped is
# read only when one of them is over 12 (or both are equal).

_MONTHS: dict[str, int] = {}
for _number, _names in enumerate(
    (
        "january jan januar jänner janvier enero gennaio januari janeiro",
        "february feb februar février febrero febbraio februari fevereiro",
        "march mar märz mars marzo maart março",
        "april apr avril abril aprile",
        "may mai mayo maggio mei maio",
        "june jun juni juin junio giugno junho",
        "july jul juli juillet julio luglio julho",
        "august aug août agosto augustus",
        "september sep sept septembre septiembre setiembre settembre setembro",
        "october oct oktober octobre octubre ottobre outubro",
        "november nov novembre noviembre novembro",
        "december dec dezember décembre diciembre dicembre dezembro",
    ),
    start=1,
):
    for _name in _names.split():
        _MONTHS[_name] = _number
_MONTH = word_pattern(list(_MONTHS))

_DATE_PATTERNS = (
    # 2024-05-01, 2024/05/01, 2024.05.01
    re.compile(
        r"(?P<y>(?:19|20)(?<![0-9A-Za-z./\-]..)[0-9]{2})(?P<sep>[-/.])(?P<m>[0-9]{2})(?P=sep)"
        r"(?P<d>[0-9]{2})(?![0-9]|[.\-/][0-9])"
    ),
    # 01.05.2024: the dotted form is day-first wherever it is used.
    re.compile(
        r"(?P<d>[0-9](?<![0-9A-Za-z./\-][0-9])[0-9]?)\.(?P<m>[0-9]{1,2})\.(?P<y>(?:19|20)[0-9]{2})"
        r"(?![0-9]|[.\-/][0-9])"
    ),
    # 13/05/2024 or 05/13/2024: resolved below, or dropped when ambiguous.
    re.compile(
        r"(?P<a>[0-9](?<![0-9A-Za-z./\-][0-9])[0-9]?)(?P<sep>[/-])(?P<b>[0-9]{1,2})(?P=sep)"
        r"(?P<y>(?:19|20)[0-9]{2})(?![0-9]|[.\-/][0-9])"
    ),
    # 1 May 2024, 1st May 2024, 1. Mai 2024, 1er mai 2024, 1 de mayo de 2024
    re.compile(
        rf"(?P<d>[0-9](?<![0-9a-z.][0-9])[0-9]?)(?:st|nd|rd|th|er|\.)?[ ]{{1,2}}(?:de[ ]+)?"
        rf"(?P<mon>{_MONTH})(?![a-zà-ÿ])\.?,?[ ]{{1,2}}(?:de[ ]+)?(?P<y>(?:19|20)[0-9]{{2}})"
        rf"(?![0-9])",
    ),
    # May 1, 2024, May 1st 2024, Jan. 5, 2024
    re.compile(
        rf"(?<![a-zà-ÿ])(?P<mon>{_MONTH})\.?[ ]{{1,2}}(?P<d>[0-9]{{1,2}})(?:st|nd|rd|th)?,?"
        rf"[ ]{{1,2}}(?P<y>(?:19|20)[0-9]{{2}})(?![0-9])",
    ),
    # 2024年5月1日
    re.compile(r"(?P<y>(?:19|20)[0-9]{2})年(?P<m>[0-9]{1,2})月(?P<d>[0-9]{1,2})日"),
)


def _dates(lowered: str, pattern: re.Pattern[str]) -> Iterator[_Hit]:
    for match in pattern.finditer(lowered):
        groups = match.groupdict()
        year = int(groups["y"])
        if groups.get("mon"):
            month = _MONTHS[groups["mon"]]
            day = int(groups["d"])
        elif groups.get("a"):
            first, second = int(groups["a"]), int(groups["b"])
            if first > 12 >= second or first == second:
                day, month = first, second
            elif second > 12 >= first:
                month, day = first, second
            else:
                continue
        else:
            month, day = int(groups["m"]), int(groups["d"])
        try:
            value = datetime.date(year, month, day).isoformat()
        except ValueError:
            continue
        yield match.start(), "date", value


# ---------------------------------------------------------------------------------------
# Addresses and domains.

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+\-])(?P<local>[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}+)"
    r"@(?P<domain>[A-Za-z0-9][A-Za-z0-9.\-]{0,252}+)"
)
_URL_HOST = re.compile(r"https?://(?P<host>[a-z0-9.\-]{1,253}+)(?![a-z0-9.\-@])")  # lowered
_BARE_DOMAIN = re.compile(
    r"(?<![A-Za-z0-9@._/:\-])(?P<domain>[A-Za-z0-9\-]{1,63}+(?:\.[A-Za-z0-9\-]{1,63}+){1,6}+)"
    r"(?![A-Za-z0-9@_\-]|\.[A-Za-z0-9])"
)
# A bare "word.word" is a domain only with a top-level domain that is common in mail and
# rarely a file extension: .py, .sh, .md, .rs, .js and friends are country codes too.
_BARE_TLDS = _words(
    "com org net edu gov mil int io co ai app dev info biz me tv xyz shop store online site "
    "tech cloud email news blog page live pro uk de fr es it nl be ch at se no dk fi ie pt pl "
    "cz ru jp cn in au nz ca us br mx ar za kr tw hk sg eu gr hu ro tr il ae"
)
# Image and document names ("logo@2x.png") look like addresses and domains.
_FILE_EXTENSIONS = _words(
    "png jpg jpeg gif svg webp bmp ico pdf doc docx xls xlsx ppt pptx txt csv zip gz tar "
    "html htm css js json xml eml exe dll"
)


def _emails(text: str) -> Iterator[_Hit]:
    for match in _EMAIL.finditer(text):
        local = match["local"]
        domain = _valid_domain(match["domain"])
        if domain is None or local.endswith(".") or ".." in local:
            continue
        yield match.start(), "email", f"{local.lower()}@{domain}"


def _url_domains(lowered: str) -> Iterator[_Hit]:
    for match in _URL_HOST.finditer(lowered):
        domain = _valid_domain(match["host"])
        if domain is not None:
            yield match.start("host"), "domain", _without_www(domain)


def _bare_domains(text: str) -> Iterator[_Hit]:
    for match in _BARE_DOMAIN.finditer(text):
        written = match["domain"].rstrip(".-")
        domain = _valid_domain(written)
        # "done.It was" is a missing space, not a domain: the top-level label of a domain
        # written in running text is lower case (or the whole name is upper case).
        tld_written = written.rpartition(".")[2]
        if domain is None or not (tld_written.islower() or written.isupper()):
            continue
        if domain.rpartition(".")[2] in _BARE_TLDS or (
            domain.startswith("www.") and domain.count(".") >= 2
        ):
            yield match.start(), "domain", _without_www(domain)


def _valid_domain(raw: str) -> str | None:
    # A sentence may end right after an address or domain: "write to a@b.com."
    domain = raw.rstrip(".-").lower()
    labels = domain.split(".")
    if len(labels) < 2 or len(domain) > 253:
        return None
    tld = labels[-1]
    if not (tld.isalpha() and 2 <= len(tld) <= 24 or tld.startswith("xn--")):
        return None
    if tld in _FILE_EXTENSIONS:
        return None
    for label in labels:
        if not 1 <= len(label) <= 63 or label.startswith("-") or label.endswith("-"):
            return None
    return domain


def _without_www(domain: str) -> str:
    return domain[4:] if domain.startswith("www.") and domain.count(".") >= 2 else domain

"""Bytes to text without ever raising: declared charsets are hints, not promises.

Real mail lies about its charset (UTF-8 labelled ``iso-8859-1``), names charsets Python
does not know (``x-unknown``, ``ks_c_5601-1987``, ``=3Dutf-8``) or declares none at all.
:func:`decode_text` tries, in order, the declared charset when it is one whose bytes UTF-8
would misread (UTF-16/32, the 7-bit ISO-2022 family, UTF-7), strict UTF-8, the declared
charset, cp1252 and finally latin-1, which accepts every byte string.
"""

from __future__ import annotations

import codecs
from functools import lru_cache

__all__ = ["decode_text", "normalise_charset"]

# Names seen in real mail that Python spells differently, or supersets that decode what
# senders actually put under the label (GB2312 mail routinely carries GBK characters,
# Shift_JIS mail the Windows extensions).
_ALIASES = {
    "utf8": "utf-8",
    "unicode-1-1-utf-8": "utf-8",
    "unicode-1-1-utf-7": "utf-7",
    "3dutf-8": "utf-8",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "cp936": "gb18030",
    "x-gbk": "gb18030",
    "euc-cn": "gb18030",
    "ks_c_5601-1987": "cp949",
    "ks-c-5601-1987": "cp949",
    "euc-kr": "cp949",
    "shift_jis": "cp932",
    "shift-jis": "cp932",
    "sjis": "cp932",
    "x-sjis": "cp932",
    "windows-31j": "cp932",
    "iso-8859-8-i": "iso-8859-8",
    "iso-8859-6-i": "iso-8859-6",
    "tis-620": "cp874",
    "windows-874": "cp874",
    "x-mac-roman": "mac_roman",
    "macintosh": "mac_roman",
    "ansi_x3.4-1968": "ascii",
    "us-ascii": "ascii",
    "iso-8859-1": "cp1252",  # HTML5's rule: the C1 range is cp1252 in practice
    "latin1": "cp1252",
    "latin-1": "cp1252",
}

# Labels that mean "no idea": treat as undeclared.
_UNKNOWN = frozenset(
    {"", "unknown", "unknown-8bit", "x-unknown", "default", "default_charset", "charset", "none"}
)

# Codecs Python registers that are not text encodings of mail, or that would interpret
# escapes; a sender naming one gets the fallback chain instead.
_REFUSED = frozenset(
    {"idna", "punycode", "unicode_escape", "raw_unicode_escape", "undefined", "mbcs", "oem"}
)

# Charsets whose bytes are valid (and wrong) UTF-8 or ASCII: they must be tried first.
_FIRST = ("utf-16", "utf-32", "iso2022", "utf-7", "hz")


@lru_cache(maxsize=512)
def normalise_charset(label: str | None) -> str | None:
    """The Python codec name for a charset label, or None when unknown or unusable."""
    if label is None:
        return None
    name = label.strip().strip("\"'").strip().lower()
    if name in _UNKNOWN:
        return None
    name = _ALIASES.get(name, name)
    for candidate in (name, name.removeprefix("x-"), name.replace("_", "-")):
        candidate = _ALIASES.get(candidate, candidate)
        try:
            info = codecs.lookup(candidate)
        except (LookupError, ValueError):
            continue
        if info.name in _REFUSED or not getattr(info, "_is_text_encoding", True):
            return None
        return info.name
    return None


def _try(data: bytes, codec: str) -> str | None:
    try:
        return data.decode(codec)
    except (UnicodeDecodeError, LookupError, ValueError):
        return None


def decode_text(data: bytes, declared: str | None = None, *, truncated: bool = False) -> str:
    """Decode bytes to text by the fallback chain; never raises.

    ``truncated`` says the bytes were cut at a bound, so a multi-byte character may be
    split at the end: the last few bytes are then allowed to be dropped rather than
    sending the whole text down the fallback chain.
    """
    codec = normalise_charset(declared)
    first = codec is not None and codec.startswith(_FIRST)
    if data.isascii() and not first:
        return data.decode("ascii")
    if first and codec is not None:
        text = _try(data, codec)
        if text is not None:
            return text
    candidates = ["utf-8"]
    if codec is not None and codec not in ("utf-8", "ascii") and not first:
        candidates.append(codec)
    for candidate in candidates:
        text = _try(data, candidate)
        if text is not None:
            return text.removeprefix("\ufeff")
        if truncated:
            for cut in (1, 2, 3):
                text = _try(data[:-cut], candidate)
                if text is not None:
                    return text.removeprefix("\ufeff")
    text = _try(data, "cp1252")
    if text is not None:
        return text
    return data.decode("latin-1")

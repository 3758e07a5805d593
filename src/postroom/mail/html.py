"""HTML bodies: sanitising, hidden-text detection and conversion to text.

One parse serves everything. libxml2 (through lxml) reads the HTML first because it is
fast and bounds nesting (256 levels), which matters: html5ever, under nh3, takes 44 s on
100,000 nested ``<div>`` but milliseconds on what lxml writes back out. On the lxml tree:

* hidden text is detected (inline styles that hide text from a reader but not from a
  program: ``display:none``, zero size or opacity, text the colour of its background...)
  and reported as the ``hidden_text`` flag;
* the tree is serialised and sanitised by nh3 (ammonia) with an allowlist: no scripts,
  event handlers, forms, frames, objects or styles that load anything, and no remote
  loads at all: an ``<img>`` keeps its ``src`` only for ``cid:`` (rewritten by the API to
  attachment URLs) and inline ``data:image/...``;
* text is derived with inscriptis (layout-aware: tables, lists), leaving hidden elements
  out, once with quoted and signature blocks marked so that the new content can be cut
  from the same conversion.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import nh3
from inscriptis import Inscriptis  # type: ignore[import-untyped]
from inscriptis.model.config import ParserConfig  # type: ignore[import-untyped]
from lxml import etree  # type: ignore[import-untyped]
from lxml import html as lxml_html

__all__ = ["HtmlResult", "process_html", "sanitize_html"]

# Private-use characters that mark where quoted content starts and ends in the text
# conversion; any in the input are removed first.
QUOTE_START = "\ue000"
QUOTE_END = "\ue001"
_MARKERS = {0xE000: None, 0xE001: None}

_ALLOWED_TAGS = {
    "a", "abbr", "acronym", "address", "b", "bdi", "bdo", "big", "blockquote", "br",
    "caption", "center", "cite", "code", "col", "colgroup", "dd", "del", "dfn", "div", "dl",
    "dt", "em", "figcaption", "figure", "font", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "i", "img", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small",
    "span", "strike", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th",
    "thead", "tr", "tt", "u", "ul", "var", "wbr",
}  # fmt: skip
# Removed with their content: executable, loading or interactive, or invisible metadata.
_REMOVED_WITH_CONTENT = {
    "script", "style", "head", "title", "noscript", "template", "iframe", "frame",
    "frameset", "object", "embed", "applet", "svg", "math", "select", "textarea", "option",
    "audio", "video", "canvas", "noembed", "noframes", "xmp", "plaintext",
}  # fmt: skip
_TABLE_ATTRS = {"align", "valign", "bgcolor", "width", "height", "colspan", "rowspan"}
_ALLOWED_ATTRIBUTES = {
    "*": {"dir", "lang", "title", "align", "style"},
    "a": {"href", "name"},
    "img": {"src", "alt", "width", "height", "border", "align"},
    "font": {"color", "face", "size"},
    "table": {"border", "cellpadding", "cellspacing", "width", "height", "bgcolor", "align"},
    "td": _TABLE_ATTRS,
    "th": _TABLE_ATTRS,
    "tr": {"align", "valign", "bgcolor", "height"},
    "col": {"span", "width", "align", "valign"},
    "colgroup": {"span", "width", "align", "valign"},
    "ol": {"start", "type"},
    "ul": {"type"},
    "li": {"value"},
    "blockquote": {"cite", "type"},
    "hr": {"width", "size", "noshade"},
}
# CSS properties that can neither load a resource nor lift content out of the message
# frame (no background/background-image, position, content, cursor, behavior...).
_ALLOWED_STYLES = {
    "color", "background-color", "font", "font-family", "font-size", "font-style",
    "font-weight", "font-variant", "text-align", "text-decoration", "text-transform",
    "text-indent", "line-height", "letter-spacing", "word-spacing", "white-space",
    "word-break", "word-wrap", "overflow-wrap", "vertical-align", "direction", "margin",
    "margin-top", "margin-right", "margin-bottom", "margin-left", "padding", "padding-top",
    "padding-right", "padding-bottom", "padding-left", "border", "border-top",
    "border-right", "border-bottom", "border-left", "border-width", "border-style",
    "border-color", "border-collapse", "border-spacing", "border-radius", "width",
    "height", "max-width", "min-width", "max-height", "min-height", "display",
    "list-style-type", "table-layout", "text-shadow", "opacity", "visibility",
}  # fmt: skip
_URL_SCHEMES = {"http", "https", "mailto", "tel", "cid", "data"}
_DANGEROUS_CSS = re.compile(r"url\s*\(|expression|@import|behavior|javascript|binding|\\", re.I)
_INLINE_IMAGE = re.compile(r"^data:image/(png|gif|jpe?g|webp|bmp);base64,", re.I)


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    if attribute == "style":
        return None if _DANGEROUS_CSS.search(value) else value
    if tag == "img" and attribute == "src":
        lowered = value.strip().lower()
        if lowered.startswith("cid:") or _INLINE_IMAGE.match(lowered):
            return value.strip()
        # Remote (or relative) image: loading it would tell the sender the mail was read.
        return None
    if attribute == "href" and value.strip().lower().startswith(("data:", "cid:")):
        return None
    return value


def sanitize_html(source: str) -> str:
    """Sanitise HTML with the allowlist (input should already be bounded in depth)."""
    return nh3.clean(
        source,
        tags=_ALLOWED_TAGS,
        clean_content_tags=_REMOVED_WITH_CONTENT,
        attributes=_ALLOWED_ATTRIBUTES,
        attribute_filter=_attribute_filter,
        strip_comments=True,
        link_rel="noopener noreferrer nofollow",
        url_schemes=_URL_SCHEMES,
        filter_style_properties=_ALLOWED_STYLES,
        url_relative="deny",
    )


# Hidden text ------------------------------------------------------------------------

_NAMED_COLOURS = {
    "white": "#ffffff", "black": "#000000", "red": "#ff0000", "green": "#008000",
    "blue": "#0000ff", "yellow": "#ffff00", "gray": "#808080", "grey": "#808080",
    "silver": "#c0c0c0", "whitesmoke": "#f5f5f5", "snow": "#fffafa", "ivory": "#fffff0",
    "navy": "#000080", "orange": "#ffa500", "purple": "#800080",
}  # fmt: skip
_RGB = re.compile(r"rgba?\(\s*(\d+)%?\s*,?\s*(\d+)%?\s*,?\s*(\d+)%?\s*(?:[,/]\s*([\d.]+%?))?\s*\)")
_ZERO = re.compile(r"^-?0*(\.0+)?(px|pt|em|rem|%|ex|ch|vw|vh|cm|mm|in)?$")
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u034f\u00ad\u00a0\u180e"), None)
# Pixel sizes this small are unreadable; senders use them to hide text.
_TINY_FONT = re.compile(r"^(0*\.\d+|1)(px|pt)?$")


def _colour(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip().lower().replace("!important", "").strip()
    if value in ("transparent", "none", "inherit", "initial", "currentcolor"):
        return "transparent" if value == "transparent" else None
    if value in _NAMED_COLOURS:
        return _NAMED_COLOURS[value]
    if value.startswith("#"):
        digits = value[1:]
        if len(digits) in (3, 4):
            digits = "".join(c * 2 for c in digits[:3])
        return "#" + digits[:6] if len(digits) >= 6 else None
    match = _RGB.match(value)
    if match:
        if match.group(4) is not None and _ZERO.match(match.group(4).rstrip("%")):
            return "transparent"
        parts = [min(255, int(match.group(i))) for i in (1, 2, 3)]
        return "#{:02x}{:02x}{:02x}".format(*parts)
    return None


def _declarations(style: str | None) -> dict[str, str]:
    if not style:
        return {}
    out: dict[str, str] = {}
    for declaration in style.split(";"):
        name, colon, value = declaration.partition(":")
        if colon:
            out[name.strip().lower()] = value.strip().lower().replace("!important", "").strip()
    return out


def _background(element: Any) -> str | None:
    """The background colour an element sits on (its own or the nearest ancestor's)."""
    node = element
    while node is not None and isinstance(node.tag, str):
        declarations = _declarations(node.get("style"))
        for key in ("background-color", "background"):
            if key in declarations:
                for token in declarations[key].split():
                    colour = _colour(token)
                    if colour is not None:
                        return colour
        colour = _colour(node.get("bgcolor"))
        if colour is not None:
            return colour
        node = node.getparent()
    return "#ffffff"


def _hides(element: Any) -> bool:
    if element.get("hidden") is not None:
        return True
    declarations = _declarations(element.get("style"))
    if not declarations:
        colour = _colour(element.get("color")) if element.tag == "font" else None
        return colour is not None and colour == _background(element.getparent())
    if declarations.get("display") == "none" or declarations.get("mso-hide") == "all":
        return True
    if declarations.get("visibility") in ("hidden", "collapse"):
        return True
    opacity = declarations.get("opacity")
    if opacity is not None and _ZERO.match(opacity):
        return True
    size = declarations.get("font-size")
    if size is not None and (_ZERO.match(size) or _TINY_FONT.match(size)):
        return True
    overflow_hidden = declarations.get("overflow") == "hidden"
    for key in ("max-height", "height", "max-width", "width", "line-height"):
        value = declarations.get(key)
        if value is not None and _ZERO.match(value) and overflow_hidden:
            return True
    indent = declarations.get("text-indent", "")
    if indent.startswith("-") and re.match(r"^-\d{3,}", indent):
        return True
    colour = _colour(declarations.get("color")) or (
        _colour(element.get("color")) if element.tag == "font" else None
    )
    if colour is not None:
        if colour == "transparent":
            return True
        own = _colour(declarations.get("background-color"))
        background = own if own is not None else _background(element.getparent())
        if colour == background:
            return True
    return False


def _has_words(element: Any) -> bool:
    text = element.text_content().translate(_INVISIBLE)
    return any(char.isalnum() for char in text)


def _hidden_elements(root: Any) -> list[Any]:
    hidden: list[Any] = []
    for element in root.iter():
        if not isinstance(element.tag, str) or element.tag in ("head", "style", "script", "title"):
            continue
        if (
            element.get("style") is not None
            or element.get("hidden") is not None
            or element.tag == "font"
        ) and _hides(element):
            hidden.append(element)
    return hidden


# Quoted and signature blocks ----------------------------------------------------------

_QUOTE_CLASSES = {
    "gmail_quote", "gmail_attr", "moz-cite-prefix", "yahoo_quoted", "protonmail_quote",
    "zmail_extra", "gmail_signature", "moz-signature", "ms-outlook-mobile-signature",
}  # fmt: skip
_QUOTE_IDS = {"signature", "isreplycontent", "isforwardcontent"}
# Elements after which everything is the quoted original (Outlook).
_REST_IDS = {"appendonsend", "divrplyfwdmsg", "mail-editor-reference-message-container"}
_REST_CLASSES = {"outlookmessageheader"}


def _marker(text: str) -> Any:
    span = etree.Element("span")
    span.text = text
    return span


def _mark_quotes(root: Any) -> None:
    body = root.find("body")
    container = body if body is not None else root
    rest_marked = False
    for element in list(root.iter()):
        if not isinstance(element.tag, str):
            continue
        classes = set((element.get("class") or "").lower().split())
        element_id = (element.get("id") or "").lower()
        if element.tag == "blockquote" or classes & _QUOTE_CLASSES or element_id in _QUOTE_IDS:
            start = _marker(QUOTE_START)
            # The element's leading text belongs inside the marked span.
            start.tail, element.text = element.text, None
            element.insert(0, start)
            element.append(_marker(QUOTE_END))
        elif not rest_marked and (element_id in _REST_IDS or classes & _REST_CLASSES):
            parent = element.getparent()
            if parent is None:
                continue
            element.addprevious(_marker(QUOTE_START))
            container.append(_marker(QUOTE_END))
            rest_marked = True


def cut_marked(text: str) -> tuple[str, str]:
    """The text with markers removed, and the text without the marked spans."""
    if QUOTE_START not in text and QUOTE_END not in text:
        return text, text
    kept: list[str] = []
    depth = 0
    for piece in re.split(f"([{QUOTE_START}{QUOTE_END}])", text):
        if piece == QUOTE_START:
            depth += 1
        elif piece == QUOTE_END:
            depth = max(0, depth - 1)
        elif depth == 0:
            kept.append(piece)
    return text.translate(_MARKERS), "".join(kept)


# Entry point ----------------------------------------------------------------------------

_LOCAL = threading.local()


def _parser() -> Any:
    # lxml parser objects must not be shared between threads.
    parser = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = lxml_html.HTMLParser(
            encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True
        )
        _LOCAL.parser = parser
    return parser


# Above this size the layout-aware converter (pure Python, about 1 s per MB of HTML) gives
# way to a plain one: line breaks at block elements, cells separated by spaces.
LAYOUT_TEXT_MAX_CHARS = 200_000
_BLOCKS = (
    "p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol",
    "blockquote", "pre", "hr", "dt", "dd", "section", "article", "header", "footer",
)  # fmt: skip
_BLANK_LINES = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")


def _plain_text(root: Any) -> str:
    for element in list(root.iter("script", "style", "head", "title")):
        if element.getparent() is not None:
            element.drop_tree()
    for element in root.iter(*_BLOCKS):
        element.tail = "\n" + (element.tail or "")
    for element in root.iter("td", "th"):
        element.tail = " " + (element.tail or "")
    text = root.text_content()
    return _BLANK_LINES.sub("\n\n", text).strip()


@dataclass(frozen=True, slots=True)
class HtmlResult:
    sanitized: str
    text: str | None  # visible text; None unless asked for
    new_text: str | None  # visible text without quoted/signature blocks
    hidden_text: bool


def _parse(source: str) -> Any:
    data = source.translate(_MARKERS).encode("utf-8", "replace")
    if not data.strip():
        return None
    try:
        return lxml_html.document_fromstring(data, parser=_parser())
    except (etree.ParserError, etree.XMLSyntaxError, ValueError):
        return None


def process_html(source: str, *, want_text: bool) -> HtmlResult:
    """Sanitise HTML, detect hidden text and (when asked) derive its text."""
    root = _parse(source)
    if root is None:
        return HtmlResult("", "" if want_text else None, "" if want_text else None, False)
    hidden = [element for element in _hidden_elements(root) if _has_words(element)]
    serialised = lxml_html.tostring(root, encoding="unicode", method="html")
    sanitized = sanitize_html(serialised).strip()
    if not want_text:
        return HtmlResult(sanitized, None, None, bool(hidden))
    for element in hidden:
        if element.getparent() is not None:
            element.drop_tree()
    _mark_quotes(root)
    if len(source) > LAYOUT_TEXT_MAX_CHARS:
        converted = _plain_text(root)
    else:
        converted = Inscriptis(root, ParserConfig()).get_text()
    text, new_text = cut_marked(converted)
    return HtmlResult(sanitized, _tidy(text), _tidy(new_text), bool(hidden))


_LINE_END_SPACE = re.compile(r"[ \t]+\n")
_MANY_BLANK_LINES = re.compile(r"\n{3,}")


def _tidy(text: str) -> str:
    """Layout output carries trailing spaces and runs of blank lines; drop them."""
    text = _LINE_END_SPACE.sub("\n", text)
    return _MANY_BLANK_LINES.sub("\n\n", text).strip()

"""New content of a reply: quoted text, attributions, originals and signatures removed."""

from __future__ import annotations

import pytest

from postroom.mail.parse import parse_message
from postroom.mail.quotes import extract_new_content

CASES = [
    (
        "gmail english",
        "Thanks, applied.\n\nOn Mon, Jan 7, 2019 at 10:00 AM Marcel Holtmann "
        "<marcel@holtmann.org> wrote:\n> Hi,\n>\n> old text\n",
        "Thanks, applied.",
    ),
    (
        "attribution wrapped over two lines",
        "Top posted.\n\nOn Mon, Jan 7, 2019 at 10:00 AM Someone <\nsomeone@example.com> wrote:\n\n"
        "> old\n",
        "Top posted.",
    ),
    (
        "inline replies keep every unquoted line",
        "Hi Marcel,\n\n> quoted 1\n> quoted 2\n\nmy answer 1\n\n> quoted 3\n\nmy answer 2\n",
        "Hi Marcel,\n\nmy answer 1\n\nmy answer 2",
    ),
    (
        "kernel style attribution",
        "Marcel Holtmann <marcel@holtmann.org> wrote:\n> patch\n\nLooks good.\n",
        "Looks good.",
    ),
    (
        "mutt attribution",
        "* Johan Hedberg <johan@example.com> [2019-01-07 10:00:00 +0200]:\n\n> old\n\nAgreed.\n",
        "Agreed.",
    ),
    (
        "german",
        "Passt.\n\nAm 07.01.2019 um 10:00 schrieb Hans Müller <hans@example.de>:\n> alt\n",
        "Passt.",
    ),
    (
        "french with a non-breaking space before the colon",
        "D'accord.\n\nLe lun. 7 janv. 2019 à 10:00, Jean <jean@example.fr> a écrit\u00a0:\n"
        "> vieux\n",
        "D'accord.",
    ),
    (
        "spanish",
        "Vale.\n\nEl lun, 7 ene 2019 a las 10:00, Ana (<ana@example.es>) escribió:\n> viejo\n",
        "Vale.",
    ),
    (
        "dutch",
        "Prima.\n\nOp ma 7 jan. 2019 om 10:00 schreef Piet <piet@example.nl>:\n> oud\n",
        "Prima.",
    ),
    (
        "italian",
        "Va bene.\n\nIl giorno lun 7 gen 2019 alle ore 10:00 Lucia <lucia@example.it> ha scritto:\n"
        "> vecchio\n",
        "Va bene.",
    ),
    (
        "portuguese",
        "Certo.\n\nEm seg., 7 de jan. de 2019 às 10:00, João <joao@example.pt> escreveu:\n"
        "> velho\n",
        "Certo.",
    ),
    (
        "swedish",
        "Okej.\n\nDen mån 7 jan. 2019 kl 10:00 skrev Sven <sven@example.se>:\n> gammal\n",
        "Okej.",
    ),
    (
        "danish / norwegian",
        "Fint.\n\nman. 7. jan. 2019 kl. 10.00 skrev Ola Nordmann <ola@example.no>:\n> gammel\n",
        "Fint.",
    ),
    (
        "russian",
        "Хорошо.\n\n7 января 2019 г., в 10:00, Иван <ivan@example.ru> написал(а):\n> старое\n",
        "Хорошо.",
    ),
    (
        "chinese",
        "好的\n\n在 2019年1月7日 10:00，张三 <zhang@example.cn> 写道：\n> 旧的\n",
        "好的",
    ),
    (
        "japanese",
        "了解です。\n\n2019年1月7日(月) 10:00 山田 <yamada@example.jp>:\n> 古い\n",
        "了解です。",
    ),
    (
        "outlook header block after underscores",
        "Yes\n\n________________________________\nFrom: A <a@example.com>\n"
        "Sent: Monday, January 7, 2019 10:00 AM\nTo: B <b@example.com>\nSubject: Re: x\n\n"
        "old body\n",
        "Yes",
    ),
    (
        "outlook original message",
        "Yes\n\n-----Original Message-----\nFrom: A\nSent: Monday\nTo: B\nSubject: x\n\nold\n",
        "Yes",
    ),
    (
        "outlook german header block",
        "Ja.\n\nVon: A <a@example.com>\nGesendet: Montag, 7. Januar 2019 10:00\nAn: B\n"
        "Betreff: x\n\nalt\n",
        "Ja.",
    ),
    (
        "outlook french original",
        "Oui.\n\n-----Message d'origine-----\nDe : A\nEnvoyé : lundi\nÀ : B\nObjet : x\n\nvieux\n",
        "Oui.",
    ),
    (
        "on wrote followed by an unmarked original",
        "Reply text\n\nOn Mon, Jan 7, 2019 at 10:00 AM X <x@example.com> wrote:\n"
        "unquoted original text\nmore\n",
        "Reply text",
    ),
    (
        "a forward with nothing above it is kept",
        "-----Original Message-----\nFrom: A\nSent: Monday\nTo: B\nSubject: x\n\nforwarded body\n",
        "-----Original Message-----\nFrom: A\nSent: Monday\nTo: B\nSubject: x\n\nforwarded body",
    ),
    (
        "signature delimiter",
        "Body line.\n\nRegards\nBob\n-- \nBob Example\nwww.example.com\n",
        "Body line.\n\nRegards\nBob",
    ),
    (
        "signature delimiter without its space",
        "Body line.\n--\nBob Example\n",
        "Body line.",
    ),
    (
        "git format-patch keeps the patch, drops the version signature",
        "Fix it.\n---\n file.c | 2 +-\n\ndiff --git a/file.c b/file.c\n--- a/file.c\n+++ b/file.c\n"
        "@@ -1 +1 @@\n-old\n+new\n-- \n2.20.1\n",
        "Fix it.\n---\n file.c | 2 +-\n\ndiff --git a/file.c b/file.c\n--- a/file.c\n+++ b/file.c\n"
        "@@ -1 +1 @@\n-old\n+new",
    ),
    (
        "mobile signature",
        "On my way.\n\nSent from my iPhone\n",
        "On my way.",
    ),
    (
        "german mobile signature",
        "Bin unterwegs.\n\nVon meinem iPhone gesendet\n",
        "Bin unterwegs.",
    ),
    (
        "mailing list footer",
        "Content.\n\n_______________________________________________\nfoo mailing list\n"
        "foo@lists.example.org\nhttps://lists.example.org/listinfo/foo\n",
        "Content.",
    ),
    (
        "nothing new: only a quote",
        "On Mon, Jan 7, 2019, X <x@example.com> wrote:\n> everything quoted\n",
        "",
    ),
    (
        "a colon line in the text is not an attribution",
        "The plan:\n\n1. do this\n2. do that\n",
        "The plan:\n\n1. do this\n2. do that",
    ),
    ("crlf line ends", "Yes.\r\n\r\n> no\r\n", "Yes."),
]


@pytest.mark.parametrize(("name", "text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_quote_and_signature_removal(name: str, text: str, expected: str) -> None:
    assert extract_new_content(text) == expected


def test_case_table_is_large_enough() -> None:
    assert len(CASES) >= 20


def test_html_quotes_are_removed_from_the_new_content() -> None:
    raw = (
        b"From: a@example.com\r\nMessage-ID: <h@example.com>\r\n"
        b"Content-Type: text/html; charset=utf-8\r\n\r\n"
        b'<div>New words here.</div><div class="gmail_quote">'
        b'<div class="gmail_attr">On Mon, B wrote:</div>'
        b'<blockquote class="gmail_quote">Old words.</blockquote></div>'
        b'<div class="gmail_signature">Bob | Example Inc</div>'
    )
    parsed = parse_message(raw)
    assert parsed.text is not None and "Old words." in parsed.text
    assert parsed.extracted_text == "New words here."
    assert parsed.snippet == "New words here."


def test_outlook_html_reply_is_cut_at_the_original() -> None:
    raw = (
        b"From: a@example.com\r\nMessage-ID: <o@example.com>\r\n"
        b"Content-Type: text/html; charset=utf-8\r\n\r\n"
        b'<p>Fine by me.</p><div id="appendonsend"></div><hr>'
        b'<div id="divRplyFwdMsg"><b>From:</b> B<br><b>Sent:</b> Monday</div>'
        b"<div>The original text.</div>"
    )
    parsed = parse_message(raw)
    assert parsed.extracted_text == "Fine by me."

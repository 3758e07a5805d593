"""One-time codes and confirmation links: a table of realistic messages, each with the
exact list extract_verifications must return (best first), and bounds on hostile input."""

from __future__ import annotations

import random
import time

import pytest

from postroom.mail.codes import MAX_VERIFICATIONS, Verification, extract_verifications

MAGIC = "https://app.example.com/auth/magic?token=Xk2pQ9zLm4Rt7Vw1"
RESET = "https://example.com/reset-password?token=9f8e7d6c5b4a39281706"
REDIRECT = "https://click.mailer.example.net/ls/click?upn=Ab12Cd34Ef56Gh78Ij90"
CONFIRM = "https://accounts.example.org/confirm/8c1d6f0e9b2a4d7c"

# (id, subject, text, html, expected [(kind, value)] best first)
Case = tuple[str, str | None, str | None, str | None, list[tuple[str, str]]]

CODES: list[Case] = [
    # -- English -------------------------------------------------------------------------
    ("en-is", None, "Your verification code is 482913. It expires in 10 minutes.", None,
     [("code", "482913")]),
    ("en-subject-before", "482913 is your Slack confirmation code", None, None,
     [("code", "482913")]),
    ("en-subject-colon", "Your Acme sign-in code: 731904", None, None, [("code", "731904")]),
    ("en-own-line-spaced", None,
     "Use the following code to sign in:\n\n  482 913\n\nIf you didn't request this, "
     "you can ignore this email.", None, [("code", "482913")]),
    ("en-passcode-4-4", None, "Here is your one-time passcode: 1234 5678", None,
     [("code", "12345678")]),
    ("en-otp-india", None, "OTP for login is 557120. Do not share it with anyone.", None,
     [("code", "557120")]),
    ("en-otp-before", None, "Dear customer, 557120 is your OTP for the transaction.", None,
     [("code", "557120")]),
    ("en-alnum-dashed", None, "Your login code: X7K-2P9", None, [("code", "X7K2P9")]),
    ("en-letters-dashed", None, "Your Epic Games security code: ABC-DEF", None,
     [("code", "ABCDEF")]),
    ("en-alnum-plain", None, "Your login code is K7PX92", None, [("code", "K7PX92")]),
    ("en-weak-enter", None, "Enter this code to continue: 773019", None,
     [("code", "773019")]),
    ("en-skips-order", None, "Your verification code for order 12345 is 482913", None,
     [("code", "482913")]),
    ("en-parenthesis", None, "Your code is 482913 (valid for 10 minutes)", None,
     [("code", "482913")]),
    ("en-subject-and-body-once", "Your verification code: 482913",
     "Your verification code is 482913.", None, [("code", "482913")]),
    # -- Other languages -----------------------------------------------------------------
    ("de-lautet", None, "Ihr Bestätigungscode lautet: 739204", None, [("code", "739204")]),
    ("de-weak", None, "Dein Code: 204118", None, [("code", "204118")]),
    ("fr", None, "Votre code de vérification est : 550217", None, [("code", "550217")]),
    ("es", None, "Tu código de verificación es 804512", None, [("code", "804512")]),
    ("pt", None, "Seu código de verificação é 330912", None, [("code", "330912")]),
    ("it", None, "Il tuo codice di verifica è 118204", None, [("code", "118204")]),
    ("nl", None, "Je verificatiecode is 902331", None, [("code", "902331")]),
    ("pl", None, "Twój kod weryfikacyjny: 661204", None, [("code", "661204")]),
    ("sv", None, "Din verifieringskod är 119034", None, [("code", "119034")]),
    ("tr", None, "Doğrulama kodu: 448201", None, [("code", "448201")]),
    ("ru", None, "Ваш код подтверждения: 661043", None, [("code", "661043")]),
    ("ja-fullwidth", None, "認証コード：３８４９２１", None, [("code", "384921")]),
    ("ja-wa", None, "認証コードは 845120 です。", None, [("code", "845120")]),
    ("zh", None, "您的验证码是 902213，5分钟内有效。", None, [("code", "902213")]),
    ("ko", None, "[Web발신] 인증번호 [482913]를 입력해주세요.", None, [("code", "482913")]),
    ("vi", None, "Mã xác minh của bạn là 558812", None, [("code", "558812")]),
    ("id", None, "Kode verifikasi Anda adalah 771204", None, [("code", "771204")]),
    # -- HTML-only -----------------------------------------------------------------------
    ("html-own-line", None, None,
     "<html><head><style>.a{color:#123456}</style></head><body><p>Your verification "
     'code</p><div style="font-size:32px;color:#333333">482913</div>'
     "<p>&copy; 2024 Acme</p></body></html>", [("code", "482913")]),
    ("html-inline-strong", None, None, "<p>Your code is <strong>482913</strong></p>",
     [("code", "482913")]),
    ("html-table", None, None,
     "<table><tr><td>Verification code:</td><td><b>604182</b></td></tr></table>",
     [("code", "604182")]),
    ("html-code-and-link", None, None,
     f'<p>Your sign-in code is <b>482913</b>.</p><p><a href="{MAGIC}">Sign in to Acme</a></p>',
     [("code", "482913"), ("link", MAGIC)]),
    # -- Must not yield a code -----------------------------------------------------------
    ("no-phone-intl", None, "Didn't request a verification code? Call +1 (415) 555-0132.",
     None, []),
    ("no-phone-national", None, "Security code questions: call 020 7946 0958", None, []),
    ("no-phone-tollfree", None,
     "Your OTP will expire in 10 minutes. Call 1800 123 4567 for help.", None, []),
    ("no-phone-ending", None, "We sent a code to the phone number ending in 4321.", None, []),
    ("no-order", None,
     "Thanks! Your order #482913 is confirmed. Show the code on your receipt at pickup.",
     None, []),
    ("no-date", None, "Your one-time code expired on 12/05/2025. Request a new one.", None, []),
    ("no-year", None,
     "Never share your security code with anyone.\n\n© 2024 Acme Inc. All rights reserved.",
     None, []),
    ("no-price", None, "Enter your card security code to pay £1250.", None, []),
    ("no-uk-postcode", None, "Your sign-in code was requested from London SW1A 1AA.", None,
     []),
    ("no-us-zip", None, "Verification code requested from San Francisco, CA 94103", None, []),
    ("no-de-plz", None, "Ihr Sicherheitscode wurde aus 10115 Berlin angefordert.", None, []),
    ("no-ticket", None, "Access code for ticket #48213: see the attached PDF.", None, []),
    ("no-invoice", None, "The verification code for invoice 20240042 is in the portal.",
     None, []),
    ("no-street", None, "Your code:\n1600 Amphitheatre Parkway, Mountain View", None, []),
    ("no-time", None, "Your one-time code is valid until 14:45 UTC.", None, []),
    ("no-time-hours", None, "Your access code is valid from 0900 hours.", None, []),
    ("no-long-id", None, "Your code: 123456789012 (request id)", None, []),
    ("no-hex-colours", None, None,
     '<style>.code{color:#123456}</style><table><tr><td bgcolor="#AABB99">Your code'
     '</td></tr></table><p style="color:#FF0000">Welcome aboard</p>'
     '<font color="336699">verification code</font>', []),
    ("no-promo", None, "Your order 123456 has shipped. Use code SAVE20 for 20% off.", None, []),
    ("no-discount", None, "Your discount code: WELCOME2024", None, []),
    ("no-zip-code", None, "Please confirm your ZIP code: 94103", None, []),
    ("no-error-code", None, "Error code 40401: the page could not be found.", None, []),
    ("no-upper-word", None, "Your code is READY", None, []),
    ("no-booking", None, "Booking code: ABC123", None, []),
    ("no-flight-confirmation", None, "Your flight confirmation code: XKJ4P9", None, []),
    ("no-minutes", None, "Your security code expires in 1440 minutes.", None, []),
    ("no-vocabulary", None, "Meeting moved to room 4821, call 555 0199.", None, []),
]  # fmt: skip

LINKS: list[Case] = [
    ("link-magic-anchor", None, None,
     "<p>Click the button below to sign in.</p>"
     f'<a href="{MAGIC}">Sign in to Example</a>'
     '<a href="https://example.com/unsubscribe?u=abc123def456ghi789">Unsubscribe</a>'
     '<a href="https://twitter.com/example">Twitter</a>'
     '<img src="https://t.example.com/open/abc123def456ghi789.gif" width="1" height="1">',
     [("link", MAGIC)]),
    ("link-reset-text", None,
     f"Reset your password:\n{RESET}\n\n"
     "Privacy: https://example.com/privacy?id=1234567890abcdef12", None,
     [("link", RESET)]),
    ("link-redirect-labelled", None, None,
     f'<a href="{REDIRECT}" style="background:#0066ff">Confirm your email address</a>',
     [("link", REDIRECT)]),
    ("link-click-here-context", None, None,
     f'<p>To verify your email address, <a href="{CONFIRM}">click here</a>.</p>',
     [("link", CONFIRM)]),
    ("link-image-button", None, None,
     f'<a href="{CONFIRM}"><img src="https://cdn.example.org/b.png" alt="Verify email"></a>',
     [("link", CONFIRM)]),
    ("link-de", None, None,
     f'<a href="{CONFIRM}">E-Mail-Adresse bestätigen</a>', [("link", CONFIRM)]),
    ("link-bare-path", None, f"{CONFIRM}\n", None, [("link", CONFIRM)]),
    ("link-entities", None, None,
     '<a href="https://example.com/verify?uid=42&amp;t=Zx81Kq02Lm77Pp31">Verify</a>',
     [("link", "https://example.com/verify?uid=42&t=Zx81Kq02Lm77Pp31")]),
    ("link-code-and-text-link", None,
     f"Your sign-in code is 482913\nOr sign in with this link:\n{MAGIC}\n", None,
     [("code", "482913"), ("link", MAGIC)]),
    ("no-link-http", None, None,
     '<a href="http://example.com/verify?token=9f8e7d6c5b4a39281706">Verify email</a>', []),
    ("no-link-privacy-terms", None, None,
     '<a href="https://example.com/privacy?v=20240501abcdef12">Privacy policy</a> '
     '<a href="https://example.com/terms?v=20240501abcdef12">Terms</a>', []),
    ("no-link-social", None, None,
     '<a href="https://www.facebook.com/acme.official.page.2024">Follow us on Facebook</a>',
     []),
    ("no-link-without-token", None, None,
     '<a href="https://app.example.com/login">Sign in</a>', []),
    ("no-link-order-confirmation", None, None,
     '<a href="https://shop.example.com/orders/1234567?key=Ab12Cd34Ef56Gh78">'
     "View your order confirmation</a>", []),
    ("no-link-blog", None,
     "Thanks for signing up! Read our blog "
     "https://blog.example.com/posts/2024-05-welcome-123456", None, []),
    ("no-link-unsubscribe-context", None,
     "Don't want these emails? Unsubscribe:\n"
     "https://mail.example.com/u/Ab12Cd34Ef56Gh78Ij90", None, []),
]  # fmt: skip


def _run(subject: str | None, text: str | None, html: str | None) -> list[tuple[str, str]]:
    return [(v.kind, v.value) for v in extract_verifications(subject, text, html)]


@pytest.mark.parametrize(
    ("subject", "text", "html", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CODES + LINKS],
)
def test_table(
    subject: str | None, text: str | None, html: str | None, expected: list[tuple[str, str]]
) -> None:
    assert _run(subject, text, html) == expected


def test_the_table_is_as_large_as_promised() -> None:
    negatives = [case for case in CODES if not case[4]]
    assert len(CODES) + len(LINKS) >= 40
    assert len(negatives) >= 15


def test_values_are_verifications() -> None:
    found = extract_verifications(None, "Your verification code is 482913", None)
    assert found == [Verification(kind="code", value="482913")]


def test_nothing_in_nothing() -> None:
    assert extract_verifications(None, None, None) == []
    assert extract_verifications("", "", "") == []


def test_results_are_bounded() -> None:
    text = "\n".join(f"Verification code: {100000 + i * 7}" for i in range(50))
    assert len(extract_verifications(None, text, None)) == MAX_VERIFICATIONS


@pytest.mark.parametrize(
    "html",
    [
        "<",
        "<a",
        "<a href=",
        '<a href="https://x',
        "<!--",
        "<style>",
        "<script>var code = 123456;",
        "</a></a><a><a>",
        "<<<<>>>>",
        "a < b > c",
        "<!DOCTYPE html><?xml?><![CDATA[ x ]]>",
        '<a href="https://[::1">Verify</a>',
        '<a href="https://exa mple.com/verify?t=Ab12Cd34Ef56Gh78">Verify</a>',
    ],
)
def test_malformed_html_does_not_raise(html: str) -> None:
    assert extract_verifications(None, None, html) == []


def test_script_content_is_not_read() -> None:
    html = "<script>var msg = 'Your verification code is 482913';</script><p>Hello</p>"
    assert extract_verifications(None, None, html) == []


def test_random_input_never_raises() -> None:
    rng = random.Random(20240501)
    alphabet = "0123456789 ABCDEFXYZabcxyz-:#.,\n<>/=\"'&;@+%€£$©" + "码コード код é İ\u0130\u00a0"
    for _ in range(400):
        size = rng.randint(0, 400)
        text = "".join(rng.choice(alphabet) for _ in range(size))
        wild = "".join(chr(rng.randint(1, 0x10FFFF)) for _ in range(rng.randint(0, 50)))
        for subject, body, html in ((text, text, text), (wild, wild, wild), (None, wild, text)):
            result = extract_verifications(subject, body, html)
            assert all(v.kind in ("code", "link") for v in result)
            assert len(result) <= MAX_VERIFICATIONS


@pytest.mark.parametrize(
    "unit",
    [
        "1234567890 ",
        "Your code is 482913. ",
        "verification code code: ",
        "<a href=",
        "<b>1</b>",
        "<",
        "<!--",
        "https://",
        "a",
        "+1 ",
        "é\u0130码",
    ],
)
def test_huge_input_is_fast(unit: str) -> None:
    body = unit * (5_000_000 // len(unit))
    started = time.process_time()  # CPU: other processes on a busy machine do not count
    extract_verifications(body, body, body)
    # Measured at about 0.1-0.3 s; the bound leaves room for a slow CI machine.
    assert time.process_time() - started < 3.0

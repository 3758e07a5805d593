"""Refs: a table of message texts, each with the exact refs extract_refs must return (in
reading order, subject first), the negatives that must yield nothing, and bounds."""

from __future__ import annotations

import random
import time

import pytest

from postroom.mail.refs import MAX_REFS, MAX_VALUE_CHARS, Ref, extract_refs

# (id, subject, text, default_region, expected [(kind, value, source)])
Case = tuple[str, str | None, str | None, str | None, list[tuple[str, str, str]]]

CASES: list[Case] = [
    # -- Orders and invoices: only after a label -----------------------------------------
    ("order-hash", None, "Order #12345 has shipped", None, [("order", "12345", "body")]),
    ("order-subject-amazon", "Your Amazon.com order 112-4567890-1234567", None, None,
     [("domain", "amazon.com", "subject"), ("order", "112-4567890-1234567", "subject")]),
    ("order-de", None, "Bestellnummer: 4711-0815", None, [("order", "4711-0815", "body")]),
    ("order-fr", None, "Numéro de commande : fr-99812", None, [("order", "FR-99812", "body")]),
    ("order-number-is", None, "Your order number is A1B2C3.", None,
     [("order", "A1B2C3", "body")]),
    ("order-confirmation", "Order Confirmation #100234", None, None,
     [("order", "100234", "subject")]),
    ("order-ja-fullwidth", None, "注文番号：１２３４５６", None, [("order", "123456", "body")]),
    ("invoice-en", None, "Invoice no. INV-2024-001", None,
     [("invoice", "INV-2024-001", "body")]),
    ("invoice-de-with-date", None, "Rechnung Nr. 2024-0042 vom 01.05.2024", None,
     [("invoice", "2024-0042", "body"), ("date", "2024-05-01", "body")]),
    # -- Amounts -------------------------------------------------------------------------
    ("amount-gbp", None, "Total: £412.80", None, [("amount", "GBP:412.80", "body")]),
    ("amount-eur-suffix", None, "Summe 412,80 €", None, [("amount", "EUR:412.80", "body")]),
    ("amount-usd-code", None, "Charged USD 1,234.50 today", None,
     [("amount", "USD:1234.50", "body")]),
    ("amount-dollar", None, "Only $12!", None, [("amount", "USD:12.00", "body")]),
    ("amount-jpy-chf", None, "¥1,200 or CHF 1'234.50", None,
     [("amount", "JPY:1200", "body"), ("amount", "CHF:1234.50", "body")]),
    ("amount-eur-grouped", None, "Montant : 1 234,56 €", None,
     [("amount", "EUR:1234.56", "body")]),
    ("amount-deduped", None, "£5 now, £5.00 later", None, [("amount", "GBP:5.00", "body")]),
    # -- Phones --------------------------------------------------------------------------
    ("phone-international", None, "Call +44 20 7946 0958 or +1 (415) 555-0132.", None,
     [("phone", "+442079460958", "body"), ("phone", "+14155550132", "body")]),
    ("phone-national-with-region", None, "Tel: 020 7946 0958", "GB",
     [("phone", "+442079460958", "body")]),
    ("phone-region-lower-case", None, "Phone: (415) 555-0132", "us",
     [("phone", "+14155550132", "body")]),
    # -- Tracking ------------------------------------------------------------------------
    ("tracking-ups-spaced", None, "UPS: 1Z 999 AA1 01 2345 678 4", None,
     [("tracking", "1Z999AA10123456784", "body")]),
    ("tracking-royal-mail", None, "Royal Mail tracking: AB123456785GB", None,
     [("tracking", "AB123456785GB", "body")]),
    ("tracking-usps", None, "USPS 9212 3912 3456 7812 3456 70", None,
     [("tracking", "9212391234567812345670", "body")]),
    ("tracking-fedex", None, "Your FedEx shipment 152152152158 is on its way", None,
     [("tracking", "152152152158", "body")]),
    ("tracking-dhl", None, "DHL Express waybill 1656740256", None,
     [("tracking", "1656740256", "body")]),
    ("tracking-labelled", None, "Sendungsnummer: 00340434161234567890", None,
     [("tracking", "00340434161234567890", "body")]),
    # -- Dates ---------------------------------------------------------------------------
    ("dates-named", None, "From 1 May 2024 to May 2, 2024", None,
     [("date", "2024-05-01", "body"), ("date", "2024-05-02", "body")]),
    ("dates-numeric", None, "2024-05-03, 13/05/2024 and 05/14/2024", None,
     [("date", "2024-05-03", "body"), ("date", "2024-05-13", "body"),
      ("date", "2024-05-14", "body")]),
    ("dates-other-languages", None, "1. Mai 2024 · 3 de mayo de 2024 · 2024年5月6日", None,
     [("date", "2024-05-01", "body"), ("date", "2024-05-03", "body"),
      ("date", "2024-05-06", "body")]),
    # -- Addresses and domains -----------------------------------------------------------
    ("email-and-url", None, "Write to Alice@Example.COM or see https://www.Example.co.uk/help",
     None, [("email", "alice@example.com", "body"), ("domain", "example.co.uk", "body")]),
    ("bare-domain", None, "Visit acme.com.", None, [("domain", "acme.com", "body")]),
    ("subject-then-body", "Invoice INV-77 from acme.io", "Invoice INV-77, £10", None,
     [("invoice", "INV-77", "subject"), ("domain", "acme.io", "subject"),
      ("invoice", "INV-77", "body"), ("amount", "GBP:10.00", "body")]),
    # -- Must yield nothing --------------------------------------------------------------
    ("no-bare-number", None, "Your number is 12345678.", None, []),
    ("no-amount-without-currency", None, "Total: 412.80", None, []),
    ("no-invalid-phone", None, "Call +44 20 7946 09 or +1 555 0100", None, []),
    ("no-national-phone-without-region", None, "Tel: 020 7946 0958", None, []),
    ("no-national-phone-without-label", None, "Reference 020 7946 0958", "GB", []),
    ("no-ambiguous-date", None, "Due 05/06/2024", None, []),
    ("no-date-without-year", None, "See you on 12 May", None, []),
    ("no-impossible-date", None, "2024-02-30 and 31.04.2024", None, []),
    ("no-order-without-number", None, "Order confirmed. In order to 12 items.", None, []),
    ("no-short-unmarked-order", None, "Your order 123 is ready", None, []),
    ("no-order-percentage", None, "Your order is 100% ready", None, []),
    ("no-order-date", None, "Order 2024-05-01", None, [("date", "2024-05-01", "body")]),
    ("no-file-names", None, "logo@2x.png, node.js, e.g. done.It was", None, []),
    ("no-millions", None, "$5M raised, £5k bonus", None, []),
    ("no-bad-ups-check-digit", None, "1Z999AA10123456785", None, []),
    ("no-bare-twelve-digits", None, "Ref 152152152158", None, []),
    ("no-leading-zero-group", None, "0,125 € per kWh", None, []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("subject", "text", "region", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_table(
    subject: str | None,
    text: str | None,
    region: str | None,
    expected: list[tuple[str, str, str]],
) -> None:
    found = extract_refs(subject, text, default_region=region)
    assert [(r.kind, r.value, r.source) for r in found] == expected


def test_the_table_is_as_large_as_promised() -> None:
    assert len(CASES) >= 25
    assert sum(1 for case in CASES if case[0].startswith("no-")) >= 10


def test_values_are_refs() -> None:
    assert extract_refs("Order #12345", None) == [Ref("order", "12345", "subject")]


def test_nothing_in_nothing() -> None:
    assert extract_refs(None, None) == []
    assert extract_refs("", "") == []


def test_unknown_region_is_ignored() -> None:
    assert extract_refs(None, "Tel: 020 7946 0958", default_region="XX") == []
    assert extract_refs(None, "Tel: 020 7946 0958", default_region="GBR") == []


def test_refs_are_bounded() -> None:
    text = " ".join(f"£{i}" for i in range(1, 200))
    found = extract_refs(None, text)
    assert len(found) == MAX_REFS
    assert found[0] == Ref("amount", "GBP:1.00", "body")
    assert found[-1] == Ref("amount", f"GBP:{MAX_REFS}.00", "body")


def test_long_values_are_dropped() -> None:
    local = "a" * 64
    domain = ".".join(["b" * 60] * 4) + ".com"  # 248 characters: the address is 313
    assert extract_refs(None, f"{local}@{domain}") == []
    assert all(len(r.value) <= MAX_VALUE_CHARS for r in extract_refs(None, f"x@{domain}"))


def test_random_input_never_raises() -> None:
    rng = random.Random(20240502)
    alphabet = "0123456789 ABCxyz1Z-:#.,/\n+()@€£$¥'’ Order Tel: FedEx May 年月日 İ\u0130\u00a0"
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        wild = "".join(chr(rng.randint(1, 0x10FFFF)) for _ in range(rng.randint(0, 50)))
        for subject, body in ((text, text), (wild, wild), (None, text)):
            found = extract_refs(subject, body, default_region="GB")
            assert len(found) <= MAX_REFS
            assert all(r.source in ("subject", "body") for r in found)


@pytest.mark.parametrize(
    "unit",
    [
        "1234567890 ",
        "€1,234.50 ",
        "€0123 ",
        "Order #",
        "Tel: +44 20 7946 0958 ",
        "+1 ",
        "1 May 2024 ",
        "example.com ",
        "a@",
        "a.",
        "1" * 40,
        "é\u0130",
    ],
)
def test_huge_input_is_fast(unit: str) -> None:
    body = unit * (5_000_000 // len(unit))
    started = time.process_time()  # CPU: other processes on a busy machine do not count
    extract_refs(body, body, default_region="GB")
    # Measured at about 0.05-0.15 s; the bound leaves room for a slow CI machine.
    assert time.process_time() - started < 3.0

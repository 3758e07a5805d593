"""Threading keys: subject normalisation, identifier digests, and which identifiers bind."""

from __future__ import annotations

import hashlib

import pytest

from postroom.mail.threading import (
    MAX_ANCESTORS,
    identifier_hash,
    is_ancestor_identifier,
    normalize_subject,
    subject_key,
    thread_keys,
)

# (subject as written, normalised form, whether a reply/forward marker was stripped)
SUBJECTS = [
    (None, "", False),
    ("", "", False),
    ("Hello", "hello", False),
    ("Re: Hello", "hello", True),
    ("RE: RE: re: Hello", "hello", True),
    ("Re[2]: Hello", "hello", True),
    ("RE(3): Hello", "hello", True),
    ("Re^2: Hello", "hello", True),
    ("Re : Hello", "hello", True),  # French typography: a space before the colon
    ("Re:Hello", "hello", True),
    ("Fwd: Hello", "hello", True),
    ("FW: Hello", "hello", True),
    ("Fw: Re: Fwd: Hello", "hello", True),
    ("AW: WG: Hallo", "hallo", True),  # German
    ("SV: VS: Hej", "hej", True),  # Scandinavian reply / forward
    ("VS: Moi", "moi", True),  # Finnish reply
    ("Antw: Hallo", "hallo", True),  # Dutch
    ("Odp: Cześć", "cześć", True),  # Polish
    ("R: Ciao", "ciao", True),  # Italian reply
    ("RIF: Ciao", "ciao", True),  # Italian
    ("I: Ciao", "ciao", True),  # Italian forward
    ("TR: Bonjour", "bonjour", True),  # French forward
    ("Réf. : Votre dossier", "votre dossier", True),  # French reference
    ("RV: Hola", "hola", True),  # Spanish forward
    ("RES: Olá", "olá", True),  # Portuguese reply
    ("ENC: Olá", "olá", True),  # Portuguese forward
    ("YNT: Merhaba", "merhaba", True),  # Turkish reply
    ("İLT: Merhaba", "merhaba", True),  # Turkish forward
    ("ΑΠ: Γεια", "γεια", True),  # Greek reply
    ("回复：你好", "你好", True),  # Chinese, full-width colon
    ("回复: 转发: 你好", "你好", True),
    ("答复: 会议", "会议", True),
    ("Ｒｅ：Hello", "hello", True),  # full-width letters fold under NFKC
    ("返信: こんにちは", "こんにちは", True),  # Japanese
    ("Re:   Hello \t  world ", "hello world", True),
    ("Hello (fwd)", "hello", True),  # Pine's forward suffix
    ("STRASSE und Straße", "strasse und strasse", False),  # case folding, not lowering
    ("[linux-bluetooth] Re: Pairing fails", "pairing fails", True),
    ("Re: [linux-bluetooth] Pairing fails", "pairing fails", True),
    ("[linux-bluetooth] Pairing fails", "pairing fails", False),
    # Patch-series tags are kept: two patches of a series, or two versions of a patch,
    # are different conversations.
    ("[PATCH v2 3/5] Bluetooth: fix", "[patch v2 3/5] bluetooth: fix", False),
    ("Re: [PATCH v2 3/5] Bluetooth: fix", "[patch v2 3/5] bluetooth: fix", True),
    ("[linux-bluetooth] [PATCH v2 3/5] fix", "[patch v2 3/5] fix", False),
    ("Re: [RFC][PATCH 06/10] cifs: x", "[rfc][patch 06/10] cifs: x", True),
    ("[PATCH] x", "[patch] x", False),
    ("[RESEND] x", "[resend] x", False),
    # Tags that are not a list name stay: a ticket, a commit hash.
    (
        "[support.example.de #33575] AutoReply: FYI",
        "[support.example.de #33575] autoreply: fyi",
        False,
    ),
    ("[87ea161] Fix for Bug#691896", "[87ea161] fix for bug#691896", False),
    ("[notmuch]", "[notmuch]", False),  # a tag alone is the subject
    # Words that merely start like a prefix are not prefixes.
    ("Really: no", "really: no", False),
    ("Resume attached", "resume attached", False),
    ("Re", "re", False),
    ("Re:", "", True),
]


@pytest.mark.parametrize(("subject", "normalized", "prefixed"), SUBJECTS)
def test_normalize_subject(subject: str | None, normalized: str, prefixed: bool) -> None:
    assert normalize_subject(subject) == normalized
    key = subject_key(subject)
    assert key.normalized == normalized
    assert key.reply_prefixed is prefixed
    assert key.display.casefold() == normalized


def test_subject_display_keeps_case() -> None:
    assert subject_key("Re: [list] Quarterly Numbers").display == "Quarterly Numbers"


def test_identifier_hash_is_sha256_of_the_exact_utf8_bytes() -> None:
    assert identifier_hash("a@b") == hashlib.sha256(b"a@b").hexdigest()
    assert identifier_hash("ü@b") == hashlib.sha256("ü@b".encode()).hexdigest()
    digest = identifier_hash("Some.ID@Example.org")
    assert len(digest) == 64 and digest == digest.lower()
    # Nothing is folded or trimmed: these are four different identifiers.
    variants = {"a@b", "A@b", " a@b", "a@b "}
    assert len({identifier_hash(v) for v in variants}) == 4


def test_identifier_hash_survives_undecodable_octets() -> None:
    raw = b"\xff\xfe@example.org"
    assert (
        identifier_hash(raw.decode("utf-8", "surrogateescape")) == hashlib.sha256(raw).hexdigest()
    )
    assert len(identifier_hash("\ud800@x")) == 64


@pytest.mark.parametrize(
    ("identifier", "ok"),
    [
        ("abc@example.org", True),
        ("1258848661-4660-1-git-send-email-stefan@datenfreihafen.org", True),
        ("4b09891e.YhJ/aJZOBwneOaFr%michiel@michielbuddingh.net", True),
        ("yes", False),
        ("mumble", False),
        ("@example.org", False),
        ("abc@", False),
        ("", False),
        (None, False),
        ("a b@example.org", False),
        ("Your message of December 31 1999 <bar@baz.com>", False),
        ("<abc@example.org>", False),
        ("x" * 994 + "@y.z", True),  # 998 octets
        ("x" * 995 + "@y.z", False),  # 999 octets
    ],
)
def test_is_ancestor_identifier(identifier: str | None, ok: bool) -> None:
    assert is_ancestor_identifier(identifier) is ok


def test_thread_keys_order_in_reply_to_first_then_nearest_reference() -> None:
    keys = thread_keys("m@x", "b@x", ("root@x", "a@x", "b@x"))
    assert keys.own == "m@x"
    assert keys.ancestors == ("root@x", "a@x", "b@x")
    assert keys.parent_candidates == ("b@x", "a@x", "root@x")
    assert keys.identifiers == ("m@x", "root@x", "a@x", "b@x")
    assert keys.answers


def test_thread_keys_in_reply_to_not_in_references_counts_as_nearest() -> None:
    keys = thread_keys("m@x", "baz@x", ("foo@x",))
    assert keys.parent_candidates == ("baz@x", "foo@x")
    assert keys.ancestors == ("foo@x", "baz@x")


def test_thread_keys_drop_self_reference_repeats_and_junk() -> None:
    keys = thread_keys("m@x", "m@x", ("yes", "a@x", "m@x", "b@x", "a@x"))
    assert keys.ancestors == ("b@x", "a@x")  # "a@x" keeps its nearest position
    assert keys.parent_candidates == ("a@x", "b@x")
    assert "m@x" not in keys.parent_candidates
    assert keys.answers


def test_thread_keys_bound_keeps_the_nearest_ancestors() -> None:
    references = tuple(f"r{i}@x" for i in range(100))
    keys = thread_keys("m@x", None, references)
    assert len(keys.ancestors) == MAX_ANCESTORS
    assert keys.ancestors == references[-MAX_ANCESTORS:]
    assert keys.parent_candidates[0] == "r99@x"
    # In-Reply-To is never cut by the bound, even when it is the oldest reference.
    keys = thread_keys("m@x", "r0@x", references)
    assert keys.parent_candidates[0] == "r0@x" and "r0@x" in keys.ancestors


def test_thread_keys_own_identifier_binds_whatever_its_form_but_not_over_the_bound() -> None:
    assert thread_keys("no-at-sign", None, ()).identifiers == ("no-at-sign",)
    assert thread_keys("x" * 999, None, ()).own is None
    assert not thread_keys("m@x", None, ()).answers

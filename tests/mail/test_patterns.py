"""The trie patterns match exactly what a longest-first alternation of the words does."""

from __future__ import annotations

import random
import re

import pytest

from postroom.mail.patterns import trie_pattern, word_pattern


def alternation(words: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)))


@pytest.mark.parametrize("seed", range(20))
def test_the_same_matches_as_a_longest_first_alternation(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "abc.$é元"
    words = ["".join(rng.choices(alphabet, k=rng.randint(1, 5))) for _ in range(rng.randint(1, 30))]
    text = "".join(rng.choices(alphabet + " ", k=2_000))
    trie = re.compile(word_pattern(words))
    expected = [m.span() for m in alternation(words).finditer(text)]
    assert [m.span() for m in trie.finditer(text)] == expected
    assert expected, "the text should hold some of the words"


def test_the_longest_word_wins_and_special_characters_are_literal() -> None:
    pattern = re.compile(word_pattern(["re", "res", "fw", "fwd", "a.b", "$"]))
    assert [m[0] for m in pattern.finditer("res: fwd: a.b axb $5 re")] == [
        "res",
        "fwd",
        "a.b",
        "$",
        "re",
    ]


def test_atoms_may_be_classes_and_optional() -> None:
    sign_in = ["s", "i", "g", "n", r"[\s\-]?", "i", "n"]
    pattern = re.compile(trie_pattern([sign_in, ["s", "i", "g", "n"]]))
    assert [m[0] for m in pattern.finditer("sign-in signin sign in sign up")] == [
        "sign-in",
        "signin",
        "sign in",
        "sign",
    ]


def test_empty_input_is_refused() -> None:
    with pytest.raises(ValueError, match="empty sequence"):
        trie_pattern([[]])
    with pytest.raises(ValueError, match="empty atom"):
        trie_pattern([["a", ""]])

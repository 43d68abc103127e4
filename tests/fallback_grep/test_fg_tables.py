"""The class tables and the case-folding prefilter, checked character by character.

A table that loses one member (`\\w` without `z`, `[[:xdigit:]]` without `F`) or a prefilter that
lowers only ASCII (and so misses `ſTRASSE` for `(?i)strasse`) breaks only the patterns that touch
that one character, which sampled tests miss. These tests enumerate.
"""

from __future__ import annotations

import string

import pytest

import fallback_grep as fg
from fallback_grep.filesearch import Matcher, search_bytes

ASCII = [chr(c) for c in range(128)]
# Each class's members, written independently of fallback_grep's tables (RE2's syntax page).
PERL = {
    "\\d": string.digits,
    "\\s": "\t\n\f\r ",
    "\\w": string.ascii_letters + string.digits + "_",
}
POSIX = {
    "alnum": string.ascii_letters + string.digits,
    "alpha": string.ascii_letters,
    "ascii": "".join(ASCII),
    "blank": "\t ",
    "cntrl": "".join(chr(c) for c in range(32)) + "\x7f",
    "digit": string.digits,
    "graph": "".join(chr(c) for c in range(33, 127)),
    "lower": string.ascii_lowercase,
    "print": "".join(chr(c) for c in range(32, 127)),
    "punct": string.punctuation,
    "space": "\t\n\v\f\r ",
    "upper": string.ascii_uppercase,
    "word": string.ascii_letters + string.digits + "_",
    "xdigit": string.digits + "abcdefABCDEF",
}


def members(pattern: str) -> set[str]:
    compiled = fg.compile(pattern)
    return {c for c in ASCII if compiled.fullmatch(c)}


@pytest.mark.parametrize("escape", sorted(PERL))
def test_perl_classes_hold_exactly_their_members(escape: str):
    assert members(escape) == set(PERL[escape])
    assert members(escape.upper()) == set(ASCII) - set(PERL[escape])  # \D \S \W
    assert members(f"[{escape}]") == set(PERL[escape])


@pytest.mark.parametrize("name", sorted(POSIX))
def test_posix_classes_hold_exactly_their_members(name: str):
    assert members(f"[[:{name}:]]") == set(POSIX[name])
    assert members(f"[[:^{name}:]]") == set(ASCII) - set(POSIX[name])


def test_word_and_xdigit_by_the_characters_a_regression_would_drop():
    assert fg.search("^\\w+$", "xyz_Z09") and fg.search("^[[:xdigit:]]+$", "09afAF")
    assert not fg.search("\\w", "-") and not fg.search("[[:xdigit:]]", "gG")


def test_unicode_classes_are_not_ascii_only():
    assert fg.fullmatch("\\pL+", "ſéΣ") and fg.fullmatch("\\p{Greek}", "σ") and not fg.fullmatch("\\pL", "1")
    assert fg.fullmatch("\\PL", "1") and not fg.fullmatch("\\PL", "é")


# Every character whose simple case folding joins an ASCII letter's orbit, beside that letter.
FOLD_VARIANTS = [("s", "\u017f"), ("k", "\u212a")]


@pytest.mark.parametrize("word,text", [
    ("(?i)strasse", "\u017fTRASSE"),
    ("(?i)strasse", "STRA\u017fSE"),
    ("(?i)strasse", "Strasse"),
    ("(?i)kelvin", "\u212aELVIN"),
    ("(?i)ask", "A\u017f\u212a"),
    ("(?i:strasse)d", "\u017ftrassed"),
])
def test_case_folding_finds_the_non_ascii_variants(word: str, text: str):
    """Through the API and through grep's line mode, whose prefilter must not lower ASCII only."""
    assert fg.search(word, text) is not None
    assert fg.search(word.encode(), text.encode()) is not None
    data = f"before\n{text} here\nafter\n".encode()
    assert [line.number for line in search_bytes(Matcher(word), data, "content").lines] == [2]
    if word.startswith("(?i)"):  # the same through grep's -i flag
        flagged = Matcher(word.removeprefix("(?i)"), case_insensitive=True)
        assert [line.number for line in search_bytes(flagged, data, "content").lines] == [2]


@pytest.mark.parametrize("ascii_letter,variant", FOLD_VARIANTS)
def test_prefilter_fold_variants_in_long_buffers(ascii_letter: str, variant: str):
    """The variant far into a big buffer, past any short-text shortcut."""
    word = f"{ascii_letter}ummary{ascii_letter}"
    data = ("filler line\n" * 5000 + f"x {variant}UMMARY{variant.upper()} y\n" + "tail\n" * 10).encode()
    hits = search_bytes(Matcher(word, case_insensitive=True), data, "content")
    assert [line.number for line in hits.lines] == [5001]
    hits = search_bytes(Matcher(f"(?i){word}"), data, "content")
    assert [line.number for line in hits.lines] == [5001]
    assert not search_bytes(Matcher(word), data, "content").lines  # case-sensitive: no match

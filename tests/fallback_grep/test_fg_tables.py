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


# -- the range-set algebra, against plain sets -----------------------------------------------------

from hypothesis import given, strategies as st  # noqa: E402

from fallback_grep import charclass, unicode_tables  # noqa: E402

SMALL = 40
RANGES = st.lists(st.tuples(st.integers(0, SMALL), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1])), max_size=6)


def as_set(ranges) -> set[int]:
    return {c for lo, hi in ranges for c in range(lo, hi + 1)}


def is_normal(ranges) -> bool:
    """Sorted, disjoint and not adjacent (adjacent ranges are merged)."""
    return all(lo <= hi for lo, hi in ranges) and all(a[1] + 1 < b[0] for a, b in zip(ranges, ranges[1:]))


@given(RANGES)
def test_normalize_keeps_the_members_and_merges_touching_ranges(ranges):
    out = charclass.normalize(ranges)
    assert as_set(out) == as_set(ranges) and is_normal(out)


def test_normalize_merges_adjacent_and_contained_ranges():
    assert charclass.normalize([(5, 6), (1, 4), (2, 3), (8, 9)]) == [(1, 6), (8, 9)]
    assert charclass.normalize([(1, 10), (2, 3)]) == [(1, 10)]


@given(RANGES)
def test_negate_is_the_complement_up_to_the_last_rune(ranges):
    out = charclass.negate(ranges)
    assert is_normal(out) and out[-1][1] == charclass.MAX_RUNE if not ranges or max(h for _, h in ranges) < charclass.MAX_RUNE else True
    assert as_set([(lo, min(hi, SMALL + 10)) for lo, hi in out if lo <= SMALL + 10]) == set(range(SMALL + 11)) - as_set(ranges)
    assert charclass.negate([(0, charclass.MAX_RUNE)]) == []


@given(RANGES, RANGES)
def test_intersect_and_subtract_are_set_operations(a, b):
    inter, diff = charclass.intersect(a, b), charclass.subtract(a, b)
    assert as_set(inter) == as_set(a) & as_set(b) and is_normal(inter)
    assert as_set(diff) == as_set(a) - as_set(b)


def test_intersect_of_unsorted_overlapping_inputs():
    assert charclass.intersect([(10, 20), (1, 3)], [(2, 12), (15, 30)]) == [(2, 3), (10, 12), (15, 20)]


def test_unicode_class_pairs_follow_the_table():
    flat = unicode_tables.CATEGORIES["Lu"]
    assert charclass.unicode_class("Lu") == [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    assert charclass.unicode_class("Any") == [(0, charclass.MAX_RUNE)] and charclass.unicode_class("Nope") is None
    assert not fg.search("\\pL", "1[!\u20ac\u0663") and not fg.search("\\p{Greek}", "az")


@pytest.mark.parametrize("pattern,members", [
    ("(?i)[a-k]", "aAkK\u212a"),   # k, the range's last code point, folds to K and the Kelvin sign
    ("(?i)[k-m]", "kK\u212alLmM"),  # k, the range's first code point
    ("(?i)[r-t]", "sS\u017ftT"),
    ("(?i)[\u212a]", "kK\u212a"),
])
def test_case_folded_classes_hold_every_orbit(pattern, members):
    compiled = fg.compile(pattern)
    assert all(compiled.fullmatch(c) for c in members)
    lo, hi = ord(pattern[5]), ord(pattern[-2])
    by_hand = {f for c in range(lo, hi + 1) for f in charclass.fold_orbit(c)} | set(range(lo, hi + 1))
    assert charclass.add_fold([(lo, hi)]) == charclass.normalize([(c, c) for c in by_hand])


def test_case_folding_a_class_that_reaches_past_the_last_folding_code_point():
    """The orbit index is walked to its end without running past it (Adlam folds near U+1E943)."""
    compiled = fg.compile("(?i)[\\x{1E900}-\\x{10FFFF}]")
    assert compiled.fullmatch("\U0001E922") and compiled.fullmatch("\U0001E900") and not compiled.fullmatch("a")
    assert fg.compile("(?i)[\\x{1E921}-\\x{1E921}]").fullmatch("\U0001E943")


# -- the prefilter's plan: which needle a pattern gets -----------------------------------------------
# A weaker needle gives the same answers, only slower, so functional tests cannot see it; these pin
# the plan itself for a few patterns whose best needle is clear.

from fallback_grep import parser as fg_parser, prefilter  # noqa: E402


def plan(pattern: str):
    tree = fg_parser.parse(pattern).tree
    needles, built = prefilter.needles_for(tree), prefilter.build(tree)
    return ((needles.literals, needles.folded, tuple(needles.variants), needles.whole) if needles else None,
            built and (built.needs_non_ascii, built.class_needle and built.class_needle.needle))


@pytest.mark.parametrize("pattern,needles,extra", [
    ("foobar", ((b"foobar",), None, (), True), (False, None)),            # the whole pattern is the literal
    ("foo|bar", ((b"foo", b"bar"), None, (), True), (False, None)),       # one needle per alternative
    ("ab\\d+cde", ((b"cde",), None, (), False), (False, None)),          # the longest literal stretch
    ("foo.*barbaz", ((b"barbaz",), None, (), False), (False, None)),
    ("(?i)strasse", ((), b"strasse", ("\u017f".encode(),), False), (False, None)),  # folded, with ſ
    ("x(?i:kelvin)", ((), b"xkelvin", ("\u212a".encode(),), False), (False, None)),
    ("\\d+é", (("é".encode(),), None, (), False), (True, None)),         # needs a non-ASCII text
    ("[a-c][0-9][a-c][0-9]", None, (False, b"\x01\x02\x01\x02")),         # a run of classes
    ("(?i)ab", None, (False, None)),                                     # too short for a folded needle
    ("(?i)abc", ((), b"abc", (), False), (False, None)),                 # three letters are enough
    ("(?i:kelvin)\\d(?i:ab)", ((), b"kelvin", ("\u212a".encode(),), False), (False, None)),  # the longest fold run
    ("foo\\d(?i:strasse)", ((b"foo",), None, (), False), (False, None)),  # a 3-byte literal beats a fold
    ("foo\\dab", ((b"foo",), None, (), False), (False, None)),          # the longest stretch, not the last
])
def test_the_prefilter_plan(pattern, needles, extra):
    assert plan(pattern) == (needles, extra)


def test_the_scanner_lowers_ascii_texts_and_searches_texts_with_a_fold_variant():
    built = prefilter.build(fg_parser.parse("(?i)strasse").tree)
    assert prefilter.Scanner(built, b"x STRASSE y").mode == "folded"
    assert prefilter.Scanner(built, "x \u017fTRASSE y".encode()).mode != "folded"
    assert prefilter.Scanner(prefilter.build(fg_parser.parse("foobar").tree), b"a foobar").mode == "literals"
    assert prefilter.Scanner(prefilter.build(fg_parser.parse("\\d+é").tree), b"ascii only").mode == "reject"


def test_a_finite_translation_multiplies_the_paths_of_a_concatenation():
    # Ten two-way alternations make 1024 alternatives, eleven make 2048: past MAX_PATHS, no translation.
    ten = prefilter.finite(fg_parser.parse("(?:ab|cd)" * 10).tree, False)
    assert ten is not None and ten.paths == 1024
    assert prefilter.finite(fg_parser.parse("(?:ab|cd)" * 11).tree, False) is None


def test_a_unit_is_at_most_four_code_points_even_when_its_only_ascii_member_folds_to_itself():
    # [\x7f-\x83] has one ASCII member (DEL, its own case pair) and four non-ASCII ones.
    assert prefilter._unit(fg_parser.parse("[\\x7f-\\x83]").tree) is None
    assert prefilter._unit(fg_parser.parse("(?i)k").tree) == ("fold", b"k", ("\u212a".encode(),))


@pytest.mark.parametrize("pattern,source", [
    ("\\d+x", b"(?:[0-9]){1}x"),         # a leading C{m,} becomes C{m}
    ("\\d+\\w", b"(?:[0-9]){1}[0-9A-Z_a-z]"),  # even when what follows overlaps C
    ("x\\d+", b"x(?:[0-9]){1}"),         # so does a trailing one
    ("x\\d+y", b"x(?:[0-9]){1,}y"),      # in the middle it stays unbounded
])
def test_the_line_regex_bounds_leading_and_trailing_runs(pattern, source):
    assert prefilter.line_regex(fg_parser.parse(pattern).tree).pattern == source


def test_a_finite_pattern_gets_no_line_regex_even_with_a_zero_count_repeat():
    # x{0} is a repeat with max 0, not an unbounded one: the exact prefilter covers the pattern.
    assert prefilter.line_regex(fg_parser.parse("ax{0}b").tree) is None
    assert prefilter.line_regex(fg_parser.parse("ax{0}b\\d+").tree) is not None


def test_a_finite_translation_adds_the_lengths_of_a_concatenation():
    # Five characters deep (two from the alternation, three literal), each at most one char's length.
    one = prefilter.finite(fg_parser.parse("x").tree, False).length
    assert one == 4  # the longest UTF-8 encoding of a character
    assert prefilter.finite(fg_parser.parse("(?:ab|cd)xyz").tree, False).length == 5 * one


def test_the_needles_of_an_alternation_are_listed_once_each():
    assert prefilter.needles_for(fg_parser.parse("(?:foo|bar)|(?:baz|foo)").tree).literals == (b"foo", b"bar", b"baz")


def test_the_unicode_tables_load_only_for_a_pattern_that_needs_them():
    """Compiling the generated tables is most of a cold `python -m fallback_grep` start: a plain pattern
    must not import them; (?i) and \\p{..} do."""
    import subprocess
    import sys
    probe = ("import sys; from fallback_grep.filesearch import Matcher; Matcher({!r}); "
             "print('fallback_grep.unicode_tables' in sys.modules)")
    loaded = {p: subprocess.run([sys.executable, "-c", probe.format(p)], capture_output=True, text=True,
                                check=True).stdout.strip()
              for p in ("PM_RESUME", "[A-Z]+_RESUME", "\\wAh", "(?i)PM_RESUME", "\\p{Greek}")}
    assert loaded == {"PM_RESUME": "False", "[A-Z]+_RESUME": "False", "\\wAh": "False",
                      "(?i)PM_RESUME": "True", "\\p{Greek}": "True"}


def test_a_finite_repeat_is_refused_past_the_path_and_length_bounds():
    """x{m,n} translates to sre only while its paths (sum of paths**k) and byte length stay bounded."""
    def fin(p):
        return prefilter.finite(fg_parser.parse(p).tree, False)
    assert fin("(?:ab|cd){1,9}").paths == 2 ** 10 - 2          # 1022 <= MAX_PATHS
    assert fin("(?:ab|cd){1,10}") is None                      # 2046 > MAX_PATHS
    assert fin("a{250}").length == prefilter.MAX_LENGTH        # 250 chars of at most 4 bytes
    assert fin("a{251}") is None


def test_a_whole_literal_hit_needs_no_verification_and_a_partial_one_does():
    scanner = prefilter.Scanner(prefilter.build(fg_parser.parse("foobar").tree), b"a foobar")
    assert scanner.mode == "literals" and scanner.hit_is_match
    partial = prefilter.Scanner(prefilter.build(fg_parser.parse("foo\\d+").tree), b"a foo1")
    assert partial.mode == "literals" and not partial.hit_is_match
    exact = prefilter.Scanner(prefilter.build(fg_parser.parse("[ab]c?").tree, exact_ok=True), b"abc")
    assert exact.mode == "regex" and exact.hit_is_match


# -- every prefilter path gives RE2's lines ----------------------------------------------------------
# One pattern per path that no other test took (mutation testing found them): an empty alternative
# in a finite translation, a line verifier after a repeat followed by an alternation that can be
# empty, and a class needle as the only filter (no sre factor behind it).

@pytest.mark.parametrize("pattern,mode", [
    ("ab(?:c|)", "literals"),
    ("(?:foo|)bar", "literals"),
    ("a()b", "literals"),
    ("x[a-c]+(?:z|y?)w", "literals"),
    ("\\s\\w*\\d{3}", "classes"),
    ("foo|bar\\d+", "literals"),      # a `bar` hit is no match by itself
])
def test_each_prefilter_path_finds_re2s_lines(pattern, mode):
    re2 = pytest.importorskip("re2")
    rows = ["foo bar", "x abcw", "xaby", "xabzw", "  abc1_ z", "x a123", "no 12 x", "  zz999 tail", "ab", "foobar", "bar x"]
    data = "\n".join(rows).encode()
    matcher = Matcher(pattern)
    assert (matcher.prefilter and matcher.prefilter.scanner(data).mode) == mode
    want = [i + 1 for i, row in enumerate(rows) if re2.search(pattern, row)]
    assert want, pattern
    assert [line.number for line in search_bytes(matcher, data, "content").lines] == want


def test_bounded_repeats_translate_and_overlapping_runs_get_no_line_regex():
    assert prefilter.finite(fg_parser.parse("(?:ab|cd){2}").tree, False).paths == 4
    assert prefilter.line_regex(fg_parser.parse("x\\d+a+").tree) is not None   # a+ starts with a only
    assert prefilter.line_regex(fg_parser.parse("x\\d+\\dy").tree) is None   # \d can follow \d+: back-off

"""The prefilter's own contract: what it extracts from a pattern and how much work it leaves.

A prefilter that lets more through (a shorter needle, a lost factor, a line verifier dropped, a
rejection that no longer rejects) gives the same answers, only slower: the search tests cannot see
it.  These tests pin the plan itself for a table of patterns (each with the reason it is the best
plan), the planners' pieces (finite translations, factors, first bytes, class needles), the
prefilter's decisions on a table of (pattern, text) cases, and, on a real text, how many candidate
lines reach the verifiers and how many `bytes.find` calls the scanner makes.
"""

from __future__ import annotations

import re

import pytest

from fallback_grep import parser as fg_parser, prefilter
from fallback_grep.filesearch import Matcher

SHARP_S = "\u017f".encode()      # ſ, folds to s
KELVIN = "\u212a".encode()       # K (Kelvin sign), folds to k


def tree(pattern: str):
    return fg_parser.parse(pattern).tree


def line_tree(pattern: str):
    return Matcher(pattern).pattern.tree


def describe(pf) -> dict | None:
    """Everything a prefilter decided, with only the parts it has."""
    if pf is None:
        return None
    out: dict = {}
    nd = pf.needles
    if nd is not None:
        if nd.literals:
            out["literals"] = nd.literals
        if nd.folded is not None:
            out["folded"] = nd.folded
        if nd.variants:
            out["variants"] = nd.variants
        if nd.whole:
            out["whole"] = True
    if pf.src is not None:
        out["exact" if pf.exact else "factor"] = pf.src
    if pf.line_regex is not None:
        out["line_regex"] = pf.line_regex.pattern.decode("latin-1")
    if pf.class_needle is not None:
        out["class_needle"] = pf.class_needle.needle
    if pf.needs_non_ascii:
        out["non_ascii"] = True
    return out


# -- the plan --------------------------------------------------------------------------------------
# (pattern, grep line mode's plan, the API's plan, why).  Grep mode may translate the whole
# pattern (`exact`: line anchors are BOL/EOL there); the API only gets a required `factor`.

PLANS = [
    ("foobar", {"literals": (b"foobar",), "whole": True, "exact": "foobar"},
     {"literals": (b"foobar",), "whole": True, "factor": "foobar"},
     "the pattern is its own needle: a hit is a match"),
    ("foo|bar", {"literals": (b"foo", b"bar"), "whole": True, "exact": "(?:foo|bar)"},
     {"literals": (b"foo", b"bar"), "whole": True, "factor": "(?:foo|bar)"},
     "one needle per alternative, each a whole match"),
    ("foo|bar\\d+", {"literals": (b"foo", b"bar")}, {"literals": (b"foo", b"bar")},
     "a `bar` hit is not a match by itself: not whole; unbounded, so no translation"),
    ("foo|\\d+", None, None, "an alternative without a literal: no needle can cover it"),
    ("foo|bar|foo\\d", {"literals": (b"foo", b"bar"), "exact": "(?:foo|bar|foo[0-9])"},
     {"literals": (b"foo", b"bar"), "factor": "(?:foo|bar|foo[0-9])"}, "a needle is listed once"),
    ("(foo|bar)", {"literals": (b"foo", b"bar"), "whole": True, "exact": "(?:foo|bar)"},
     {"literals": (b"foo", b"bar"), "whole": True, "factor": "(?:foo|bar)"},
     "an alternation inside a capture"),
    ("x(bc)d", {"literals": (b"xbcd",), "whole": True, "exact": "xbcd"},
     {"literals": (b"xbcd",), "whole": True, "factor": "xbcd"}, "a capture inside a concatenation"),
    ("a|b", {"literals": (b"a", b"b"), "whole": True, "exact": "(?:a|b)"},
     {"literals": (b"a", b"b"), "whole": True},
     "one-letter alternatives pin down too little for a factor (score 1 < 2)"),
    ("(?i)strasse", {"folded": b"strasse", "variants": (SHARP_S,),
                     "exact": "(?:[Ss]|\u00c5\u00bf)[Tt][Rr][Aa](?:[Ss]|\u00c5\u00bf)(?:[Ss]|\u00c5\u00bf)[Ee]"},
     {"folded": b"strasse", "variants": (SHARP_S,),
      "factor": "(?:[Ss]|\u00c5\u00bf)[Tt][Rr][Aa](?:[Ss]|\u00c5\u00bf)(?:[Ss]|\u00c5\u00bf)[Ee]"},
     "a folded needle, with the non-ASCII variant that lowering would miss"),
    ("x(?i:kelvin)", {"folded": b"xkelvin", "variants": (KELVIN,),
                      "exact": "x(?:[Kk]|\u00e2\x84\u00aa)[Ee][Ll][Vv][Ii][Nn]"},
     {"folded": b"xkelvin", "variants": (KELVIN,),
      "factor": "x(?:[Kk]|\u00e2\x84\u00aa)[Ee][Ll][Vv][Ii][Nn]"},
     "a plain letter joins the folded run"),
    ("(?i)k", {"exact": "(?:[Kk]|\u00e2\x84\u00aa)"}, None, "one folded letter is too short a needle"),
    ("(?i:kelvin)\\d(?i:ab)", {"folded": b"kelvin", "variants": (KELVIN,),
                               "exact": "(?:[Kk]|\u00e2\x84\u00aa)[Ee][Ll][Vv][Ii][Nn][0-9][Aa][Bb]"},
     {"folded": b"kelvin", "variants": (KELVIN,),
      "factor": "(?:[Kk]|\u00e2\x84\u00aa)[Ee][Ll][Vv][Ii][Nn][0-9][Aa][Bb]"},
     "the longest folded run, not the last"),
    ("(?i:abc)\\d(?i:xyz)", {"folded": b"abc", "exact": "[Aa][Bb][Cc][0-9][Xx][Yy][Zz]"},
     {"folded": b"abc", "factor": "[Aa][Bb][Cc][0-9][Xx][Yy][Zz]"}, "of equal folded runs, the first"),
    ("ab\\pL(?i:xy)", {"literals": (b"ab",), "factor": "ab"}, {"literals": (b"ab",), "factor": "ab"},
     "a plain literal as long as the folded one wins: no lowering"),
    ("\u00e9(?i)abc", {"exact": "\u00c3\u00a9[Aa][Bb][Cc]", "class_needle": b"\x01\x02\x03", "non_ascii": True},
     {"factor": "\u00c3\u00a9[Aa][Bb][Cc]", "class_needle": b"\x01\x02\x03", "non_ascii": True},
     "a non-ASCII literal cannot be lowered with the fold run: the run of classes wins"),
    ("foo(?i:bar)baz", {"literals": (b"foo",), "exact": "foo[Bb][Aa][Rr]baz"},
     {"literals": (b"foo",), "factor": "foo[Bb][Aa][Rr]baz"},
     "a 3-byte plain literal beats lowering the text for a longer folded one"),
    ("ab{3}c", {"literals": (b"abbbc",), "exact": "a(?:b){3}c"}, {"literals": (b"abbbc",), "factor": "a(?:b){3}c"},
     "x{3} of a literal is three literal bytes"),
    ("a{17}", {"exact": "(?:a){17}"}, {"factor": "(?:a){17}"}, "past 16 copies a repeat is no needle"),
    ("[A-Z]+_RESUME", {"literals": (b"_RESUME",), "factor": "(?:[A-Z]){1}_RESUME",
                       "line_regex": "(?:[A-Z]){1}_RESUME"},
     {"literals": (b"_RESUME",), "factor": "(?:[A-Z]){1}_RESUME"},
     "the last copy of a leading x+ touches what follows; the line verifier keeps one copy"),
    ("x(?:ab|cd)+y", {"literals": (b"x",), "factor": "x(?:(?:ab|cd)){1}"},
     {"literals": (b"x",), "factor": "x(?:(?:ab|cd)){1}"},
     "the first copy of a trailing x+ touches what precedes"),
    ("x{2,}yz", {"factor": "(?:x){2}yz", "line_regex": "(?:x){2}yz", "class_needle": b"\x01\x01\x02\x03"},
     {"factor": "(?:x){2}yz", "class_needle": b"\x01\x01\x02\x03"},
     "x{2,} gives two copies; four classes beat the two-byte literal `yz`"),
    ("ab+c", {"literals": (b"a",), "factor": "a(?:b){1}", "line_regex": "a(?:b){1,}c"},
     {"literals": (b"a",), "factor": "a(?:b){1}"},
     "a repeat in the middle of the line verifier stays unbounded"),
    ("\\s\\w{5}\\s", {"exact": "[\\\t\\\x0c-\\\r\\ ](?:[0-9A-Z_a-z]){5}[\\\t\\\x0c-\\\r\\ ]",
                      "class_needle": b"\x01\x02\x02\x02\x02\x02\x01"},
     {"class_needle": b"\x01\x02\x02\x02\x02\x02\x01"},
     "disjoint classes become a translated needle; classes alone score 0, no factor"),
    ("a[x-z]b", {"exact": "a[x-z]b", "class_needle": b"\x01\x02\x03"},
     {"factor": "a[x-z]b", "class_needle": b"\x01\x02\x03"},
     "three classes pin down more than the one-byte literal `a`"),
    ("ab\\d", {"exact": "ab[0-9]", "class_needle": b"\x01\x02\x03"},
     {"factor": "ab[0-9]", "class_needle": b"\x01\x02\x03"},
     "a two-byte literal is weak: the three-class run replaces it"),
    ("abc\\d", {"literals": (b"abc",), "exact": "abc[0-9]"}, {"literals": (b"abc",), "factor": "abc[0-9]"},
     "a three-byte literal is not weak: no class needle"),
    ("\\w\\w\\w\\d", {"exact": "[0-9A-Z_a-z][0-9A-Z_a-z][0-9A-Z_a-z][0-9]"}, None,
     "\\w and \\d overlap: no byte could have one class symbol"),
    ("\\bfoo\\b", {"literals": (b"foo",), "exact": "\\bfoo\\b"}, {"literals": (b"foo",), "factor": "foo"},
     "assertions only in the whole-pattern translation"),
    ("^foo$", {"literals": (b"foo",), "exact": "(?m:^)foo(?m:$)"}, {"literals": (b"foo",), "factor": "foo"},
     "^ and $ are line bounds in grep mode, text bounds (untranslatable) in the API"),
    ("x\\Ay", {"literals": (b"x",), "exact": "x(?m:^)y"}, {"literals": (b"x",)},
     "\\A is BOL in grep mode"),
    ("a.*b", {"literals": (b"a",)}, {"literals": (b"a",)},
     ".* can be followed by b: no line verifier, only the needle"),
    ("[a-d]x", {"literals": (b"x",), "exact": "[a-d]x"}, {"literals": (b"x",), "factor": "[a-d]x"},
     "a class of four scores as nearly literal"),
    ("[a-e]x", {"literals": (b"x",), "exact": "[a-e]x"}, {"literals": (b"x",)},
     "a class of five does not: the factor scores 1 < 2"),
    ("\u00e9", {"literals": ("\u00e9".encode(),), "whole": True, "exact": "\u00c3\u00a9", "non_ascii": True},
     {"literals": ("\u00e9".encode(),), "whole": True, "non_ascii": True},
     "a non-ASCII literal: an ASCII text cannot match"),
    ("(\u00e9)", {"literals": ("\u00e9".encode(),), "whole": True, "exact": "\u00c3\u00a9", "non_ascii": True},
     {"literals": ("\u00e9".encode(),), "whole": True, "non_ascii": True},
     "a capture is transparent"),
    ("\\d+\u00e9", {"literals": ("\u00e9".encode(),), "line_regex": "(?:[0-9]){1}\u00c3\u00a9", "non_ascii": True},
     {"literals": ("\u00e9".encode(),), "non_ascii": True}, "a needle, a line verifier and non-ASCII"),
    ("\\p{Greek}", {"exact": prefilter._class_regex(fg_parser.parse("\\p{Greek}").tree.ranges), "non_ascii": True},
     {"non_ascii": True}, "a big class: only the ASCII rejection in the API"),
    ("x\\C", {"literals": (b"x",), "exact": "x[\x00-\\\t\\\x0b-\u00ff]"}, {"literals": (b"x",)},
     "\\C translates to any byte but \\n in grep mode"),
    ("[ab]c?", {"exact": "[a-b](?:c){0,1}"}, None, "finite: grep translates it; nothing required"),
    ("x*", {"line_regex": "(?:x){0}"}, None, "every line matches; the verifier says so at once"),
    ("", {"exact": ""}, None, "the empty pattern matches every line"),
    ("(?:ab|cd){2}x", {"literals": (b"x",), "exact": "(?:(?:ab|cd)){2}x"},
     {"literals": (b"x",), "factor": "(?:(?:ab|cd)){2}x"}, "a bounded repeat of an alternation"),
    ("a(?:b|)c", {"literals": (b"a",), "exact": "a(?:b|)c"}, {"literals": (b"a",), "factor": "a(?:b|)c"},
     "an empty alternative translates to nothing"),
    ("|".join(f"a{i:02}" for i in range(16)),
     {"literals": tuple(f"a{i:02}".encode() for i in range(16)), "whole": True,
      "exact": "(?:" + "|".join(f"a{i:02}" for i in range(16)) + ")"},
     {"literals": tuple(f"a{i:02}".encode() for i in range(16)), "whole": True,
      "factor": "(?:" + "|".join(f"a{i:02}" for i in range(16)) + ")"},
     "16 literals: 16 finds"),
    ("|".join(f"a{i:02}" for i in range(17)),
     {"exact": "(?:" + "|".join(f"a{i:02}" for i in range(17)) + ")"},
     {"factor": "(?:" + "|".join(f"a{i:02}" for i in range(17)) + ")"},
     "17 literals: one sre scan is cheaper than 17 finds"),
]


@pytest.mark.parametrize("pattern,grep,api,why", PLANS, ids=[row[0][:30] for row in PLANS])
def test_the_plan(pattern, grep, api, why):
    assert describe(Matcher(pattern).prefilter) == grep, why
    assert describe(prefilter.build(tree(pattern))) == api, why


# -- the planners' pieces --------------------------------------------------------------------------

FINITE = [
    # pattern, (src, paths, max byte length, score) with assertions allowed, why
    ("x", ("x", 1, 4, 1), "a literal: one path, up to four UTF-8 bytes, nearly literal"),
    ("[a-d]", ("[a-d]", 1, 4, 1), "a class of four is still selective"),
    ("[a-e]", ("[a-e]", 1, 4, 0), "a class of five is not"),
    ("[ax-z]", ("[ax-z]", 1, 4, 1), "two leaf ranges in one byte class"),
    ("\u00e9", ("\u00c3\u00a9", 1, 4, 1), "a two-byte character"),
    ("\\C", ("[\x00-\u00ff]", 1, 1, 0), "any byte is one byte long"),
    ("(?:ab|cd){1,3}", ("(?:(?:ab|cd)){1,3}", 2 + 4 + 8, 24, 2), "paths of 1, 2 and 3 copies"),
    ("a??", ("(?:a){0,1}?", 2, 4, 0), "a lazy repeat stays lazy; zero copies pin nothing"),
    ("x{2}", ("(?:x){2}", 1, 8, 2), "x{n} scores n"),
    ("ab|c", ("(?:ab|c)", 2, 8, 1), "an alternation scores its weakest branch"),
    ("\\bx\\B", ("\\bx\\B", 1, 4, 1), "word assertions are ASCII in sre and RE2 alike"),
    ("(x)", ("x", 1, 4, 1), "a capture is transparent"),
    ("[^\\x00-\\x{10FFFF}]", ("(?!)", 1, 0, 0), "the empty class never matches"),
    ("", ("", 1, 0, 0), "the empty pattern"),
    ("x*", None, "unbounded"),
    ("\\pL", None, "past MAX_UNIT_BRANCHES: a trie that big is slower than the automaton"),
    ("^x", None, "^ outside grep mode is the text start: sre would anchor at pos"),
]


@pytest.mark.parametrize("pattern,want,why", FINITE, ids=[row[0] for row in FINITE])
def test_finite_translations(pattern, want, why):
    fin = prefilter.finite(tree(pattern), True)
    assert (fin and (fin.src, fin.paths, fin.length, fin.score)) == want, why


FIVE, TWO = "(?:ab|cd|ef|gh|ij)", "(?:kl|mn)"
PATHS_2000 = FIVE * 3 + TWO * 4                                  # 5**3 * 2**4 alternatives
UNIT_600 = "".join(f"\\x{{{0x100 + 2 * i:x}}}" for i in range(600))  # 600 isolated code points

BOUNDS = [
    # pattern, (paths, length) or None when refused, why
    (PATHS_2000, (2000, 56), "a concatenation of exactly MAX_PATHS paths"),
    (PATHS_2000 + "|zz", None, "one more alternative: MAX_PATHS + 1"),
    (FIVE * 3 + TWO * 3 + "|" + "(?:op|qr|st|uv|wx)" * 3 + "(?:yz|AB)" * 3, (2000, 48),
     "an alternation of exactly MAX_PATHS paths (1000 + 1000)"),
    (f"(?:{PATHS_2000}){{1}}", (2000, 56), "a repeat of exactly MAX_PATHS paths"),
    (f"(?:{PATHS_2000}){{0,1}}", None, "zero or one copy: MAX_PATHS + 1"),
    ("(?:ab|cd){1,9}", (2 ** 10 - 2, 72), "a repeat's paths sum over its counts"),
    ("(?:ab|cd){1,10}", None, "2046 paths, only 80 bytes long"),
    ("\\C{999}\\C", (1, 1000), "a concatenation of exactly MAX_LENGTH bytes"),
    ("\\C{1000}\\C", None, "MAX_LENGTH + 1"),
    ("(?:\\C\\C){500}", (1, 1000), "a repeat of exactly MAX_LENGTH bytes"),
    ("(?:\\C\\C\\C\\C\\C\\C\\C){143}", None, "a repeat of MAX_LENGTH + 1 bytes, one path"),
    (f"[{UNIT_600}]", (1, 4), "a class of exactly MAX_UNIT_BRANCHES UTF-8 sequences"),
    (f"[{UNIT_600}\\x{{5b0}}]", None, "MAX_UNIT_BRANCHES + 1"),
]


@pytest.mark.parametrize("pattern,want,why", BOUNDS, ids=[r[2] for r in BOUNDS])
def test_finite_translations_stop_exactly_at_their_bounds(pattern, want, why):
    fin = prefilter.finite(tree(pattern), False)
    assert (fin and (fin.paths, fin.length)) == want, why


def test_finite_fragments_carry_no_instance_dict():
    # Planning a pattern builds one per node and per factor candidate.
    assert not hasattr(prefilter.finite(tree("ab"), False), "__dict__")


def test_assertions_translate_only_where_allowed():
    # A factor is searched anywhere in a text, where \b would be judged from the wrong context.
    assert prefilter.finite(tree("\\bx"), False) is None
    assert prefilter.finite(line_tree("^x$"), True).src == "(?m:^)x(?m:$)"


FACTORS = [
    ("[A-Z]+_RESUME", ("(?:[A-Z]){1}_RESUME", 7), "a leading x+ lends its last copy"),
    ("(x+)yz", ("(?:x){1}yz", 3), "also inside a capture"),
    ("xy(z+)", ("xy(?:z){1}", 3), "a trailing x+ lends its first copy"),
    ("x{2,}yz", ("(?:x){2}yz", 4), "x{n,} lends n copies"),
    ("foo.*barbaz", ("barbaz", 6), "the most selective stretch, not the first"),
    ("ab|cd", ("(?:ab|cd)", 2), "a finite alternation is its own factor"),
    ("(ab|cd)", ("(?:ab|cd)", 2), "also in a capture"),
    ("[a-d]x", ("[a-d]x", 2), "score 2 is enough"),
    ("[a-e]x", None, "score 1 is not"),
    ("a.*b", None, "single letters around .* score 1"),
    ("(?:a+)", None, "one copy of a scores 1"),
    ("(x+yz)", ("(?:x){1}yz", 3), "a capture around the whole pattern is looked through"),
    ("(?:\\bab)+cd", ("cd", 2), "an edge copy may not carry an assertion"),
    ("(?:ab|cd){1,10}yz", ("yz", 2), "only an unbounded repeat lends copies"),
    ("ab\\pLcd", ("ab", 2), "an untranslatable character lends nothing"),
    ("x\\pL+y", None, "\\pL has no translation: each side scores 1"),
    ("ab\\pL+cd\\pL+ef", ("ab", 2), "the first of equal scores"),
    ("x(?:\\pL|y)zw\\d+", ("zw(?:[0-9]){1}", 2), "an untranslatable item ends a factor"),
    ("a{200}b{100}", ("(?:a){200}", 200), "a concatenation past MAX_LENGTH is cut back to what fits"),
]


@pytest.mark.parametrize("pattern,want,why", FACTORS, ids=[row[0] for row in FACTORS])
def test_best_factor(pattern, want, why):
    fac = prefilter.best_factor(tree(pattern))
    assert (fac and (fac.src, fac.score)) == want, why


FIRST_BYTES = [
    ("a", {0x61}, "a literal"),
    ("[a-c]", {0x61, 0x62, 0x63}, "a class"),
    ("\u00e9", {0xC3}, "the lead byte of a multi-byte character"),
    ("(ab)", {0x61}, "through a capture"),
    ("ab", {0x61}, "the first item of a concatenation"),
    ("a?b", None, "the first item can be empty: unknown"),
    ("a|bc", {0x61, 0x62}, "the union of the alternatives"),
    ("a|b?", None, "an alternative can be empty"),
    ("a+", {0x61}, "a repeat of at least one copy"),
    ("a*", None, "a repeat of zero copies"),
    ("\\b", None, "an assertion consumes nothing"),
    ("", None, "the empty pattern"),
]


@pytest.mark.parametrize("pattern,want,why", FIRST_BYTES, ids=[row[0] for row in FIRST_BYTES])
def test_first_bytes(pattern, want, why):
    assert prefilter._first_bytes(tree(pattern)) == want, why


LINE_REGEXES = [
    ("\\d+x", "(?:[0-9]){1}x", "a leading C{m,} becomes C{m}"),
    ("x\\d+", "x(?:[0-9]){1}", "so does a trailing one"),
    ("x\\d+$", "x(?:[0-9]){1,}(?m:$)", "trailing but for an assertion: it stays unbounded"),
    ("x\\d+y", "x(?:[0-9]){1,}y", "in the middle it stays unbounded: y cannot start a digit"),
    ("x\\d+a+", "x(?:[0-9]){1,}(?:a){1}", "the follower may itself be a run"),
    ("x\\d+(?:a|bc)", "x(?:[0-9]){1,}(?:a|bc)", "or an alternation of other first bytes"),
    ("x\\d+(ab)", "x(?:[0-9]){1,}ab", "or a capture"),
    ("x\\d+\\by", "x(?:[0-9]){1,}\\by", "assertions are skipped when looking for the follower"),
    ("x[a-c]*y", "x(?:[a-c]){0,}y", "zero copies are allowed"),
    ("x\\d+\\dy", None, "\\d can follow \\d+: sre would back off through every shorter run"),
    ("x\\d+(?:a|b?)", None, "the follower can be empty"),
    ("x\\d+(?:a|\\d)", None, "one alternative of the follower overlaps"),
    ("a.*b", None, ". includes b"),
    ("x\\pL+y", None, "\\pL has no translation"),
    ("x(?:ab)+y", None, "only a repeated single character is allowed"),
    ("xy", None, "a finite pattern has the exact prefilter instead"),
    ("ax{0}b", None, "x{0} is a bounded repeat"),
    ("\\d+\\pL", None, "a character class past MAX_UNIT_BRANCHES has no translation"),
    ("ax{2}b", None, "so is x{2}"),
    ("ax{0}b\\d+", "a(?:x){0}b(?:[0-9]){1}", "x{0} is finite, not unbounded"),
]


@pytest.mark.parametrize("pattern,want,why", LINE_REGEXES, ids=[row[0] for row in LINE_REGEXES])
def test_line_regex(pattern, want, why):
    lr = prefilter.line_regex(line_tree(pattern))
    assert (lr and lr.pattern.decode("latin-1")) == want, why


CLASS_NEEDLES = [
    ("\\s\\w{5}\\s", b"\x01\x02\x02\x02\x02\x02\x01", "equal classes share a symbol"),
    ("[a-c][0-9][a-c][0-9]", b"\x01\x02\x01\x02", "symbols by first appearance"),
    ("abc", b"\x01\x02\x03", "single letters are classes too"),
    ("\\d{2,}-\\d", b"\x01\x01\x02\x01", "an unbounded repeat ends a run with its first n copies"),
    ("\\d+-\\d+-\\d+", b"\x01\x02\x01", "... and starts the next with its last n"),
    ("x\\d{16}", b"\x01" + b"\x02" * 16, "x{16} counts sixteen times"),
    ("x\\d{17}", None, "past 16 copies a repeat ends the run"),
    ("\\d\\d\\d+", b"\x01\x01\x01", "a trailing \\d+ adds one"),
    ("\\d*\\d\\d", None, "\\d* adds nothing: two classes are too few"),
    ("\u00e9\\d\\d\\d", b"\x01\x01\x01", "a non-ASCII character ends a run"),
    ("\\d\\d(?:a|b)\\d\\d\\d", b"\x01\x01\x01", "an alternation ends a run: the longest run wins"),
    ("\\w\\d\\d", None, "overlapping classes"),
    ("\\d\\dx{0}\\d", b"\x01\x01\x01", "x{0} matches empty: the digits stay adjacent"),
    ("x\\d[a-c]{2,3}\\d", None, "a repeat of varying length ends a run"),
    ("[ab][bc][cd]", None, "overlapping neighbours"),
]


@pytest.mark.parametrize("pattern,want,why", CLASS_NEEDLES, ids=[row[0] for row in CLASS_NEEDLES])
def test_class_needle(pattern, want, why):
    cn = prefilter.class_needle(line_tree(pattern))
    assert (cn and cn.needle) == want, why


def test_of_equal_runs_of_classes_the_first_wins():
    cn = prefilter.class_needle(line_tree("\\d\\d\\d[^0-9]+[a-c][a-c][a-c]"))
    assert cn.needle == b"\x01\x01\x01" and cn.table[ord("0")] == 1 and cn.table[ord("a")] == 0xFF


def test_a_class_needle_table_maps_each_member_to_its_symbol_and_everything_else_to_ff():
    cn = prefilter.class_needle(line_tree("[a-c][0-9][a-c]"))
    assert len(cn.table) == 256
    want = bytearray(b"\xff" * 256)
    want[ord("a"):ord("c") + 1] = b"\x01" * 3
    want[ord("0"):ord("9") + 1] = b"\x02" * 10
    assert cn.table == bytes(want)
    assert b"x b7c y".translate(cn.table).find(cn.needle) == 2


NON_ASCII = [
    ("\u00e9", True, "a non-ASCII literal"),
    ("[\u00e9-\u00eb]", True, "a class of non-ASCII members"),
    ("[a-\u00e9]", False, "a class with ASCII members"),
    ("[\\x{80}-\\x{ff}]", True, "U+0080 is two bytes in UTF-8"),
    ("x\u00e9", True, "a concatenation with one required non-ASCII item"),
    ("\u00e9|\u00eb", True, "every alternative is non-ASCII"),
    ("\u00e9|x", False, "one alternative is ASCII"),
    ("\u00e9+", True, "at least one copy"),
    ("\u00e9*", False, "zero copies"),
    ("\u00e9{0}", False, "zero copies, counted"),
    ("(\u00e9)", True, "through a capture"),
    ("\\b", False, "an assertion"),
    ("", False, "the empty pattern"),
]


@pytest.mark.parametrize("pattern,want,why", NON_ASCII, ids=[row[0] for row in NON_ASCII])
def test_needs_non_ascii(pattern, want, why):
    assert prefilter.needs_non_ascii(tree(pattern)) is want, why


def test_units_and_runs():
    unit = prefilter._unit
    assert unit(tree("x")) == ("lit", b"x")
    assert unit(tree("\u00e9")) == ("lit", "\u00e9".encode())
    assert unit(tree("(?i)x")) == ("fold", b"x", ())
    assert unit(tree("(?i)s")) == ("fold", b"s", (SHARP_S,))
    assert unit(tree("[ab]")) is None              # two letters, not one letter in two cases
    assert unit(tree("[aB]")) is None
    assert unit(tree("[a-e]")) is None             # a range of five
    assert unit(tree("(?i)\u00e9")) is None        # no ASCII member to lower
    assert unit(tree("x+")) is None
    # At most four code points, one of them ASCII (U+007F is its own case pair).
    assert unit(tree("[\\x7f-\\x82]")) == ("fold", b"\x7f", tuple(chr(c).encode() for c in (0x80, 0x81, 0x82)))
    assert unit(tree("[\\x7f\\x{100}\\x{102}\\x{104}]")) == ("fold", b"\x7f", ("\u0100".encode(), "\u0102".encode(), "\u0104".encode()))
    assert unit(tree("[\\x7f-\\x83]")) is None
    assert unit(tree("[\\x7f\\x{100}\\x{102}\\x{104}\\x{106}]")) is None   # five, in five ranges
    assert unit(tree("[\\x7f-\\x80]")) == ("fold", b"\x7f", ("\u0080".encode(),))
    assert unit(tree("[A\\x{100}]")) is None                     # A without a
    assert prefilter._ascii_unit(tree("[\\x7f-\\x80]")) is None  # U+0080 is not the byte 0x80
    assert prefilter._ascii_unit(tree("[\\x00-\\x7f]")) == frozenset(range(128))
    runs = prefilter._runs(prefilter._flatten(tree("ab{2}c\\d+(?i:x)y")))
    assert runs == [[("lit", b"a"), ("lit", b"b"), ("lit", b"b"), ("lit", b"c")],
                    [("fold", b"x", ()), ("lit", b"y")]]
    assert prefilter._runs(prefilter._flatten(tree("b{16}"))) == [[("lit", b"b")] * 16]
    assert prefilter._runs(prefilter._flatten(tree("b{17}"))) == []


# -- the prefilter's decisions ---------------------------------------------------------------------

def test_quick_reject_answers_with_a_bool_from_the_buffers_first_n_bytes():
    buf = bytearray(b"xx foo yy\n" + b"\0" * 20)
    lit = Matcher("foo").prefilter
    assert lit.quick_reject(buf, 10) is False
    assert lit.quick_reject(bytearray(b"foo"), 3) is False    # a hit at offset 0
    assert lit.quick_reject(buf, 5) is True                 # `foo` ends past byte 5
    two = Matcher("fo|yy").prefilter                         # several needles, two-byte finders
    assert two.quick_reject(buf, 10) is False
    assert two.quick_reject(buf, 4) is True
    folded = Matcher("(?i)FOO yy").prefilter
    assert folded.quick_reject(buf, 10) is False
    assert folded.quick_reject(buf, 8) is True
    assert folded.quick_reject(bytearray(b"xx FOO YY"), 9) is False
    classes = Matcher("\\s\\w{5}\\s").prefilter              # no needles: cannot reject early
    assert classes.quick_reject(buf, 10) is False


def test_a_folded_needle_rejects_ascii_and_defers_to_texts_with_a_variant():
    nd = Matcher("(?i)strasse").prefilter.needles
    assert nd.may_occur(b"die STRASSE") is True
    assert nd.may_occur(b"die strase") is False
    assert nd.may_occur("die \u017ftra\u017f\u017fe".encode()) is True     # lowering cannot see it
    assert nd.may_occur("caf\u00e9 strase".encode()) is False                  # non-ASCII, no variant


MAY_MATCH = [
    # pattern, text, pos, endpos, may a match be in text[pos:endpos]?, why
    ("\\p{Greek}", b"plain ascii", 0, 11, False, "an ASCII text cannot hold Greek"),
    ("\\p{Greek}", "\u03a9".encode(), 0, 2, True, "a Greek letter"),
    ("foo|bar", b"a bar", 0, 5, True, "one of the needles"),
    ("foo|bar", b"a bar", 0, 4, False, "the needle ends past endpos"),
    ("foo|bar", b"a bar", 3, 5, False, "the needle starts before pos"),
    ("foo|bar", b"bar", 0, 3, True, "a needle at pos"),
    ("foo|bar\\d+", b"zzz", 0, 3, False, "needles without a factor"),
    ("[A-Z]+_RESUME", b"X_RESUMEX", 0, 9, True, "the factor's sre"),
    ("\\s\\w{5}\\s", b"no run of five", 0, 14, True, "no needle, no factor: cannot tell"),
    ("x\\d\\dy", b"x1y x22", 0, 7, False, "the factor (x, two digits, y) is not there"),
    ("x\\d\\dy", b"x12y", 0, 4, True, "the factor is there"),
    ("(?i)strasse", b"STRASSE", 0, 7, True, "folded needles are not used here (a lowered copy per call)"),
    ("x\\p{Greek}", b"x ascii", 0, 7, False, "the needle x is there, but the text is ASCII"),
]


@pytest.mark.parametrize("pattern,text,pos,endpos,want,why", MAY_MATCH, ids=[f"{r[0]}-{r[2]}-{r[3]}" for r in MAY_MATCH])
def test_may_match(pattern, text, pos, endpos, want, why):
    pf = prefilter.build(tree(pattern))
    assert pf is not None
    assert pf.may_match(text, pos, endpos) is want, why


def test_the_scanner_jumps_to_candidates_and_stops_at_endpos():
    pf = Matcher("foo|bar").prefilter
    sc = pf.scanner(b"a bar foo bar")
    assert sc.mode == "literals"
    assert [sc.find(p, 13) for p in (0, 3, 7, 11)] == [2, 6, 10, -1]
    assert pf.scanner(b"foo bar").find(0, 7) == 0       # the nearest hit, even at 0
    assert pf.scanner(b"bar foo").find(0, 7) == 0
    cached = pf.scanner(b"a bar foo bar")
    assert cached.find(0, 13) == 2      # caches bar at 2, foo at 6
    assert cached.find(0, 4) == -1      # the cached hit at 2 ends at 5, past endpos
    assert cached.find(0, 5) == 2       # ... and exactly at endpos
    narrow = pf.scanner(b"a bar")
    assert narrow.find(0, 4) == -1      # no hit ends by byte 4 ...
    assert narrow.find(0, 5) == 2       # ... which must not hide the one ending at 5
    # A folded hit is a candidate, not a match: `FOO` here is not followed by a digit.
    folded = Matcher("(?i)foo\\d").prefilter.scanner(b"x FOO y foo1")
    assert folded.mode == "folded" and folded.lowered == b"x foo y foo1"
    assert [folded.find(0, 12), folded.find(3, 12), folded.find(9, 12)] == [2, 8, -1]
    classes = Matcher("\\d\\d\\d").prefilter.scanner(b"a 12 345")
    assert classes.mode == "classes" and [classes.find(0, 8), classes.find(6, 8)] == [5, -1]
    regex = Matcher("[ab]c?").prefilter.scanner(b"xx bc")
    assert regex.mode == "regex" and regex.find(0, 5) == 3 and regex.find(0, 3) == -1
    greek = prefilter.build(tree("\\p{Greek}")).scanner(b"ascii")
    assert greek.mode == "reject" and greek.find(0, 5) == -1
    none = Matcher("\\p{Greek}+\\s").prefilter.scanner("\u03a9 x".encode())
    assert none.mode == "none"


SCANNER_MODES = [
    # pattern, text, mode, is every candidate a match?, why
    ("foobar", b"a foobar", "literals", True, "a whole literal"),
    ("foo\\d+", b"a foo1", "literals", False, "a partial literal"),
    ("(?i)foobar", b"a FOOBAR", "folded", False, "an ASCII text is lowered"),
    ("(?i)strasse", "\u017ftrasse".encode(), "regex", True, "a text with a variant: the exact sre"),
    ("(?i)strasse", "caf\u00e9 strasse".encode(), "folded", False, "non-ASCII but no variant: lowered"),
    ("\\s\\w{5}\\s", b" abcde ", "classes", False, "a run of classes"),
    ("[ab]c?", b"abc", "regex", True, "the exact translation"),
    ("[a-d]+[e-h]", b"ae", "regex", False, "a factor only"),
    ("\\d+\u00e9", b"12 ascii", "reject", False, "no non-ASCII byte at all"),
    ("\\d+\u00e9", "12\u00e9".encode(), "literals", False, "non-ASCII: the needle"),
    ("\\p{Greek}+\\s", "\u03a9 x".encode(), "none", False, "nothing to scan with"),
]


@pytest.mark.parametrize("pattern,text,mode,trusted,why", SCANNER_MODES, ids=[r[0] + "-" + r[2] for r in SCANNER_MODES])
def test_scanner_modes(pattern, text, mode, trusted, why):
    sc = Matcher(pattern).prefilter.scanner(text)
    assert (sc.mode, sc.hit_is_match) == (mode, trusted), why


# -- the work left to the verifiers, on a real text ------------------------------------------------

ROWS = [
    "foo = bar(1)",                    # 1
    "foobar and foo2",                 # 2
    "FOOBAR in capitals",              # 3
    "the strasse",                     # 4
    "die STRASSE",                     # 5
    "eine \u017ftrasse",               # 6
    "PM_RESUME here",                  # 7
    "pm_resume there",                 # 8
    "XPM_RESUME _RESUME",              # 9
    "tab\there 12345 x",               # 10
    "words abcde fghij end",           # 11
    "\u03a9mega \u03b1\u03b2",         # 12
    "abc1 ab12 a123",                  # 13
    "x" * 300 + " foo9",               # 14: longer than LINE_SRE_MAX
    "",                                # 15
    "ab ab ab",                        # 16
]
TEXT = "\n".join(ROWS).encode()
ASCII_TEXT = "\n".join(r for r in ROWS if r.isascii()).encode()


class Counting(Matcher):
    """A Matcher that counts the candidate lines the prefilter hands on: checked by an sre
    verifier or the automaton (`checked`), by the automaton (`automaton`), and the scans for a
    next match without any prefilter (`scans`)."""

    def __init__(self, pattern):
        super().__init__(pattern)
        self.checked = self.automaton = self.scans = 0

    def _confirm(self, data, start, end):
        self.checked += 1
        return super()._confirm(data, start, end)

    def _verify(self, data, start, end):
        self.automaton += 1
        return super()._verify(data, start, end)

    def _next_match_pos(self, data, pos, n):
        self.scans += 1
        return super()._next_match_pos(data, pos, n)


WORK = [
    # pattern, text, matching lines, (checked, by the automaton, scans), why
    ("foobar", TEXT, [2], (0, 0, 0), "a whole literal: hits are matches"),
    ("foo|bar", TEXT, [1, 2, 14], (0, 0, 0), "whole literals"),
    ("foo\\d", TEXT, [2, 14], (3, 0, 0), "the three lines holding foo, by sre"),
    ("foo|bar\\d", TEXT, [1, 2, 14], (3, 0, 0), "one check per line, not per hit"),
    ("(?i)strasse", TEXT, [4, 5, 6], (0, 0, 0), "a text with ſ: the exact sre finds matches only"),
    ("(?i)strasse", ASCII_TEXT, [4, 5], (2, 0, 0), "an ASCII text: the two lowered hits"),
    ("(?i)foo\\d", ASCII_TEXT, [2, 12], (4, 0, 0), "every line holding foo in any case is checked"),
    ("PM_RESUME", TEXT, [7, 9], (0, 0, 0), "a whole literal"),
    ("[A-Z]+_RESUME", TEXT, [7, 9], (2, 0, 0), "only lines with _RESUME, verified by the line sre"),
    ("\\s\\w{5}\\s", TEXT, [10, 11], (2, 0, 0), "a class needle hits the two lines"),
    ("\\d{5}", TEXT, [10], (1, 0, 0), "five digits in a row: one line"),
    ("ab\\d", TEXT, [13], (1, 0, 0), "the class needle, not the two-byte literal ab"),
    ("\\p{Greek}", TEXT, [12], (0, 0, 0), "the exact sre"),
    ("\\p{Greek}", ASCII_TEXT, [], (0, 0, 0), "rejected without a scan"),
    ("a\\d+", TEXT, [13], (10, 0, 0), "a one-byte needle: every line with an a"),
    ("\\bab\\b", TEXT, [16], (4, 0, 0), "lines with ab, checked by the exact sre"),
    ("\\d{3}\\pL", TEXT, [], (2, 2, 0), "the class needle's two lines go to the automaton"),
    ("\\d+\\s\\d+\\s\\d+", b"12 3 45\nx 1 y\n1 2\n", [1], (2, 0, 0),
     "the class needle hits lines 1 and 3; the line sre verifies them"),
    ("x+ foo\\d", b"x" * 251 + b" foo1\n" + b"x" * 252 + b" foo1", [1, 2], (2, 1, 0),
     "a line of LINE_SRE_MAX bytes goes to sre, one byte more to the automaton"),
    ("x+ foo\\d", TEXT, [14], (2, 1, 0), "the long line goes to the automaton, the short one to sre"),
    ("x{3} foo", TEXT, [14], (1, 0, 0), "a long line, but the exact sre needs no back-off"),
    ("ab|\\d+", TEXT, [1, 2, 10, 11, 13, 14, 16], (0, 0, 7), "no prefilter: the automaton scans"),
    (".*", ASCII_TEXT, list(range(1, 15)), (0, 0, 14), "scanner mode none: the automaton scans"),
]


@pytest.mark.parametrize("pattern,text,lines,work,why", WORK,
                         ids=[f"{r[0]}-{'ascii' if r[1] is ASCII_TEXT else 'text'}" for r in WORK])
def test_the_work_left_to_the_verifiers(pattern, text, lines, work, why):
    m = Counting(pattern)
    got = [text.count(b"\n", 0, start) + 1 for start, _ in m.iter_line_matches(text)]
    assert (got, (m.checked, m.automaton, m.scans)) == (lines, work), why


def test_the_literal_scanner_finds_each_needle_once_per_hit_not_once_per_line():
    pf = Matcher("foo|bar").prefilter
    calls = []

    def counting(k, find):
        def wrapped(hay, pos, endpos):
            calls.append(k)
            return find(hay, pos, endpos)
        return wrapped
    pf.needles.finders = tuple(counting(k, f) for k, f in enumerate(pf.needles.finders))
    data = b"foo\nx\nx\nx\nbar\nfoo bar\n"
    sc = pf.scanner(data)
    hits = []
    pos = 0
    while (hit := sc.find(pos, len(data))) >= 0:
        hits.append(hit)
        pos = data.find(b"\n", hit) + 1
    assert hits == [0, 10, 14]
    # foo: found at 0, then at 14 (kept while bar is found at 10), then no more; bar: at 10,
    # then at 18 (kept while foo is found at 14), then no more.
    assert calls.count(0) == 3 and calls.count(1) == 3


def test_two_byte_needles_use_sre_and_others_bytes_find():
    # bytes.find barely skips with a two-byte needle; sre's literal search runs memchr.
    two, three = prefilter._finder(b"ab"), prefilter._finder(b"abc")
    assert two(b"xxab ab", 0, 7) == 2 and two(b"xxab ab", 3, 7) == 5 and two(b"xxab", 0, 3) == -1
    assert three(b"xabc", 0, 4) == 1 and three(b"xabc", 0, 3) == -1
    def uses_sre(find):
        return any(isinstance(getattr(c.cell_contents, "__self__", None), re.Pattern)
                   for c in find.__closure__ or ())
    assert uses_sre(two) and not uses_sre(three)

"""The prefilter's planning is linear and bounded (issue 30, finding 9).

best_factor built every candidate factor whole and cut it back one item at a time: cubic in the
length of a concatenation (a 2,000-character literal took 60 s, 64 KiB would have taken an hour),
in Abhed's own process for every grep call. These tests pin the sliding window that replaced it
against the old definition (hypothesis), the amount of work it does (counted, not timed), and each
bound a translation keeps to: paths, bytes, sre source size and nesting (sre's own parser recurses
once per group), the early exits that keep a 64 KiB pattern from being translated whole only to be
thrown away, and the memo that translates a class repeated thousands of times once.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fallback_grep as fg
from fallback_grep import bounded, parser as fg_parser, prefilter
from fallback_grep import syntax as sx
from fallback_grep.filesearch import Matcher


def tree(pattern: str):
    return fg_parser.parse(pattern).tree


def line_tree(pattern: str):
    return Matcher(pattern).pattern.tree


def facts(fin):
    return fin and (fin.src, fin.paths, fin.length, fin.score, fin.nest)


# -- best_factor against its definition ------------------------------------------------------------

def reference_factor(node):
    """The old best_factor, word for word but for its bounds (prefilter._concat's): for each start,
    the whole run of translations and the next item's edge, cut back one item at a time."""
    while node.op == sx.CAPTURE:
        node = node.subs[0]
    items = node.subs if node.op == sx.CONCAT else [node]
    trans = [prefilter.finite(it, False) for it in items]
    best, n = None, len(items)
    for i in range(n):
        left = trans[i] or prefilter._edge(items[i], {})
        if left is None:
            continue
        parts, j = [left], i + 1
        while j < n and trans[j] is not None:
            parts.append(trans[j])
            j += 1
        if j < n:
            parts.append(prefilter._edge(items[j], {}))
        cand = prefilter._concat(parts)
        while cand is None:
            parts.pop()
            cand = prefilter._concat(parts)
        if best is None or cand.score > best.score:
            best = cand
    return best if best is not None and best.score >= prefilter.MIN_FACTOR_SCORE else None


# Items that exercise every case: literals (score 1), wide classes (score 0), untranslatable items
# (\pL, x*), items with an edge copy (x+, x{2,}, in a capture), long items near MAX_LENGTH and
# MAX_PATHS, an assertion (no translation without assertions), empty captures (length 0).
ITEMS = ["a", "b", "xyz", "[a-d]", "[a-z]", "\\d", "\\pL", "x*", "x+", "(?:ab)+", "y{2,}", "(z+)", "(?:\\bq)+",
         "\\C{300}", "a{200}", "(?:ab|cd){1,5}", "(?:ab|cd|ef|gh|ij){2}", "()", "\\b", "(k)", "\u00e9", "(?i:s)",
         "[\\x{100}-\\x{17f}]{3}"]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=24), st.booleans())
def test_best_factor_is_the_old_definition(items, wrap):
    pattern = "".join(items)
    node = tree(f"({pattern})" if wrap else pattern)
    got, want = prefilter.best_factor(node), reference_factor(node)
    assert facts(got) == facts(want), pattern


@pytest.mark.parametrize("pattern, want", [
    ("a{200}b{100}c{50}", ("(?:a){200}", 200)),        # the window drops a{200} before b{100}c{50} fit
    ("b{100}c{50}a{200}", ("(?:c){50}(?:a){200}", 250)),
    ("x+" + "a{100}" * 3 + "y+", ("(?:x){1}(?:a){100}(?:a){100}", 201)),  # a left edge, then the run
    ("a{120}" * 8 + "y+", ("(?:a){120}(?:a){120}(?:y){1}", 241)),   # only the last start reaches y+
    ("a{125}" * 8 + "y+", ("(?:a){125}(?:a){125}", 250)),   # exactly MAX_LENGTH: no room for the edge
    ("a{124}" * 2 + "y+", ("(?:a){124}(?:a){124}(?:y){1}", 249)),   # the right edge fits
])
def test_windows_at_the_length_bound(pattern, want):
    fac = prefilter.best_factor(tree(pattern))
    assert (fac.src, fac.score) == want
    assert facts(fac) == facts(reference_factor(tree(pattern)))


@pytest.mark.parametrize("pattern", [
    "abcdefghij" * 5 + "x+", "x+" + "abcdefghij" * 5, "(?:ab|cd)" * 8 + "y+", "a{5}b{5}c{5}d{5}" * 3 + "z+",
    "abc\\pLdefghijklmnopqrstuvwxyz0123456789", "[a-d]" * 20,
])
def test_windows_at_the_source_size_bound(monkeypatch, pattern):
    monkeypatch.setattr(prefilter, "MAX_SRC", 30)
    got = prefilter.best_factor(tree(pattern))
    assert facts(got) == facts(reference_factor(tree(pattern)))
    assert got is not None and len(got.src) <= 30


def test_windows_at_the_paths_bound():
    five, two = "(?:ab|cd|ef|gh|ij)", "(?:kl|mn)"
    fac = prefilter.best_factor(tree(five * 3 + two * 4 + "q+"))        # exactly MAX_PATHS: all seven
    assert (fac.paths, fac.score) == (2000, 15) and fac.src.endswith("(?:kl|mn)(?:q){1}")
    fac = prefilter.best_factor(tree(five * 3 + two * 5 + "q+"))        # one more: the window slides on
    assert (fac.paths, fac.score) == (25 * 32, 15) and fac.src.endswith("(?:q){1}")
    assert facts(fac) == facts(reference_factor(tree(five * 3 + two * 5 + "q+")))


def greek_translations(monkeypatch) -> list:
    """The translations of \\p{Greek} made from now on."""
    made, make = [], prefilter._class_finite
    greek = tuple(tree("\\p{Greek}").ranges)
    monkeypatch.setattr(prefilter, "_class_finite",
                        lambda ranges: (made.append(1) if tuple(ranges) == greek else None) or make(ranges))
    return made


def test_best_factor_shares_one_memo_among_its_items(monkeypatch):
    node = tree("\\p{Greek}x" * 50)
    made = greek_translations(monkeypatch)
    assert prefilter.best_factor(node).score == 50
    assert len(made) == 1


def test_line_regex_shares_one_memo_among_its_items(monkeypatch):
    node = line_tree("\\p{Greek}\\d+" * 50)
    made = greek_translations(monkeypatch)
    assert prefilter.line_regex(node) is not None
    assert len(made) == 1


def test_best_factor_does_linear_work(monkeypatch):
    """A concatenation of n items: each enters and leaves the window once (the old way built and cut
    back n candidates of up to MAX_LENGTH items each)."""
    calls = {"fits": 0, "concat": 0}
    fits, concat = prefilter._Window.fits, prefilter._concat

    def counted_fits(self, part):
        calls["fits"] += 1
        return fits(self, part)

    def counted_concat(parts):
        calls["concat"] += 1
        return concat(parts)

    monkeypatch.setattr(prefilter._Window, "fits", counted_fits)
    monkeypatch.setattr(prefilter, "_concat", counted_concat)
    n = 20_000
    fac = prefilter.best_factor(tree("abcdefghij" * (n // 10) + "x+"))
    assert fac.score == prefilter.MAX_LENGTH // 4 and fac.src == ("abcdefghij" * 25)
    assert calls["fits"] <= 2 * n + 2 and calls["concat"] == 1


def test_a_long_literal_plans_whole():
    # 64 KiB: the needle is the whole literal (joined once: `bytes +=` per unit was quadratic), the
    # exact translation is refused at MAX_LENGTH, the factor is its first MAX_LENGTH bytes.
    text = ("0123456789abcdef" * 4096)
    pf = prefilter.build(line_tree(text), exact_ok=True)
    assert pf.needles.literals == (text.encode(),) and pf.needles.whole and not pf.exact
    assert pf.src == text[:prefilter.MAX_LENGTH // 4]


# -- the bounds of one translation -----------------------------------------------------------------

def test_repeat_paths_are_the_sum_of_powers_until_past_the_bound():
    for paths in range(1, 8):
        for lo in range(0, 6):
            for hi in range(lo, 14):
                total = sum(paths ** k for k in range(lo, hi + 1))
                want = total if total <= prefilter.MAX_PATHS else None
                assert prefilter._repeat_paths(paths, lo, hi) == want, (paths, lo, hi)
    assert prefilter._repeat_paths(1, 0, 1999) == 2000 and prefilter._repeat_paths(1, 0, 2000) is None
    assert prefilter._repeat_paths(2000, 1, 1) == 2000 and prefilter._repeat_paths(2000, 0, 1) is None
    assert prefilter._repeat_paths(2, 0, 1000) is None and prefilter._repeat_paths(2, 1000, 1000) is None
    assert prefilter._repeat_paths(1000, 0, 1) == 1001 and prefilter._repeat_paths(45, 2, 2) is None
    assert prefilter._repeat_paths(44, 2, 2) == 1936 and prefilter._repeat_paths(44, 0, 2) == 1 + 44 + 1936


def groups(depth: int) -> str:
    """A finite pattern whose translation nests `depth` groups: each alternation adds one."""
    return "(?:a|" * depth + "b" + ")" * depth


@pytest.mark.parametrize("pattern, nest", [
    (groups(prefilter.MAX_NEST), prefilter.MAX_NEST),
    (groups(prefilter.MAX_NEST + 1), None),
    ("(?:" * 150 + "ab" + "){1}" * (prefilter.MAX_NEST - 1) + ")" * (151 - prefilter.MAX_NEST), prefilter.MAX_NEST - 1),
    ("(?:" * 150 + "ab" + "){1}" * prefilter.MAX_NEST + ")" * (150 - prefilter.MAX_NEST), prefilter.MAX_NEST),
    ("(?:" * 150 + "ab" + "){1}" * (prefilter.MAX_NEST + 1) + ")" * (149 - prefilter.MAX_NEST), None),
    (groups(prefilter.MAX_NEST).replace("b", "\\C"), prefilter.MAX_NEST),   # \C, as any atom, nests nothing
    (groups(prefilter.MAX_NEST).replace("b", "(?:)"), prefilter.MAX_NEST),
    (groups(prefilter.MAX_NEST - 3).replace("b", "[\\x{100}-\\x{10000}]"), prefilter.MAX_NEST),
    (groups(prefilter.MAX_NEST - 2).replace("b", "[\\x{100}-\\x{10000}]"), None),
    ("[\\x{100}-\\x{10000}]", prefilter.CLASS_NEST),    # a class of several lengths: a trie of (?:...)
    ("(?:[\\x{100}-\\x{10000}]|x)", prefilter.CLASS_NEST + 1),
    ("[\\x{100}-\\x{17f}]", 0),                         # two byte classes side by side
    ("[a-z]", 0), ("ab", 0),
])
def test_the_sre_source_nests_at_most_max_nest_groups(pattern, nest):
    fin = prefilter.finite(tree(pattern), False)
    assert (fin and fin.nest) == nest
    if fin is not None:
        re.compile(fin.src.encode("latin-1"))    # sre's parser takes it


def depth(src: str) -> int:
    """How deep groups nest in an sre source (no escaped parentheses in these)."""
    deepest = level = 0
    for ch in src:
        level += (ch == "(") - (ch == ")")
        deepest = max(deepest, level)
    return deepest


@pytest.mark.parametrize("pattern", ["[\\x{0}-\\x{10FFFF}]", "[\\x{7f}-\\x{10000}]", "\\p{Greek}", "(?i)k",
                                     "[\\x{100}-\\x{17f}\\x{800}-\\x{8ff}\\x{10000}-\\x{10100}]"])
def test_class_nest_bounds_a_class_tries_real_nesting(pattern):
    fin = prefilter.finite(tree(pattern), False)
    assert depth(fin.src) <= fin.nest <= prefilter.CLASS_NEST == 3


def literal_alternation(size: int) -> str:
    """An alternation of distinct 2-character literals whose sre source is exactly `size` long."""
    count = (size - 2) // 3           # "(?:" + "ab|" * (count - 1) + "ab" + ")" = 3 * count + 2
    words = [f"{chr(0x41 + i // 52 % 26)}{chr(0x41 + i % 26)}" for i in range(count)]
    return "|".join(words)


@pytest.mark.parametrize("size, fits", [(prefilter.MAX_SRC - 2, True), (prefilter.MAX_SRC + 1, False)])
def test_the_sre_source_is_at_most_max_src(monkeypatch, size, fits):
    monkeypatch.setattr(prefilter, "MAX_PATHS", 10 ** 9)      # only the source size binds here
    fin = prefilter.finite(tree(literal_alternation(size)), False)
    assert (fin is not None) is fits
    if fits:
        assert len(fin.src) <= prefilter.MAX_SRC


def test_a_class_of_one_code_point_is_a_literal_unit():
    assert prefilter._unit(tree("[a]")) == ("lit", b"a")
    assert prefilter.needles_for(tree("x[y]z")).literals == (b"xyz",)


def test_the_longest_literal_stretch_is_the_first_of_the_longest():
    assert prefilter.needles_for(tree("abc\\d+xyz")).literals == (b"abc",)
    assert prefilter.needles_for(tree("ab(?i:k)cdef\\d+xyz")).literals == (b"cdef",)
    assert prefilter.needles_for(tree("abcd(?i:k)ef")).literals == (b"abcd",)


def test_each_kind_of_translation_stops_at_max_src(monkeypatch):
    monkeypatch.setattr(prefilter, "MAX_SRC", 40)
    finite = prefilter.finite
    assert finite(tree("a" * 40), False).src == "a" * 40 and finite(tree("a" * 41), False) is None
    assert finite(tree("a" * 17 + "|" + "b" * 18), False).src == "(?:" + "a" * 17 + "|" + "b" * 18 + ")"
    assert finite(tree("a" * 17 + "|" + "b" * 19), False) is None                  # 41 characters
    assert finite(tree("a|b|c|" + "d" * 30), False).src == "(?:a|b|c|" + "d" * 30 + ")"   # 40, four parts
    assert finite(tree("a|b|c|" + "d" * 31), False) is None
    assert finite(tree("(?:" + "a" * 32 + "){2}"), False) is not None                # (?:a*32){2}: 39
    assert finite(tree("(?:" + "a" * 32 + "){2,3}"), False) is None                  # 41
    assert finite(tree("(?:" + "a" * 41 + "){2}"), False) is None                    # its body already


def test_a_long_alternation_stops_at_the_first_alternative_past_a_bound(monkeypatch):
    seen = []
    walk = prefilter._finite

    def counted(node, allow, memo):
        seen.append(node)
        return (yield from walk(node, allow, memo))

    monkeypatch.setattr(prefilter, "_finite", counted)
    paths = prefilter.MAX_PATHS
    alternatives = [f"(?:w|v){{{i % 7 + 1}}}" for i in range(3 * paths)]
    assert prefilter.finite(tree("|".join(alternatives)), False) is None
    assert len(seen) < 2 * paths         # not all 3 * MAX_PATHS alternatives (and their bodies)
    seen.clear()
    assert prefilter.finite(tree("x" * 50_000), False) is None
    assert len(seen) <= 1                # the leaves are read in place: stops after MAX_LENGTH // 4


def test_a_concatenation_with_an_untranslatable_item_is_untranslatable_at_once():
    assert prefilter.finite(tree("ab\\pLcd"), False) is None
    assert prefilter.finite(tree("ab(?:\\pL|x)cd"), False) is None
    assert prefilter.finite(tree("(?:ab|\\pL|cd)"), False) is None
    assert prefilter.finite(tree("(?:\\pL){2}"), False) is None


# -- a class repeated is translated once -----------------------------------------------------------

def test_a_class_node_is_translated_once_per_plan(monkeypatch):
    made = []
    make = prefilter._class_finite
    monkeypatch.setattr(prefilter, "_class_finite", lambda ranges: made.append(ranges) or make(ranges))
    node = tree("\\p{Greek}" * 500 + "[a-f]" * 3)
    memo = {}
    first = prefilter.finite(node.subs[0], False, memo)
    assert prefilter.finite(node.subs[1], False, memo) is first       # the parser shares the node
    prefilter.build(node)
    assert len(made) == 1 + 2                # this memo's one, then one per class in the plan's
    made.clear()
    prefilter.finite(node.subs[0], False)    # a fresh memo translates again
    assert len(made) == 1


def test_a_literal_rune_is_one_finite():
    assert prefilter._leaf(tree("q"), {}) is prefilter._leaf(tree("q"), {})
    assert facts(prefilter._leaf(tree("q"), {})) == ("q", 1, 4, 1, 0)


# -- the other planners, at 64 KiB -----------------------------------------------------------------

def test_class_compatibility_is_judged_per_byte():
    digit, lower, both = frozenset(b"0123456789"), frozenset(b"abc"), frozenset(b"abc0")
    assert prefilter._compatible([digit, lower, digit, lower])
    assert prefilter._compatible([digit, frozenset(b"0123456789")])       # equal sets, two objects
    assert not prefilter._compatible([digit, lower, both])
    assert not prefilter._compatible([both, digit])
    assert prefilter._compatible([])
    # 3,000 distinct disjoint single-byte classes would have been 9,000,000 pairs: 128 at most here.
    assert prefilter._compatible([frozenset([b]) for b in range(128)] * 30)


def test_alternation_needles_stop_past_sixteen_literals(monkeypatch):
    asked = []
    walk = prefilter._needles
    monkeypatch.setattr(prefilter, "_needles", lambda node: asked.append(node) or walk(node))
    assert prefilter.needles_for(tree("|".join(f"w{i:04d}" for i in range(5000)))) is None
    assert len(asked) <= 18
    asked.clear()
    nd = prefilter.needles_for(tree("|".join(f"w{i:04d}" for i in range(16))))
    assert len(nd.literals) == 16 and nd.whole
    assert prefilter.needles_for(tree("ab|ab|" + "|".join(f"w{i:04d}" for i in range(15)))).literals[0] == b"ab"


def test_line_regex_finds_followers_past_assertions_and_keeps_to_max_src(monkeypatch):
    assert prefilter._followers(line_tree("a\\b\\b\\d+\\bc").subs) == [3, 3, 3, 5, 5, None]
    assert prefilter.line_regex(line_tree("x\\d+\\b\\b\\by")).pattern == b"x(?:[0-9]){1,}\\b\\b\\by"
    assert prefilter.line_regex(line_tree("x\\d+\\b\\b\\b\\d")) is None
    assert prefilter.line_regex(line_tree("x\\d+\\b\\b\\b")).pattern == b"x(?:[0-9]){1,}\\b\\b\\b"
    monkeypatch.setattr(prefilter, "MAX_SRC", 15)
    assert prefilter.line_regex(line_tree("x\\d+y")).pattern == b"x(?:[0-9]){1,}y"     # 15 characters
    monkeypatch.setattr(prefilter, "MAX_SRC", 14)
    assert prefilter.line_regex(line_tree("x\\d+y")) is None
    monkeypatch.undo()
    words = line_tree("\\w+\\s" * 2000)
    assert prefilter.line_regex(words) is not None
    monkeypatch.setattr(prefilter, "MAX_SRC", 1000)
    assert prefilter.line_regex(words) is None
    assert prefilter.line_regex(line_tree("\\w+\\s" * 20)) is not None


def test_needs_non_ascii_walks_any_depth():
    deep = "(?:" * 900 + "\u00e9" + ")+" * 900
    assert prefilter.needs_non_ascii(tree(deep))
    assert not prefilter.needs_non_ascii(tree("(?:" * 900 + "\u00e9|x" + ")+" * 900))
    assert prefilter.needs_non_ascii(tree("x" * 30_000 + "\u00e9"))
    assert not prefilter.needs_non_ascii(tree("\u00e9|" * 30_000 + "x"))


def test_first_bytes_walk_any_depth():
    assert prefilter._first_bytes(tree("(" * 900 + "ab|cd" + ")" * 900)) == {0x61, 0x63}
    assert prefilter._first_bytes(tree("(?:" * 900 + "a" + ")+" * 900)) == {0x61}
    assert prefilter._first_bytes(tree("(?:" * 900 + "a" + ")*" * 900)) is None


# -- what mutation testing found (seed 30) ----------------------------------------------------------

def group_depth(src: str) -> int:
    """How deep `(?:` groups nest in an sre source of ASCII letters, classes and groups."""
    depth = deepest = 0
    for i, c in enumerate(src):
        if src.startswith("(?:", i):
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
    return deepest


@pytest.mark.parametrize("pattern, src, nest", [
    ("abc", "abc", 0), ("[a-c]xyz", "[a-c]xyz", 0), ("(?:ab|cd)ef", "(?:ab|cd)ef", 1),
    ("x+abc", "(?:x){1}abc", 1), ("(?:(?:ab|cd)e|f)gh", "(?:(?:ab|cd)e|f)gh", 2),
])
def test_a_factor_counts_the_nesting_its_source_has(pattern, src, nest):
    # A concatenation adds no group: a factor of plain literals nests none.
    fac = prefilter.best_factor(tree(pattern))
    assert (fac.src, fac.nest) == (src, nest) and group_depth(fac.src) == nest


def test_best_factor_looks_at_the_clock_even_when_no_walk_runs():
    # Characters are translated without bounded.run (which looks at the clock every CHECK_EVERY
    # steps); the window's loop looks itself, so a long literal still stops at the deadline.
    node = tree("abcdefghij" * 500)
    with bounded.deadline(0.0, "abcdefghij" * 500), pytest.raises(fg.error, match="pattern too complex"):
        prefilter.best_factor(node)
    assert prefilter.best_factor(node).src == "abcdefghij" * 25    # no deadline: planned

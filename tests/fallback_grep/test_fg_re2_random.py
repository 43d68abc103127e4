"""A bounded random differential against google-re2: seeded patterns and texts, every span compared.

Runs a fixed seed (the same cases in every run, so a regression shows at once) plus one fresh seed
per run (so CI keeps exploring). A failure prints the seed: FG_RANDOM_SEED=<seed> replays it.
FG_RANDOM_CASES sets the number of cases per seed (default 300: a few seconds).

One family is tolerated, and tested below for what it is: a repeat whose body can match empty and
holds a repeat of the other greediness, e.g. `(?:(?:(?:ab)*)*?)*`. Such patterns are compared like
the rest; a disagreement on one is reported, not failed.

Why RE2 cannot be matched there by a tree rule: its parser and simplifier squash `**`, `*?`-chains
and friends only when both operators have the same flags, so they leave this tree alone, and RE2
itself gives different answers for the same sub-pattern W = `(?:(?:(?:ab)*)*?)*` on "ab": (0, 0)
for W alone and for `c*W`, (0, 2) for `x?W` and `(W)`, with its DFA as with BitState. The split
comes from Prog::Flatten (re2/prog.cc). RE2 compiles a nullable `x*` as `(x+)?`, then cuts the
program into instruction lists, one per "root", each expanded in priority order with its own
visited set. Roots are the start, every successor of a byte/capture/assertion instruction, and the
loop heads MarkDominator adds; it runs once per root in descending instruction order, skipping the
start, over a snapshot of the roots. With `x?W` the outer loop's entry is a root that is not the
start, so MarkDominator makes the outer loop's back edge (the Alt of its `+`) a root too; that
list, expanded with a fresh visited set, reaches the lazy inner loop's `a` thread before the empty
match, so RE2 prefers (0, 2). With W at the start, the lazy loop's own Alt becomes the root instead
and the empty match keeps priority. Matching that would mean
reproducing RE2's instruction numbering and flattening in fallback_grep's compiler; fallback_grep
follows the plain leftmost-first (Perl/Pike VM) priority order, which is what RE2 answers for W
alone.
"""

from __future__ import annotations

import os
import random

import pytest

import fallback_grep as fg
from fallback_grep import parser, syntax

re2 = pytest.importorskip("re2")

FIXED_SEED = 20261203
CASES = int(os.environ.get("FG_RANDOM_CASES", "300"))
ATOMS = ["a", "b", "ab", "x", ".", "[ab]", "[^b]", "[[:alpha:]]", "[[:digit:]]", "\\w", "\\W", "\\s",
         "\\d", "\\b", "\\B", "^", "$", "(?m:^)", "(?m:$)", "é", "(?i:A)", "ſ", "\\pL", ""]
REPEATS = ["*", "+", "?", "*?", "+?", "??", "{0,2}", "{1,2}?", "{2}"]
TEXT_ALPHABET = "aabbx \nAé1ſ"


def random_pattern(rng: random.Random, depth: int = 3) -> str:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(ATOMS)
    shape = rng.randrange(4)
    parts = [random_pattern(rng, depth - 1) for _ in range(rng.randint(2, 3))]
    if shape == 0:
        return "".join(parts)
    if shape == 1:
        return "(?:" + "|".join(parts) + ")"
    if shape == 2:
        return "(" + "|".join(parts) + ")"
    return "(?:" + random_pattern(rng, depth - 1) + ")" + rng.choice(REPEATS)


def engine_dependent_in_re2(pattern: str) -> bool:
    """A repeat with a nullable body that holds a repeat of the other greediness (see the docstring)."""
    tree = parser.parse(pattern).tree
    for node in syntax.walk(tree):
        if node.op == syntax.REPEAT and syntax.nullable(node.subs[0]):
            inner = [n for n in syntax.walk(node.subs[0]) if n.op == syntax.REPEAT]
            if any(n.greedy != node.greedy for n in inner):
                return True
    return False


def spans(m, groups: int):
    if m is None:
        return None
    return tuple(m.span(g) for g in range(groups + 1))


def disagreements(seed: int, cases: int) -> tuple[list[tuple], list[tuple]]:
    """(disagreements, tolerated ones: in the engine-dependent family) over `cases` seeded cases."""
    rng = random.Random(seed)
    opts = re2.Options()
    opts.log_errors = False
    found, tolerated = [], []
    for _ in range(cases):
        pattern = random_pattern(rng)
        text = "".join(rng.choice(TEXT_ALPHABET) for _ in range(rng.randint(0, 8)))
        try:
            want_re = re2.compile(pattern.encode(), opts)
        except re2.error:
            with pytest.raises(fg.error):
                fg.compile(pattern.encode())
            continue
        got_re = fg.compile(pattern.encode())
        data = text.encode()
        for how in ("search", "match", "fullmatch"):
            want = spans(getattr(want_re, how)(data), want_re.groups)
            got = spans(getattr(got_re, how)(data), got_re.groups)
            if want != got:
                (tolerated if engine_dependent_in_re2(pattern) else found).append((pattern, text, how, want, got))
    return found, tolerated


def _check(seed: int) -> None:
    bad, tolerated = disagreements(seed, CASES)
    for p, t, how, w, g in tolerated:
        print(f"tolerated (RE2 engine-dependent family): {how} {p!r} on {t!r}: re2 {w}, fallback_grep {g}")
    assert not bad, (f"fallback_grep disagrees with RE2 on {len(bad)} case(s); replay with FG_RANDOM_SEED={seed}: "
                     + "; ".join(f"{how} {p!r} on {t!r}: re2 {w}, fallback_grep {g}" for p, t, how, w, g in bad[:5]))


def test_fixed_seed_agrees_with_re2():
    _check(FIXED_SEED)


def test_fresh_seed_agrees_with_re2():
    seed = int(os.environ.get("FG_RANDOM_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"FG_RANDOM_SEED={seed}")
    _check(seed)


def test_the_generator_reaches_nested_repeats_and_the_tolerated_family():
    """The random patterns do exercise nested repeats, the family tolerated above among them."""
    rng = random.Random(FIXED_SEED)
    sample = [random_pattern(rng) for _ in range(2000)]
    nested = [p for p in sample if any(n.op == syntax.REPEAT and any(m.op == syntax.REPEAT for m in syntax.walk(n.subs[0]))
                                       for n in syntax.walk(parser.parse(p).tree))]
    assert len(nested) > 100 and any(engine_dependent_in_re2(p) for p in nested)


@pytest.mark.parametrize("pattern,text,span", [
    ("(?:(?:(?:ab)*)*?)*", "ab", (0, 0)),   # RE2 (0, 0) too
    ("(?:(?:ab)*?)*", "ab", (0, 0)),        # RE2 (0, 0) too
    ("(?:(?:ab)*)*?", "ab", (0, 0)),        # RE2 (0, 0) too
    ("(?:(?:ab)*)*", "ab", (0, 2)),         # same greediness: RE2 squashes it to (?:ab)*
    ("(?:(?:ab)*?)*?", "ab", (0, 0)),       # same greediness, lazy: (?:ab)*?
    ("(?:(?:ab)+)*", "abab", (0, 4)),
    ("(?:(?:ab)?)+", "abab", (0, 4)),
    ("(?:(?:ab)+?)?", "abab", (0, 2)),
])
def test_nested_repeats_follow_leftmost_first_priority(pattern, text, span):
    assert fg.compile(pattern).search(text).span() == span
    if not engine_dependent_in_re2(pattern):
        assert re2.search(pattern, text).span() == span


def test_the_issue_case_re2_answers_differently_for_the_same_repeat():
    """Issue 14 item 12's case. RE2's own answer for the repeat W depends on what precedes it; the
    parser squash and simplify rules do not apply (the two operators' flags differ). fallback_grep
    answers (0, 0) everywhere, as RE2 does for W alone. If a future RE2 answers consistently, this
    test fails and the tolerated family above should be dropped."""
    w = "(?:(?:(?:ab)*)*?)*"
    re2_spans = {p: re2.search(p, "ab").span() for p in (w, "x?" + w, "(" + w + ")", "c*" + w)}
    assert re2_spans == {w: (0, 0), "x?" + w: (0, 2), "(" + w + ")": (0, 2), "c*" + w: (0, 0)}
    assert {p: fg.search(p, "ab").span() for p in re2_spans} == dict.fromkeys(re2_spans, (0, 0))
    assert fg.search("([[:alpha:]]a|" + w + ")", "ab").span() == (0, 0)  # RE2: (0, 2)
    assert engine_dependent_in_re2("([[:alpha:]]a|" + w + ")")

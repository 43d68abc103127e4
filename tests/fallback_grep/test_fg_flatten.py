"""flatten.py's RE2 program, checked against RE2's own: the flattened size, instruction for instruction.

The emulation must build the same program as RE2 (the parser's factoring, the simplifier, the
compiler's numbering, Prog::Flatten), or the loop heads that become list roots differ and so do the
answers of patterns whose loops can iterate on empty. Most shape mistakes change no answer on short
texts, so match differentials miss them (mutation testing showed it: dropping the `(?i)` letter or
one-character-class literal, the counted-repeat key of the second factoring round, or the
assertion-repeat clamp all passed). google-re2 reports the flattened program's size
(`programsize`), which counts every list item: comparing it catches a different shape directly.

Only ASCII atoms whose classes are one byte range per range (and `(?i)` letters, which RE2 compiles
to one folding ByteRange) are used, so one class leaf here is as many ByteRange items there as it
has ranges.
"""

from __future__ import annotations

import random

import pytest

import fallback_grep as fg
from fallback_grep import flatten, parser, syntax as sx

re2 = pytest.importorskip("re2")

ATOMS = ["a", "b", "ab", "x", "", "\\b", "^", "$", "(?m:^)", "[ab]", "a|b", "a|", "|a", "(?i:a)", "[a]",
         "(?i)ab", "a{2}", "[ab]{2}", "\\b{2}", "ab|ac", "[ab]x|[ab]y", "a{2}b|a{2}c", "\\bx|\\by",
         "(?:a*)x|(?:a*)y", "(a)|(a)b", "ab|aa", "(?i:a)b|(?i:a)c", "[a]b|ac", "x|[ab]|a", "(?:\\b)*",
         "\\b|\\bx"]
REPEATS = ["*", "*?", "+", "+?", "?", "??", "{0,2}", "{2,}", "{1,}?", "{2}", "{0,3}", "{1,3}?", "{3}"]
# What precedes or encloses the pattern decides the anchors stripped and the required prefix.
CONTEXTS = ["{}", "x?{}", "({})", "c*{}", "{}b", "a{}", "[a-z]a|{}", "^{}", "{}$", "(x|{})", "{}(b)",
            "^a{}", "(^{})", "({}$)", "^ab{}", "^(?i)ab{}", "^[a]b{}", "^(?:a)[b]{}", "(?:^){}", "{}|a",
            "a|{}", "x{}|a{}", "(?:a{}|a{})"]


def _nested(rng: random.Random, depth: int = 3) -> str:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(ATOMS)
    shape = rng.randrange(6)
    if shape == 0:
        return _nested(rng, depth - 1) + _nested(rng, depth - 1)
    if shape in (1, 5):
        return "(?:" + "|".join(_nested(rng, depth - 1) for _ in range(rng.randint(2, 3))) + ")"
    return ("(" if shape == 2 else "(?:") + _nested(rng, depth - 1) + ")" + rng.choice(REPEATS)


def _pattern(rng: random.Random) -> str:
    context = rng.choice(CONTEXTS)
    return context.format(*[_nested(rng) for _ in range(context.count("{}"))])


def _leaf_width(c, kind, pc) -> int:
    """How many RE2 list items one item here is: a class is one ByteRange per range, except that
    a class closed under ASCII case folding keeps only its lower-case ranges (folding ByteRanges)."""
    if kind != "leaf" or c.op[pc] != flatten.I_CHAR or c.arg[pc].op != sx.CLASS:
        return 1
    ranges = c.arg[pc].ranges

    def has(ch):
        return any(lo <= ch <= hi for lo, hi in ranges)

    folds = all(has(u) == has(u + 32) for u in range(ord("A"), ord("Z") + 1))
    return sum(1 for lo, hi in ranges if not (folds and ord("A") <= lo and hi <= ord("Z")))


def flat_size(pattern: str) -> int:
    """The number of instructions of RE2's flattened program, as flatten.py builds it."""
    shaped = flatten.parse_shape(parser.parse(pattern).tree)
    split = flatten.required_prefix(shaped)
    shaped = flatten.simplify(split[1] if split else shaped)
    shaped, anchor_start = flatten.strip_anchor(shaped, sx.BOT)
    shaped, _ = flatten.strip_anchor(shaped, sx.EOT)
    c = flatten._Re2Compiler(pattern)
    start, start_unanchored = c.compile(shaped, anchor_start)
    c.optimize(start)
    assert start, pattern
    return sum(_leaf_width(c, kind, pc) for _, items in flatten.flatten(c, start, start_unanchored)
               for kind, pc in items)


def test_flattened_programs_have_re2s_size():
    rng = random.Random(20261203)
    patterns = [p for p in (_pattern(rng) for _ in range(1500))
                if flatten.has_empty_loop(parser.parse(p).tree)]
    assert len(patterns) > 400
    bad = [(p, re2.compile(p).programsize, flat_size(p)) for p in patterns
           if re2.compile(p).programsize != flat_size(p)]
    assert not bad, f"{len(bad)} of {len(patterns)} differ from RE2 (pattern, re2, here): {bad[:5]}"


@pytest.mark.parametrize("pattern", [
    # One case per shape rule that a mutant broke without changing an answer of the other tests.
    "^(?:a)[b](?:([a]){0,3}){0,2}(?:\\b)*",          # a one-character class is a literal
    "^(?i)ab(?:(?:\\b)*){1,}?",                      # so is a (?i) ASCII letter (RequiredPrefix)
    "^ab(?:^)+?",                                    # the required prefix is the whole literal run
    "^a(?:(?:a|\\b{2})|(?:(?:a*)x|(?:a*)y){1,}?|(?:\\b{2})+?)(?:(?:b|ab)|([ab]x|[ab]y){1,}?)",
    "(x|((?:(a{2}b|a{2}c){1,3}?|(?:a|(?m:^)))){1,}?)",  # round 2 factors a leading x{n}
    "^(?i)ab(?:(?:\\b{2}){1,}?){3}",                 # an assertion repeats at most once
    "(^(?:(?m:^))*?)",                               # ^ is stripped inside a capture too
    "(?:a(?:(a)|(a)b)*|a(?:a{2}b|a{2}c){3}(?:\\b{2})+(?:(a)|(a)b|(?:[ab]|(?i:a)b|(?i:a)c)))",
    "c*((?:^|\\b|\\bx|\\b{2}))+?((?:\\b)*[^\\x00-\\x{10FFFF}]){0,2}",  # (nothing)? is a Nop
])
def test_shape_rules_give_re2s_size(pattern):
    assert flatten.has_empty_loop(parser.parse(pattern).tree)
    assert flat_size(pattern) == re2.compile(pattern).programsize


@pytest.mark.parametrize("pattern,text,spans", [
    # `(?:a?)?` is `a?` (same flags and greediness), not `a*`.
    ("(?:\\b)*(?:a?)?", "aa", ((0, 1),)),
    # A part that can match nothing compiles to no instruction, inside any repeat.
    ("a(?:(?:(?:[^\\x00-\\x{10FFFF}])?)?)*", "aa", ((0, 1),)),
    ("(?:a*)*|[^\\x00-\\x{10FFFF}]", "aa", ((0, 2),)),
])
def test_shape_rules_give_re2s_answers(pattern, text, spans):
    assert flatten.has_empty_loop(parser.parse(pattern).tree)
    assert fg.compile(pattern).search(text).regs == spans
    m = re2.search(pattern, text)
    assert tuple(m.span(g) for g in range(m.re.groups + 1)) == spans

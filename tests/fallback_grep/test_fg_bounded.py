"""Preparing a pattern is bounded (issue 30, finding 9): no recursion a pattern can deepen, a
deadline that fails clearly, and work linear in the pattern's length.

`(((a|b)*)*){0,1000}c` raised RecursionError (an "Internal error" of the grep tool, a traceback
on stderr): RE2's simplification makes it 1000 nested `(?:x(?:x...)?)?`, past Python's limit. Each
walk now runs on fallback_grep.bounded.run; these tests prepare generated deep patterns (nested
groups, repetitions and alternations, long alternations and concatenations, counted repeats of
nested loops) up to the grep tool's 64 KiB, in every stage (parse, line rewrite, translation for
rg, program, prefilter plan), with Python's recursion limit held just above the test's own depth:
the only exceptions allowed are fallback_grep.error's own limits, each with its teaching message.
Work is counted (the deadline's checks, one per step of every walk), never timed.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fallback_grep as fg
from fallback_grep import bounded, flatten
from fallback_grep.filesearch import Matcher, check, search_bytes
from fallback_grep.parser import parse
from fallback_grep.translate import rust_pattern

KIB = 1024
LIMITS = {"nesting", "repeat size", "pattern too large"}   # the errors a well-formed pattern may meet
STACK_SLACK = 400     # frames a preparation may use above its caller's (sre's parser: ~2 per group)


@contextmanager
def shallow_stack():
    """Python's recursion limit just above the caller's depth: a walk that recursed once per
    nesting level of a pattern fails here, whatever the default limit of the machine."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + STACK_SLACK)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def prepare(pattern: str, case_insensitive: bool = False, multiline: bool = False, api: bool = False) -> set[str]:
    """Every stage of both grep backends (and of the API's compile); the limits met
    (fallback_grep.error's construct)."""
    met = set()
    stages = [lambda: check(pattern, case_insensitive, multiline),
              lambda: rust_pattern(pattern, case_insensitive, multiline, limit=1 << 20),
              lambda: Matcher(pattern, case_insensitive, multiline)]
    for stage in stages + ([lambda: fg.compile(pattern)] if api else []):
        try:
            stage()
        except fg.error as exc:
            assert exc.construct in LIMITS, exc
            assert "fix:" in str(exc)
            met.add(exc.construct)
    return met


# -- generated deep patterns -----------------------------------------------------------------------

def fill(block: str, size: int) -> str:
    return block * max(1, size // len(block))


FAMILIES = {
    "nested groups": lambda d, n: fill("(" * d + "ab" + ")" * d, n),
    "nested non-capturing groups": lambda d, n: fill("(?:" * d + "a" + ")" * d, n),
    "nested flag groups": lambda d, n: fill("(?i:" * d + "k" + ")" * d, n),
    "nested stars": lambda d, n: fill("(?:" * d + "a" + ")*" * d, n),
    "nested pluses of captures": lambda d, n: fill("(" * d + "ab" + ")+" * d, n),
    "nested lazy quests": lambda d, n: fill("(?:" * d + "a" + ")??" * d, n),
    "nested alternations": lambda d, n: fill("(?:a|" * d + "b" + ")" * d, n),
    "nested alternations with empty": lambda d, n: fill("(?:|a" * d + ")*" * d, n),
    "counted nested stars": lambda d, n: fill("(" * d + "a|b" + ")*" * (d - 1) + "){0,1000}c", n),
    "nested counted repeats": lambda d, n: fill("(?:" * d + "a" + "){1}" * d, n),
    "long alternation": lambda d, n: "|".join(f"w{i:05d}" for i in range(max(1, n // 7))),
    "long concatenation": lambda d, n: fill("abcdefghij", n),
    "long class concatenation": lambda d, n: fill("[[:alpha:]]", n),
    "unicode classes": lambda d, n: fill("\\p{Greek}\\pL", n),
    "shared prefix alternation": lambda d, n: "(?:x*)*(?:" + "a" * (n // 2) + "b|" + "a" * (n // 2) + "c)",
}


# The grep tool's longest pattern for the families where length itself is the danger; the
# others repeat blocks of at most RE2's nesting, whose 16 KiB already hold several.
AT_64_KIB = {"long alternation", "long concatenation", "long class concatenation", "shared prefix alternation",
             "nested groups", "counted nested stars"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_up_to_64_kib_prepares_within_the_stack(family):
    pattern = FAMILIES[family](999, (64 if family in AT_64_KIB else 16) * KIB - 100)
    assert len(pattern.encode()) <= 64 * KIB
    with shallow_stack():
        prepare(pattern)
        prepare(FAMILIES[family](999, 4 * KIB), case_insensitive=True, multiline=True, api=True)


@pytest.mark.parametrize("depth", [1000])
@pytest.mark.parametrize("family", sorted(f for f in FAMILIES if "nested" in f))
def test_nesting_at_re2s_limit_prepares_within_the_stack(family, depth):
    with shallow_stack():
        met = prepare(FAMILIES[family](depth, 0), api=True)
    assert met <= {"repeat size", "pattern too large"}


@st.composite
def deep_patterns(draw):
    parts = draw(st.lists(st.tuples(st.sampled_from(sorted(FAMILIES)), st.integers(1, 1000),
                                    st.integers(1, 4 * KIB)), min_size=1, max_size=3))
    return "".join(FAMILIES[family](depth, size) for family, depth, size in parts)[:64 * KIB]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(deep_patterns(), st.booleans(), st.booleans())
def test_generated_deep_patterns_meet_only_the_engines_limits(pattern, case_insensitive, multiline):
    try:
        parse(pattern)
    except fg.error as exc:     # cut at 64 KiB: an unbalanced group is the user's error, and said so
        assert exc.construct in {"missing )", "unexpected )", "nesting", "repeat size", "bad repetition",
                                 "missing repeat argument", "missing ]", "trailing backslash", "\\p"}
        return
    with shallow_stack():
        prepare(pattern, case_insensitive, multiline, api=True)


def test_the_issues_pattern_compiles_and_matches():
    # (((a|b)*)*){0,1000}c raised RecursionError: simplify's 1000 nested quests, walked recursively.
    with shallow_stack():
        m = Matcher("(((a|b)*)*){0,1000}c")
        assert search_bytes(m, b"xx\nabbac\n", "count").count == 1
        assert fg.compile("(((a|b)*)*){0,1000}c").search("zzabc").span() == (2, 5)
    assert flatten.has_empty_loop(m.pattern.tree)


def test_threads_prepare_deep_patterns_side_by_side_on_small_stacks():
    # _deep_recursion raised the process-wide recursion limit per compile and put it back after: a
    # thread finishing lowered it under another thread still deep in its walk.
    errors, old = [], threading.stack_size()
    patterns = [FAMILIES[f](999, 0) for f in ("nested groups", "nested stars", "nested alternations",
                                               "counted nested stars")]

    def work(pattern):
        try:
            for _ in range(2):
                prepare(pattern)
        except BaseException as exc:  # noqa: BLE001 - any failure, reported below
            errors.append(exc)

    threading.stack_size(256 * KIB)   # no C recursion per level either
    try:
        threads = [threading.Thread(target=work, args=(p,)) for p in patterns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        threading.stack_size(old)
    assert errors == []


# -- run() -----------------------------------------------------------------------------------------

def countdown(n):
    if n == 0:
        return 0
    return 1 + (yield countdown(n - 1))


def test_run_drives_a_walk_deeper_than_any_recursion_limit():
    assert bounded.run(countdown(200_000)) == 200_000
    assert bounded.run(countdown(0)) == 0


def test_an_exception_in_a_walk_ends_it():
    def failing(n):
        if n == 0:
            raise ValueError("at the bottom")
        yield failing(n - 1)

    with pytest.raises(ValueError, match="at the bottom"):
        bounded.run(failing(5000))


def test_run_looks_at_the_clock_every_check_every_steps(monkeypatch):
    looks = []
    monkeypatch.setattr(bounded, "check", lambda: looks.append(1))
    bounded.run(countdown(10 * bounded.CHECK_EVERY - 1))
    assert len(looks) == 9
    looks.clear()
    bounded.run(countdown(10 * bounded.CHECK_EVERY))
    assert len(looks) == 10


# -- the deadline ----------------------------------------------------------------------------------

def test_without_a_deadline_check_never_fails():
    bounded.check()
    assert bounded.run(countdown(50_000)) == 50_000


def test_a_passed_deadline_fails_with_the_time_and_how_to_simplify():
    pattern = "(?:a|b)" * 5000
    with bounded.deadline(0.0, pattern):
        with pytest.raises(fg.error) as info:
            Matcher(pattern)
    err = info.value
    assert err.construct == "pattern too complex" and err.pattern == pattern
    assert "took more than 0 s" in str(err) and "simplify the pattern" in str(err)
    assert "split a long alternation" in str(err) and "(a|b)*" in str(err)
    bounded.check()     # the deadline ended with its block


@pytest.mark.parametrize("stage", ["check", "translate", "matcher", "compile"])
def test_every_stage_stops_at_the_deadline(stage):
    pattern = "(?:" * 300 + "ab|c" + ")*" * 300 + "x" * 30_000
    run = {"check": lambda: check(pattern), "translate": lambda: rust_pattern(pattern),
           "matcher": lambda: Matcher(pattern), "compile": lambda: fg.compile(pattern + "y")}[stage]
    with bounded.deadline(0.0, pattern), pytest.raises(fg.error, match="pattern too complex"):
        run()


def test_each_stage_after_the_parse_stops_at_the_deadline(monkeypatch):
    """The deadline passes while one stage runs: the next look at the clock, in that stage, fails."""
    from fallback_grep import lines, prefilter, prog, translate
    pattern = "(?:" * 200 + "ab" + ")+" * 200 + "[[:alpha:]]" * 5000
    tree = check(pattern)
    line = lines.to_line_mode(tree, pattern)
    stages = {"line rewrite": lambda: lines.to_line_mode(tree, pattern),
              "translation": lambda: translate.rust_tree(tree),
              "program": lambda: prog.compile_tree(line, 0, pattern=pattern),
              "RE2-shape program": lambda: flatten.compile_flat(line, 0, pattern),
              "prefilter": lambda: prefilter.build(line, exact_ok=True)}
    for name, run in stages.items():
        with bounded.deadline(0.0, pattern):
            with pytest.raises(fg.error, match="pattern too complex"):
                run()
            assert name


def test_deadlines_nest_and_the_earliest_holds():
    with bounded.deadline(3600, "outer"):
        with bounded.deadline(0.0, "inner"), pytest.raises(fg.error) as info:
            bounded.check()
        assert info.value.pattern == "inner"
        bounded.check()                      # the outer one is back, and far away
        with bounded.deadline(7200, "later"):
            bounded.check()
    with bounded.deadline(0.0, "first"):
        with bounded.deadline(3600, "second"), pytest.raises(fg.error) as info:
            bounded.check()
        assert info.value.pattern == "first"  # a later deadline does not lift an earlier one


def test_a_deadline_is_its_threads_own():
    seen = []
    with bounded.deadline(0.0, "here"):
        thread = threading.Thread(target=lambda: seen.append(bounded.run(countdown(5000))))
        thread.start()
        thread.join()
    assert seen == [5000]


def test_the_cyclic_collector_pauses_within_a_deadline_and_resumes_after_the_last():
    import gc
    assert gc.isenabled()
    with bounded.deadline(60, "a"):
        assert not gc.isenabled()
        with bounded.deadline(60, "b"):
            assert not gc.isenabled()
        assert not gc.isenabled()             # the outer one still prepares
    assert gc.isenabled()
    with pytest.raises(fg.error), bounded.deadline(0.0, "c"):
        bounded.check()
    assert gc.isenabled()                     # also after a failure
    gc.disable()
    try:
        with bounded.deadline(60, "d"):
            pass
        assert not gc.isenabled()             # off before: left off
    finally:
        gc.enable()


def test_the_collector_resumes_when_the_last_thread_ends_its_preparation():
    import gc
    inside, release = threading.Event(), threading.Event()

    def other():
        with bounded.deadline(60, "other"):
            inside.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(30)
    with bounded.deadline(60, "here"):
        pass
    assert not gc.isenabled()                 # the other thread is still preparing
    release.set()
    thread.join()
    assert gc.isenabled()


# -- linear work -----------------------------------------------------------------------------------

def work(monkeypatch, pattern: str) -> float:
    """Steps per byte to prepare the pattern for both backends (one look at the clock per step)."""
    looks = []
    monkeypatch.setattr(bounded, "CHECK_EVERY", 1)
    monkeypatch.setattr(bounded, "check", lambda: looks.append(1))
    prepare(pattern)
    return len(looks) / len(pattern)


@pytest.mark.parametrize("family", ["long concatenation", "long class concatenation", "long alternation",
                                    "nested groups", "nested stars", "counted nested stars", "nested alternations",
                                    "shared prefix alternation", "unicode classes"])
def test_preparation_work_grows_linearly(monkeypatch, family):
    small, large = (work(monkeypatch, FAMILIES[family](300, size)) for size in (4 * KIB, 16 * KIB))
    assert large <= 1.15 * small, (small, large)

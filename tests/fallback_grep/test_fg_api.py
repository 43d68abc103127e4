"""The re-shaped public API over str and bytes."""
import pytest

import fallback_grep as fg
from fallback_grep import dfa, pikevm
from fallback_grep.parser import parse
from fallback_grep.prog import compile_tree


def test_search_match_fullmatch_on_str_and_bytes():
    p = fg.compile(r"(\w+)@(?P<host>\w+)\.com")
    m = p.search("mail bob@example.com now")
    assert m.span() == (5, 20) and m.group(1) == "bob" and m.group("host") == "example"
    assert m.groups() == ("bob", "example") and m.groupdict() == {"host": "example"}
    assert m.start(2) == 9 and m.end("host") == 16 and m[0] == "bob@example.com"
    pb = fg.compile(rb"(\w+)@(?P<host>\w+)\.com")
    mb = pb.search(b"mail bob@example.com now")
    assert mb.span() == (5, 20) and mb.group(1, 2) == (b"bob", b"example")
    assert p.match("bob@x.com!").span() == (0, 9)
    assert p.match(" bob@x.com") is None
    assert p.fullmatch("bob@x.com") is not None and p.fullmatch("bob@x.com!") is None


def test_str_offsets_are_characters():
    m = fg.search("(é+)(x)", "aééx")
    assert m.span() == (1, 4) and m.span(1) == (1, 3) and m.group(2) == "x"
    assert [m.span() for m in fg.finditer("é", "éaé")] == [(0, 1), (2, 3)]
    assert fg.compile("x").search("ééx", 1).span() == (2, 3)


def test_unmatched_group_is_none():
    m = fg.search("(a)|(b)", "b")
    assert m.groups() == (None, "b") and m.span(1) == (-1, -1)
    assert m.groups(default="") == ("", "b")


def test_finditer_and_findall():
    assert fg.findall(r"\d+", "a1b22c333") == ["1", "22", "333"]
    assert fg.findall(r"(\w)=(\d)", "a=1 b=2") == [("a", "1"), ("b", "2")]
    assert fg.findall("a*", "baaa") == ["", "aaa", ""]
    assert fg.findall(b"x", b"xax") == [b"x", b"x"]


def test_flags_argument():
    assert fg.search("abc", "xABC", fg.IGNORECASE).span() == (1, 4)
    assert fg.search("^b$", "a\nb\nc", fg.MULTILINE).span() == (2, 3)
    assert fg.search("a.b", "a\nb", fg.DOTALL) is not None
    assert fg.search("a+", "aaa", fg.UNGREEDY).span() == (0, 1)
    assert fg.search("a|ab", "ab", fg.LONGEST).span() == (0, 2)


def test_re2_semantics_not_python_semantics():
    assert fg.search("a$", "a\n") is None          # $ is \z without (?m)
    assert fg.search(r"\w", "é") is None            # \w is ASCII
    assert fg.search(r"\bx", "éx") is not None      # \b is ASCII: é is not a word char
    assert fg.search("(?i)k", "\u212a") is not None  # Kelvin sign folds to k
    assert fg.search("(?i)s", "ſ") is not None
    assert fg.search(r"\pL+", "añb1").group() == "añb"
    assert fg.search(r"\p{Greek}+", "abc αβγ").group() == "αβγ"
    assert fg.search(r"[[:upper:]]+", "abCDe").group() == "CD"
    assert fg.search(r"\Qa.b\E+", "a.bbb").group() == "a.bbb"
    assert fg.search(r"\x{1F600}", "x\U0001F600").span() == (1, 2)
    assert fg.search(r"\101\x42", "AB") is not None
    assert fg.search(rb"\C", b"\xff").span() == (0, 1)


def test_type_errors_are_explained():
    with pytest.raises(TypeError, match="same type"):
        fg.compile("a").search(b"a")
    with pytest.raises(TypeError):
        fg.compile(3)


def test_compile_cache_is_bounded():
    for i in range(200):
        fg.compile(f"x{i}")
    assert len(fg._cache) <= fg._CACHE_MAX


def test_groupindex_and_groups_count():
    p = fg.compile("(?P<a>x)(y)(?<b>z)")
    assert p.groups == 3 and p.groupindex == {"a": 1, "b": 3}
    with pytest.raises(IndexError):
        p.search("xyz").group(4)


def _steps(pattern, text):
    """Thread steps the Pike VM takes: a machine-independent measure of work."""
    tree = parse(pattern)
    prog = compile_tree(tree.tree, tree.ncap)
    counter = pikevm.StepCounter()
    pikevm.search(prog, text, counter=counter)
    return counter.steps


@pytest.mark.parametrize("pattern,make", [
    ("(a+)+$", lambda n: b"a" * n + b"b"),
    ("(a|aa)*c", lambda n: b"a" * n),
    ("(x+x+)+y", lambda n: b"x" * n),
])
def test_pathological_patterns_do_linear_work(pattern, make):
    small, big = _steps(pattern, make(2_000)), _steps(pattern, make(8_000))
    # Linear: 4x the input costs about 4x the steps (a backtracker would need 2^n).
    assert 3.5 * small <= big <= 4.5 * small


def test_dfa_work_is_linear_and_cache_is_bounded():
    p = fg.compile("(x+x+)+y")
    d = p._dfa("fwd")
    assert d.search(b"x" * 100_000, 0, 100_000) is None
    assert len(d.states) < 20


def test_dfa_gives_up_and_vm_takes_over_when_cache_thrashes(monkeypatch):
    # (a|b)*a(a|b){12} needs ~2^13 DFA states; with a tiny cache the DFA must give up and the
    # Pike VM still finds the right match.
    monkeypatch.setattr(dfa, "MAX_STATES", 50)
    import random
    rng = random.Random(7)
    text = "".join(rng.choice("ab") for _ in range(3000)) + "a" + "b" * 12
    p = fg.compile("[ab]*a[ab]{12}$")
    d = p._dfa("fwd")
    assert d.search(text.encode(), 0, len(text)) is dfa.GAVE_UP
    m = p.search(text)
    assert m is not None and m.span() == (0, len(text))


def test_pattern_is_safe_to_share_between_threads():
    import threading
    p = fg.compile(r"(\w+)=(\d+)")
    text = " ".join(f"k{i}={i}" for i in range(300))
    want = [m.span() for m in p.finditer(text)]
    results = []

    def work():
        results.append([m.span() for m in p.finditer(text)])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [want] * 4


def test_escape_round_trips():
    samples = ["a.b*c", "(x)[y]{z}", "^$|\\", "tab\tnew\nline", "nul\x00", "ünï ∆", "-_~"]
    for text in samples:
        assert fg.fullmatch(fg.escape(text), text) is not None, text
    assert fg.escape(b"a+b") == b"a\\+b"
    assert fg.escape("x_1") == "x_1"


def test_dfa_cache_flushes_across_many_short_searches(monkeypatch):
    """grep verifies many short lines with one DFA: once the cache is full it must be flushed
    (the thrash check counts the bytes of all calls since the last flush), not given up on for
    every later line because each single line is short."""
    monkeypatch.setattr(dfa, "MAX_STATES", 7)
    p = fg.compile("(?:abc|xyz|klm)d")
    d = p._dfa("fwd")
    phases = [b"abcabcabcd  abcab", b"xyzxyzxyzd  xyzxy", b"klmklmklmd  klmkl"]
    results = []
    for phase in phases:
        for _ in range(300):
            results.append(d.search(phase, 0, len(phase)))
    assert dfa.GAVE_UP not in results
    assert results == [10] * 900
    assert d.flushes >= 1

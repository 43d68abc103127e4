"""Rejections that teach: every RE2 NOT SUPPORTED construct and every kind of invalid syntax
raises fallback_grep.error naming the construct, its position and a concrete fix."""
import re as pyre

import pytest

import fallback_grep as fg
from fallback_grep import flatten
from fallback_grep.parser import parse

# (pattern, construct, 0-based position, a phrase the fix must contain)
UNSUPPORTED = [
    ("foo(?=bar)", "lookahead", 3, "foobar"),
    ("foo(?!bar)", "lookahead", 3, "grep again"),
    ("(?<=def )name", "lookbehind", 0, "def name"),
    ("(?<!x)y", "lookbehind", 0, "grep twice"),
    ("(a)\\1", "backreference", 3, "literally"),
    ("\\k<n>", "backreference", 0, "literally"),
    ("\\k'n'", "backreference", 0, "literally"),
    ("\\g1", "backreference", 0, "literally"),
    ("\\g{-1}", "backreference", 0, "literally"),
    ("(?P<n>a)(?P=n)", "backreference", 8, "literally"),
    ("a*+", "possessive quantifier", 1, "drop the trailing `+`"),
    ("a++", "possessive quantifier", 1, "drop the trailing `+`"),
    ("a?+", "possessive quantifier", 1, "drop the trailing `+`"),
    ("a{2,3}+", "possessive quantifier", 1, "drop the trailing `+`"),
    ("(?>abc)", "atomic group", 0, "(?:re)"),
    ("(?(1)a|b)", "conditional", 0, "alternation"),
    ("(?R)", "recursion", 0, "nested"),
    ("(?1)", "recursion", 0, "nested"),
    ("(?+1)", "recursion", 0, "nested"),
    ("(?&name)", "recursion", 0, "nested"),
    ("(?P>name)", "recursion", 0, "nested"),
    ("\\g<name>", "recursion", 0, "nested"),
    ("abc\\Z", "\\Z", 3, "\\z"),
    ("\\Gfoo", "\\G", 0, "^"),
    ("foo\\Kbar", "\\K", 3, "foobar"),
    ("\\R", "\\R", 0, "\\r?\\n"),
    ("\\X", "\\X", 0, "\\PM\\pM*"),
    ("a\\hb", "\\h", 1, "[[:blank:]]"),
    ("\\H", "\\H", 0, "[^\\t ]"),
    ("\\V", "\\V", 0, "[^\\n"),
    ("\\N{DIGIT ONE}", "\\N", 0, "\\x{"),
    ("\\cK", "\\c", 0, "\\x0B"),
    ("\\e", "\\e", 0, "\\x1B"),
    ("\\uXXXX", "case conversion", 0, "(?i)"),
    ("\\LABC\\E", "case conversion", 0, "(?i)"),
    ("a(?#comment)b", "comment group", 1, "delete the comment"),
    ("(*FAIL)", "backtracking verb", 0, "delete the verb"),
    ("(*CRLF)a", "backtracking verb", 0, "delete the verb"),
    ("(?C1)", "callout", 0, "delete"),
    ("(?{code})", "embedded code", 0, "delete"),
    ("(?|a|b)", "branch reset", 0, "(?:...)"),
    ("(?'n'a)", "quoted group name", 0, "(?P<name>"),
    ("[\\b]", "\\b in class", 1, "\\x08"),
]

INVALID = [
    ("(abc", "missing )", 0, "`)`"),
    ("ab(c", "missing )", 2, "`)`"),          # the caret is under the group left open,
    ("a(b(c)d", "missing )", 1, "`)`"),       # not under the start of the pattern
    ("abc)", "unexpected )", 3, "\\)"),
    ("[abc", "missing ]", 0, "`]`"),
    ("[z-a]", "class range", 1, "low-high"),
    ("*a", "missing repeat argument", 0, "escape it"),
    ("a|*", "missing repeat argument", 2, "escape it"),
    ("a**", "bad repetition", 1, "(?:a*)*"),
    ("a{2}{3}", "bad repetition", 1, "group"),
    ("a{1001}", "repeat size", 1, "at most 1000"),
    ("a{2,1}", "repeat size", 1, "min <= max"),
    ("a{1,0}", "repeat size", 1, "min <= max"),      # a maximum of 0 is still a maximum
    ("(a{500}){3}", "repeat size", 8, "reduce the counts"),
    ("((a{10}){10}){11}", "repeat size", 13, "reduce the counts"),
    ("\\8", "backreference", 0, "literally"),
    ("\\i", "invalid escape", 0, "RE2 escapes are"),
    ("\\x{110000}", "invalid escape", 0, "10FFFF"),
    ("\\xZZ", "invalid escape", 0, "two hex digits"),
    ("\\p{Klingon}", "unknown Unicode class", 0, "Greek"),
    ("\\p{Cn}", "unknown Unicode class", 0, "Cn"),
    ("[[:foo:]]", "class range", 1, "[[:alpha:]]"),
    ("(?x)a b", "flag", 2, "only the flags i"),
    ("(?i-)a", "flag", 0, "(?-i)"),
    ("(?P<>a)", "named group", 0, "letters"),
    ("(?P<a-b>x)", "named group", 0, "letters"),
    ("ab\\", "trailing backslash", 2, "\\\\"),
    ("[a-\\d]", "class range", 1, "first or last"),
]


@pytest.mark.parametrize("pattern,construct,pos,fix", UNSUPPORTED + INVALID,
                         ids=[p for p, *_ in UNSUPPORTED + INVALID])
def test_rejection_teaches(pattern, construct, pos, fix):
    with pytest.raises(fg.error) as info:
        fg.compile(pattern)
    e = info.value
    assert isinstance(e, ValueError)
    assert e.construct == construct
    assert e.pos == pos
    assert e.pattern == pattern
    msg = str(e)
    assert fix in msg, msg
    assert "fix:" in msg
    # The message shows the pattern with a caret under the offending position.
    lines = msg.splitlines()
    shown = [i for i, line in enumerate(lines) if line.strip() == pattern]
    assert shown, msg
    caret = lines[shown[0] + 1]
    assert caret.index("^") - lines[shown[0]].index(pattern) == pos


def test_lookahead_message_matches_the_issue():
    with pytest.raises(fg.error) as info:
        fg.compile("foo(?=bar)")
    msg = str(info.value)
    assert "RE2 has no lookahead" in msg
    assert "`foobar`" in msg and "output_mode content" in msg


def test_every_not_supported_escape_in_the_syntax_file_is_rejected():
    """Each `\\X ... NOT SUPPORTED` escape of re2_syntax.txt (non-vim) is rejected, except those
    RE2 itself parses as something valid (\\v is vertical tab, \\C any byte, \\b/\\B word
    boundaries, \\E after \\Q, \\pN/\\PN classes)."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "data" / "re2" / "re2_syntax.txt").read_text()
    escapes = set()
    for line in text.splitlines():
        if "NOT SUPPORTED" in line and "vim" not in line and line.startswith("\\"):
            escapes.add(line.split("\t")[0])
    valid_in_re2 = {"\\v", "\\b"}
    assert len(escapes) > 15
    for esc in sorted(escapes - valid_in_re2):
        sample = esc.replace("...", "x").replace("name", "n").replace("X", "X")
        with pytest.raises(fg.error):
            fg.compile(sample)


def test_every_not_supported_group_in_the_syntax_file_is_rejected():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "data" / "re2" / "re2_syntax.txt").read_text()
    rejected = 0
    for line in text.splitlines():
        if "NOT SUPPORTED" in line and "vim" not in line and line.startswith(("(?", "(*")):
            sample = line.split("\t")[0]
            sample = sample.replace("re)", "a)").replace("text", "t").replace("code", "c")
            sample = sample.replace("cond", "1").replace("name", "n").replace("true", "a")
            sample = sample.replace("false", "b").replace("x|y|z", "x|y")
            with pytest.raises(fg.error):
                fg.compile(sample)
            rejected += 1
    assert rejected >= 30


def test_possessive_in_the_syntax_file_are_rejected():
    for q in ["*+", "++", "?+", "{1,2}+", "{1,}+", "{1}+"]:
        with pytest.raises(fg.error) as info:
            fg.compile("x" + q)
        assert info.value.construct == "possessive quantifier"


def test_bytes_pattern_errors_and_invalid_utf8():
    with pytest.raises(fg.error) as info:
        fg.compile(b"a(?=b)")
    assert info.value.construct == "lookahead"
    with pytest.raises(fg.error) as info:
        fg.compile(b"\xff")
    assert info.value.construct == "invalid UTF-8"


def test_long_or_multiline_pattern_message_quotes_context():
    long = "x" * 300 + "(?=y)"
    with pytest.raises(fg.error) as info:
        fg.compile(long)
    assert "near" in str(info.value) and info.value.pos == 300


def test_too_large_program_is_rejected_with_advice():
    with pytest.raises(fg.error) as info:
        fg.compile("\\pL{1000}")
    assert "too large" in str(info.value) and "\\pL+" in str(info.value)


def test_too_large_program_is_rejected_with_advice_when_it_follows_re2s_flattened_layout():
    """A loop that can iterate on empty takes flatten.py's compiler; the limit and advice hold there too."""
    pattern = "(?:\\pL{1000}|)*"
    assert flatten.has_empty_loop(parse(pattern).tree)
    with pytest.raises(fg.error) as info:
        fg.compile(pattern)
    msg = str(info.value)
    assert "too large" in msg and "250000 instructions" in msg and "\\pL+" in msg


@pytest.mark.parametrize("pattern", ["a{,5}", "a{2", "a{", "x{2}{,3}", "\\Qa.b", "(?)", "a(?i)*",
                                     "[a-b-c]", "[]a]", "a{01}", "a{9876543210}", "a{2,99999999999}", "[^]a]", "\\_", "\\ ", "()|a",
                                     "(?P<n>a)(?P<n>b)", "(?P<ñ>a)", "\\pLx", "[\\d-z]"])
def test_valid_re2_edge_cases_compile(pattern):
    fg.compile(pattern)


def test_error_is_a_value_error_with_attributes():
    e = fg.error("what", "pat", 1, "construct", "hint")
    assert isinstance(e, ValueError) and e.pattern == "pat" and e.pos == 1
    assert e.construct == "construct" and pyre.search("fix: hint", str(e))


def test_an_unclosed_named_backreference_is_shown_whole():
    # \k<name without its `>`: the message still quotes what was written, up to the end.
    with pytest.raises(fg.error) as info:
        fg.compile("a\\k<name")
    assert info.value.construct == "backreference"
    assert "`\\k<name` is not supported" in str(info.value), str(info.value)


def test_perl_classes_do_not_fold_without_the_i_flag():
    # \w is ASCII; only (?i) adds the fold variants of its letters (\u017f for s, \u212a for k).
    assert fg.compile("\\w").search("\u017f") is None
    assert fg.compile("\\w").search("\u212a") is None
    assert fg.compile("(?i)\\w").search("\u017f")


def test_the_tab_escape_is_a_tab():
    assert fg.compile("\\t").search("a\tb").span() == (1, 2)
    assert fg.compile("\\t").search("a\nb") is None


@pytest.mark.parametrize("depth", [999, 1000])
def test_deeply_nested_groups_compile_and_match(depth):
    # The prefilter planners recursed once per level and raised RecursionError at 999 levels.
    m = fg.compile("(" * depth + "a" + ")" * depth).search("xa")
    assert m.span() == (1, 2) and len(m.groups()) == depth


def test_groups_nested_past_the_limit_are_rejected_with_the_limit():
    with pytest.raises(fg.error) as info:
        fg.compile("(" * 1001 + "a" + ")" * 1001)
    assert info.value.construct == "nesting" and info.value.pos == 1000
    assert "1000" in str(info.value) and "simplify the pattern" in str(info.value)

"""The analysis's bounds at their edges (mutation testing, issue 31, item 6)."""

from __future__ import annotations

import shlex

import pytest

from abhed.gate.shellparse import analyze


def test_a_line_of_1000_commands_is_read_whole_and_one_more_is_cut():
    # Read here, not in the bounded child a 2 KB line goes to: the count is what is tested, and the
    # child's 40 ms of CPU include copying a test process's pages, which a loaded machine inflates.
    from abhed.gate.shellparse import _read
    whole = _read(":;" * 1000)
    assert len(whole.commands) == 1000 and whole.whole and not whole.opaque
    cut = _read(":;" * 1001)
    assert len(cut.commands) == 1000 and not cut.whole and cut.opaque == ["the line has more than 1000 commands"]


def test_a_line_whose_parse_blows_up_at_its_end_is_stopped_in_its_child():
    """tree-sitter's error recovery at EOF reports no progress: only the bounded child stops it."""
    analysis = analyze("` 2>&1 " * 600)
    assert not analysis.whole and analysis.opaque[0].startswith(
        "the line could not be read within 40 ms of CPU time and 64 MiB ("), analysis.opaque


def test_a_parse_over_its_cpu_time_says_so():
    analysis = analyze("` 2>&1 " * 2000)
    assert not analysis.whole and analysis.opaque[0] in (
        "the shell grammar needed more than the 30 ms of CPU time this check gives it to read the line",
        "the line could not be read within 40 ms of CPU time and 64 MiB (the parser crashed (SIGPROF))"), analysis.opaque


def test_scripts_nested_three_deep_are_read_whole():
    line = "sh -c " + shlex.quote("sh -c " + shlex.quote("sh -c ls"))
    analysis = analyze(line)
    assert [c.argv[0] for c in analysis.commands] == ["sh", "sh", "sh", "ls"] and not analysis.opaque, analysis


@pytest.mark.parametrize("line, place", [("ls )", "(near ')', column 4)"), ("echo ok; if", "(near 'echo ok; if', column 1)")])
def test_a_parse_error_says_where(line, place):
    assert analyze(line).opaque[0] == f"the shell grammar could not parse it {place}"


@pytest.mark.parametrize("line, argvs", [("x=$(echo $(ls))", [["ls"], ["echo", None], []]),
                                         ("[[ $(echo $(ls)) ]]", [["ls"], ["echo", None], ["[["]])])
def test_a_nested_substitution_is_walked_once(line, argvs):
    assert [c.argv for c in analyze(line).commands] == argvs


@pytest.mark.parametrize("line, argv", [('echo "{a,b}"x', ["echo", "{a,b}x"]), ("echo x'{a,b}'", ["echo", "x{a,b}"])])
def test_quoted_braces_in_a_concatenation_are_no_brace_expansion(line, argv):
    analysis = analyze(line)
    assert [c.argv for c in analysis.commands] == [argv] and not analysis.opaque, analysis


LONG = "a" * 60


@pytest.mark.parametrize("line, reason", [
    (f"echo $(( {LONG} + 1 ))", f"arithmetic '$(( {LONG[:36]}': bash evaluates it, subscripts and all, at run time"),
    (f"(( {LONG} ))", f"arithmetic '(( {LONG[:37]}': bash evaluates it, subscripts and all, at run time"),
    (f"{{ ls; }} > f {LONG}", f"words after a redirection of a compound statement ('{{ ls; }} > f {LONG[:28]}')"),
    (f"cat > ${LONG}", f"the redirection target '${LONG[:39]}' is only known at run time"),
    ("nice " * 300 + "ls", "`nice nice nice nice nice nice nice nice ` nests too many wrappers to follow"),
    (f"if {LONG}", f"the construct ERROR ('if {LONG[:37]}') is not one this check understands"),
])
def test_a_reason_quotes_40_characters_of_what_it_is_about(line, reason):
    assert reason in analyze(line).opaque, analyze(line).opaque


@pytest.mark.parametrize("line, argvs", [
    ("cat <(cat <(ls))", [["ls"], ["cat", None], ["cat", None]]),  # a process substitution is walked once too
    ("find . -exec \\;", [["find", ".", "-exec", ";"]]), ("find -exec", [["find", "-exec"]]),  # runs nothing: no crash
    ("[ -f a ]", [["["]]), ("[[ -f a ]]", [["[["]]), ("export", [["export"]]), ("x=1 y=2", [[], []]),
])
def test_what_each_line_runs(line, argvs):
    assert [c.argv for c in analyze(line).commands] == argvs


def test_a_redirection_target_on_the_next_line_is_opaque():
    assert analyze("ls >\nfile").opaque == ["a redirection whose target is on the next line: the grammar reads it as "
                                            "the target, bash as a syntax error"]


def test_a_glob_argument_that_may_be_an_option_quotes_40_characters():
    assert analyze(f"rm *{LONG}").opaque == [
        f"the argument '*{LONG[:39]}' is a pattern that could expand to a file name starting with '-', read as an "
        "option: write it as ./PATTERN, or after --"]


def test_a_parse_that_reports_no_progress_is_stopped_by_the_childs_cpu_timer():
    """An open pipeline sends tree-sitter's error recovery into work that reports no progress (16 KB
    once took 200 MB and seconds): only the child's own CPU timer (SIGPROF at 40 ms) stops it soon,
    before the memory bound or the wall-clock backstop would."""
    analysis = analyze("a | " * 4000)
    assert not analysis.whole
    # Which CPU bound stops it first depends on how the child is scheduled: the timer, or the
    # grammar's own 30 ms check when the parse reports progress in between. Never wall-clock or memory.
    assert analysis.opaque in (
        ["the line could not be read within 40 ms of CPU time and 64 MiB (the parser crashed (SIGPROF))"],
        ["the shell grammar needed more than the 30 ms of CPU time this check gives it to read the line"])


def test_a_stopped_parse_is_not_resumed_by_the_next_line():
    """tree-sitter resumes a halted parse on the next call unless the parser is reset: the next
    line would be read as the rest of the one that ran out of time."""
    from abhed.gate.shellparse import Analysis, _parse
    assert _parse(b"ls | " * 200 + b"ls", Analysis(parse_left=0.0)) is None  # stopped at once
    tree = _parse(b"echo hi", Analysis())
    assert tree is not None and tree.root_node.text == b"echo hi" and not tree.root_node.has_error


def test_every_parse_of_a_line_spends_the_lines_one_budget():
    from abhed.gate.shellparse import PARSE_CPU_SECONDS, Analysis, _parse
    analysis = Analysis()
    for _ in range(3):
        assert _parse(b"ls -la | grep x | wc -l; " * 40, analysis) is not None
    assert 0 < PARSE_CPU_SECONDS - analysis.parse_left  # what the parses took is gone from the budget

"""python -m fallback_grep: options, output shapes and exit statuses."""
import io
import subprocess
import sys

import pytest

from fallback_grep.__main__ import glob_regex, main


@pytest.fixture()
def tree(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.c").write_text("alpha\nbeta PM_RESUME\ngamma\n")
    (tmp_path / "src" / "b.h").write_text("one\nPM_RESUME two\n")
    (tmp_path / "notes.md").write_text("pm_resume here\n")
    (tmp_path / ".hidden.c").write_text("PM_RESUME\n")
    (tmp_path / "blob.o").write_bytes(b"\x00PM_RESUME")
    return tmp_path


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_files_with_matches_is_the_default(tree):
    code, out, err = run(["PM_RESUME", tree])
    assert code == 0
    assert out.splitlines() == [f"{tree}/src/a.c", f"{tree}/src/b.h"]
    assert "skipped 1 binary file" in err and "64 KiB" in err


def test_count_and_case_insensitive(tree):
    code, out, _ = run(["--output-mode", "count", "-i", "pm_resume", tree])
    assert code == 0
    assert out.splitlines() == [f"{tree}/notes.md:1", f"{tree}/src/a.c:1", f"{tree}/src/b.h:1"]


def test_content_with_context(tree):
    code, out, _ = run(["--output-mode", "content", "-C", "1", "PM_RESUME", tree / "src"])
    assert code == 0
    assert out.splitlines() == [
        f"{tree}/src/a.c-1-alpha", f"{tree}/src/a.c:2:beta PM_RESUME", f"{tree}/src/a.c-3-gamma",
        "--", f"{tree}/src/b.h-1-one", f"{tree}/src/b.h:2:PM_RESUME two"]


def test_single_file_omits_the_path(tree):
    code, out, _ = run(["--output-mode", "content", "PM", tree / "src" / "a.c"])
    assert out == "2:beta PM_RESUME\n"


def test_glob_and_hidden(tree):
    code, out, _ = run(["--glob", "*.h", "PM_RESUME", tree])
    assert out.splitlines() == [f"{tree}/src/b.h"]
    code, out, _ = run(["--glob", "!src/**", "-i", "PM_RESUME", tree])
    assert out.splitlines() == [f"{tree}/notes.md"]
    code, out, _ = run(["--hidden", "--glob", "*.c", "PM_RESUME", tree])
    assert out.splitlines() == [f"{tree}/.hidden.c", f"{tree}/src/a.c"]


def test_multiline(tree):
    code, out, _ = run(["--multiline", "--output-mode", "content", "alpha.beta", tree / "src"])
    assert out.splitlines() == [f"{tree}/src/a.c:1:alpha", f"{tree}/src/a.c:2:beta PM_RESUME"]


def test_exit_status_no_match_is_1(tree):
    assert run(["nothing-here", tree])[0] == 1


def test_rejected_pattern_exits_2_with_the_teaching_message(tree):
    code, out, err = run(["foo(?=bar)", tree])
    assert code == 2 and out == ""
    assert "RE2 has no lookahead" in err and "foobar" in err and "^" in err


def test_missing_path_exits_2(tree):
    code, _, err = run(["x", tree / "nope"])
    assert code == 2 and "no such file" in err


def test_glob_translation():
    assert glob_regex("*.py").match("a/b/c.py")
    assert not glob_regex("*.py").match("a/b/c.pyc")
    assert glob_regex("src/**/*.c").match("src/x/y/z.c")
    assert glob_regex("src/**/*.c").match("src/z.c")
    assert not glob_regex("src/*.c").match("src/x/z.c")
    assert glob_regex("*.{c,h}").match("x/y.h")
    assert glob_regex("[ab].txt").match("b.txt")


def test_module_entry_point(tree):
    proc = subprocess.run([sys.executable, "-m", "fallback_grep", "-i", "pm_resume",
                           str(tree / "notes.md")], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == str(tree / "notes.md")


def test_threads_give_the_same_output_and_a_negative_count_is_explained(tree):
    """-j N searches with N processes; the output is the same as with one, line for line."""
    for mode in ("content", "count", "files_with_matches"):
        one = run(["-j", "1", "--output-mode", mode, "-C", "1", "PM_RESUME", tree])
        assert run(["-j", "3", "--output-mode", mode, "-C", "1", "PM_RESUME", tree]) == one
        assert run(["--output-mode", mode, "-C", "1", "PM_RESUME", tree]) == one
    code, out, err = run(["-j", "-2", "PM_RESUME", tree])
    assert code == 2 and out == ""
    assert err == "fallback_grep: --threads must be 0 (one per core) or more; got -2\n"


@pytest.mark.parametrize("hidden", [False, True])
def test_the_filter_without_globs_keeps_what_the_general_one_keeps(hidden):
    """make_filter's short functions for the common case (no --glob) decide as its general
    one does: hidden entries only with --hidden, a .git directory never (a .git file is a
    hidden file)."""
    from fallback_grep.__main__ import make_filter
    fast = make_filter("/r", [], hidden)
    general = make_filter("/r", ["!never-matches-anything"], hidden)
    cases = [("/r/a.c", False), ("/r/.hidden.c", False), ("/r/src", True), ("/r/.cache", True),
             ("/r/.git", True), ("/r/sub/.git", False), ("/r/x.git", True), ("/r/a/.b/c", False)]
    assert [fast(p, d) for p, d in cases] == [general(p, d) for p, d in cases]
    assert [fast(p, d) for p, d in cases] == ([True, True, True, True, False, True, True, True] if hidden
                                             else [True, False, True, False, False, False, True, True])


def test_a_one_process_search_imports_nothing_it_does_not_use(tree):
    """Start-up is a fixed cost of every command line search: -j1 imports neither dataclasses
    (and the inspect module under it), nor shutil (argparse's way to the terminal width), nor
    what only the workers need (pickle, selectors, multiprocessing)."""
    heavy = ("dataclasses", "inspect", "pickle", "selectors", "multiprocessing", "signal", "shutil")
    code = ("import sys; from fallback_grep.__main__ import main; main(['-j1', 'PM_RESUME', sys.argv[1]]); "
            f"print(*[m for m in {heavy!r} if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "", f"imported by a -j1 search: {proc.stdout.splitlines()[-1]}"


def test_records_compare_print_and_copy_like_the_dataclasses_they_replace():
    from fallback_grep.filesearch import FileResult, Line
    from fallback_grep.syntax import LITERAL, Node
    assert Line(1, "a", True) == Line(1, "a", True) != Line(1, "a", False)
    assert repr(Line(2, "x", False)) == "Line(number=2, text='x', is_match=False)"
    assert repr(FileResult("/p", count=1)) == ("FileResult(path='/p', matched=False, count=1, lines=(), "
                                              "binary=False, stopped_at=None, error=None, truncated=False)")
    n = Node(LITERAL, rune=97)
    assert n.replace(rune=98) == Node(LITERAL, rune=98) and n.rune == 97 and n.subs == []
    assert Node(LITERAL) != Line(1, "a", True) and Node("concat").subs is not Node("concat").subs
    with pytest.raises(TypeError, match="Node has no field runes"):
        n.replace(runes=1)
    with pytest.raises(TypeError):
        hash(n)


@pytest.mark.parametrize("columns", ["60", "132"])
def test_help_is_laid_out_as_argparse_lays_it_out(columns, monkeypatch):
    """The help formatter finds the width without shutil, and finds the same one."""
    import argparse
    from fallback_grep.__main__ import build_parser
    monkeypatch.setenv("COLUMNS", columns)
    ours = build_parser()
    theirs = build_parser()
    theirs.formatter_class = argparse.HelpFormatter
    assert ours.format_help() == theirs.format_help()
    assert ("Python,\nlinear time" in ours.format_help()) == (columns == "60")   # the width was used

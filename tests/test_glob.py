"""glob (spec §5): one test per semantic bullet and per error case."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abhed.files.globpattern import compile_glob, expand_braces
from abhed.tools.glob import newest_first


def make(ws, *names, mtime_start=1_000_000):
    for i, name in enumerate(names):
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        os.utime(path, (mtime_start + i, mtime_start + i))


def test_sorted_newest_first_with_path_as_tie_break(tools, ws):
    make(ws, "old.py", "mid.py", "new.py")
    for name in ("tie_b.py", "tie_a.py"):
        (ws / name).write_text("")
        os.utime(ws / name, (5_000_000, 5_000_000))
    out = tools.ok("glob", pattern="*.py").split("\n")
    assert out == [str(ws / n) for n in ("tie_a.py", "tie_b.py", "new.py", "mid.py", "old.py")]


def test_double_star_braces_and_classes(tools, ws):
    make(ws, "src/a.ts", "src/deep/b.tsx", "src/c.js", "test/a1.ts", "test/a2.ts", "test/b3.ts")
    assert set(tools.ok("glob", pattern="src/**/*.{ts,tsx}").split("\n")) == {str(ws / "src/a.ts"),
                                                                             str(ws / "src/deep/b.tsx")}
    assert set(tools.ok("glob", pattern="test/a[12].ts").split("\n")) == {str(ws / "test/a1.ts"),
                                                                         str(ws / "test/a2.ts")}
    assert tools.ok("glob", pattern="test/[!a]*.ts") == str(ws / "test/b3.ts")


def test_path_sets_the_root_and_paths_out_are_absolute(tools, ws):
    make(ws, "pkg/mod/x.go", "other/y.go")
    assert tools.ok("glob", pattern="**/*.go", path=str(ws / "pkg")) == str(ws / "pkg/mod/x.go")


def test_dotfiles_are_matched(tools, ws):
    make(ws, ".github/workflows/ci.yml")
    assert tools.ok("glob", pattern="**/*.yml") == str(ws / ".github/workflows/ci.yml")


def test_no_match_is_never_an_empty_string(tools, ws):
    make(ws, "a.py")
    assert tools.ok("glob", pattern="*.rs") == "[no files matched: *.rs]"


def test_no_match_at_the_top_suggests_double_star(tools, ws):
    make(ws, "src/a.py", "src/b.py")
    out = tools.ok("glob", pattern="*.py")
    assert out.startswith("[no files matched: *.py]") and "**/*.py would match 2 file(s)" in out


def test_gitignore_and_default_exclusions_are_respected_and_reported(tools, ws):
    make(ws, ".gitignore", "app.js", "app.min.js", "node_modules/lib/x.js", "dist/bundle.js")
    (ws / ".gitignore").write_text("*.min.js\n")
    out = tools.ok("glob", pattern="**/*.js")
    assert out.split("\n")[0] == str(ws / "app.js")
    assert "1 matching file. To include one" in out
    assert "2 directories (dist, node_modules)" in out and "set path to it" in out
    assert tools.ok("glob", pattern="**/*.js", path=str(ws / "node_modules")) == str(ws / "node_modules/lib/x.js")


def test_the_cap_is_1000_after_sorting_with_a_note(tools, ws):
    for i in range(1005):
        (ws / f"f{i:04}.txt").write_text("")
        os.utime(ws / f"f{i:04}.txt", (i, i))
    out = tools.ok("glob", pattern="*.txt").split("\n")
    assert len(out) == 1001 and out[0] == str(ws / "f1004.txt")
    assert out[-1] == ("[truncated: showing 1000 of 1005 files, newest first. Narrow the pattern (e.g. src/**/*.ts "
                       "instead of **/*) or set path to a subdirectory.]")


def test_the_cap_keeps_the_first_paths_among_files_tied_at_the_cut_off(tools, ws):
    """Only the shown files are ordered: 3 newest, then 1100 files with one time (an unpacked
    archive) of which the first 997 by path fill the page, and none of the 10 older ones."""
    for i in range(3):
        (ws / f"new{i}.txt").write_text("")
        os.utime(ws / f"new{i}.txt", (9_000 + i, 9_000 + i))
    for i in range(1100):
        (ws / f"t{i:04}.txt").write_text("")
        os.utime(ws / f"t{i:04}.txt", (5_000, 5_000))
    for i in range(10):
        (ws / f"a{i}.txt").write_text("")
        os.utime(ws / f"a{i}.txt", (1_000, 1_000))
    out = tools.ok("glob", pattern="*.txt").split("\n")
    assert out[:-1] == [str(ws / n) for n in ("new2.txt", "new1.txt", "new0.txt")] + \
        [str(ws / f"t{i:04}.txt") for i in range(997)]
    assert out[-1].startswith("[truncated: showing 1000 of 1113 files, newest first.")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text("abc/", min_size=1, max_size=4), st.integers(0, 5)), max_size=40,
                unique_by=lambda item: item[0]),
       st.integers(1, 12))
def test_newest_first_equals_sorting_everything(files, limit):
    """The cut-off selection gives exactly the full sort's first `limit` (newest, ties by path)."""
    mtimes = dict(files)
    want = sorted(mtimes, key=lambda p: (-mtimes[p], p))[:limit]
    assert newest_first(list(mtimes), list(mtimes.values()), limit) == want


@pytest.mark.parametrize("pattern, fact", [
    ("[abc", "Unclosed '[' at position 0"),
    ("src/{a,b", "Unbalanced '{' at position 4"),
    ("", "The pattern is empty"),
    ("../*.py", "contains '..'"),
    ("/etc/*.conf", "absolute path outside the search path"),
])
def test_bad_patterns_are_instructions(tools, pattern, fact):
    assert fact in tools.err("glob", pattern=pattern)


def test_a_backwards_range_is_an_instruction_not_a_traceback(tools):
    """[z-a] passed every check of the translation and failed in re.compile (found by the
    hypothesis test of the suffix fast path: `**/*{[\\,-*]}`)."""
    for pattern in ("src/[z-a].py", "**/*{[\\,-*]}"):
        error = tools.err("glob", pattern=pattern)
        assert f"{pattern!r} is not a usable glob: bad character range" in error
        assert "[a-z], not [z-a]" in error and "[-az] or [az-]" in error


def test_absolute_pattern_inside_the_root_is_accepted(tools, ws):
    make(ws, "src/a.py")
    assert tools.ok("glob", pattern=f"{ws}/src/*.py") == str(ws / "src/a.py")


def test_missing_directory_suggests_a_close_one(tools, ws):
    (ws / "source").mkdir()
    err = tools.err("glob", pattern="*", path=str(ws / "sourc"))
    assert f"Directory not found: {ws / 'sourc'}" in err and str(ws / "source") in err


def test_a_file_as_path_explains(tools, ws):
    make(ws, "a.py")
    err = tools.err("glob", pattern="*", path=str(ws / "a.py"))
    assert "is a file, not a directory" in err and f"set path to {ws}" in err


def test_outside_the_roots_is_refused(tools):
    assert "outside the allowed roots" in tools.err("glob", pattern="*", path="/etc")


def test_brace_expansion_and_translation():
    assert expand_braces("a{b,c{d,e}}f") == ["abf", "acdf", "acef"]
    assert expand_braces("x\\{a,b}") == ["x\\{a,b}"]
    regex, _ = compile_glob("**/a/*.py", "/r")
    assert regex.fullmatch("a/x.py") and regex.fullmatch("q/w/a/x.py") and not regex.fullmatch("a/b/x.py")
    assert not compile_glob("*.py", "/r")[0].fullmatch("sub/x.py")


PRUNING_TREE = ["top.c", "a.txt", "a/x.c", "a/b/y.c", "a/b/c/z.h", "b/x.c", "b/x/w.c", "ab.c", "a[/]b.c",
                "a/b.c", "src/app/m.ts", "src/app/deep/n.ts", "src/lib/o.ts", ".hidden/p.c", "q/a*b/r.c"]


@pytest.mark.parametrize("pattern", [
    "*.c", "*.txt", "a/*.c", "a/**/*.h", "{a,b}/x.c", "{a,b}/**/*.c", "[ab]/*.c", "?/x.c", "**/x.c",
    "a/b/c/z.h", "a[.-0]b.c", "a[/]b.c", "src/app/**", "src/*/*.ts", "src/**/*.ts", "**", "q/a\\*b/*.c",
    ".hidden/*.c", "a/b/*", "*/*/*.c"])
def test_pruned_walk_finds_exactly_what_a_full_walk_finds(tools, ws, pattern):
    """The glob walk skips directories that cannot hold a match; it must find every file a walk of the
    whole tree filtered by the same regex finds (a class like [.-0] spans "/", so it prunes nothing)."""
    make(ws, *PRUNING_TREE)
    regex, _ = compile_glob(pattern, str(ws))
    every = {str(ws / name) for name in PRUNING_TREE if regex.fullmatch(name)}
    out = tools.ok("glob", pattern=pattern)
    found = set() if out.startswith("[no files matched") else set(out.split("\n"))
    assert found == every


def test_the_walk_enters_only_directories_that_can_hold_a_match():
    from abhed.tools.glob import pruner
    assert pruner(["**/*.c"]) is None and pruner(["*.c", "**"]) is None
    top = pruner(["*.txt"])
    assert not top("a") and not top(".git")
    drivers = pruner(["drivers/**/*.h"])
    assert drivers("drivers") and drivers("drivers/net/x") and not drivers("fs") and not drivers("driversx")
    two = pruner(["src/*/*.ts", "lib/*.py"])
    assert two("src") and two("src/app") and not two("src/app/deep") and two("lib") and not two("lib/x")
    assert pruner(["a[.-0]b.c"])("a/b")  # a class may span "/": depth is not bounded


_NAME_CHARS = st.sampled_from(list("ab.c_-*?[]{}\\\n/ é"))


@settings(max_examples=400, deadline=None)
@given(suffixes=st.lists(st.text(_NAME_CHARS, max_size=4), min_size=1, max_size=3),
       path=st.text(_NAME_CHARS, min_size=1, max_size=14))
def test_the_suffix_fast_path_answers_as_the_regex(suffixes, path):
    """glob stamps each file with path_test instead of the regex: for `**/*SUFFIX` an endswith, else
    the regex itself; both must agree on every path, newlines and wildcard characters included."""
    from abhed.files.globpattern import GlobError, path_test
    pattern = "**/*" + ("{" + ",".join(suffixes) + "}" if len(suffixes) > 1 else suffixes[0])
    try:
        regex, expanded = compile_glob(pattern, "/ws")
    except GlobError:
        return
    assert bool(path_test(regex, expanded)(path)) == bool(regex.fullmatch(path))


def test_the_suffix_fast_path_is_taken_only_for_star_star_slash_star_suffix():
    from abhed.files.globpattern import path_test
    for pattern in ("**/*.c", "**/*.{ts,tsx}", "**/*", "**/*.tar.gz"):
        regex, expanded = compile_glob(pattern, "/ws")
        assert path_test(regex, expanded) != regex.fullmatch, pattern
    for pattern in ("*.c", "src/**/*.c", "**/a*.c", "**/*.[ch]", "**/*/x.c", "**", "**/*.{c,h/x}"):
        regex, expanded = compile_glob(pattern, "/ws")
        assert path_test(regex, expanded) == regex.fullmatch, pattern
    regex, expanded = compile_glob("**/*.c", "/ws")
    test = path_test(regex, expanded)
    assert test("a/b.c") and test(".c") and not test("a.c/b") and not test("a/b.h")
    assert test("a/b.c") is True and test("a/b.h") is False  # endswith answered, not the regex
    assert test("a\nb/c.c") is True and regex.fullmatch("a\nb/c.c")  # `**` crosses a newline-named directory


def test_globstar_crosses_a_directory_named_with_a_newline(tools, ws):
    """A hostile repository's "a\\nb/" directory cannot hide its files from `**`."""
    make(ws, "a\nb/hidden.py", "a\nb/deep/x.c")
    for pattern in ("**/*.py", "**/hidden.py", "**/deep/*.c", "**"):
        out = tools.ok("glob", pattern=pattern)
        assert "hidden.py" in out or "x.c" in out, (pattern, out)

"""glob (spec §5): one test per semantic bullet and per error case."""

from __future__ import annotations

import os
import time

import pytest

from abhed.files.globpattern import compile_glob, expand_braces


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


@pytest.mark.parametrize("pattern, fact", [
    ("[abc", "Unclosed '[' at position 0"),
    ("src/{a,b", "Unbalanced '{' at position 4"),
    ("", "The pattern is empty"),
    ("../*.py", "contains '..'"),
    ("/etc/*.conf", "absolute path outside the search path"),
])
def test_bad_patterns_are_instructions(tools, pattern, fact):
    assert fact in tools.err("glob", pattern=pattern)


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

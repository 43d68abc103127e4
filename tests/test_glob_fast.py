"""glob's faster walk (issue 34): the same answer, nothing from outside the workspace whatever is
swapped while it runs, and no regex compiled again for a tree walked before."""

from __future__ import annotations

import os
import re

import pytest

from abhed.files import filewalk, splitwalk
from abhed.files.filewalk import walk
from abhed.files.globpattern import compile_glob, path_test
from abhed.tools.glob import Found, pruner
from test_glob_split import _workspace

EXCLUDES = ["node_modules", ".git", "target", "dist", "__pycache__"]
FUTURE = 3_000_000_000  # 2065: newer than any file made now
LATER = 4_000_000_000


def tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def matching(pattern, root):
    regex, expanded = compile_glob(pattern, str(root))
    return path_test(regex, expanded)


def test_only_stamped_sees_only_the_files_the_pattern_matches(ws):
    """The files the pattern rejects are neither listed nor hidden: the ignore rules never test them;
    what it matches is listed, stamped and hidden exactly as a full walk says."""
    tree(ws, {".gitignore": "*.o\ngen/\nskip.c\n", "a.c": "", "a.h": "", "x.o": "", "skip.c": "", "gen/g.c": "",
              "src/b.c": "", "src/b.txt": "", "src/sub/c.c": ""})
    full = walk(ws, EXCLUDES, stamp=matching("**/*.c", ws))
    only = walk(ws, EXCLUDES, stamp=matching("**/*.c", ws), only_stamped=True)
    rel = lambda paths: sorted(os.path.relpath(p, ws) for p in paths)  # noqa: E731
    assert rel(only.files) == rel(only.stamped) == rel(full.stamped) == ["a.c", "src/b.c", "src/sub/c.c"]
    assert sorted(zip(only.stamped, only.stamps)) == sorted(zip(full.stamped, full.stamps))
    assert rel(only.hidden_files) == ["skip.c"] and rel(full.hidden_files) == ["skip.c", "x.o"]
    assert rel(only.hidden_dirs) == rel(full.hidden_dirs) == ["gen"]


def test_only_stamped_without_a_stamp_lists_every_file(ws):
    tree(ws, {"a.c": "", "b.h": ""})
    assert sorted(os.path.basename(p) for p in walk(ws, EXCLUDES, only_stamped=True).files) == ["a.c", "b.h"]


def test_a_directory_swapped_for_a_link_to_outside_during_a_glob_lists_and_dates_nothing_outside(
        tools, ws, tmp_path, monkeypatch):
    """A sandboxed job swaps src/ for a symlink to a directory outside (with newer files) between
    the listing of the root and the opening of src/: nothing behind the link is listed or dated,
    and the note says a directory could not be read."""
    outside = tree(tmp_path / "outside", {"secret.c": "", "deep/secret2.c": ""})
    for path in (outside / "secret.c", outside / "deep" / "secret2.c"):
        os.utime(path, (LATER, LATER))
    tree(ws, {"top.c": "", "src/inner.c": "", "src/more/m.c": ""})
    real = filewalk.beneath.open_rel

    def swap_then_open(fd, parts, *args, **kw):
        if parts == ["src"] and not (ws / "src").is_symlink():
            (ws / "src").rename(ws / "src.moved")
            (ws / "src").symlink_to(outside, target_is_directory=True)
        return real(fd, parts, *args, **kw)
    monkeypatch.setattr(filewalk.beneath, "open_rel", swap_then_open)
    out = tools.ok("glob", pattern="**/*.c")
    assert (ws / "src").is_symlink(), "the swap did not happen: the test proves nothing"
    assert "secret" not in out and str(outside) not in out
    assert out.split("\n")[0] == str(ws / "top.c")
    assert f"could not be read (permission denied), e.g. {ws / 'src'}" in out


def test_a_file_swapped_for_a_link_to_outside_before_its_stat_is_dated_by_the_link_not_the_target(
        tools, ws, tmp_path, monkeypatch):
    """Between the listing and the reading of modification times, a matched file becomes a symlink
    to a newer file outside: the order is made by the link's own time (a fact of the workspace),
    never by the outside file's."""
    outside = tree(tmp_path / "outside", {"target.c": ""})
    os.utime(outside / "target.c", (LATER, LATER))
    tree(ws, {"new1.c": "", "new2.c": "", "victim.c": ""})
    for name in ("new1.c", "new2.c"):
        os.utime(ws / name, (FUTURE, FUTURE))
    real_stat = os.stat
    swapped = []

    def swap_then_stat(path, *args, **kw):
        if path == "victim.c" and not swapped and kw.get("dir_fd") is not None:
            os.unlink(ws / "victim.c")
            (ws / "victim.c").symlink_to(outside / "target.c")
            swapped.append(path)
        return real_stat(path, *args, **kw)
    monkeypatch.setattr(os, "stat", swap_then_stat)
    out = tools.ok("glob", pattern="**/*.c")
    monkeypatch.undo()
    assert swapped, "the swap did not happen: the test proves nothing"
    assert out.split("\n") == [str(ws / "new1.c"), str(ws / "new2.c"), str(ws / "victim.c")]
    assert str(outside) not in out


def test_a_tree_walked_before_compiles_no_regex_again(ws, monkeypatch):
    """The ignore rules' regexes are kept by source (filewalk._compile): re's own cache, 512
    patterns dropped oldest first, let a long session compile a big tree's again on every walk."""
    tree(ws, {".gitignore": "/build*\n*.tmp*\ndocs/**/gen/\n", "src/.gitignore": "/out[0-9]\nx?y\n",
              "src/deep/.gitignore": "a/*.c\n", "src/deep/a/k.c": "", "src/m.c": "", "docs/z/gen/q.c": ""})
    stamp = matching("**/*.c", ws)
    first = walk(ws, EXCLUDES, stamp=stamp, only_stamped=True)
    compiled = []
    real = re.compile
    monkeypatch.setattr(filewalk.re, "compile", lambda *a, **kw: compiled.append(a[0]) or real(*a, **kw))
    again = walk(ws, EXCLUDES, stamp=stamp, only_stamped=True)
    assert compiled == [] and again.stamped == first.stamped and again.hidden_dirs == first.hidden_dirs


def test_the_compiled_regexes_kept_are_bounded():
    assert filewalk._compile.cache_info().maxsize == 1024
    assert filewalk._compile("a(b)c") is filewalk._compile("a(b)c") and filewalk._compile("a(b)c").fullmatch("abc")


def test_a_glob_matching_few_files_still_splits_a_big_walk(tmp_path, monkeypatch):
    """The split's estimate counts the files the walk meets, not the few the pattern keeps: after
    the root (STEP 1), 10 files seen and 4 directories pending make 40 files still to walk."""
    for i in range(10):
        (tmp_path / f"f{i}.txt").write_text("x")
    for d in range(4):
        (tmp_path / f"d{d}").mkdir()
        (tmp_path / f"d{d}" / "g.c").write_text("x")
    split = []
    real = splitwalk.fork_map
    monkeypatch.setattr(splitwalk, "fork_map", lambda *a: split.append(a[2]) or real(*a))
    monkeypatch.setattr(splitwalk, "STEP", 1)
    monkeypatch.setattr(splitwalk, "MIN_FILES", 40)
    with filewalk.Walk(tmp_path, EXCLUDES, stamp=matching("**/*.c", tmp_path), only_stamped=True) as walking:
        shares = splitwalk.summaries(walking, lambda listing: sorted(listing.stamped), 2)
    assert sorted(p for share in shares for p in share) == [str(tmp_path / f"d{d}" / "g.c") for d in range(4)]
    assert split == [2]


@pytest.mark.parametrize("pattern", ["**/*", "**/*.c", "src*/**/*.h", "*.txt", "**/*.log", "**/{a,b}*.c",
                                     "lib*/deep/**", "src1/m*/a0[0-9].c", "nothing/**/*.zz"])
def test_what_glob_reports_is_the_same_whether_the_walk_sees_only_matches_or_every_file(ws, pattern):
    """Found (the newest, the counts, the hidden directories and matches) from a walk that sees only
    the pattern's files equals Found from a walk that sees every file and stamps the matches."""
    _workspace(ws)
    regex, expanded = compile_glob(pattern, str(ws))
    found = [Found.of(walk(ws, EXCLUDES, stamp=path_test(regex, expanded), descend=pruner(expanded), only_stamped=only),
                      ws, regex, expanded) for only in (False, True)]
    assert found[0] == found[1]
    assert found[1].count == len(found[1].newest) or len(found[1].newest) == 1000

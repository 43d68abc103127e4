"""abhed.session.gitindex against real git: the entries it writes are the ones git writes, and git reads
what it writes (diff-files sees an unchanged file as unchanged, write-tree gives git's tree)."""

from __future__ import annotations

import os
import subprocess
import time
from hashlib import sha1
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abhed.session import gitindex


def git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True, check=True, env=env).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c.txt").write_text("c\n")
    (root / "top.txt").write_text("top\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("top.txt")
    git(root, "init", "-q")
    old = time.time() - 10  # not racily clean: git keeps the real mtime
    for path in root.rglob("*"):
        if ".git" not in path.parts:
            os.utime(path, (old, old), follow_symlinks=False)
    git(root, "add", "-A")
    return root


def later() -> float:
    """A snapshot's time well after the fixture's files last changed (mtime and ctime: utime moves the
    change time to now), so that their entries are not racily clean and keep their stat data."""
    return time.time() + gitindex.RACY_S + 1


def entries_of(repo: Path) -> list[gitindex.Entry]:
    return gitindex.read(repo / ".git" / "index").entries


def test_the_entries_written_are_byte_for_byte_git_s_own(repo: Path) -> None:
    ours = []
    for entry in entries_of(repo):
        st = os.lstat(repo / os.fsdecode(entry.name))
        ours.append(gitindex.entry(entry.name, st, entry.oid, later()))
    assert [e.raw for e in ours] == [e.raw for e in entries_of(repo)]
    assert [oct(e.mode) for e in ours] == ["0o100644", "0o120000", "0o100755", "0o100644"]


def test_git_reads_what_is_written_and_sees_nothing_changed(repo: Path) -> None:
    tree = git(repo, "write-tree")
    gitindex.write(repo / ".git" / "index", gitindex.Index([gitindex.entry(e.name, os.lstat(repo / os.fsdecode(e.name)),
                                                                           e.oid, later()) for e in entries_of(repo)]))
    assert git(repo, "diff-files", "--name-only") == b""
    assert git(repo, "write-tree") == tree
    (repo / "top.txt").write_text("changed\n")
    assert git(repo, "diff-files", "--name-only") == b"top.txt\n"


def test_a_racily_clean_or_unsettled_entry_is_made_to_look_changed(repo: Path) -> None:
    (repo / "fresh.txt").write_text("fresh\n")
    oid = sha1(b"blob 6\0fresh\n").digest()
    git(repo, "hash-object", "-w", "fresh.txt")
    fresh = gitindex.entry(b"fresh.txt", os.lstat(repo / "fresh.txt"), oid, time.time())
    settled = gitindex.entry(b"top.txt", os.lstat(repo / "top.txt"), entries_of(repo)[-1].oid, later())
    torn = gitindex.entry(b"top.txt", os.lstat(repo / "top.txt"), entries_of(repo)[-1].oid, later(), settled=False)
    changed = gitindex.entry(b"top.txt", os.lstat(repo / "top.txt"), entries_of(repo)[-1].oid, time.time())
    assert fresh.raw[8:16] == bytes(8) and torn.raw[8:16] == bytes(8)  # mtime 0: git re-lists them
    assert changed.raw[8:16] == bytes(8)  # an old mtime, but the inode changed (utime) just now: the same
    assert settled.raw[8:16] != bytes(8)
    gitindex.write(repo / ".git" / "index", gitindex.Index(gitindex.merged(entries_of(repo), {b"fresh.txt": fresh})))
    assert git(repo, "diff-files", "--name-only") == b"fresh.txt\n"  # reported, never re-read by path


def test_merged_replaces_adds_removes_and_keeps_files_and_directories_apart(repo: Path) -> None:
    old = entries_of(repo)
    st = os.lstat(repo / "top.txt")
    new = {name: gitindex.entry(name, st, b"\1" * 20, 0) for name in (b"a", b"top.txt/x", b"z")}
    names = [e.name for e in gitindex.merged(old, {**new, b"run.sh": None})]
    # `a` a file now: a/b/c.txt goes; `top.txt/x`: the file top.txt goes; run.sh removed; sorted as git sorts
    assert names == [b"a", b"link", b"top.txt/x", b"z"]


def test_a_file_and_a_path_below_it_read_in_one_capture_keep_the_file(repo: Path) -> None:
    st = os.lstat(repo / "top.txt")
    both = {b"d": gitindex.entry(b"d", st, b"\1" * 20, 0), b"d/p1": gitindex.entry(b"d/p1", st, b"\2" * 20, 0)}
    names = [e.name for e in gitindex.merged([], both)]
    assert names == [b"d"]


def test_a_name_longer_than_its_length_field_round_trips(repo: Path) -> None:
    name = b"x/" + b"n" * 5000
    st = os.lstat(repo / "top.txt")
    e = gitindex.entry(name, st, b"\3" * 20, 0)
    gitindex.write(repo / "idx", gitindex.Index([e]))
    assert gitindex.read(repo / "idx").entries == [e]


@pytest.mark.parametrize("damage, why", [
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "its checksum does not match"),
    (lambda d: _resum(d[:4] + (3).to_bytes(4, "big") + d[8:-20]), "it is not a version 2 index"),
    (lambda d: _resum(d[:-20] + b"link" + (0).to_bytes(4, "big")), "it needs the extension b'link'"),
    (lambda d: _resum(d[:8] + (9).to_bytes(4, "big") + d[12:-20]), "it ends inside an entry"),
    (lambda d: b"", "its checksum does not match"),
])
def test_an_index_not_written_here_is_unreadable_not_misread(repo: Path, damage, why: str) -> None:
    data = (repo / ".git" / "index").read_bytes()
    with pytest.raises(gitindex.Unreadable) as refused:
        gitindex.parse(damage(data))
    assert str(refused.value).startswith(why)


def _resum(body: bytes) -> bytes:
    return body + sha1(body).digest()


def test_optional_extensions_git_writes_are_skipped(repo: Path) -> None:
    git(repo, "write-tree")  # adds the cache-tree extension (TREE)
    assert b"TREE" in (repo / ".git" / "index").read_bytes()
    assert [e.name for e in entries_of(repo)] == [b"a/b/c.txt", b"link", b"run.sh", b"top.txt"]


def test_a_missing_index_has_no_entries(tmp_path: Path) -> None:
    assert gitindex.read(tmp_path / "none") == gitindex.Index([])


def _deep_repo(tmp_path: Path, depth: int) -> Path:
    root = tmp_path / "deep"
    path = root
    for i in range(depth):
        path = path / f"d{i % 10}"
        (path).mkdir(parents=True, exist_ok=True)
        (path / "f.txt").write_text(f"{i}\n")
    (root / "side").mkdir()
    (root / "side" / "s.txt").write_text("s\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "write-tree")  # with git's cache of trees
    return root


@pytest.fixture
def deep_tmp(tmp_path: Path):
    yield tmp_path
    subprocess.run(["rm", "-rf", str(tmp_path / "deep")], check=True)  # pytest's own clean-up recurses: too deep


@pytest.mark.parametrize("depth", [3, 1200])  # deeper than Python's recursion limit
def test_git_s_cache_of_trees_survives_a_change_and_only_changed_trees_are_invalid(deep_tmp: Path,
                                                                                   depth: int) -> None:
    tmp_path = deep_tmp
    repo = _deep_repo(tmp_path, depth)
    path = repo / ".git" / "index"
    index = gitindex.read(path)
    assert index.trees is not None and gitindex._serialise(gitindex._parse_trees(index.trees)) == index.trees
    deepest = next(e.name for e in reversed(index.entries) if e.name.startswith(b"d0/")) if depth == 3 else \
        max((e.name for e in index.entries), key=len)
    (repo / os.fsdecode(deepest)).write_text("changed\n")
    oid = bytes.fromhex(git(repo, "hash-object", "-w", os.fsdecode(deepest)).decode().strip())
    entry = gitindex.entry(deepest, os.lstat(repo / os.fsdecode(deepest)), oid, 0)
    written = gitindex.write(path, gitindex.updated(index, {deepest: entry, b"side/s.txt": None}))
    root = gitindex._parse_trees(written.trees)
    assert root.count == -1 and [d.name for d in root.down] == [b"d0", b"side"]
    side = root.down[1]
    assert side.count == -1  # its only file is gone
    ours = git(repo, "write-tree")
    (repo / "side" / "s.txt").unlink()
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_INDEX_FILE": str(tmp_path / "fresh-index")}
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    fresh = subprocess.run(["git", "-C", str(repo), "write-tree"], check=True, env=env, capture_output=True).stdout
    assert ours == fresh  # git computed, from what was written, the tree a fresh index of the work tree gives


def test_the_cache_of_trees_git_writes_back_is_taken_in_without_reading_the_entries_again(tmp_path: Path) -> None:
    repo = _deep_repo(tmp_path, 3)
    path = repo / ".git" / "index"
    index = gitindex.read(path)
    written = gitindex.write(path, gitindex.updated(index, {b"side/s.txt": None}))
    git(repo, "write-tree")
    again = gitindex.after_git(path, written)
    assert again.entries is written.entries and again.trees == gitindex.read(path).trees
    assert gitindex._parse_trees(again.trees).count >= 0


def test_a_damaged_cache_of_trees_is_dropped_not_trusted(tmp_path: Path) -> None:
    repo = _deep_repo(tmp_path, 3)
    index = gitindex.read(repo / ".git" / "index")
    for damage in (index.trees[:-3], index.trees + b"x", b"\0x y\n"):
        assert gitindex.updated(gitindex.Index(index.entries, damage), {b"side/s.txt": None}).trees is None


def test_an_empty_index_is_read_and_written(tmp_path: Path) -> None:
    written = gitindex.write(tmp_path / "idx", gitindex.Index([]))
    data = (tmp_path / "idx").read_bytes()
    assert len(data) == 32 and gitindex.parse(data) == gitindex.Index([], None, written.body)
    assert oct((tmp_path / "idx").stat().st_mode & 0o777) == "0o600"
    assert gitindex.checksum(tmp_path / "idx") == data[-20:].hex() and gitindex.checksum(tmp_path / "none") is None


def test_an_index_that_cannot_be_read_or_ends_inside_an_entry_is_unreadable(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(gitindex.Unreadable) as refused:
        gitindex.read(tmp_path)  # a directory
    assert str(refused.value).startswith(f"cannot read {tmp_path}: ")
    data = (repo / ".git" / "index").read_bytes()
    body = data[:-20]
    for cut in (63, 70):  # the last entry's stat data whole but its name cut, or its padding
        with pytest.raises(gitindex.Unreadable) as refused:
            gitindex.parse(_resum(body[:len(body) - (len(entries_of(repo)[-1].raw) - cut)]))
        assert str(refused.value) == "it ends inside an entry"


def test_an_index_in_the_middle_of_a_merge_is_unreadable_here(tmp_path: Path) -> None:
    root = tmp_path / "merge"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for key, value in (("user.name", "a"), ("user.email", "a@a")):
        git(root, "config", key, value)
    (root / "f").write_text("base\n")
    git(root, "add", "f")
    git(root, "commit", "-qm", "base")
    git(root, "checkout", "-qb", "other")
    (root / "f").write_text("other\n")
    git(root, "commit", "-qam", "other")
    git(root, "checkout", "-q", "main")
    (root / "f").write_text("main\n")
    git(root, "commit", "-qam", "main")
    subprocess.run(["git", "-C", str(root), "merge", "-q", "other"], capture_output=True)  # a conflict: stages 1-3
    with pytest.raises(gitindex.Unreadable) as refused:
        gitindex.read(root / ".git" / "index")
    assert str(refused.value) == "it holds an entry with a merge stage or extended flags"


def test_only_the_cache_of_trees_is_taken_among_the_optional_extensions(tmp_path: Path) -> None:
    repo = _deep_repo(tmp_path, 3)
    data = (repo / ".git" / "index").read_bytes()
    trees = gitindex.read(repo / ".git" / "index").trees
    other = b"ZZZZ" + (5).to_bytes(4, "big") + b"12345"
    before = _resum(data[:-20] + other)  # TREE, then another optional one
    after_ = gitindex.parse(before)
    assert after_.trees == trees and len(after_.entries) == len(gitindex.parse(data).entries)
    start = data.index(b"TREE")
    first = _resum(data[:start] + other + data[start:-20])  # another one first, then TREE
    assert gitindex.parse(first).trees == trees
    assert gitindex.parse(_resum(data[:start] + other)).trees is None


def test_what_is_written_holds_the_cache_of_trees_and_git_s_rewrite_is_checked(tmp_path: Path) -> None:
    repo = _deep_repo(tmp_path, 3)
    path = repo / ".git" / "index"
    index = gitindex.read(path)
    written = gitindex.write(path, gitindex.updated(index, {b"side/s.txt": None}))
    assert gitindex.read(path).trees == written.trees is not None
    # git changed the entries (another process added a file): the whole file is read again
    (repo / "new.txt").write_text("new\n")
    git(repo, "add", "new.txt")
    again = gitindex.after_git(path, written)
    assert b"new.txt" in [e.name for e in again.entries]
    (path).write_bytes(path.read_bytes()[:-1] + b"\0")  # damaged
    with pytest.raises(gitindex.Unreadable):
        gitindex.after_git(path, written)


def test_updating_an_index_without_a_cache_of_trees_keeps_none(repo: Path) -> None:
    index = gitindex.read(repo / ".git" / "index")
    assert index.trees is None
    assert gitindex.updated(index, {b"top.txt": None}).trees is None


def test_an_empty_directory_s_cache_round_trips_and_a_missing_subtree_is_no_error(tmp_path: Path) -> None:
    oid = b"\7" * 20
    data = b"\0" + b"0 1\n" + oid + b"sub\0" + b"0 0\n" + oid  # entry counts of 0 are valid: they have an id
    root = gitindex._parse_trees(data)
    assert root.count == 0 and root.oid == oid and root.down[0].count == 0 and root.down[0].oid == oid
    assert gitindex._serialise(root) == data
    changed = gitindex._invalidated(root, b"missing/deeper/file")  # no such subtree: only the root is invalid
    assert changed.count == -1 and changed.down[0].count == 0
    assert gitindex._serialise(changed) == b"\0-1 1\nsub\0" + b"0 0\n" + oid
    assert gitindex._serialise(root) == data  # a copy: the cache it came from is unchanged


def test_a_changed_name_that_is_a_cached_directory_removes_its_subtree(tmp_path: Path) -> None:
    repo = _deep_repo(tmp_path, 3)
    index = gitindex.read(repo / ".git" / "index")
    root = gitindex._parse_trees(gitindex.updated(index, {b"side": None}).trees)
    assert [d.name for d in root.down] == [b"d0"]  # `side` a file now (or gone): its cached tree goes


def test_adding_a_path_drops_only_files_named_like_its_directories(repo: Path) -> None:
    st = os.lstat(repo / "top.txt")
    old = [gitindex.entry(b"a", st, b"\1" * 20, 0), gitindex.entry(b"ab", st, b"\1" * 20, 0)]
    names = [e.name for e in gitindex.merged(old, {b"ab/c": gitindex.entry(b"ab/c", st, b"\2" * 20, 0)})]
    assert names == [b"a", b"ab/c"]


def _merged_by_rule(old: list, changes: dict) -> list:
    """git's rule for merged(), stated plainly: what each change removes, then every entry sorted."""
    files = {name for name, new in changes.items() if new is not None}

    def removed(name: bytes) -> bool:
        return name in changes or any(name.startswith(f + b"/") or f.startswith(name + b"/") for f in files)
    added = [e for e in changes.values() if e is not None and not any(e.name.startswith(f + b"/") for f in files)]
    return sorted([e for e in old if not removed(e.name)] + added, key=lambda e: e.name)


_PART = st.sampled_from([b"a", b"ab", b"a-b", b"b", b"c.txt", b"d0"])
_NAMES = st.lists(_PART, min_size=1, max_size=3).map(b"/".join)


@settings(max_examples=300, deadline=None)
@given(old_names=st.lists(_NAMES, max_size=12, unique=True), changed=st.dictionaries(_NAMES, st.booleans(), max_size=6),
       insert_up_to=st.sampled_from([0, 64]))
def test_merged_follows_the_rule_whether_it_inserts_or_sorts(old_names, changed, insert_up_to) -> None:
    stat_data = os.lstat(__file__)
    # A valid index: no name is a directory of another (the later name wins, as merged() itself would have it).
    old: list = []
    for name in sorted(old_names):
        old = gitindex.merged(old, {name: gitindex.entry(name, stat_data, b"\1" * 20, 0)})
    changes = {name: gitindex.entry(name, stat_data, b"\2" * 20, 0) if keep else None for name, keep in changed.items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gitindex, "_INSERT_UP_TO", insert_up_to)
        assert gitindex.merged(old, changes) == _merged_by_rule(old, changes)


# -- the trees computed here (updated with a store) are git's own ---------------------------------------------

_SEGMENT = st.sampled_from([b"a", b"a-b", b"a.c", b"b", b"d0", b"zz"])
_PATHS = st.lists(_SEGMENT, min_size=1, max_size=4).map(b"/".join)


def _valid(names: list[bytes]) -> list[bytes]:
    """The names a work tree can hold at once: none is a directory of another (the first one wins)."""
    kept: list[bytes] = []
    for name in names:
        if not any(name.startswith(k + b"/") or k.startswith(name + b"/") or k == name for k in kept):
            kept.append(name)
    return kept


def _blob(repo: Path, name: bytes, text: bytes) -> gitindex.Entry:
    oid = bytes.fromhex(git(repo, "hash-object", "-w", "--stdin", data=text).decode().strip())
    return gitindex.entry(name, os.lstat(repo / ".git" / "HEAD"), oid, later())  # the stat data does not matter here


@settings(max_examples=60, deadline=None)
@given(first=st.lists(_PATHS, min_size=1, max_size=14), changed=st.lists(_PATHS, max_size=6),
       removed=st.integers(0, 3), budget=st.sampled_from([1, 2, 1024]))
def test_trees_computed_from_the_cache_are_git_s_write_tree(tmp_path_factory, first, changed, removed, budget) -> None:
    """A later snapshot's trees, computed here from git's cache of trees and the changed entries, against
    git's write-tree of the same entries with no cache: the same root, and byte for byte the same cache."""
    repo = tmp_path_factory.mktemp("trees")
    git(repo, "init", "-q")
    index_file = repo / ".git" / "index"
    start = [_blob(repo, name, b"v1 " + name) for name in sorted(_valid(first))]
    gitindex.write(index_file, gitindex.Index(start))
    git(repo, "write-tree")  # git adds its cache of trees
    cached = gitindex.read(index_file)
    assert cached.trees is not None
    changes: dict[bytes, gitindex.Entry | None] = {e.name: None for e in start[:removed]}
    changes.update({name: _blob(repo, name, b"v2 " + name) for name in _valid(changed)})
    store = lambda body: bytes.fromhex(git(repo, "hash-object", "-w", "-t", "tree", "--stdin", data=body).decode().strip())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gitindex, "BUILD_UP_TO", budget)  # 1 and 2: the computation stops part-way
        ours = gitindex.updated(cached, changes, store)
        # A later snapshot starts from the trees this one parsed and computed, which stay as they were.
        assert ours.root is not None and gitindex._serialise(ours.root) == ours.trees
        again = gitindex.updated(ours, {name: None for name in _valid(changed)[:1]}, store)
        assert gitindex._serialise(ours.root) == ours.trees
    _check_against_write_tree(repo, index_file, again, budget)
    _check_against_write_tree(repo, index_file, ours, budget)


def _check_against_write_tree(repo: Path, index_file: Path, ours: gitindex.Index, budget: int) -> None:
    theirs_file = repo / "theirs"
    gitindex.write(theirs_file, gitindex.Index(ours.entries))
    env_index = {"GIT_INDEX_FILE": str(theirs_file)}
    theirs_root = subprocess.run(["git", "-C", str(repo), "write-tree"], env={**os.environ, **env_index},
                                 capture_output=True, check=True).stdout.decode().strip()
    root = gitindex.root_tree(ours)
    if root is not None:  # every tree computed
        assert root == theirs_root
        assert ours.trees == gitindex.read(theirs_file).trees
    else:  # stopped part-way: git's write-tree finishes from what was computed, to the same tree
        assert budget < 1024
        gitindex.write(index_file, ours)
        assert git(repo, "write-tree").decode().strip() == theirs_root

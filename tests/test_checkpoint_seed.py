"""Issue 34: the first snapshot of a git workspace takes what the repository's own index and packs
already know (abhed/session/seed.py), and hashes only what it cannot trust.

Judged by what undo writes back (bytes and modes on disk) and by the snapshot's tree compared with
the tree of a first snapshot that trusted nothing (every file read and hashed): the two must be
the same object, whatever the repository's index says.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from hashlib import sha1
from pathlib import Path

import pytest

from abhed.session import checkpoint, gitindex, seed
from abhed.session.checkpoint import Shadow

GIT_ENV = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent",
           "LC_ALL": "C", "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "Dev",
           "GIT_COMMITTER_EMAIL": "dev@example.com"}


@pytest.fixture(autouse=True)
def no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The user's and the system's git config are read by seed.configs_convert: none here."""
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nohome"))
    monkeypatch.setattr(seed, "_read_host", lambda path: None)


@pytest.fixture(autouse=True)
def settled_ctimes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose ctime is within gitindex.RACY_S of a snapshot is made to be read again by the next
    one (git's whole-second compare could miss a change): in real use the repository's files are older
    than that; these tests make them a moment before the snapshot, so the margin is taken away (every
    change they make changes a size or a mode, which git sees in any second)."""
    monkeypatch.setattr(gitindex, "RACY_S", -10)


def git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True,
                          env=GIT_ENV).stdout


def age(ws: Path, seconds: int = 100) -> None:
    """Every work-tree file written just now, as if written `seconds` ago: not racily clean when the
    index is written now. (Only those: a file's ctime changes again, and Debian's git compares whole
    seconds, so it would not record the new nanoseconds that seed.py compares.)"""
    then = time.time() - seconds
    for directory, dirs, files in os.walk(ws):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = os.path.join(directory, name)
            if os.lstat(path).st_mtime > then + seconds / 2:
                os.utime(path, (then, then), follow_symlinks=False)


def repository(ws: Path, *, init: tuple[str, ...] = ()) -> None:
    """A committed, packed repository with an index whose stat data matches the work tree."""
    ws.mkdir(exist_ok=True)
    (ws / "src" / "lib").mkdir(parents=True)
    (ws / "src" / "lib" / "a.py").write_bytes(b"def a():\n    return 1\n")
    (ws / "src" / "lib" / "data.bin").write_bytes(bytes(range(256)) * 4)
    (ws / "src" / "secret.txt").write_text("keep me private\n")
    (ws / "src" / "secret.txt").chmod(0o600)
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "notes.md").write_text("line 1\nline 2\n")
    (ws / "link").symlink_to("src/lib/a.py")
    git(ws, "init", "-q", "-b", "main", *init)
    commit(ws)


def commit(ws: Path) -> None:
    age(ws)
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "work")
    git(ws, "gc", "-q")
    git(ws, "status", "--porcelain")  # refreshes the index: its stat data is the work tree's


def first(home: Path, ws: Path, *, trusted: bool = True, **kw) -> tuple[Shadow, object, object]:
    """The first snapshot of `ws` in a store under `home`; `trusted` False: as if the repository's index
    had changed during the session (nothing taken from it)."""
    shadow = Shadow(home, ws, **kw)
    if not trusted:
        shadow.started_ns = 0
    snapshot, capture = shadow.snapshot("s1", "before", {"call": "c1", "tool": "bash"})
    return shadow, snapshot, capture


def taken(shadow: Shadow) -> int:
    """How many blobs the first snapshot did not store itself (they are the repository's)."""
    index = gitindex.read(shadow.git_dir / "index")
    objects = shadow.git_dir / "objects"
    return sum(not (objects / e.oid.hex()[:2] / e.oid.hex()[2:]).exists() for e in index.entries)


def same_as_hashing(tmp_path: Path, ws: Path, **kw) -> tuple[Shadow, object]:
    """The seeded first snapshot, checked against one that trusted nothing: the same tree and modes."""
    shadow, snap, capture = first(tmp_path / "home", ws, **kw)
    _, plain, plain_capture = first(tmp_path / "plain", ws, trusted=False, **kw)
    assert (snap.tree, snap.modes_blob) == (plain.tree, plain.modes_blob)
    assert sorted(capture.not_covered) == sorted(plain_capture.not_covered)
    return shadow, snap


def undo_to(shadow: Shadow, number: int = 1, session: str = "s1") -> None:
    with shadow.locked():
        shadow.apply(shadow.plan_undo(session, number))


def test_the_first_snapshot_takes_the_repository_s_blobs_and_undo_restores_them(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    shadow, snap = same_as_hashing(tmp_path, ws)
    assert snap.tree == git(ws, "rev-parse", "HEAD^{tree}").strip()
    assert taken(shadow) == 6  # every file and the symlink: none was read and hashed
    assert list((shadow.dir / seed.PACKS / "pack").glob("pack-*.pack"))
    before = {p: (p.read_bytes(), stat.S_IMODE(p.lstat().st_mode)) for p in ws.rglob("*")
              if p.is_file() and ".git" not in p.parts}
    (ws / "src" / "lib" / "a.py").write_text("broken\n")
    (ws / "src" / "secret.txt").unlink()
    (ws / "run.sh").chmod(0o644)
    undo_to(shadow)
    after = {p: (p.read_bytes(), stat.S_IMODE(p.lstat().st_mode)) for p in ws.rglob("*")
             if p.is_file() and ".git" not in p.parts}
    assert after == before
    assert after[ws / "src" / "secret.txt"][1] == 0o600


def test_undo_reads_the_repository_s_blobs_after_the_user_s_gc_removed_its_pack(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    shadow, _, _ = first(tmp_path / "home", ws)
    original = (ws / "src" / "lib" / "data.bin").read_bytes()
    # The user rewrites history and collects: the blob of data.bin is in no pack of the repository any more.
    (ws / "src" / "lib" / "data.bin").write_bytes(b"new\n")
    git(ws, "commit", "-qam", "amend", "--amend")
    git(ws, "reflog", "expire", "--expire=now", "--all")
    git(ws, "gc", "-q", "--prune=now")
    old = sha1(b"blob %d\0" % len(original) + original).hexdigest()
    assert subprocess.run(["git", "-C", str(ws), "cat-file", "-e", old], env=GIT_ENV).returncode != 0
    undo_to(shadow)
    assert (ws / "src" / "lib" / "data.bin").read_bytes() == original


def crafted_index(ws: Path, victim: bytes, donor: bytes) -> None:
    """Rewrite .git/index so that `victim`'s entry (its real stat data) names `donor`'s blob."""
    data = (ws / ".git" / "index").read_bytes()
    _version, entries = seed.parse_index(data)
    oids = {name: oid for name, _f, oid, _u, _r in entries}
    raw = next(r for name, _f, _o, _u, r in entries if name == victim)
    at = data.index(raw)
    data = data[:at + 40] + oids[donor] + data[at + 60:-20]
    (ws / ".git" / "index").write_bytes(data + sha1(data).digest())


def test_an_index_a_model_crafted_during_the_session_is_not_trusted(tmp_path: Path) -> None:
    """The attack: a sandboxed command pairs a.py's real stat with another file's blob id in .git/index,
    so that the first checkpoint would record the wrong content and undo restore the wrong bytes."""
    ws = tmp_path / "ws"
    repository(ws)
    shadow = Shadow(tmp_path / "home", ws)  # the session starts
    crafted_index(ws, b"src/lib/a.py", b"notes.md")  # ... and then the model writes the index
    shadow.snapshot("s1", "before", {"call": "c1", "tool": "bash"})
    real = (ws / "src" / "lib" / "a.py").read_bytes()
    (ws / "src" / "lib" / "a.py").write_text("the model's change\n")
    undo_to(shadow)
    assert (ws / "src" / "lib" / "a.py").read_bytes() == real
    assert taken(shadow) == 0  # nothing was taken from an index changed during the session


def test_a_racily_clean_entry_is_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git's racy-clean rule: a file whose mtime is not older than the index may have changed unseen."""
    ws = tmp_path / "ws"
    repository(ws)
    crafted_index(ws, b"src/lib/a.py", b"notes.md")  # stands for a change git could not see
    index = ws / ".git" / "index"
    mtime = (ws / "src" / "lib" / "a.py").lstat().st_mtime_ns
    os.utime(index, ns=(mtime, mtime))  # written in the same second as a.py: racily clean
    shadow, snap, _ = first(tmp_path / "home", ws)
    assert git(ws, "hash-object", "src/lib/a.py").strip() in shadow.git("ls-tree", "-r", snap.tree).decode()


@pytest.mark.parametrize("setup", ["index v4", "index v3 with skip-worktree and intent-to-add", "split index",
                                   "sparse checkout", "sha256", "assume-unchanged"])
def test_every_index_form_ends_as_hashing_everything_would(tmp_path: Path, setup: str) -> None:
    ws = tmp_path / "ws"
    repository(ws, init=("--object-format=sha256",) if setup == "sha256" else ())
    if setup == "index v4":
        git(ws, "update-index", "--index-version", "4")
    elif setup.startswith("index v3"):
        (ws / "empty").write_bytes(b"")
        commit(ws)  # the empty blob in a pack: an intent-to-add entry names it, with its file's real stat
        git(ws, "update-index", "--skip-worktree", "notes.md")
        (ws / "notes.md").write_text("changed behind skip-worktree\n")
        (ws / "new.txt").write_text("new\n")
        git(ws, "add", "-N", "new.txt")
    elif setup == "split index":
        git(ws, "update-index", "--split-index")
    elif setup == "sparse checkout":
        git(ws, "sparse-checkout", "set", "--no-cone", "/src/")
    elif setup == "assume-unchanged":
        git(ws, "update-index", "--assume-unchanged", "notes.md")
        (ws / "notes.md").write_text("changed behind assume-unchanged\n")
    shadow, _snap = same_as_hashing(tmp_path, ws)
    expected = {"index v4": 6, "index v3 with skip-worktree and intent-to-add": 6, "split index": 0,
                "sparse checkout": 3, "sha256": 0, "assume-unchanged": 5}[setup]
    assert taken(shadow) == expected


@pytest.mark.parametrize("how", [".gitattributes eol", "info/attributes", "autocrlf", "macro"])
def test_bytes_that_git_converts_are_hashed_as_they_are(tmp_path: Path, how: str) -> None:
    """A file git converts (eol, a filter) has other bytes in the index than on disk: the store keeps the disk's."""
    ws = tmp_path / "ws"
    repository(ws)
    (ws / "src" / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    if how == ".gitattributes eol":
        (ws / "src" / ".gitattributes").write_text("*.txt text eol=crlf\n")
    elif how == "info/attributes":
        (ws / ".git" / "info").mkdir(exist_ok=True)
        (ws / ".git" / "info" / "attributes").write_text("*.txt text\n")
    elif how == "autocrlf":
        git(ws, "config", "core.autocrlf", "true")
    else:
        (ws / ".gitattributes").write_text("[attr]crlf-text text eol=crlf\n*.txt crlf-text\n")
    commit(ws)
    assert b"\r" not in subprocess.run(["git", "-C", str(ws), "show", "HEAD:src/crlf.txt"], capture_output=True,
                                       env=GIT_ENV).stdout  # the index's blob differs from the file
    shadow, snap = same_as_hashing(tmp_path, ws)
    (ws / "src" / "crlf.txt").write_text("changed\n")
    undo_to(shadow)
    assert (ws / "src" / "crlf.txt").read_bytes() == b"one\r\ntwo\r\n"
    if how == ".gitattributes eol":
        assert taken(shadow) > 0  # only the directory the attributes file governs is hashed


def test_nested_repositories_submodules_and_exclusions_end_as_hashing_everything_would(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    (ws / "vendor").mkdir()
    (ws / "vendor" / "x.c").write_text("int x;\n")
    commit(ws)
    git(ws / "vendor", "init", "-q")  # the tracked directory is a nested repository now
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "s.txt").write_text("sub\n")
    git(sub, "init", "-q")
    git(sub, "add", "-A")
    git(sub, "commit", "-qm", "sub")
    git(ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "mod")
    commit(ws)
    shadow, snap = same_as_hashing(tmp_path, ws, exclude=("src/secret.txt",))
    listing = shadow.git("ls-tree", "-r", "--name-only", snap.tree).decode().split()
    assert "vendor/x.c" not in listing and "src/secret.txt" not in listing and "mod" not in listing
    assert "src/lib/a.py" in listing and taken(shadow) > 0


def test_the_untracked_listing_starts_before_the_exclusions_and_finds_what_it_would_after_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded index is written once without its trees; git lists the untracked files from then on, on
    the other core, while the exclusions take tracked entries out and the trees are made. An entry taken
    out matches info/exclude, which the listing reads too: listed before or after, it is left out."""
    ws = tmp_path / "ws"
    repository(ws)
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"tracked, excluded\n")
    (ws / ".gitignore").write_text("*.tmp\n")
    commit(ws)
    (ws / "build" / "new.o").write_bytes(b"untracked, excluded\n")
    (ws / "build" / "out.o").write_bytes(b"tracked, excluded, changed\n")
    (ws / "src" / "gen.tmp").write_text("ignored\n")
    (ws / "new.txt").write_text("untracked\n")
    order: list[str] = []
    real_start, real_trees, real_git = checkpoint._Early.start, seed.trees_of, Shadow.git
    monkeypatch.setattr(checkpoint._Early, "start", lambda self: (order.append(" ".join(self._command)), real_start(self)))
    monkeypatch.setattr(seed, "trees_of", lambda entries: (order.append("trees"), real_trees(entries))[1])
    def git(self, *args, **kw):
        if args == Shadow.OTHERS_LISTING:
            order.append("listed")
        return real_git(self, *args, **kw)
    monkeypatch.setattr(Shadow, "git", git)
    shadow, snap = same_as_hashing(tmp_path, ws, exclude=("build",))
    listing = shadow.git("ls-tree", "-r", "--name-only", snap.tree).decode().split()
    assert "new.txt" in listing and "src/lib/a.py" in listing and taken(shadow) > 0
    assert not [name for name in listing if name.startswith("build/") or name.endswith(".tmp")]
    others = " ".join(Shadow.OTHERS_LISTING)
    # Each snapshot starts it before the trees and runs it once: the plain one takes nothing from the
    # index it does not trust, but the index still names the tracked files, which it then writes by name.
    halves = ([others, "listed", "trees"], [others, "trees", "listed"])
    assert order[:3] in halves and order[3:] in halves, order


def test_the_census_vouches_for_a_file_only_while_no_change_names_it_or_a_directory_above_it() -> None:
    """seed.Census: the sandbox start's lstat's (sandbox.census), and the change set's named paths."""
    st = os.lstat(__file__)
    linked = os.stat_result((st.st_mode, st.st_ino, st.st_dev, 2, st.st_uid, st.st_gid, st.st_size, 0, 0, 0))
    dirs = {"": {"top.c": st}, "a": {"x.c": st, "y.c": st, "l.c": linked}, "a/b": {"z.c": st}, "c": {"w.c": st}}
    census = seed.Census(dirs, {"a/y.c", "a/b", "c/new.c"})
    assert census.stat(b"top.c", b"", b"top.c") is st and census.stat(b"a/x.c", b"a", b"x.c") is st
    assert census.stat(b"c/w.c", b"c", b"w.c") is st  # another name in its directory was named, not it
    assert census.stat(b"a/y.c", b"a", b"y.c") is None  # named
    assert census.stat(b"a/b/z.c", b"a/b", b"z.c") is None  # its directory named (replaced, say)
    assert census.stat(b"a/l.c", b"a", b"l.c") is None  # a write through its other name names only that one
    assert census.stat(b"a/none.c", b"a", b"none.c") is None and census.stat(b"d/x.c", b"d", b"x.c") is None
    assert seed.Census(dirs, {"a"}).stat(b"a/b/z.c", b"a/b", b"z.c") is None  # a directory further up
    assert seed.Census(dirs, {""}).stat(b"top.c", b"", b"top.c") is None  # the root itself


def test_the_census_vouches_for_no_directory_of_a_nested_repository() -> None:
    """A directory holding a .git, or below one, as the walk found it or as the change set names one made
    since: nothing there is vouched for (the seed opens it and refuses it: seed.Seeder._open_dir)."""
    st = os.lstat(__file__)
    dirs = {"": {"top.c": st, ".git": st}, "n": {".git": st, "x.c": st}, "n/d": {"y.c": st},
            "a": {"x.c": st}, "a/b": {"z.c": st}, "c": {"w.c": st}}
    census = seed.Census(dirs, {"a/b/.git"})
    assert census.stat(b"top.c", b"", b"top.c") is st  # the root's own .git is the repository's
    assert census.stat(b"n/x.c", b"n", b"x.c") is None and census.stat(b"n/d/y.c", b"n/d", b"y.c") is None
    assert census.stat(b"a/b/z.c", b"a/b", b"z.c") is None  # a .git made there since
    assert census.stat(b"a/x.c", b"a", b"x.c") is st and census.stat(b"c/w.c", b"c", b"w.c") is st


def test_a_first_snapshot_that_hashed_many_files_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Shadow, "FIRST_NOTE_FILES", 5)
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(7):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    _, _, capture = first(tmp_path / "home", ws)
    assert "first checkpoint of this workspace read and hashed 7 files" in capture.first
    assert "later ones only read what changed" in capture.first
    assert "the workspace is no git repository" in capture.first  # why: no index to take them from
    repo = tmp_path / "repo"
    repository(repo)
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    _, _, capture = first(tmp_path / "home2", repo)
    assert capture.first == ""  # 3 untracked files read: under the bar; the 6 taken are not counted


def test_trees_of_names_that_sort_differently_in_a_tree_than_in_the_index(tmp_path: Path) -> None:
    """git orders a directory's entries as if a subdirectory's name ended in "/": a-b, a.c, a/, a0."""
    ws = tmp_path / "ws"
    repository(ws)
    for name in ("a-b", "a.c", "a0", "a/b-c/d", "a/b/c", "a/b.x", "z/y/x/w"):
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(name)
    commit(ws)
    shadow, snap = same_as_hashing(tmp_path, ws)
    assert snap.tree == git(ws, "rev-parse", "HEAD^{tree}").strip()
    assert taken(shadow) == 13
    # The index's cache of trees (ids, and the entry counts git relies on) is git's own: git's read-tree
    # of the same tree writes it afresh (its subtrees in another order, shorter names first).
    env = {**GIT_ENV, "GIT_INDEX_FILE": str(tmp_path / "git-index")}
    subprocess.run(["git", "--git-dir", str(shadow.git_dir), "read-tree", snap.tree], check=True, env=env)
    ours, gits = (cached_trees(path) for path in (shadow.git_dir / "index", tmp_path / "git-index"))
    assert ours == gits and len(ours) == 9 and ours[b""][0] == 13


def cached_trees(index: Path) -> dict[bytes, tuple[int, bytes | None]]:
    """An index's cache of trees: each directory's path, its entry count and tree id."""
    trees = gitindex.read(index).trees
    assert trees is not None
    found, walk = {}, [(b"", gitindex._parse_trees(trees))]
    while walk:
        path, node = walk.pop()
        found[path] = (node.count, node.oid)
        walk += [(path + b"/" + down.name if path else down.name, down) for down in node.down]
    return found
    assert shadow.git("fsck", "--connectivity-only", "--no-dangling", check=False).count(b"missing tree") == 0


def test_a_write_call_whose_first_checkpoint_hashed_many_files_says_so_in_its_result(
        ws: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from abhed.session import checkpoint
    from abhed_testing import Tools
    monkeypatch.setattr(Shadow, "FIRST_NOTE_FILES", 3)
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    t = Tools(ws, home)
    t.ctx.checkpoints = checkpoint.Checkpoints(Shadow(home, ws))
    first_result = t.ok("write", path=str(ws / "new.txt"), content="n")
    assert "[Abhed: the first checkpoint of this workspace read and hashed 4 files in" in first_result
    assert "later ones only read what changed" in first_result
    assert "first checkpoint" not in t.ok("write", path=str(ws / "new2.txt"), content="n")


def test_only_a_large_pack_is_linked_so_the_sandbox_copies_nothing_of_the_repository_apart(tmp_path: Path) -> None:
    """sandbox.hardlinks copies apart every workspace file with a name outside the workspace (a store's
    link is one) at each session's start, but binds a large pack read-only: small packs and every .idx
    are copied into the store, so the repository's files keep one name."""
    ws = tmp_path / "ws"
    repository(ws)
    first(tmp_path / "home", ws)
    assert [p.stat().st_nlink for p in (ws / ".git" / "objects" / "pack").glob("pack-*")] == [1, 1]


def test_linked_packs_count_against_the_store_cap_only_once_the_repository_dropped_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from abhed.session import collect
    monkeypatch.setattr(seed, "BIND_MIN_BYTES", 0)  # this small pack linked as a large one would be
    ws = tmp_path / "ws"
    repository(ws)
    shadow, _, _ = first(tmp_path / "home", ws)
    assert max(p.stat().st_nlink for p in (ws / ".git" / "objects" / "pack").glob("pack-*.pack")) == 2
    shared = collect.measure(shadow)
    packs = list((ws / ".git" / "objects" / "pack").glob("pack-*"))
    size = sum(p.stat().st_size for p in packs if p.suffix in (".pack", ".idx"))
    for pack in packs:
        pack.chmod(0o644)
        pack.unlink()  # the user's gc replaced them: the store's links are the last ones
    assert collect.measure(shadow) >= shared + size


def test_an_index_written_since_the_session_began_in_an_earlier_process_is_not_trusted(
        tmp_path: Path, home: Path) -> None:
    """`abhed tool` runs each call in a process of its own: a call that ran without its checkpoint (a
    human allowed it) may have written the index before the process of the next call started."""
    from abhed.session import checkpoint
    from abhed_testing import Tools
    ws = tmp_path / "ws"
    repository(ws)
    t = Tools(ws, home)  # the session begins
    crafted_index(ws, b"src/lib/a.py", b"notes.md")  # a call of it, run without a checkpoint
    real = (ws / "src" / "lib" / "a.py").read_bytes()
    t.ctx.checkpoints = checkpoint.Checkpoints(Shadow(home, ws))  # the next call's process
    t.ok("read", path=str(ws / "src" / "lib" / "a.py"))
    t.ok("write", path=str(ws / "src" / "lib" / "a.py"), content="the model's change\n")
    undo_to(t.ctx.checkpoints.shadow, session=t.session.id)
    assert (ws / "src" / "lib" / "a.py").read_bytes() == real


def test_undo_reads_the_store_s_own_object_first_and_a_linked_pack_only_for_what_the_store_lacks() -> None:
    """git would look in every pack before the loose objects: a linked pack must never override a blob
    Abhed hashed itself, so seed.Reader asks the store first."""
    from contextlib import contextmanager
    from abhed.session import gitobjects

    class Store:
        def blob(self, oid: str) -> bytes:
            if oid == "own":
                return b"the store's bytes"
            raise gitobjects.Missing(oid)

    class Packs:
        def blob(self, oid: str) -> bytes:
            return b"the pack's bytes"

    @contextmanager
    def packs():
        yield Packs()
    reader = seed.Reader(Store(), packs())
    assert reader.blob("own") == b"the store's bytes"
    assert reader.blob("taken") == b"the pack's bytes"
    reader.close()
    with pytest.raises(gitobjects.Missing):
        seed.Reader(Store(), None).blob("taken")


def test_a_seeded_first_snapshot_hands_git_no_workspace_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As tests/test_checkpoint_races.py's rule: listing, tree and object plumbing only; the one addition,
    index-pack, reads the store's own pack of trees."""
    from abhed.session import checkpoint
    ws = tmp_path / "ws"
    repository(ws)
    seen: list[tuple[str, ...]] = []
    real = checkpoint.hostproc.run
    monkeypatch.setattr(checkpoint.hostproc, "run", lambda argv, **kw: seen.append(tuple(argv)) or real(argv, **kw))
    shadow, _, _ = first(tmp_path / "home", ws)
    commands = {next(a for a in argv[1:] if not a.startswith("-") and "=" not in a) for argv in seen}
    assert commands <= {"init", "diff-files", "ls-files", "write-tree", "index-pack", "cat-file", "log",
                        "for-each-ref", "count-objects"}, commands
    packs = [argv[-1] for argv in seen if "index-pack" in argv]
    assert packs and all(Path(p).is_relative_to(shadow.git_dir / "objects" / "pack") for p in packs)


def test_a_later_session_s_first_bash_call_says_nothing_of_the_store_s_own_pack_links(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's repo-packs links (made by the first snapshot) are Abhed's own: the sandbox's hard-link
    check of every later session leaves them out of its note (still bound read-only); a link of the
    user's to a file outside is still told."""
    from abhed.gate.approval import Gate, Policy
    from abhed.session import checkpoint
    from abhed_testing import Tools
    from sandbox import hardlinks
    monkeypatch.setattr(seed, "BIND_MIN_BYTES", 0)  # this small pack linked, and bound, as a large one would be
    monkeypatch.setattr(hardlinks, "BIND_MIN_BYTES", 0)
    ws = tmp_path / "ws"
    repository(ws)

    def session() -> str:
        t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws), invoked_by_human=True, confirmed=True))
        t.ctx.checkpoints = checkpoint.from_settings(t.settings, ws)
        try:
            return t.ok("bash", command="echo ran | tee -a out.txt", description="x")
        finally:
            t.ctx.close()

    assert "ran" in session()  # the first snapshot links the pack into the store
    pack = max((ws / ".git" / "objects" / "pack").glob("pack-*.pack"), key=lambda p: p.stat().st_size)
    assert pack.stat().st_nlink == 2
    told = session()
    assert "shared hard links" not in told, told
    assert pack.stat().st_nlink == 2  # bound read-only, not copied apart
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's\n")
    os.link(outside, ws / "linked.txt")
    told = session()
    assert "1 file in the workspace shared hard links with files outside it (e.g. linked.txt" in told, told


def test_a_first_snapshot_captures_the_repository_s_state_beside_the_seed_and_raises_what_that_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """repostate's capture runs in its own thread from the snapshot's start (checkpoint._RepoBeside); a later
    snapshot runs it in the caller's thread; what it raised reaches the caller as it was."""
    import threading

    from abhed.session import repostate
    ws = tmp_path / "ws"
    repository(ws)
    threads: list[str] = []
    real = repostate.RepoState.capture
    def capture(self, tree, *args):
        threads.append(threading.current_thread().name)
        return real(self, tree, *args)
    monkeypatch.setattr(repostate.RepoState, "capture", capture)
    shadow, snapshot, _ = first(tmp_path / "home", ws)
    assert threads == ["abhed-repo-state"] and snapshot.repo
    shadow.snapshot("s1", "after", {"call": "c1", "tool": "bash", "number": 1})
    assert threads[1:] == [threading.current_thread().name]
    def fails(self, tree, *args):
        raise checkpoint.CheckpointError("the repository's state could not be read (a test)")
    monkeypatch.setattr(repostate.RepoState, "capture", fails)
    with pytest.raises(checkpoint.CheckpointError, match="could not be read"):
        first(tmp_path / "home2", ws)


@pytest.mark.parametrize("trusted", [True, False])
def test_an_index_crafted_before_the_session_takes_nothing_under_git_and_no_fifo(tmp_path: Path, trusted: bool) -> None:
    """A hostile repository ships (or a tool wrote before the session) an index whose extra entries carry
    the exact stat of `.git/HEAD` and of a FIFO, each naming a blob it has: matching stat data must not
    make the snapshot hold a file of .git (undo would write there) nor take a FIFO for a file. Nor may
    the names alone, read from an index not trusted (written during the session): names of .git are
    no tracked files to read."""
    ws = tmp_path / "ws"
    repository(ws)
    os.mkfifo(ws / "pipe")
    then = time.time_ns() - 100 * 1_000_000_000
    os.utime(ws / "pipe", ns=(then, then))
    os.utime(ws / ".git" / "HEAD", ns=(then, then))
    index = ws / ".git" / "index"
    _version, parsed = seed.parse_index(index.read_bytes())
    entries = {name: gitindex.Entry(name, f[6], oid, raw) for name, f, oid, _u, raw in parsed}
    donor = entries[b"notes.md"].oid
    for name, path in ((b".git/HEAD", ws / ".git" / "HEAD"), (b"pipe", ws / "pipe")):
        entries[name] = gitindex.entry(name, os.lstat(path), donor, time.time() + 1000)  # (not made racily clean)
    # notes.md twice: once as it is (taken), once with another's stat (not taken); git reads no such index
    twice = gitindex.entry(b"notes.md", os.lstat(ws / "run.sh"), donor, time.time() + 1000)
    gitindex.write(index, gitindex.Index(sorted([*entries.values(), twice], key=lambda e: e.name)))
    shadow, snap, capture = first(tmp_path / "home", ws, trusted=trusted)
    listing = shadow.git("ls-tree", "-r", "--name-only", snap.tree).decode().split()
    assert ".git/HEAD" not in listing and "pipe" not in listing and "notes.md" in listing
    assert any(line.startswith("pipe (") for line in capture.not_covered)  # named: a FIFO has no content to keep
    assert taken(shadow) == (6 if trusted else 0)  # the rest was taken, or nothing from an index not trusted


@pytest.mark.parametrize("trusted", [True, False])
def test_a_tracked_file_a_gitignore_names_is_covered_changed_or_not(tmp_path: Path, trusted: bool) -> None:
    """A file tracked with `git add -f` though a .gitignore names it is the repository's own content.
    Changed before the session, the seed cannot take it, and git's listing of untracked files leaves
    it out (ignored): it went uncovered without a word, and undo could not bring it back."""
    ws = tmp_path / "ws"
    repository(ws)
    (ws / ".gitignore").write_text("*.o\nbuild/\n")
    (ws / "x.o").write_bytes(b"tracked though ignored\n")
    (ws / "build").mkdir()
    (ws / "build" / "keep.txt").write_text("tracked in an ignored directory\n")
    (ws / "build" / "gone.txt").write_text("tracked, then deleted\n")
    (ws / "y.o").write_bytes(b"tracked, unchanged\n")
    (ws / "z.o").write_bytes(b"tracked\n")
    commit(ws)
    git(ws, "add", "-f", "x.o", "y.o", "z.o", "build/keep.txt", "build/gone.txt")
    commit(ws)
    (ws / "x.o").write_bytes(b"changed before the session\n")
    (ws / "z.o").write_bytes(b"changed, excluded\n")
    (ws / "build" / "keep.txt").write_text("changed too\n")
    (ws / "build" / "gone.txt").unlink()
    (ws / "build" / "untracked.txt").write_text("ignored and untracked: left out\n")
    shadow, snap, capture = first(tmp_path / "home", ws, trusted=trusted, exclude=("y.o", "z.o"))
    listing = shadow.git("ls-tree", "-r", "--name-only", snap.tree).decode().split()
    assert {"x.o", "build/keep.txt", "src/lib/a.py"} <= set(listing)
    assert "build/untracked.txt" not in listing and "build/gone.txt" not in listing
    assert "y.o" not in listing and "z.o" not in listing  # checkpoints.exclude still leaves a tracked file out
    assert capture.not_covered == []
    (ws / "x.o").write_bytes(b"the model's change\n")
    (ws / "build" / "keep.txt").unlink()
    undo_to(shadow)
    assert (ws / "x.o").read_bytes() == b"changed before the session\n"
    assert (ws / "build" / "keep.txt").read_text() == "changed too\n"
    assert not (ws / "build" / "gone.txt").exists()


def test_only_the_packs_that_hold_a_blob_taken_are_linked_into_the_store(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    (tmp_path / "stray").write_text("in no file of the work tree\n")
    stray = git(ws, "hash-object", "-w", str(tmp_path / "stray")).strip()
    subprocess.run(["git", "-C", str(ws), "pack-objects", "-q", ".git/objects/pack/pack"], input=f"{stray}\n",
                   text=True, check=True, capture_output=True, env=GIT_ENV)
    assert len(list((ws / ".git" / "objects" / "pack").glob("*.pack"))) == 2
    shadow, _snap, _capture = first(tmp_path / "home", ws)
    linked = list((shadow.dir / seed.PACKS / "pack").glob("*.pack"))
    assert len(linked) == 1 and stray.encode() not in subprocess.run(
        ["git", "show-index"], stdin=linked[0].with_suffix(".idx").open("rb"), capture_output=True).stdout


@pytest.mark.parametrize("crafted", [b"/notes.md", b"src//lib/a.py"])
def test_an_index_entry_with_an_empty_name_component_is_not_taken(tmp_path: Path, crafted: bytes) -> None:
    """A hostile repository's index names a file with a leading or doubled slash, with that file's real
    stat: taken, it would be a second root entry of the same name (or a directory with no name), and
    the first snapshot would fail, leaving every call without a checkpoint."""
    ws = tmp_path / "ws"
    repository(ws)
    index = ws / ".git" / "index"
    entries = {e.name: e for e in gitindex.read(index).entries}
    real = entries[crafted.replace(b"//", b"/").lstrip(b"/")]
    entries[crafted] = gitindex.Entry(crafted, real.mode, real.oid, real.raw[:62] + crafted + b"\0" * (8 - (62 + len(crafted)) % 8))
    gitindex.write(index, gitindex.Index(sorted(entries.values(), key=lambda e: e.name)))
    shadow, snap, _capture = first(tmp_path / "home", ws)
    names = shadow.git("ls-tree", "-r", "--name-only", snap.tree).decode().split("\n")
    assert names.count("notes.md") == 1 and "src/lib/a.py" in names
    listed = shadow.git("ls-tree", snap.tree, "notes.md").decode().split()
    assert listed[2] == git(ws, "hash-object", "notes.md").strip()  # its real content

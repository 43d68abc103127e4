"""Later snapshots from the git guard's change set (issue 34; abhed/session/changeset.py).

Each case runs real bash calls in the real sandbox through dispatch, as the agent does, after a
first call that sets the base. It judges by what the host has: the snapshot taken from the change
set must be the tree a full listing gives (the same shadow index, captured again in full), and
`undo` must put the workspace back. Each of inotify's blind spots is made the way it happens -- a
write through mmap from a sandboxed command, one from a background job whose mapping outlives
the call, an event queue overflow, the human's edit between calls (by write and by mmap), another
process writing the shadow index -- and must fall back to something complete.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import time
from pathlib import Path

import pytest

from abhed.agent.dispatch import changes_of
from abhed.gate.approval import Gate, Policy
from abhed.session import checkpoint, gitindex
from abhed.session.checkpoint import Checkpoints, Shadow, UndoRefused
from abhed.session.undo import undo
from abhed_testing import Tools

def state(ws: Path) -> dict[str, object]:
    """Every entry of the work tree but .git and Abhed's own: its kind, mode and content."""
    found: dict[str, object] = {}
    for top, dirs, files in os.walk(ws):
        rel = os.path.relpath(top, ws)
        dirs[:] = [d for d in dirs if not (rel == "." and d in (".git", ".abhed"))]
        for name in dirs + files:
            path = Path(top) / name
            st = path.lstat()
            key = os.path.normpath(os.path.join(rel, name))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir", oct(st.st_mode & 0o7777))
            elif path.is_file():
                found[key] = ("file", oct(st.st_mode & 0o7777), path.read_bytes())
            else:
                found[key] = ("other",)
    return found


@pytest.fixture
def session(ws: Path, home: Path, monkeypatch):
    # A kernel-sized tree's rule, on this small one: no lstat of every tracked file in a later snapshot.
    monkeypatch.setattr(checkpoint, "STAT_EVERY_FILE_UP_TO", 0)
    (ws / "src" / "deep").mkdir(parents=True)
    for i in range(20):
        (ws / "src" / f"m{i}.py").write_text(f"value = {i}\n")
    (ws / "src" / "deep" / "x.txt").write_text("deep\n")
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_text("object\n")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws), invoked_by_human=True, confirmed=True))
    t.ctx.checkpoints = Checkpoints(Shadow(home, ws))
    bash(t, "exit 0")  # the first call: its snapshots are full (no change set yet) and set the base
    bash(t, "exit 0")
    yield t
    t.ctx.close()


def bash(t: Tools, command: str) -> str:
    result = t("bash", command=command, description="test")
    assert not result.is_error, result.content
    assert "checkpoint" in result.metadata, result.metadata  # a snapshot was taken before and after
    assert "after_error" not in result.metadata["checkpoint"], result.metadata
    return result.content


def shadow(t: Tools) -> Shadow:
    assert t.ctx.checkpoints is not None
    return t.ctx.checkpoints.shadow


def last_after_is_what_a_full_listing_finds(t: Tools) -> None:
    """The after snapshot of the last call, against a full capture of the same workspace now."""
    sh = shadow(t)
    after = sh.chain(t.session.id)[-1]
    assert after.kind == "after"
    # Another process's capture: this one's own would change the index its next snapshot starts from
    # (a file read again past git's racy second gets its real mtime), and that snapshot would list all.
    other = Shadow(sh.dir.parent.parent, t.ws)
    with other.locked():
        full = other.capture()
    assert (full.tree, full.modes_blob, full.repo) == (after.tree, after.modes_blob, after.repo), sh.diff(after, full)
    sh.close()  # the index this process kept, written for git to read
    assert after.tree == git_s_own_tree(sh)  # the trees Abhed computed from git's cache (gitindex.built)


def git_s_own_tree(sh: Shadow) -> str:
    """git's write-tree of the shadow index's entries, with no cache of trees to trust."""
    bare = sh.dir / "index.bare"
    gitindex.write(bare, gitindex.Index(gitindex.read(sh.git_dir / "index").entries))
    env = {"PATH": os.environ["PATH"], "GIT_INDEX_FILE": str(bare), "GIT_DIR": str(sh.git_dir)}
    return subprocess.run(["git", "write-tree", "--missing-ok"], env=env, capture_output=True, check=True,
                          text=True).stdout.strip()


def undo_last(t: Tools, confirm=lambda plan: True) -> str:
    """Undo the last call as chat's /undo does: with the sandbox's change set (Shadow.current)."""
    number = shadow(t).chain(t.session.id)[-1].number
    return undo(t.ctx.checkpoints, t.session, number, force=False, confirm=confirm, changes=changes_of(t.ctx))


# Each command, and what undo leaves as it is because checkpoints do not cover it.
CHANGES = [
    ("echo new > top.txt", ()),
    ("echo more >> src/m3.py", ()),
    ("mkdir -p a/b/c && echo x > a/b/c/new.txt && echo y > a/top.txt", ()),
    ("mv src/deep src/moved", ()),
    ("rm -rf src/deep", ()),
    ("rm src/m1.py && mv src/m2.py src/m2b.py", ()),
    ("chmod 600 src/m4.py; chmod 755 src/m5.py", ()),
    ("ln -s m6.py src/link.py", ()),
    ("echo 'src/m7.py' >> .gitignore; echo 'ignored' > new.log; echo w > new.txt", ("new.log",)),
    ("mkdir -p build/sub && echo o > build/sub/x.o; echo w > src/m8.py", ("build/sub", "build/sub/x.o")),
    ("mkfifo src/pipe; echo z > src/m9.py", ("src/pipe",)),
    ("mkdir -p nested && git -C nested init -q && echo n > nested/file", ("nested",)),
    ("python3 -c \"import mmap; f=open('src/m10.py','r+b'); m=mmap.mmap(f.fileno(),0); m[0:5]=b'VALUE'; m.flush()\"",
     ()),
    ("python3 -c \"import os; os.utime('src/m11.py', (0, 0))\"", ()),
    ("truncate -s 0 src/m12.py; : > src/m13.py", ()),
    ("echo 'x' > a_file && mkdir d1 && mv a_file d1/ && mv d1 d2", ()),
    ("git add -A && git -c user.name=a -c user.email=a@a commit -qm one && git branch feature", ()),
    ("ln src/m0.py hard.py && echo more >> hard.py", ()),  # src/m0.py changed too, and no event names it
]


@pytest.mark.parametrize(("command", "uncovered"), CHANGES)
def test_a_later_snapshot_from_the_change_set_is_the_full_listing_and_undo_restores(session: Tools, command: str,
                                                                                      uncovered: tuple[str, ...]) -> None:
    (session.ws / "old.log").write_text("kept out\n")  # the human, between calls: seen by the watch
    bash(session, "exit 0")
    before = state(session.ws)
    bash(session, command)
    fallback = shadow(session).later.fallback  # what git's own listing decides falls back to it
    assert fallback == "" or ".gitignore changed" in fallback or "nested/.git" in fallback, fallback
    last_after_is_what_a_full_listing_finds(session)
    assert undo_last(session).startswith(("Undone", "Nothing to undo"))
    last_after_is_what_a_full_listing_finds(session)  # the undo's own after snapshot, read from the change set
    after = state(session.ws)
    left = {k for k in set(before) | set(after) if any(k == u or k.startswith(u + "/") for u in uncovered)}
    assert {k: v for k, v in after.items() if k not in left} == {k: v for k, v in before.items() if k not in left}


def git_runs(monkeypatch) -> list[tuple[str, ...]]:
    """The git commands the shadow runs from now on (their first two words), as a list that grows."""
    ran: list[tuple[str, ...]] = []
    real = Shadow.git

    def spy(self, *args, **kwargs):
        ran.append(args[:2])
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Shadow, "git", spy)
    return ran


def test_later_calls_run_no_walk_and_an_after_snapshot_no_stat_of_every_file(session: Tools, monkeypatch) -> None:
    ran = git_runs(monkeypatch)
    bash(session, "echo hello > src/m0.py")
    assert shadow(session).later.fallback == ""
    assert ("ls-files", "-z") not in ran, ran  # neither ls-files -o nor ls-files -o -i
    assert not [a for a in ran if a[0] == "diff-files"], ran  # no live mapping, a local filesystem: none (mapped.py)
    assert not [a for a in ran if a[0] == "write-tree"], ran  # the trees computed from git's cache (gitindex.built)
    assert (session.ws / "src" / "m0.py").read_text() == "hello\n"
    last_after_is_what_a_full_listing_finds(session)


def test_an_undo_reads_the_workspace_from_the_change_set_and_the_next_call_carries_on(session: Tools,
                                                                                         monkeypatch) -> None:
    """chat's /undo: its three reads (the plan, the check under the freeze, the state after) and the
    next call's snapshot walk nothing and lstat no file when a change set covers them (on the kernel
    each full listing took some 0.3 s: 1.2 s per undo, and 0.9 s for the next call)."""
    bash(session, "echo hello > src/m0.py; echo new > fresh.txt")
    ran = git_runs(monkeypatch)
    assert undo_last(session).startswith("Undone")
    assert shadow(session).later.fallback == ""
    assert ("ls-files", "-z") not in ran and not [a for a in ran if a[0] == "diff-files"], ran
    assert (session.ws / "src" / "m0.py").read_text() == "value = 0\n" and not (session.ws / "fresh.txt").exists()
    last_after_is_what_a_full_listing_finds(session)
    ran.clear()  # that check's own full listing
    bash(session, "echo again > src/m1.py")
    assert shadow(session).later.fallback == "" and ("ls-files", "-z") not in ran, ran
    last_after_is_what_a_full_listing_finds(session)


@pytest.mark.parametrize("change", ["echo late >> src/m2.py", "rm src/m3.py", "echo new > late.txt"])
def test_a_change_while_the_undo_waits_for_its_answer_is_seen_from_the_change_set(session: Tools,
                                                                                   change: str) -> None:
    bash(session, "echo hello > src/m0.py")

    def answer(plan: str) -> bool:
        subprocess.run(["sh", "-c", change], cwd=session.ws, check=True)  # the human, meanwhile
        return True
    before = state(session.ws)
    with pytest.raises(checkpoint.CheckpointError, match="changed while the undo waited for your answer"):
        undo_last(session, answer)
    assert shadow(session).later.fallback == ""  # seen from the change set, not from a walk
    assert state(session.ws) != before and (session.ws / "src" / "m0.py").read_text() == "hello\n"  # nothing undone


def test_a_write_through_a_mapping_that_outlives_the_call_is_found_by_stat(session: Tools) -> None:
    """A background job maps a tracked file and writes through it during a later call: no inotify event
    while the mapping lives, so that call's after snapshot lstat's every file (diff-files)."""
    script = ("import mmap, os, time\n"
              "f = open('src/m14.py', 'r+b'); m = mmap.mmap(f.fileno(), 0)\n"
              "while not os.path.exists('go'): time.sleep(0.02)\n"
              "m[0:5] = b'MAPPD'; m.flush(); open('done', 'w').close()\n"
              "time.sleep(60)\n")
    (session.ws / "mapper.py").write_text(script)
    started = session("bash", command="python3 mapper.py", description="mapper", background=True)
    assert not started.is_error, started.content
    original = (session.ws / "src" / "m14.py").read_bytes()
    bash(session, "touch go; while [ ! -e done ]; do sleep 0.02; done")
    assert (session.ws / "src" / "m14.py").read_bytes().startswith(b"MAPPD")
    last_after_is_what_a_full_listing_finds(session)
    bash(session, f"kill %{started.metadata['job']}")
    assert undo_last(session).startswith(("Undone", "Nothing"))
    after, = [s for s in shadow(session).chain(session.session.id) if s.kind == "after"][-2:-1]
    # the call that let the job write: its after snapshot has the write, so undoing it restores the original
    number = after.number
    assert undo(session.ctx.checkpoints, session.session, number, force=False,
                confirm=lambda plan: True).startswith("Undone")
    assert (session.ws / "src" / "m14.py").read_bytes() == original


def test_a_command_s_own_mapping_is_named_when_it_goes(session: Tools) -> None:
    """The command maps, writes and exits: IN_CLOSE_WRITE names the file, with no stat of every file."""
    original = (session.ws / "src" / "m15.py").read_bytes()
    bash(session, "python3 -c \"import mmap; f=open('src/m15.py','r+b'); m=mmap.mmap(f.fileno(),0); "
                  "f.close(); m[0:5]=b'WROTE'\"")
    assert shadow(session).later.fallback == ""
    assert (session.ws / "src" / "m15.py").read_bytes().startswith(b"WROTE")
    last_after_is_what_a_full_listing_finds(session)
    assert undo_last(session).startswith("Undone")
    assert (session.ws / "src" / "m15.py").read_bytes() == original


def test_an_event_queue_overflow_falls_back_to_the_full_listing(session: Tools) -> None:
    before = state(session.ws)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    bash(session, f"cd src && seq 1 {limit // 2 + 10} | xargs touch && echo x > m16.py")
    assert shadow(session).later.fallback == "no complete change set since this process's last snapshot"
    last_after_is_what_a_full_listing_finds(session)
    assert undo_last(session).startswith("Undone")
    assert state(session.ws) == before
    bash(session, "echo y > src/m17.py")  # and the next one trusts the change set again
    assert shadow(session).later.fallback == ""
    last_after_is_what_a_full_listing_finds(session)


def test_the_human_s_edits_between_calls_are_in_the_next_before_snapshot(session: Tools) -> None:
    """By write (inotify sees it) and through a mapping the human's process holds (only stat sees it):
    either way the next checkpoint has them, and undo does not overwrite them without --force."""
    path = session.ws / "src" / "m18.py"
    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0)
    bash(session, "exit 0")
    mapped[0:5] = b"HUMAN"
    mapped.flush()
    (session.ws / "src" / "m19.py").write_text("the human's\n")
    bash(session, "echo model > src/m18.py; echo model > src/m19.py")
    chain = shadow(session).chain(session.session.id)
    before = chain[-2]
    assert before.kind == "before"
    listed = shadow(session).git("show", f"{before.tree}:src/m18.py")
    assert listed.startswith(b"HUMAN"), listed
    assert shadow(session).git("show", f"{before.tree}:src/m19.py") == b"the human's\n"
    with pytest.raises(UndoRefused) as refused:  # the human's edits, since the call before, are in the way
        undo(session.ctx.checkpoints, session.session, chain[-4].number, force=False, confirm=lambda plan: True)
    assert set(refused.value.paths) >= {"src/m18.py", "src/m19.py"}
    assert undo_last(session).startswith("Undone")  # the last call only: back to the human's content
    assert path.read_bytes().startswith(b"HUMAN") and (session.ws / "src" / "m19.py").read_text() == "the human's\n"
    mapped.close()


def test_a_snapshot_by_another_process_between_calls_makes_the_next_one_full(session: Tools, home: Path) -> None:
    other = Checkpoints(Shadow(home, session.ws))  # another process's (its own Shadow: its own memory)
    (session.ws / "src" / "m20.py").write_text("changed\n")
    other.before("other-session", "call-1", "write", "main")
    other.close()  # its process ends: the index it kept goes to the file
    bash(session, "echo z > src/m21.py")
    assert shadow(session).later.fallback == ""  # the after snapshot: its base is this process's before
    chain = shadow(session).chain(session.session.id)
    assert shadow(session).git("show", f"{chain[-2].tree}:src/m20.py") == b"changed\n"
    last_after_is_what_a_full_listing_finds(session)


def test_a_later_snapshot_gives_git_no_workspace_file_to_read(session: Tools, monkeypatch) -> None:
    """As test_checkpoint_races' rule: only listing, tree and object plumbing; check-ignore matches names
    (and lstat's them, as ls-files does) against the ignore rules."""
    from abhed.session import checkpoint, gitindex
    seen: list[tuple[str, ...]] = []
    real = checkpoint.hostproc.run
    monkeypatch.setattr(checkpoint.hostproc, "run", lambda argv, **kw: seen.append(tuple(argv)) or real(argv, **kw))
    bash(session, "echo new > fresh.txt; mkdir -p n/m && echo x > n/m/y.txt && echo ignored > n/m/z.log")
    assert shadow(session).later.fallback == ""
    commands = {argv[argv.index(next(a for a in argv[1:] if not a.startswith("-") and "=" not in a))]
                for argv in seen if len(argv) > 1}
    assert commands <= {"diff-files", "check-ignore", "write-tree", "cat-file"}, commands
    assert "check-ignore" in commands
    last_after_is_what_a_full_listing_finds(session)


def test_a_microvm_counts_as_a_sandboxed_process_alive(monkeypatch) -> None:
    """A microVM outlives its commands (and its page cache writes back later): an after snapshot then
    lstat's every tracked file, as while a background job runs."""
    import weakref

    from sandbox import box as sandbox_session

    class Box:
        backend, _closed = "microvm", False

        def jobs(self) -> tuple[()]:
            return ()
    box = Box()
    monkeypatch.setattr(sandbox_session, "_boxes", weakref.WeakSet([box]))
    monkeypatch.setattr(sandbox_session, "running_count", lambda: 0)
    assert sandbox_session.sandboxed_alive()
    box._closed = True
    assert not sandbox_session.sandboxed_alive()
    box.backend, box._closed = "bwrap", False
    assert not sandbox_session.sandboxed_alive()


def test_the_covered_directories_are_every_ancestor_of_every_indexed_name() -> None:
    """changeset.Names.dirs (the FIFO scan's directories) in one pass over the sorted index: the same
    set as every prefix of every name, whatever sorts between a directory's files ("a-b", "a.c")."""
    from abhed.session import changeset, gitindex

    names = sorted([b"top.txt", b"a/b/c/d.txt", b"a/b/e.txt", b"a/b-x/f", b"a/b.c", b"a/z/y/x/w", b"a-b/g",
                    b"a.c/h", b"q/r"])
    entries = [gitindex.Entry(n, 0, 0, b"") for n in names]
    expected = sorted({""} | {"/".join(n.decode().split("/")[:i]) for n in names for i in range(1, n.count(b"/") + 1)})
    assert changeset.Names(entries).dirs() == expected
    assert changeset.Names([]).dirs() == [""]


def test_in_a_small_tree_a_write_through_a_hard_link_made_outside_is_not_undone(session: Tools, tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """The human links a tracked file from outside the workspace and writes through that name between
    two calls: no event names it (inotify reports the write to the outside directory). Up to
    STAT_EVERY_FILE_UP_TO tracked files every later snapshot lstat's every file, so the next "before"
    holds the human's bytes, and undoing the model's change to that file gives them back."""
    monkeypatch.setattr(checkpoint, "STAT_EVERY_FILE_UP_TO", 20_000)  # the default, this tree's size
    outside = tmp_path / "elsewhere" / "m5-second-name.py"
    outside.parent.mkdir()
    os.link(session.ws / "src" / "m5.py", outside)
    bash(session, "exit 0")
    with open(outside, "r+b") as f:
        f.write(b"human = 5\n")  # in place, the same length: the workspace's name sees it
    assert (session.ws / "src" / "m5.py").read_bytes() == b"human = 5\n"
    bash(session, "echo model >> src/m5.py")
    assert undo_last(session).startswith("Undone")
    assert (session.ws / "src" / "m5.py").read_bytes() == b"human = 5\n"


# -- the shadow index kept in memory between snapshots (Shadow._read_index, _write_index) --------------

def test_later_snapshots_keep_the_index_in_memory_and_closing_writes_it(session: Tools, home: Path) -> None:
    index_file = shadow(session).git_dir / "index"
    written = index_file.read_bytes()
    bash(session, "echo kept > src/m0.py; echo new > fresh.txt")
    assert index_file.read_bytes() == written  # a few changed files: the whole index is not written again
    after = shadow(session).chain(session.session.id)[-1]
    session.ctx.close()  # the session's process is done
    entries = {e.name: e for e in gitindex.read(index_file).entries}
    assert entries[b"src/m0.py"].oid.hex() == blob_id(b"kept\n") and entries[b"fresh.txt"].oid.hex() == blob_id(b"new\n")
    nxt = Shadow(home, session.ws)  # the next process starts from that file
    with nxt.locked():
        assert nxt.capture().tree == after.tree


def test_closing_after_another_process_wrote_the_index_keeps_theirs(session: Tools, home: Path, monkeypatch) -> None:
    bash(session, "echo ours > src/m0.py")
    other = Checkpoints(Shadow(home, session.ws))
    (session.ws / "src" / "m1.py").write_text("theirs\n")
    other.before("other-session", "call-1", "write", "main")
    other.close()
    theirs = (shadow(session).git_dir / "index").read_bytes()
    session.ctx.checkpoints.close()
    assert (shadow(session).git_dir / "index").read_bytes() == theirs
    from_change_set = sources(monkeypatch)
    bash(session, "echo again > src/m2.py")  # from their index: a full listing, as complete as ever
    assert from_change_set == [False, True]  # the before snapshot listed everything; the after, its change set
    last_after_is_what_a_full_listing_finds(session)


def test_a_prune_by_another_process_drops_the_kept_index_and_no_snapshot_names_a_pruned_blob(session: Tools,
                                                                                             home: Path,
                                                                                             monkeypatch) -> None:
    """The hazard: git's prune keeps what the index file names, and the index this process kept names
    a blob that only its checkpoints reach. Another process collects those checkpoints and prunes; the
    next snapshot must read the file again, not name the blob that is gone."""
    sh = shadow(session)
    bash(session, "echo only-in-memory > src/m0.py")
    blob = blob_id(b"only-in-memory\n")
    other = Shadow(home, session.ws)
    with other.locked():  # the store over its caps, say: this session's checkpoints collected, then the prune
        other.git("update-ref", "-d", f"refs/abhed/{session.session.id}")
        other.git("prune", "--expire=now")
    assert not has_object(sh, blob)  # what the kept index names is gone
    from_change_set = sources(monkeypatch)
    bash(session, "echo x > src/m1.py")
    assert from_change_set == [False, True]
    chain = sh.chain(session.session.id)
    for snapshot in chain:
        listed = sh.git("ls-tree", "-r", "-z", snapshot.tree).split(b"\0")
        assert all(has_object(sh, line.split()[2].decode()) for line in listed if line), snapshot
    assert has_object(sh, blob)  # read again, and stored again
    last_after_is_what_a_full_listing_finds(session)


def test_the_kept_index_reaches_the_file_before_git_reads_it(session: Tools, monkeypatch) -> None:
    """Trees too many to compute here: git's write-tree computes them, from the index file, which
    must hold what this process kept (and the cache of the tree it last wrote must not answer)."""
    bash(session, "echo one > src/m0.py")
    monkeypatch.setattr(gitindex, "BUILD_UP_TO", 0)
    ran = git_runs(monkeypatch)
    bash(session, "echo two > src/m1.py")
    assert ("write-tree",) in ran
    last_after_is_what_a_full_listing_finds(session)


def test_a_full_listing_lists_against_the_kept_index(session: Tools, home: Path) -> None:
    """git lists what differs from the index file: a file the kept index holds and the file does not,
    removed since without the change set saying so, must still be found gone."""
    bash(session, "echo t > tmp.txt")
    (session.ws / "tmp.txt").unlink()
    sh = shadow(session)
    with sh.locked():
        ours = sh.capture()  # no change set: a full listing
    fresh = Shadow(home, session.ws)
    with fresh.locked():
        assert ours.tree == fresh.capture().tree
    assert b"tmp.txt" not in sh.git("ls-tree", "--name-only", "-z", ours.tree).split(b"\0")


def test_the_kept_index_is_written_once_many_entries_changed(session: Tools, monkeypatch) -> None:
    """So that a killed process leaves little for the next to read again."""
    monkeypatch.setattr(checkpoint, "FLUSH_AFTER", 1)
    index_file = shadow(session).git_dir / "index"
    bash(session, "echo a > src/m0.py")
    assert b"src/m0.py" not in {e.name for e in gitindex.read(index_file).entries if e.oid.hex() == blob_id(b"a\n")}
    bash(session, "echo b > src/m1.py; echo c > src/m2.py")
    names = {e.name for e in gitindex.read(index_file).entries if e.oid.hex() in (blob_id(b"b\n"), blob_id(b"c\n"))}
    assert names == {b"src/m1.py", b"src/m2.py"}


def sources(monkeypatch) -> list[bool]:
    """For each snapshot from now on: whether it was taken from the change set (else a full listing)."""
    found: list[bool] = []
    real = Shadow._since

    def spy(self, changes, kind):
        since = real(self, changes, kind)
        found.append(since is not None and since.valid)
        return since
    monkeypatch.setattr(Shadow, "_since", spy)
    return found


def blob_id(data: bytes) -> str:
    return subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True).stdout.decode().strip()


def has_object(sh: Shadow, oid: str) -> bool:
    """Asked of git directly (not through the shadow, which would write the index it keeps first)."""
    return subprocess.run(["git", "--git-dir", str(sh.git_dir), "cat-file", "-e", oid]).returncode == 0

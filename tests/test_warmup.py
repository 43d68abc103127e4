"""Issue 34: the first checkpoint and the sandbox's start, done while the model takes its first turn
(abhed/tools/warmup.py). Judged on the host: what undo writes back, and when a command ran
relative to the warm-up's snapshot."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha1
from pathlib import Path
from types import SimpleNamespace

import pytest

from abhed.gate.approval import Gate, Policy
from abhed.session import checkpoint, gitindex, mapped, seed, treeio
from abhed.session.checkpoint import CheckpointError, Shadow
from abhed.session.hashing import Hashing
from abhed.tools import warmup
from abhed.tools.bash import BashSandbox
from abhed_testing import Tools

from test_checkpoint_seed import commit, git, no_user_config, repository  # noqa: F401 (a fixture, and the repository)


@pytest.fixture(autouse=True)
def settled_ctimes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitindex, "RACY_S", -10)  # as in test_checkpoint_seed: files made a moment ago


def session(ws: Path, home: Path) -> Tools:
    """A session as `abhed run --mode auto` opens one: checkpoints on, the warm-up started."""
    t = Tools(ws, home, gate=Gate(Policy.create("auto", [], [], ws), invoked_by_human=True, confirmed=True))
    t.ctx.checkpoints = checkpoint.from_settings(t.settings, ws)
    return t


@contextmanager
def warmed(ws: Path, home: Path) -> Iterator[Shadow]:
    """The checkpoint store of a session whose warm-up is over; the session's process is done after
    (the index it keeps is then in its file)."""
    t = session(ws, home)
    try:
        warmup.start(t.ctx)
        t.ctx.warmed()
        assert t.ctx.checkpoints is not None
        yield t.ctx.checkpoints.shadow
    finally:
        t.ctx.close()


def test_the_warm_up_takes_the_first_snapshot_and_undo_restores_the_real_bytes(tmp_path: Path, home: Path) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    original = (ws / "src" / "lib" / "a.py").read_bytes()
    t = session(ws, home)
    try:
        assert warmup.start(t.ctx) is t.ctx.warmup and warmup.start(t.ctx) is None  # one per process
        t.ctx.warmed()
        shadow = t.ctx.checkpoints.shadow
        assert (shadow.git_dir / "index").exists() and t.ctx.shell is not None  # done before any call
        assert list((shadow.dir / seed.PACKS / "pack").glob("pack-*.pack"))  # seeded from the repository
        out = t.ok("bash", command="printf 'broken\\n' > src/lib/a.py && rm run.sh", description="x")
        assert "checkpoint" not in out or "first checkpoint" not in out
        assert (ws / "src" / "lib" / "a.py").read_bytes() == b"broken\n"
        with shadow.locked():
            shadow.apply(shadow.plan_undo(t.session.id, 1))
        assert (ws / "src" / "lib" / "a.py").read_bytes() == original
        assert (ws / "run.sh").read_text() == "#!/bin/sh\necho hi\n" and (ws / "run.sh").stat().st_mode & 0o100
    finally:
        t.ctx.close()


def test_the_first_snapshot_names_fifos_and_sockets_from_the_guard_s_listings_without_a_walk_of_its_own(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard lists every directory at the sandbox's start and after each change: the first snapshot's
    specials (what it names as not covered) come from those listings, not from a second walk."""
    ws = tmp_path / "ws"
    repository(ws)
    os.mkfifo(ws / "src" / "lib" / "pipe")
    os.mknod(ws / "s.sock", stat.S_IFSOCK | 0o600)
    (ws / "only").mkdir()
    os.mkfifo(ws / "only" / "fifo")  # in no covered file's directory: not named
    specials, walked = warmed_specials(ws, home, monkeypatch)
    assert specials == ["s.sock (a socket: it has no content to keep)", "src/lib/pipe (a FIFO: it has no content to keep)"]
    assert walked == [[]]  # every covered directory was the guard's to tell


def warmed_specials(ws: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[list[str]]]:
    """The specials a session's warm-up found, and the directories it listed itself for them."""
    walked: list[list[str]] = []
    real = treeio.Tree.specials
    monkeypatch.setattr(treeio.Tree, "specials", lambda self, dirs: (walked.append(list(dirs)), real(self, dirs))[1])
    with warmed(ws, home) as shadow:
        return list(shadow.later.specials or []), walked


def test_a_covered_directory_the_guard_has_not_listed_is_listed_by_the_first_snapshot(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made after the guard's listings were handed over (here: taken out of them), it is listed for its specials."""
    from sandbox.gitguard import GitGuard
    ws = tmp_path / "ws"
    repository(ws)
    os.mkfifo(ws / "src" / "lib" / "pipe")
    real_take = GitGuard.take_changes
    def take(self):
        taken = real_take(self)
        taken.listed = taken.listed - {"src/lib"}
        taken.specials.pop("src/lib", None)
        return taken
    monkeypatch.setattr(GitGuard, "take_changes", take)
    specials, walked = warmed_specials(ws, home, monkeypatch)
    assert specials == ["src/lib/pipe (a FIFO: it has no content to keep)"] and walked == [["src/lib"]]


def blob_id(data: bytes) -> bytes:
    return sha1(b"blob %d\0" % len(data) + data).digest()


def census_hits(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The names whose lstat the seed took from the sandbox start's census (seed.Census), whether the
    Python loop looked it up or the native one took the entry (abhed/session/_seed.c)."""
    hits: list[bytes] = []
    real = seed.Census.stat
    def stat(self, name, parent, base):
        st = real(self, name, parent, base)
        if st is not None:
            hits.append(name)
        return st
    monkeypatch.setattr(seed.Census, "stat", stat)
    if seed._native is not None:
        native = seed._native
        def take(*args):
            rest = native.take(*args)
            hits.extend(args[9])  # taken
            return rest
        monkeypatch.setattr(seed, "_native", SimpleNamespace(**{**vars(native), "take": take}))
    return hits


def test_what_changed_after_the_sandbox_start_s_census_is_read_and_the_rest_is_taken_from_it(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The census (sandbox.census) holds each file's lstat from before these writes, which still matches
    the repository's index: the seed must not take it for a file written since (named by the guard's
    events), for another name of a file written through one name (nothing names it), nor below a
    directory that was replaced (named; its new files no event names)."""
    ws = tmp_path / "ws"
    repository(ws)
    (ws / "pair").mkdir()
    (ws / "pair" / "a.txt").write_bytes(b"one inode\n")
    os.link(ws / "pair" / "a.txt", ws / "pair" / "b.txt")
    commit(ws)
    hits = census_hits(monkeypatch)
    real_open = BashSandbox.open
    def open_then_write(cls, ctx):
        shell = real_open(ctx)
        (ws / "notes.md").write_bytes(b"LINE 1\nLINE 2\n")  # the same size: only its stat says so
        with open(ws / "pair" / "a.txt", "r+b") as through_a:
            through_a.write(b"TWO")  # b.txt's content too; no event names b.txt
        os.rename(ws / "src" / "lib", ws / "src" / "old")
        (ws / "src" / "lib").mkdir()
        (ws / "src" / "lib" / "a.py").write_bytes(b"def a():\n    return 2\n")
        (ws / "src" / "lib" / "data.bin").write_bytes((ws / "src" / "old" / "data.bin").read_bytes())
        return shell
    monkeypatch.setattr(BashSandbox, "open", classmethod(open_then_write))
    with warmed(ws, home) as shadow:
        pass
    index = {e.name: e.oid for e in gitindex.read(shadow.git_dir / "index").entries}
    for name in ("notes.md", "pair/a.txt", "pair/b.txt", "src/lib/a.py", "run.sh"):
        assert index[name.encode()] == blob_id((ws / name).read_bytes()), name
    assert b"run.sh" in hits and b"src/secret.txt" in hits  # the rest came from the census
    assert not {b"notes.md", b"pair/a.txt", b"pair/b.txt", b"src/lib/a.py", b"src/lib/data.bin"} & set(hits)


@pytest.mark.parametrize("version", [2, 4])  # 4: names prefix-compressed, the stat bytes packed from the fields
def test_a_census_record_takes_a_file_only_as_the_index_has_it_and_keeps_its_exact_mode(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """The census's records (sandbox.census: git's stat bytes, then st_mode) against the index: a file
    changed before the session (same size) is read, not taken; one over checkpoints.max_file_bytes is
    not taken; the exact mode of one taken (0600) is kept for undo."""
    ws = tmp_path / "ws"
    repository(ws)
    git(ws, "update-index", "--index-version", str(version))
    (ws / "notes.md").write_bytes(b"LINE 1\nLINE 2\n")  # before the session: the census sees it as it is now
    hits = census_hits(monkeypatch)
    real_init = Shadow.__init__
    def small_files(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.max_file_bytes = 1000  # src/lib/data.bin has 1,024
    monkeypatch.setattr(Shadow, "__init__", small_files)
    with warmed(ws, home) as shadow:
        modes = shadow._modes()["modes"]
    index = {e.name: e.oid for e in gitindex.read(shadow.git_dir / "index").entries}
    assert {b"notes.md", b"src/secret.txt", b"src/lib/data.bin"} <= set(hits)  # each had a record
    assert index[b"notes.md"] == blob_id(b"LINE 1\nLINE 2\n")
    assert b"src/lib/data.bin" not in index
    assert index[b"src/secret.txt"] == blob_id(b"keep me private\n") and modes["src/secret.txt"] == 0o600
    assert b"run.sh" in index and index[b"link"] == blob_id(b"src/lib/a.py")  # taken: the rest as it was


def test_no_file_of_a_nested_repository_is_taken_from_the_census_whether_it_was_there_or_made_since(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The outer repository's index still names files of a directory that became a repository of its own
    (not covered: seed.py): the census must vouch for none of them, whether its walk saw the .git or only
    the change set names it (made after the walk), and the snapshot holds none of them."""
    ws = tmp_path / "ws"
    repository(ws)
    (ws / "nested" / "deep").mkdir(parents=True)
    (ws / "nested" / "deep" / "x.c").write_bytes(b"int x;\n")
    commit(ws)
    git(ws / "nested", "init", "-q")  # before the session: the census walk finds its .git
    hits = census_hits(monkeypatch)
    real_open = BashSandbox.open
    def open_then_init(cls, ctx):
        shell = real_open(ctx)
        git(ws / "src" / "lib", "init", "-q")  # after the walk: only the change set names src/lib/.git
        return shell
    monkeypatch.setattr(BashSandbox, "open", classmethod(open_then_init))
    with warmed(ws, home) as shadow:
        pass
    index = {e.name for e in gitindex.read(shadow.git_dir / "index").entries}
    assert not {b"nested/deep/x.c", b"src/lib/a.py", b"src/lib/data.bin"} & index
    assert not [name for name in hits if name.startswith((b"nested/", b"src/lib/"))]
    assert b"src/secret.txt" in hits and b"run.sh" in hits  # the rest came from the census


def test_no_census_is_used_where_inotify_may_not_see_every_writer(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A network filesystem, say (mapped.trusted_filesystem): a change there may come with no event."""
    ws = tmp_path / "ws"
    repository(ws)
    hits = census_hits(monkeypatch)
    monkeypatch.setattr(mapped, "trusted_filesystem", lambda fd: "a filesystem other hosts write to")
    with warmed(ws, home) as shadow:
        assert (shadow.git_dir / "index").exists() and hits == []


def test_no_command_and_no_write_runs_before_the_warm_up_s_snapshot_is_over(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run while the warm-up trusts the repository's index could pair a file's stat with another
    blob: every call that may change the workspace waits for it (dispatch, the bash tool)."""
    ws = tmp_path / "ws"
    repository(ws)
    done: list[float] = []
    real = Shadow.prepare

    def slow(self, *args, **kw):
        time.sleep(0.5)
        try:
            return real(self, *args, **kw)
        finally:
            done.append(time.time())
    monkeypatch.setattr(Shadow, "prepare", slow)
    for tool, args in (("bash", {"command": "date +%s.%N > stamp", "description": "x"}),
                       ("bash", {"command": "true", "description": "read-only: no checkpoint, still waits"}),
                       ("write", {"path": str(ws / "stamp"), "content": "x"})):
        (ws / "stamp").unlink(missing_ok=True)
        done.clear()
        t = session(ws, home / tool / str(len(args)))
        try:
            warmup.start(t.ctx)
            t.ok(tool, **args)
            assert done, "the call did not wait for the warm-up"
            if args.get("command") != "true":
                assert (ws / "stamp").stat().st_mtime >= done[0] - 0.01, (tool, args)
        finally:
            t.ctx.close()


def test_a_warm_up_that_fails_leaves_the_first_call_to_take_its_checkpoint(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    repository(ws)

    def fails(self, *args, **kw):
        raise CheckpointError("the store's disk is full")
    monkeypatch.setattr(Shadow, "prepare", fails)
    t = session(ws, home)
    try:
        warmup.start(t.ctx)
        result = t("bash", command="echo x >> notes.md", description="x")
        assert not result.is_error and result.metadata["checkpoint"]["number"] == 1, result.content
    finally:
        t.ctx.close()
    with t.ctx.checkpoints.shadow.locked():
        shadow = t.ctx.checkpoints.shadow
        shadow.apply(shadow.plan_undo(t.session.id, 1))
    assert (ws / "notes.md").read_text() == "line 1\nline 2\n"


def test_the_warm_up_s_progress_shows_only_while_a_call_waits_and_its_note_reaches_the_first_call(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    monkeypatch.setattr(Shadow, "FIRST_NOTE_FILES", 3)
    t = session(ws, home)
    shown: list[Hashing] = []
    t.ctx.progress = shown.append
    w = warmup.Warmup(t.ctx)
    w._report(Hashing(1, 4, 2, True))
    assert shown == []  # nobody waits: the model's turn shows nothing
    w._waiting.set()
    w._report(Hashing(2, 4, 4, True))
    assert shown == [Hashing(2, 4, 4, True)]
    try:
        warmup.start(t.ctx)
        t.ctx.warmed()
        out = t.ok("write", path=str(ws / "new.txt"), content="n")
        assert "[Abhed: the first checkpoint of this workspace read and hashed 4 files in" in out
        assert "first checkpoint" not in t.ok("write", path=str(ws / "new2.txt"), content="n")
    finally:
        t.ctx.close()


def test_a_call_that_changes_nothing_does_not_wait(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    repository(ws)
    release = threading.Event()
    monkeypatch.setattr(Shadow, "prepare", lambda self, *a, **kw: release.wait(30))
    t = session(ws, home)
    try:
        warmup.start(t.ctx)
        assert "line 1" in t.ok("read", path=str(ws / "notes.md"))  # while the warm-up still runs
        assert t.ctx.warmup._thread.is_alive()
    finally:
        release.set()
        t.ctx.close()


def test_a_session_that_closes_first_starts_no_snapshot_and_closes_the_shell_the_warm_up_opened(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from abhed.tools import bash
    ws = tmp_path / "ws"
    repository(ws)
    closed: list[bool] = []
    prepared: list[bool] = []

    class Fake:
        def close(self) -> list[str]:
            closed.append(True)
            return []

    def opening(ctx):
        time.sleep(0.3)
        return Fake()
    monkeypatch.setattr(bash.BashSandbox, "open", classmethod(lambda cls, ctx: opening(ctx)))
    monkeypatch.setattr(Shadow, "prepare", lambda self, *a, **kw: prepared.append(True))
    t = session(ws, home)
    warmup.start(t.ctx)
    t.ctx.close()
    assert closed == [True] and prepared == [] and t.ctx.shell is None
    assert not (t.ctx.checkpoints.shadow.git_dir / "index").exists()


@pytest.mark.parametrize("fails", [False, True])
def test_the_warm_up_runs_without_the_cyclic_collector_and_turns_it_back_on(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    """Each full collection meanwhile traversed the census and the index's entries again (warmup._no_collection);
    a warm-up that fails leaves the collector on too."""
    import gc
    ws = tmp_path / "ws"
    repository(ws)
    seen: list[bool] = []
    real = Shadow.prepare
    def prepare(self, *args, **kw):
        seen.append(gc.isenabled())
        if fails:
            raise CheckpointError("the store is unwritable (a test)")
        return real(self, *args, **kw)
    monkeypatch.setattr(Shadow, "prepare", prepare)
    assert gc.isenabled()
    with warmed(ws, home):
        assert seen == [False] and gc.isenabled()

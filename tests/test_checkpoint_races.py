"""Issue 30, findings 2, 4, 5, 6: snapshots and undo while a sandboxed job rearranges the workspace.

The attack: a job in the bwrap sandbox (of another session) exchanges a directory of the workspace
with a symlink to a directory outside it, renameat2(RENAME_EXCHANGE) in a tight loop, while the
host snapshots the workspace and undoes calls that rewrote that directory's files. Judged on the
host: nothing was created or changed in the outside directory, no byte of its 0600 secret is in the
checkpoint store, and every snapshot and undo ended (each git has a deadline; none was met).

Undo freezes the workspace's sandboxed processes first (sandbox.freeze); the same loop runs with the
freeze switched off, so that what keeps the undo inside the workspace is seen to be the descriptors
it writes through, not the freeze. Also: a FIFO where git or Abhed reads, a directory that became a
symlink (`ln -sfn`), host git killed with Abhed, the lock released on every path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sandbox
from abhed.session import checkpoint
from abhed.session.checkpoint import Checkpoints, CheckpointError, Shadow
from abhed.session.events import new_id
from abhed.session.store import SessionStore
from abhed.session.undo import undo

SWAP = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
print("swapping", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)  # fails while undo has one of the two away: it goes on all the same
"""
SECRET = b"OUTSIDE-SECRET-0600-4711"
REPO = Path(__file__).resolve().parents[1]
FILES = 200
ROUNDS = 200


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def _store_holds(shadow: Shadow, needle: bytes) -> bool:
    out = subprocess.run(["git", "--git-dir", str(shadow.git_dir), "cat-file", "--batch-all-objects", "--batch"],
                         capture_output=True, check=True).stdout
    return needle in out


@pytest.fixture
def outside(tmp_path: Path):
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_bytes(SECRET + b"\n")
    os.chmod(path / "secret.txt", 0o600)
    for i in range(3):
        (path / f"p{i:04d}").write_bytes(SECRET + b" under a workspace name\n")
    before = _tree(path)
    yield path
    assert _tree(path) == before, "something outside the workspace was created or changed"


def _populate(ws: Path, outside: Path) -> None:
    (ws / "d").mkdir()
    for i in range(FILES):
        (ws / "d" / f"p{i:04d}").write_text(f"original {i}\n")
    (ws / "l").symlink_to(outside)


@pytest.fixture
def swapper(ws: Path, outside: Path, tmp_path: Path):
    """The attack, as a background job in the bwrap sandbox of another session."""
    _populate(ws, outside)
    log = tmp_path / "swapper.log"
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as sb:
        job = sb.start_background(f"exec python3 -c {shlex.quote(SWAP)} d l", cwd=ws, log_path=log)
        for _ in range(500):
            if b"swapping" in log.read_bytes():
                break
            time.sleep(0.01)
        assert b"swapping" in log.read_bytes(), log.read_text()
        yield job
        assert job.running, f"the swapper stopped by itself: the attack did not run the whole time ({log.read_text()})"


def _change(sb: sandbox.Sandbox, ws: Path, round_: int) -> None:
    """The agent's call: rewrite every file of the directory, through the sandbox (it meets the swap too)."""
    sb.run(f"for f in d/p* l/p*; do echo 'changed {round_}' > \"$f\" 2>/dev/null; done; true", cwd=ws, timeout_s=60)


@pytest.mark.slow
@pytest.mark.alone
def test_undo_beside_a_sandboxed_swapper_freezes_it_and_writes_nothing_outside(ws: Path, home: Path, outside: Path,
                                                                               swapper) -> None:
    """`abhed undo` as it runs: plan, confirm, then freeze the workspace's sandboxes and restore."""
    shadow = Shadow(home, ws, timeout_s=60)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    outcomes = {"undone": 0, "changed while asked": 0, "call changed nothing": 0}
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as agent:
        for round_ in range(ROUNDS):
            before, _ = cp.before(session.id, new_id(), "bash", "main")
            _change(agent, ws, round_)
            cp.after(session.id, before)
            try:
                report = undo(cp, session, before.number, force=True, confirm=lambda plan: True)
            except CheckpointError as exc:
                # The swapper ran on while the plan waited for its answer: nothing is changed then.
                assert str(exc).startswith("The workspace changed while the undo waited"), str(exc)
                outcomes["changed while asked"] += 1
                continue
            if report.startswith("Nothing to undo"):
                # Every write of the call met `d` swapped out (it then points outside, read-only in
                # the sandbox) and the swaps left the tree as the snapshot saw it: a true answer.
                outcomes["call changed nothing"] += 1
                continue
            assert report.startswith("Undone"), report
            outcomes["undone"] += 1
    print(f"\n{ROUNDS} undo attempts: {outcomes}", flush=True)
    assert outcomes["undone"] > 0
    assert not _store_holds(shadow, SECRET)


@pytest.mark.slow
@pytest.mark.alone
def test_restores_racing_a_sandboxed_swapper_write_nothing_outside(ws: Path, home: Path, outside: Path,
                                                                   swapper) -> None:
    """Finding 2 as it was: the restore itself while the job swaps (no freeze): only the descriptors
    it writes through keep it inside the workspace."""
    shadow = Shadow(home, ws, timeout_s=60)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    restored = failed = 0
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as agent:
        for round_ in range(ROUNDS):
            before, _ = cp.before(session.id, new_id(), "bash", "main")
            _change(agent, ws, round_)
            cp.after(session.id, before)
            with shadow.locked():
                plan = shadow.plan_undo(session.id, before.number)
                try:
                    shadow.apply(plan)
                    restored += 1
                except CheckpointError as exc:  # a directory moved under it: named, never a hang or a traceback
                    assert "could not be restored" in str(exc), str(exc)
                    failed += 1
    print(f"\n{ROUNDS} restores racing the swapper: {restored} whole, {failed} with paths not restored", flush=True)
    assert restored + failed == ROUNDS
    assert not _store_holds(shadow, SECRET)


@pytest.mark.slow
@pytest.mark.alone
def test_snapshots_beside_a_sandboxed_swapper_take_no_outside_byte(ws: Path, home: Path, outside: Path,
                                                                    swapper) -> None:
    shadow = Shadow(home, ws, timeout_s=60)
    shapes = set()
    for round_ in range(ROUNDS):
        snap, _ = shadow.snapshot("s", "before", {"call": str(round_), "tool": "bash"})
        shapes.add(shadow.git("ls-tree", snap.tree).decode())
    print(f"\n{ROUNDS} snapshots, {len(shapes)} different shapes of the swapped pair", flush=True)
    assert len(shapes) > 1, "no snapshot met the swap: the test did not exercise the race"
    assert not _store_holds(shadow, SECRET)
    assert not _store_holds(shadow, b"under a workspace name")


def test_a_host_swapper_racing_the_restore_sends_no_file_outside(ws: Path, home: Path, outside: Path,
                                                                   monkeypatch) -> None:
    """Without a sandbox to freeze (a process of the user's own): the descriptors alone keep undo inside."""
    from sandbox import freeze
    monkeypatch.setattr(freeze, "freeze", lambda workspace: freeze.Frozen())
    _populate(ws, outside)
    shadow = Shadow(home, ws, timeout_s=60)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    for f in (ws / "d").iterdir():
        f.unlink()
    cp.after(session.id, before)
    proc = subprocess.Popen([sys.executable, "-c", SWAP, str(ws / "d"), str(ws / "l")], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"swapping"
        for _ in range(20):
            try:
                undo(cp, session, before.number, force=True, confirm=lambda plan: True)
            except CheckpointError:
                pass
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


# -- a FIFO where a file was: nothing blocks -----------------------------------------------------------


def test_a_fifo_in_place_of_a_file_is_skipped_and_named(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    shadow = Shadow(home, ws, timeout_s=30)
    shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    (ws / "a.txt").unlink()
    os.mkfifo(ws / "a.txt")
    os.mkfifo(ws / "new.fifo")
    snap, capture = shadow.snapshot("s", "before", {"call": "2", "tool": "bash"})
    # a.txt was a file: what it is now is named; git's listing of new files leaves special files out
    assert capture.not_covered == ["a.txt (a FIFO: it has no content to keep)"]
    assert shadow.git("ls-tree", "--name-only", snap.tree) == b""


def test_a_fifo_where_git_reads_a_gitignore_stops_that_snapshot_and_the_next_call_tries_again(ws: Path,
                                                                                              home: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "f.txt").write_text("f\n")
    os.mkfifo(ws / "sub" / ".gitignore")  # git's walk opens it to read the ignore rules, and waits for a writer
    shadow = Shadow(home, ws, timeout_s=2)
    started = time.monotonic()
    with pytest.raises(CheckpointError) as stopped:
        shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    waited = time.monotonic() - started
    message = str(stopped.value)
    assert message.startswith("git ls-files did not finish within 2 s (checkpoints.timeout_s)")
    assert "a FIFO where git reads a file such as .gitignore" in message and "raise checkpoints.timeout_s" in message
    assert _git_children() == [], "git was left running"
    print(f"\nstopped after {waited:.1f} s")
    (ws / "sub" / ".gitignore").unlink()
    snap, _ = shadow.snapshot("s", "before", {"call": "2", "tool": "bash"})  # the lock was released; it works again
    assert shadow.git("ls-tree", "-r", "--name-only", snap.tree).decode().split() == ["sub/f.txt"]


def _git_children() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if stat.split(") ", 1)[0].endswith("(git") and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(entry))
    return found


KILLED = r"""
import os, sys
from pathlib import Path
from abhed.session.checkpoint import Shadow
shadow = Shadow(Path(sys.argv[1]), Path(sys.argv[2]), timeout_s=600)
print(os.getpid(), flush=True)
shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
"""


def test_kill_9_of_abhed_kills_its_git_and_leaves_the_lock_free(ws: Path, home: Path) -> None:
    os.mkfifo(ws / ".gitignore")  # the snapshot's git waits here for ever
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(home), str(ws)], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    pid = int(proc.stdout.readline())
    git = []
    for _ in range(500):
        git = [p for p in _all_pids() if _parent(p) == pid and b"ls-files" in _cmdline(p)]
        if git:
            break
        time.sleep(0.01)
    assert git, "the snapshot's git never started"
    os.kill(pid, signal.SIGKILL)
    proc.wait()
    for _ in range(500):
        if not os.path.exists(f"/proc/{git[0]}") or _state(git[0]) == "Z":
            break
        time.sleep(0.01)
    assert not os.path.exists(f"/proc/{git[0]}") or _state(git[0]) == "Z", "git outlived Abhed"
    (ws / ".gitignore").unlink()
    shadow = Shadow(home, ws, timeout_s=30)
    snap, _ = shadow.snapshot("s", "before", {"call": "2", "tool": "bash"})  # the lock is free
    assert snap.number == 1


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _stat_fields(pid: int) -> list[str]:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return ["X", "0"]


def _parent(pid: int) -> int:
    return int(_stat_fields(pid)[1])


def _state(pid: int) -> str:
    return _stat_fields(pid)[0]


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def test_the_lock_is_released_when_a_snapshot_fails(ws: Path, home: Path) -> None:
    shadow = Shadow(home, ws, timeout_s=30)
    shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    index = shadow.git_dir / "index"
    index.unlink()
    index.mkdir()  # every git that reads the index fails
    with pytest.raises(CheckpointError):
        shadow.snapshot("s", "before", {"call": "2", "tool": "bash"})
    index.rmdir()
    import fcntl
    fd = os.open(shadow.dir / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # would raise BlockingIOError if still held
    finally:
        os.close(fd)


# -- a directory that became a symlink: recorded as such, undone, never a wedge ---------------------


def test_a_directory_replaced_by_a_symlink_is_recorded_and_undone(ws: Path, home: Path) -> None:
    (ws / "build").mkdir()
    (ws / "build" / "new.o").write_text("new\n")
    (ws / "out").mkdir()
    (ws / "out" / "f.txt").write_text("old output\n")
    (ws / "out" / "g.txt").write_text("old g\n")
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    subprocess.run(["bash", "-c", "rm -rf out && ln -sfn build out"], cwd=ws, check=True)  # as users do
    cp.after(session.id, before)
    second, capture = cp.before(session.id, new_id(), "bash", "main")  # not refused: no wedge
    assert capture.not_covered == []
    entries = cp.shadow.git("ls-tree", second.tree).decode()
    assert "120000 blob" in entries and "\tout" in entries
    assert undo(cp, session, before.number, force=False, confirm=lambda plan: True).startswith("Undone")
    assert (ws / "out").is_dir() and not (ws / "out").is_symlink()
    assert (ws / "out" / "f.txt").read_text() == "old output\n" and (ws / "out" / "g.txt").read_text() == "old g\n"
    assert (ws / "build" / "new.o").read_text() == "new\n"


def test_a_file_that_became_a_directory_and_back_is_undone_both_ways(ws: Path, home: Path) -> None:
    (ws / "x").write_text("a file\n")
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    first, _ = cp.before(session.id, new_id(), "bash", "main")
    (ws / "x").unlink()
    (ws / "x").mkdir()
    (ws / "x" / "inner.txt").write_text("inner\n")
    cp.after(session.id, first)
    assert undo(cp, session, first.number, force=False, confirm=lambda plan: True).startswith("Undone")
    assert (ws / "x").read_text() == "a file\n"
    assert undo(cp, session, first.number + 1, force=False, confirm=lambda plan: True).startswith("Undone")
    assert (ws / "x" / "inner.txt").read_text() == "inner\n"


UNREADABLE = r"""
import json, sys
from pathlib import Path
from abhed.session.checkpoint import Shadow
shadow = Shadow(Path(sys.argv[1]), Path(sys.argv[2]))
snap, capture = shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
print(json.dumps({"not_covered": capture.not_covered,
                  "tree": shadow.git("ls-tree", "-r", "--name-only", snap.tree).decode().split()}))
"""


def test_a_file_that_cannot_be_read_is_named_and_costs_no_checkpoint(ws: Path, home: Path) -> None:
    """As a user without root's power over permissions (CAP_DAC_OVERRIDE dropped, as for any user)."""
    (ws / "ok.txt").write_text("ok\n")
    (ws / "locked.txt").write_text("locked\n")
    os.chmod(ws / "locked.txt", 0)
    cmd = [sys.executable, "-c", UNREADABLE, str(home), str(ws)]
    if os.geteuid() == 0:
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search",
               *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["not_covered"] == ["locked.txt (cannot be read: Permission denied)"]
    assert got["tree"] == ["ok.txt"]


def test_checkpoint_uses_no_path_in_git_s_hands(ws: Path, home: Path, monkeypatch) -> None:
    """git is never asked to read the workspace's files: no update-index, hash-object of a path, read-tree -u,
    checkout: only listing, tree and object plumbing."""
    (ws / "a.txt").write_text("a\n")
    seen: list[tuple[str, ...]] = []
    real = checkpoint.hostproc.run
    monkeypatch.setattr(checkpoint.hostproc, "run", lambda argv, **kw: seen.append(tuple(argv)) or real(argv, **kw))
    cp = Checkpoints(Shadow(home, ws))
    session = SessionStore(home).create(ws)
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    (ws / "a.txt").write_text("b\n")
    (ws / "new.txt").write_text("new\n")
    cp.after(session.id, before)
    undo(cp, session, before.number, force=False, confirm=lambda plan: True)
    commands = {argv[argv.index(next(a for a in argv[1:] if not a.startswith("-") and "=" not in a))]
                for argv in seen if len(argv) > 1}
    allowed = {"init", "diff-files", "ls-files", "write-tree", "mktree", "commit-tree", "update-ref", "cat-file",
               "log", "diff-tree", "rev-list", "count-objects", "for-each-ref", "prune"}
    assert commands <= allowed, commands - allowed
    assert (ws / "a.txt").read_text() == "a\n" and not (ws / "new.txt").exists()


def test_a_repository_whose_making_was_killed_is_made_again(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    shadow = Shadow(home, ws)
    shadow.git_dir.mkdir(parents=True)
    (shadow.git_dir / "HEAD").write_text("ref: refs/heads/master\n")  # git init killed after its first file
    (shadow.dir / "git.init").mkdir()  # and one killed before its rename
    snap, _ = shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    assert shadow.git("ls-tree", "--name-only", snap.tree) == b"a.txt\n"
    assert not (shadow.dir / "git.init").exists()


def test_a_damaged_repository_that_holds_checkpoints_is_never_wiped(ws: Path, home: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    shadow = Shadow(home, ws)
    shadow.snapshot("s", "before", {"call": "1", "tool": "bash"})
    (shadow.git_dir / "HEAD").unlink()
    with pytest.raises(CheckpointError) as damaged:
        shadow.snapshot("s", "before", {"call": "2", "tool": "bash"})
    assert f"the shadow repository {shadow.git_dir} is damaged (it lacks HEAD, objects/ or refs/)" in str(damaged.value)
    assert "Move it away to start a new one" in str(damaged.value)
    assert any((shadow.git_dir / "objects").glob("??/*"))


def test_undo_holds_a_running_sandboxed_job_of_the_workspace_still_while_it_restores(ws: Path, home: Path,
                                                                                     tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """Judged by a job's own output: while the restore runs, a job appending in a loop appends nothing."""
    (ws / "a.txt").write_text("a\n")
    shadow = Shadow(home, ws)
    cp = Checkpoints(shadow)
    session = SessionStore(home).create(ws)
    before, _ = cp.before(session.id, new_id(), "bash", "main")
    (ws / "a.txt").write_text("b\n")
    cp.after(session.id, before)
    grew: list[int] = []
    real = Shadow.apply

    def apply(self, plan):  # type: ignore[no-untyped-def]
        size = (tmp_path / "count.log").stat().st_size
        time.sleep(0.3)
        grew.append((tmp_path / "count.log").stat().st_size - size)
        return real(self, plan)
    monkeypatch.setattr(Shadow, "apply", apply)
    with sandbox.Sandbox(sandbox.SandboxConfig(), ws) as other_session:
        job = other_session.start_background("while :; do echo x; done", cwd=ws, log_path=tmp_path / "count.log")
        time.sleep(0.2)
        assert undo(cp, session, before.number, force=True, confirm=lambda plan: True).startswith("Undone")
        size = (tmp_path / "count.log").stat().st_size
        time.sleep(0.3)
        after = (tmp_path / "count.log").stat().st_size - size
        assert job.running
    assert grew == [0], "the job ran on while undo restored the workspace"
    assert after > 0, "the job was not continued after the undo"
    assert (ws / "a.txt").read_text() == "a\n"

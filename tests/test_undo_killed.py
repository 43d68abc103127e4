"""A killed undo or snapshot loses nothing and leaves nothing running or locked (issue 33, finding 6).

Real kill -9 of the real `abhed undo` process, at a point made reproducible by ABHED_TEST_PAUSE
(abhed/session/journal.py: the process writes a marker and waits there to be killed). Judged on the
host: which processes survive, whether the workspace still changes, the files' bytes and modes after
`abhed undo --finish` / `--rollback`, and what the next commands say.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from abhed.session import journal
from abhed.session.checkpoint import Checkpoints, Shadow
from abhed.session.store import SessionStore
from abhed_testing import Tools, abhed
from test_checkpoint import tree_state

FILES = 40


def _session(ws: Path, home: Path) -> tuple[Tools, dict, dict]:
    """A session whose bash call rewrote FILES files (some with exact modes): the states before and after."""
    for i in range(FILES):
        (ws / f"f{i:02}.txt").write_text(f"old {i}\n")
        (ws / f"f{i:02}.txt").chmod(0o640 if i % 3 else 0o600)
    (ws / "gone.txt").write_text("deleted by the call\n")
    t = Tools(ws, home)
    t.ctx.checkpoints = Checkpoints(Shadow(home, ws))
    old = tree_state(ws)
    t.ok("bash", command="for f in f*.txt; do echo new > $f; chmod 644 $f; done; rm gone.txt; echo x > made.txt",
         description="rewrite")
    new = tree_state(ws)
    t.ctx.close()
    return t, old, new


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _wait_gone(pids: list[int]) -> list[int]:
    """The pids still alive after waiting for them (generously: a loaded machine), none when all died."""
    for _ in range(600):
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def _killed_undo(ws: Path, home: Path, t: Tools, marker: Path, point: str) -> list[int]:
    """Start `abhed undo --yes`, wait for it at `point`, kill -9 it; its children as they were then."""
    env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": "", "ABHED_TEST_PAUSE": point,
           "ABHED_TEST_PAUSE_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "abhed", "undo", "--yes", t.session.id], cwd=ws, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    children = _children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    return children


def test_kill_9_of_undo_leaves_no_git_running_and_the_next_commands_offer_to_finish(ws: Path, home: Path,
                                                                                   tmp_path: Path) -> None:
    t, old, new = _session(ws, home)
    children = _killed_undo(ws, home, t, tmp_path / "paused", "undo:5")
    assert children, "git cat-file, reading the store's objects, was running when the undo was killed"
    assert _wait_gone(children) == []  # died with Abhed (PR_SET_PDEATHSIG), not left under PID 1
    half = tree_state(ws)
    assert half != old and half != new  # part-way, as the issue found it
    time.sleep(1)
    assert tree_state(ws) == half  # nothing is still writing the workspace
    shadow = Shadow(home, ws)
    facts = journal.read(shadow.dir, journal.UNDO)
    assert facts["to"] == 1 and facts["number"] == 2 and facts["session"] == t.session.id
    # The next commands say what happened and how to get out of it.
    listing = abhed("checkpoints", t.session.id, cwd=ws)
    assert listing.returncode == 0
    assert (f"An undo was interrupted: undo checkpoint 2 of session {t.session.id}, taking the workspace back to "
            "before checkpoint 1, started ") in listing.stderr
    assert f"`abhed undo --finish {t.session.id}`" in listing.stderr
    assert f"`abhed undo --rollback {t.session.id}`" in listing.stderr
    again = abhed("undo", "--yes", t.session.id, cwd=ws)
    assert again.returncode == 1 and "Undo refused: An undo was interrupted" in again.stderr
    assert tree_state(ws) == half  # the refusal changed nothing
    done = abhed("undo", "--finish", "--yes", t.session.id, cwd=ws)
    assert done.returncode == 0, done.stderr
    assert "Finished: the interrupted undo is closed; the workspace is as it was before checkpoint 1." in done.stdout
    notes = [e.content for e in SessionStore(home).open(t.session.id).log.load().events
             if getattr(e, "origin", None) == "undo"]
    assert notes[-1].startswith("[Abhed: an undo interrupted earlier was finished: the workspace is as it was before "
                                "checkpoint 1.")
    assert tree_state(ws) == old  # bytes and exact modes, the killed run's files included
    assert journal.read(shadow.dir, journal.UNDO) is None
    assert "An undo was interrupted" not in abhed("checkpoints", t.session.id, cwd=ws).stderr
    # The modes the store keeps are the restored ones: undoing the undo gives back the call's result.
    assert abhed("undo", "--yes", t.session.id, cwd=ws).returncode == 0
    assert tree_state(ws) == new


def test_rollback_puts_back_the_workspace_as_before_the_killed_undo(ws: Path, home: Path, tmp_path: Path) -> None:
    t, old, new = _session(ws, home)
    _killed_undo(ws, home, t, tmp_path / "paused", "undo:7")
    done = abhed("undo", "--rollback", "--yes", t.session.id, cwd=ws)
    assert done.returncode == 0, done.stderr
    assert "Rolled back: the interrupted undo is closed; the workspace is as it was before the undo (checkpoint 2)." \
        in done.stdout
    assert tree_state(ws) == new
    assert journal.read(Shadow(home, ws).dir, journal.UNDO) is None
    nothing = abhed("undo", "--finish", "--yes", t.session.id, cwd=ws)
    assert nothing.returncode == 0 and "No undo was interrupted in this workspace" in nothing.stdout


def test_finish_rollback_and_to_exclude_one_another(ws: Path, home: Path) -> None:
    out = abhed("undo", "--finish", "--rollback", cwd=ws)
    assert out.returncode == 2 and "--finish, --rollback and --to exclude one another" in out.stderr


def test_a_killed_first_checkpoint_is_named_by_the_next_call(ws: Path, home: Path, tmp_path: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    marker = tmp_path / "paused"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from abhed_testing import Tools; "
            "from abhed.session.checkpoint import Checkpoints, Shadow; from pathlib import Path; "
            "t = Tools(Path(sys.argv[2]), Path(sys.argv[3])); t.ctx.checkpoints = Checkpoints(Shadow(t.ctx.settings.home, t.ws)); "
            "t('bash', command='echo b > b.txt', description='x')")
    env = {**os.environ, "ABHED_TEST_PAUSE": "snapshot", "ABHED_TEST_PAUSE_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parent), str(ws), str(home)], env=env)
    while not marker.exists():
        assert proc.poll() is None
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (ws / "b.txt").exists()  # the call never ran
    t = Tools(ws, home)
    t.ctx.checkpoints = Checkpoints(Shadow(home, ws))
    t.ok("read", path=str(ws / "a.txt"))
    out = t("write", path=str(ws / "a.txt"), content="new\n")
    assert not out.is_error
    assert "the before snapshot of call " in out.content and "(bash) of session " in out.content
    assert "was interrupted (Abhed was killed) and never recorded: that call has no checkpoint of its own. This " \
           "snapshot retakes the workspace whole" in out.content
    assert out.metadata["checkpoint"]["number"] == 1
    assert Shadow(home, ws).chain(t.session.id)[0].meta["interrupted"] == out.metadata["checkpoint"]["interrupted"]
    again = t("write", path=str(ws / "a.txt"), content="newer\n")
    assert "interrupted" not in again.content  # said once
    t.ctx.close()
    from abhed.session.undo import undo
    undo(t.ctx.checkpoints, t.session, 1, force=False, confirm=lambda s: True)
    assert (ws / "a.txt").read_text() == "a\n"


def test_a_stale_index_lock_waits_for_its_owner_then_is_cleared(ws: Path, home: Path) -> None:
    """git's index.lock is cleared only once the process that may write it is gone: a git child of a
    killed Abhed holds the store's lock (inherited), so the next snapshot waits for it to die."""
    (ws / "a.txt").write_text("a\n")
    shadow = Shadow(home, ws)
    with shadow.locked():
        pass  # the store exists
    fd = os.open(shadow.dir / "lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    holder = subprocess.Popen(["sleep", "600"], pass_fds=(fd,))  # stands for a surviving git child
    os.close(fd)
    (shadow.git_dir / "index.lock").write_bytes(b"half")
    done = threading.Event()

    def snap() -> None:
        shadow.snapshot("s1", "before", {"call": "c", "tool": "write", "agent_id": "main"})
        done.set()
    worker = threading.Thread(target=snap)
    worker.start()
    time.sleep(0.5)
    assert not done.is_set() and (shadow.git_dir / "index.lock").read_bytes() == b"half"
    holder.kill()
    holder.wait()
    worker.join()
    assert done.is_set() and not (shadow.git_dir / "index.lock").exists()
    assert shadow.tip("s1")[1]["number"] == 1


def test_git_children_inherit_the_lock(ws: Path, home: Path) -> None:
    shadow = Shadow(home, ws)
    assert shadow.lock_fds() == ()
    with shadow.locked():
        (fd,) = shadow.lock_fds()
        assert os.path.samefile(f"/proc/self/fd/{fd}", shadow.dir / "lock")
        out = shadow.git("rev-parse", "--git-dir")  # a git child: the descriptor is open in it
        assert out
    assert shadow.lock_fds() == ()


def test_a_journal_is_read_back_whole_and_a_damaged_one_reads_as_an_empty_record(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    assert journal.read(tmp_path, journal.UNDO) is None
    journal.write(tmp_path, journal.UNDO, {"session": "s", "number": 3, "to": 1})
    assert journal.read(tmp_path, journal.UNDO) == {"session": "s", "number": 3, "to": 1, "pid": os.getpid()}
    assert stat.S_IMODE((tmp_path / journal.UNDO).stat().st_mode) == 0o600
    journal.write(tmp_path, journal.SNAPSHOT, {"kind": "before"})
    assert journal.read(tmp_path, journal.SNAPSHOT) == {"kind": "before", "pid": os.getpid()}
    assert sorted(p.name for p in tmp_path.iterdir()) == [journal.SNAPSHOT, journal.UNDO]  # no temporary left
    (tmp_path / journal.UNDO).write_text("{half")
    assert journal.read(tmp_path, journal.UNDO) == {}
    (tmp_path / journal.UNDO).write_text("[1]")
    assert journal.read(tmp_path, journal.UNDO) == {}
    journal.clear(tmp_path, journal.UNDO)
    journal.clear(tmp_path, journal.UNDO)  # gone already: no error
    assert journal.read(tmp_path, journal.UNDO) is None
    monkeypatch.setenv("ABHED_TEST_PAUSE", "undo:2")
    monkeypatch.setenv("ABHED_TEST_PAUSE_MARKER", str(tmp_path / "marker"))
    journal.pause("undo:1")  # another point: returns at once
    assert not (tmp_path / "marker").exists()


def test_the_notices_say_which_undo_to_which_checkpoint_and_when() -> None:
    facts = {"session": "s1", "number": 4, "to": 2, "started": "2026-01-02 03:04:05", "pid": 77}
    assert journal.undo_notice(facts) == (
        "An undo was interrupted: undo checkpoint 4 of session s1, taking the workspace back to before checkpoint 2, "
        "started 2026-01-02 03:04:05 (process 77), never finished: Abhed was killed or the machine stopped while it "
        "restored files, so the workspace is part-way between the two. Finish it with `abhed undo --finish s1`, or "
        "put back the workspace as it was before it with `abhed undo --rollback s1`.")
    assert journal.undo_notice({}).startswith("An undo was interrupted: undo checkpoint ? of session ?, taking the "
                                              "workspace back to before checkpoint ?, started ? (process ?)")
    said = journal.snapshot_notice({"session": "s1", "kind": "after", "call": "c9", "tool": "bash",
                                    "started": "then", "pid": 5})
    assert said.startswith("the after snapshot of call c9 (bash) of session s1, started then by process 5, was "
                           "interrupted")
    assert journal.snapshot_notice({}).startswith("the ? snapshot of call ? (?) of session ?, started ? by process ?")


def test_a_damaged_undo_journal_is_said_and_not_guessed(ws: Path, home: Path) -> None:
    t, old, new = _session(ws, home)
    shadow = Shadow(home, ws)
    (shadow.dir / journal.UNDO).write_text("{}")
    out = abhed("undo", "--finish", "--yes", t.session.id, cwd=ws)
    assert out.returncode == 2 and f"{shadow.dir / journal.UNDO}, is damaged" in out.stderr
    assert tree_state(ws) == new


def test_chat_start_names_the_interrupted_undo_and_finishes_it_with_slash_undo(ws: Path, home: Path,
                                                                                 tmp_path: Path) -> None:
    from abhed.model.replay import ReplayServer, Turn
    t, old, new = _session(ws, home)
    _killed_undo(ws, home, t, tmp_path / "paused", "undo:3")
    with ReplayServer([Turn(text="unused")]) as server:
        out = abhed("chat", "--session", t.session.id, "--endpoint", server.url, "--workspace", str(ws),
                    input="/undo --finish\ny\n/exit\n", cwd=ws)
    shown = out.stdout + out.stderr
    assert f"An undo was interrupted: undo checkpoint 2 of session {t.session.id}" in " ".join(shown.split())
    assert "In this chat: /undo --finish or /undo --rollback." in " ".join(shown.split())
    assert "Finished: the interrupted undo is closed" in " ".join(shown.split()), shown[-3000:]
    assert tree_state(ws) == old
    assert journal.read(Shadow(home, ws).dir, journal.UNDO) is None


def test_a_snapshot_that_fails_and_says_so_is_not_called_interrupted_later(ws: Path, home: Path) -> None:
    from abhed.session.checkpoint import CheckpointError
    (ws / "a.txt").write_text("a\n")
    with pytest.raises(CheckpointError):  # the store's disk reserve, out of reach
        Shadow(home, ws, disk_reserve_bytes=10**18).snapshot("s", "before", {"call": "c", "tool": "write"})
    shadow = Shadow(home, ws)
    assert journal.read(shadow.dir, journal.SNAPSHOT) is None
    _, capture = shadow.snapshot("s", "before", {"call": "d", "tool": "write"})
    assert capture.interrupted == ""


def _finish(t: Tools, home: Path, ws: Path, *, rollback: bool = False, asked: list | None = None) -> str:
    from abhed.session import undo as undoing
    session = SessionStore(home).open(t.session.id)
    return undoing.finish(Checkpoints(Shadow(home, ws)), session, rollback=rollback, force=False,
                          confirm=lambda plan: (asked if asked is not None else []).append(plan) or True)


def test_finishing_an_undo_killed_after_its_last_file_still_does_the_mode_fix_up(ws: Path, home: Path) -> None:
    """Killed between the last restored file and the mode fix-up: nothing is left to restore, the
    fix-up and the undo's "after" snapshot still happen, and the journal goes."""
    from abhed.session import undo as undoing
    t, old, new = _session(ws, home)
    shadow = Shadow(home, ws)
    session = SessionStore(home).open(t.session.id)
    undoing.undo(Checkpoints(shadow), session, 1, force=False, confirm=lambda plan: True)
    assert tree_state(ws) == old
    (shadow.dir / "modes.json").unlink()  # as if the fix-up never ran
    journal.write(shadow.dir, journal.UNDO, {"session": t.session.id, "number": 2, "to": 1, "call": "undo-x",
                                             "started": "then"})
    assert undoing.interrupted(Checkpoints(shadow)).startswith("An undo was interrupted: undo checkpoint 2")
    asked: list[str] = []
    assert _finish(t, home, ws, asked=asked) == ("Finished: the interrupted undo is closed; the workspace is as it "
                                                 "was before checkpoint 1.")
    assert asked == []  # nothing to change: nothing to confirm
    assert json.loads((shadow.dir / "modes.json").read_text())["modes"] == {
        f"f{i:02}.txt": 0o640 if i % 3 else 0o600 for i in range(FILES)}
    assert undoing.interrupted(Checkpoints(shadow)) is None
    tip = shadow.tip(t.session.id)[1]
    assert (tip["kind"], tip["number"], tip["ended"], tip["call"]) == ("after", 2, "finish done", "undo-x")


def test_finish_refuses_the_undo_of_another_session_and_changes_nothing(ws: Path, home: Path) -> None:
    from abhed.session.checkpoint import CheckpointError
    t, old, new = _session(ws, home)
    shadow = Shadow(home, ws)
    journal.write(shadow.dir, journal.UNDO, {"session": "other-1", "number": 2, "to": 1})
    with pytest.raises(CheckpointError) as refused:
        _finish(t, home, ws, rollback=True)
    assert str(refused.value) == (f"The interrupted undo is one of session other-1, not of {t.session.id}: run "
                                  "`abhed undo --rollback other-1` (outside a chat of that session).")
    assert tree_state(ws) == new and journal.read(shadow.dir, journal.UNDO) is not None


def test_a_cancelled_rollback_changes_nothing_and_keeps_the_journal(ws: Path, home: Path, tmp_path: Path) -> None:
    from abhed.session import undo as undoing
    t, old, new = _session(ws, home)
    _killed_undo(ws, home, t, tmp_path / "paused", "undo:4")
    half = tree_state(ws)
    shadow = Shadow(home, ws)
    shown: list[str] = []
    said = undoing.finish(Checkpoints(shadow), SessionStore(home).open(t.session.id), rollback=True, force=False,
                          confirm=lambda plan: shown.append(plan) and False)
    assert said == "Roll back cancelled; nothing was changed."
    assert shown[0].startswith("Roll back the interrupted undo: Undo to before checkpoint 2 changes ")
    assert tree_state(ws) == half and journal.read(shadow.dir, journal.UNDO) is not None

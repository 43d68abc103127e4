"""A session store that fails (issue 33, finding 1): full (ENOSPC), read-only (EROFS), refused (EACCES).

Real filesystems, no mocks: a small tmpfs mounted for the test and filled, or remounted read-only;
a session directory its owner may not write, with root's override dropped (setpriv). Each case is
judged by what is on disk (the file written or not, temporary files left, the events in the log
and whether `sessions verify` still finds it intact) and by the message and exit status. The rule
under test (docs/security.md, "The session store"): no call runs that the log does not hold; a
call that ran is reported as landed, its result first and the store's failure beside it; the run
stops; no temporary file is left.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from abhed.agent import dispatch
from abhed.session.audit import verify_session
from abhed.session.events import ActionEvent, ObservationEvent
from abhed.session.store import SessionError, SessionStore
from abhed.session.storefail import store_error
from abhed_testing import REPO, Tools, abhed

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs (or drop its override)")

PAGE = 4096
FULL = "its filesystem is full"
SESSION_FILES = {"events.jsonl", "events.head", "state.json", "lock", "blobs", "summary.json"}


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(mount: Path, leave_pages: int = 0) -> None:
    """Fill the filesystem of `mount` to the last byte, then free `leave_pages` pages again."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = PAGE
        while size >= 1:
            try:
                os.write(fd, b"f" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                size //= 2
    finally:
        os.close(fd)
    if leave_pages:
        os.truncate(mount / "filler", os.stat(mount / "filler").st_size - leave_pages * PAGE)


def unfill(mount: Path) -> None:
    (mount / "filler").unlink()


def leftovers(*directories: Path) -> list[str]:
    """Temporary files left in `directories` (and a session's blobs/): the head's and atomic writes'."""
    found = []
    for directory in directories:
        for path in [*directory.iterdir(), *((directory / "blobs").iterdir() if (directory / "blobs").is_dir() else [])]:
            if path.name.startswith(".events.head.") or ".abhed-tmp-" in path.name:
                found.append(str(path))
    return found


def events(tools: Tools) -> list:
    return tools.session.log.load().events


def assert_intact(tools: Tools) -> None:
    """The log and its head agree (nothing torn, nothing past the head) and nothing temporary is left."""
    verdict = verify_session(tools.session.dir)
    assert verdict.ok and verdict.status == "OK", verdict.problem
    assert set(os.listdir(tools.session.dir)) <= SESSION_FILES
    assert leftovers(tools.session.dir, tools.ws) == []


def assert_not_run(result, log: Path, reason: str) -> None:
    assert result.is_error and result.metadata["error_kind"] == dispatch.STORE_FAILED
    assert result.content.startswith(f"Not run: the session store could not append an event to {log} (")
    assert reason in result.content and "Nothing was changed." in result.content


# -- the store apart from the workspace ----------------------------------------------------------------

@needs_root
@pytest.mark.parametrize("name, args", [
    ("write", {"path": "new.txt", "content": "hello\n"}),
    ("edit", {"path": "old.txt", "old_string": "old", "new_string": "new"}),
    ("bash", {"command": "echo ran > ran.txt", "description": "write a marker"}),
    ("read", {"path": "old.txt"}),
])
def test_a_full_store_runs_no_call_and_says_what_to_free(small: Path, tmp_path: Path, name: str, args: dict) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "old.txt").write_text("old\n")
    tools = Tools(ws, small / "home")
    tools.ok("read", path=str(ws / "old.txt"))
    before = len(events(tools))
    fill(small)
    try:
        result = tools(name, **{k: str(ws / v) if k == "path" else v for k, v in args.items()})
    finally:
        tools.ctx.close()
    assert_not_run(result, tools.session.log.path, FULL)
    assert f"old sessions are in {small / 'home' / 'sessions'}" in result.content
    assert "point ABHED_HOME to a larger disk" in result.content
    assert sorted(os.listdir(ws)) == ["old.txt"] and (ws / "old.txt").read_text() == "old\n"  # nothing ran
    assert len(events(tools)) == before  # the log is as it was: no action, no torn line
    assert_intact(tools)


@needs_root
def test_a_call_that_landed_before_the_store_filled_is_told_as_landed(small: Path) -> None:
    """The store fills between the call's action and its result: for some free space the write's
    action (and its content, a blob) fits, the file is written, and its result no longer fits. Every
    outcome, whichever free space, is true to the disk; the landed one is seen at least once. The
    workspace shares the store's filesystem (the case of the report)."""
    ws = small / "ws"
    ws.mkdir()
    tools = Tools(ws, small / "home")
    outcomes = []
    for pages in range(0, 24):
        target = ws / f"f{pages}.txt"
        content = f"{pages}\n" * (10 * 1024)  # over 16 KiB: its action stores it as a blob
        fill(small, pages)
        try:
            result = tools("write", path=str(target), content=content)
        finally:
            unfill(small)
        logged = {type(e).__name__ for e in events(tools)[-2:]}
        if result.metadata.get("error_kind") == dispatch.STORE_FAILED:
            outcomes.append("not run")
            assert not target.exists() and "ActionEvent" not in logged
        elif result.metadata.get("store_error"):
            outcomes.append("landed")
            assert target.read_text() == content  # the effect happened, and is reported so:
            assert result.content.startswith(f"Created {target}: wrote {len(content)} bytes")  # the result first
            last = events(tools)[-1]
            observed = isinstance(last, ObservationEvent) and str(target) in last.content
            lost = ("its result is in the session log, but the session's state after it could not be saved"
                    if observed else "the session log does not hold its result")
            assert (f"\n[Abhed: this call ran: its result above stands and its effect is in place, but {lost}: the "
                    "session store could not ") in result.content
            assert FULL in result.content and result.content.endswith("no call runs until the store can record it.]")
        elif result.is_error:  # the workspace's own ENOSPC: the write's usual error, recorded
            outcomes.append("refused")
            assert not target.exists() and "ObservationEvent" in logged
            assert f"No space left on the device while creating {target}" in result.content
        else:
            outcomes.append("recorded")
            assert target.read_text() == content and "ObservationEvent" in logged
        assert_intact(tools)
    assert "landed" in outcomes and "not run" in outcomes and outcomes[-1] == "recorded", outcomes


@needs_root
def test_a_full_store_starts_no_session(small: Path, tmp_path: Path) -> None:
    fill(small)
    with pytest.raises(SessionError) as refused:
        SessionStore(small / "home").create(tmp_path, "s1")
    message = str(refused.value)
    assert message.startswith("Session 's1' could not be started, and nothing was run: the session store could not ")
    assert str(small / "home" / "sessions") in message and FULL in message
    assert leftovers(small / "home" / "sessions" / "s1") == []


@needs_root
def test_abhed_tool_on_a_full_store_is_an_error_not_a_traceback(small: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"ABHED_HOME": str(small / "home"), "ABHED_CONFIG": ""}
    assert abhed("tool", "read", json.dumps({"path": str(REPO / "README.md")}), "--workspace", str(ws),
                 "--session", "s", env=env, cwd=ws).returncode == 0
    fill(small)
    proc = abhed("tool", "write", json.dumps({"path": str(ws / "a.txt"), "content": "a"}), "--workspace", str(ws),
                 "--session", "s", env=env, cwd=ws)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 1 and proc.stdout.startswith("Not run: the session store could not append an event to "
                                                           f"{small / 'home' / 'sessions' / 's' / 'events.jsonl'}")
    assert f"abhed: the session store could not append an event to" in proc.stderr and FULL in proc.stderr
    assert not (ws / "a.txt").exists()
    fresh = abhed("tool", "read", json.dumps({"path": str(REPO / "README.md")}), "--workspace", str(ws), env=env,
                  cwd=ws)  # a new session
    assert "Traceback" not in fresh.stderr and fresh.returncode == 2
    assert "could not be started, and nothing was run: the session store could not" in fresh.stderr
    assert FULL in fresh.stderr
    assert leftovers(*(small / "home" / "sessions").iterdir()) == []


# -- the store and the workspace on one filesystem -------------------------------------------------------

@needs_root
def test_a_command_that_fills_the_shared_disk_is_told_as_landed_and_stops_the_run(small: Path) -> None:
    """`abhed run` against the replay server: the model's first call fills the disk the workspace
    and the store share; the command's effect is in place and reported so, the run stops with
    status 1 and says why, and the model's next call (a write) never runs."""
    from abhed.model.replay import ReplayServer, Turn
    ws, home = small / "ws", small / "home"
    ws.mkdir()
    config = small.parent / "config.toml"
    config.write_text("[sandbox]\ndisk_reserve_bytes = 0\n[checkpoints]\nenabled = false\n")
    turns = [Turn(calls=[("bash", {"command": "head -c 8M /dev/zero > big; echo wrote", "description": "fill"})]),
             Turn(calls=[("write", {"path": str(ws / "after.txt"), "content": "no\n"})]), Turn(text="done")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "fill the disk", "--endpoint", server.url, "--mode", "auto", "--workspace", str(ws),
                     env={"ABHED_HOME": str(home), "ABHED_CONFIG": str(config)}, cwd=ws)
        asked = len(server.requests)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("Stopped before finishing: the session store failed.")
    assert ("abhed: the run stopped because the session store failed (no call runs that the log does not record): "
            "the session store could not append an event to ") in proc.stderr
    assert FULL in proc.stderr and "abhed resume " in proc.stdout
    assert (ws / "big").stat().st_size > 0 and not (ws / "after.txt").exists()  # landed; the next call never ran
    assert asked == 1  # the model was not asked again
    (ws / "big").unlink()  # room again: the log is intact, the call it holds is the one that ran
    session = next((home / "sessions").iterdir())
    assert verify_session(session).ok and leftovers(session, ws) == []
    logged = SessionStore(home).open(session.name).log.load().events
    actions = [e for e in logged if isinstance(e, ActionEvent)]
    assert [a.tool for a in actions] == ["bash"]
    assert not any(isinstance(e, ObservationEvent) and e.action_id == actions[0].id for e in logged)


# -- read-only and refused stores -------------------------------------------------------------------------

@needs_root
def test_a_read_only_store_runs_no_call_and_says_to_remount(small: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    tools = Tools(ws, small / "home")
    subprocess.run(["mount", "-o", "remount,ro", str(small)], check=True)
    try:
        result = tools("write", path=str(ws / "a.txt"), content="a")
        started = abhed("tool", "read", json.dumps({"path": str(REPO / "README.md")}), "--workspace", str(ws),
                        "--session", tools.session.id, env={"ABHED_HOME": str(small / "home"), "ABHED_CONFIG": ""})
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small)], check=True)
    assert result.is_error and result.metadata["error_kind"] == dispatch.STORE_FAILED
    assert result.content.startswith(f"Not run: the session store could not open {tools.session.log.path} "
                                     "(Read-only file system); its filesystem is read-only: remount it read-write, or "
                                     "point ABHED_HOME to a writable directory. Nothing was changed.")
    assert not (ws / "a.txt").exists()
    assert "Traceback" not in started.stderr and started.returncode == 2
    assert f"the session store could not open the lock file {tools.session.dir / 'lock'} (Read-only file system)" \
        in started.stderr
    assert_intact(tools)


@needs_root
def test_a_store_its_user_may_not_write_runs_no_call_and_says_whom_to_let(tmp_path: Path, home: Path) -> None:
    """The session directory made read-only for its owner, root's override dropped (setpriv): the
    append works (the log is writable), the head's replacement is refused, and the log is cut back."""
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"ABHED_HOME": str(home), "ABHED_CONFIG": ""}
    assert abhed("tool", "read", json.dumps({"path": str(REPO / "README.md")}), "--workspace", str(ws), "--session",
                 "p", env=env).returncode == 0
    session = home / "sessions" / "p"
    size = (session / "events.jsonl").stat().st_size
    session.chmod(0o500)
    try:
        proc = abhed("tool", "write", json.dumps({"path": str(ws / "a.txt"), "content": "a"}), "--workspace", str(ws),
                     "--session", "p", env=env, obey_permissions=True)
    finally:
        session.chmod(0o700)
    assert "Traceback" not in proc.stderr and proc.returncode == 1
    assert proc.stdout.startswith(f"Not run: the session store could not append an event to {session / 'events.jsonl'} "
                                  "(Permission denied); user root (uid 0) may not write there: give that user write "
                                  f"access to {home / 'sessions'} (chown or chmod), or point ABHED_HOME to a directory "
                                  "the user owns. Nothing was changed.")
    assert not (ws / "a.txt").exists()
    assert (session / "events.jsonl").stat().st_size == size  # cut back: no action of a call that never ran
    assert verify_session(session).ok and leftovers(session) == []


# -- what each failure says (the advice itself, for the causes a test cannot make on demand) --------------

@pytest.mark.parametrize("code, says", [
    (errno.ENOSPC, "its filesystem is full ("), (errno.EDQUOT, "its filesystem is full ("),
    (errno.EROFS, "its filesystem is read-only: remount it read-write, or point ABHED_HOME to a writable directory"),
    (errno.EACCES, "may not write there: give that user write access to"),
    (errno.EPERM, "may not write there: give that user write access to"),
    (errno.EIO, "the disk or filesystem failed: check it (dmesg, fsck), or point ABHED_HOME to another disk"),
])
def test_each_cause_says_what_to_do(tmp_path: Path, code: int, says: str) -> None:
    log = tmp_path / "home" / "sessions" / "s" / "events.jsonl"  # nothing of it exists: the nearest parent answers
    error = store_error(OSError(code, os.strerror(code)), log, "append an event to")
    assert error.message.startswith(f"the session store could not append an event to {log} ({os.strerror(code)}); ")
    assert says in error.message and (error.path, error.errno) == (log, code)
    if code in (errno.ENOSPC, errno.EDQUOT):
        assert re.search(r"its filesystem is full \(\d{1,3}(,\d{3})* bytes free\): free space there", error.message)
        assert f"old sessions are in {tmp_path / 'home' / 'sessions'})" in error.message
    if code in (errno.EACCES, errno.EPERM):
        assert f"(uid {os.getuid()}) may not write there" in error.message
        assert f"write access to {tmp_path / 'home' / 'sessions'} (chown or chmod)" in error.message


def test_a_path_outside_any_sessions_directory_names_its_own_directory(tmp_path: Path) -> None:
    error = store_error(OSError(errno.EACCES, "Permission denied"), tmp_path / "x" / "f", "open")
    assert f"write access to {tmp_path / 'x'} (chown or chmod)" in error.message
    bare = store_error(OSError("no errno"), tmp_path / "f", "open")
    assert bare.message.startswith(f"the session store could not open {tmp_path / 'f'} (OSError); the disk or ")


def test_the_error_reads_as_its_message(tmp_path: Path) -> None:
    error = store_error(OSError(errno.EROFS, "Read-only file system"), tmp_path / "f", "open")
    assert str(error) == error.message


@needs_root
def test_a_user_without_a_name_is_named_by_uid() -> None:
    """A process of a uid with no passwd entry (a container's, a CI runner's): its uid alone."""
    from abhed.session import storefail
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.setuid(54321)
            os.write(write, storefail._user().encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as answer:
        assert answer.read() == b"uid 54321"


def test_a_sync_that_fails_names_the_log(tmp_path: Path) -> None:
    """An fsync of events appended unsynced cannot be made (here: the log is gone): told, as a store failure."""
    from abhed.session.events import EventLog
    from abhed.session.storefail import StoreError
    log = EventLog(tmp_path / "events.jsonl")
    with pytest.raises(StoreError) as failed:
        log.sync()
    assert failed.value.message.startswith(f"the session store could not make durable the events of {log.path} (No "
                                           "such file or directory); the disk or filesystem failed")


def test_the_log_and_its_head_are_the_owner_s_alone(tmp_path: Path) -> None:
    import stat
    from abhed.session.events import ActionEvent, EventLog
    log = EventLog(tmp_path / "events.jsonl")
    log.append(ActionEvent(session_id="s", tool="t", input={}))
    for path in (log.path, tmp_path / "events.head"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@needs_root
def test_a_session_whose_first_event_cannot_be_written_is_not_begun(tmp_path: Path, home: Path) -> None:
    """The log refuses its first event (its file is not writable: root's override dropped) while
    state.json could be saved: the session is not begun at all, rather than begun without the event
    that declares its chain."""
    directory, ws = home / "sessions" / "first", tmp_path / "ws"
    directory.mkdir(parents=True)
    ws.mkdir()
    (directory / "events.jsonl").touch(mode=0o400)
    proc = abhed("tool", "read", json.dumps({"path": str(REPO / "README.md")}), "--workspace", str(ws),
                 "--session", "first", env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""}, obey_permissions=True)
    assert "Traceback" not in proc.stderr and proc.returncode == 2
    assert (f"Session 'first' could not be started, and nothing was run: the session store could not open "
            f"{directory / 'events.jsonl'} (Permission denied)") in proc.stderr
    assert not (directory / "state.json").exists() and (directory / "events.jsonl").read_bytes() == b""


@pytest.mark.parametrize("name, args, before_run", [
    ("write", {"path": "new.txt", "content": "hello\n"}, True),
    ("bash", {"command": "true", "description": "nothing"}, True),
    ("grep", {"pattern": "old", "path": "."}, False),
    ("read", {"path": "old.txt"}, False),
    ("glob", {"pattern": "*.txt", "path": "."}, False),
])
@pytest.mark.parametrize("durable", [True, False])
def test_the_log_is_fsynced_before_a_call_that_may_change_anything_and_before_any_result_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, args: dict, before_run: bool, durable: bool) -> None:
    """A read-only native tool runs once its action is appended (its fsync would cost each grep some
    1-2 ms): the fsync after it, the observation's or the loop's log.sync() before the model sees the
    result, covers both. Any other call's action is durable before the tool runs."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "old.txt").write_text("old\n")
    tools = Tools(ws, tmp_path / "home")
    order: list[str] = []
    real_fsync, real_execute = os.fsync, dispatch._execute
    log = tools.session.log.path

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(log):
            order.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(dispatch, "_execute", lambda *a, **k: (order.append("run"), real_execute(*a, **k))[1])
    try:
        result = dispatch.call(tools.ctx, name, {k: str(ws / v) if k == "path" else v for k, v in args.items()},
                               tools.gate, durable=durable)
        assert not result.is_error, result.content
        if not durable:
            tools.session.log.sync()  # as the loop does, before the model sees the results
    finally:
        tools.ctx.close()
    assert order[:2] == (["fsync", "run"] if before_run else ["run", "fsync"]), order
    assert order[-1] == "fsync"
    kinds = [type(e).__name__ for e in events(tools)][-2:]
    assert kinds == ["ActionEvent", "ObservationEvent"]

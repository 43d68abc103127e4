"""Issues 14 and 33: processes writing and editing one file, each after its own read, never lose a
change, whatever their ABHED_HOME or user; a lock held for ever ends in a clear error, not a hang."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from abhed.files import atomic, filelock
from abhed_testing import REPO

# One writer: rounds of (read, then write or edit adding the line <TAG i>), retried after a refusal.
# Every change keeps all the file held when it was read, so a line missing at the end is a change
# that was reported done and then overwritten by a writer that never saw it: a lost update.
WORKER = r"""
import json, sys
from pathlib import Path
from abhed.session import config
from abhed.agent import dispatch
from abhed.gate.approval import Gate, Policy
from abhed.files.paths import PathPolicy
from abhed.session.store import SessionStore
from abhed.tools.base import ToolContext

ws, home, tag, rounds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
targets = sys.argv[5:]
settings = config.load(env={"ABHED_HOME": str(home), "ABHED_CONFIG": ""})
ctx = ToolContext(SessionStore(home).create(ws), settings, PathPolicy.create(ws))
gate = Gate(Policy.create("accept-edits", [], [], ws), invoked_by_human=True)
done, refused = [], 0
for i in range(rounds):
    target = targets[i % len(targets)]
    line = f"<{tag}{i}>"
    while True:
        dispatch.call(ctx, "read", json.dumps({"path": target, "limit": 1}), gate)
        if i % 2:
            args = {"path": target, "old_string": "END\n", "new_string": f"{line}\nEND\n"}
            result = dispatch.call(ctx, "edit", json.dumps(args), gate)
        else:  # the content as read (read records its hash), plus the line: a whole-file write
            seen = Path(target).read_text()
            args = {"path": target, "content": seen.replace("END\n", f"{line}\nEND\n")}
            result = dispatch.call(ctx, "write", json.dumps(args), gate)
        if not result.is_error:
            done.append([target, line])
            break
        assert "changed on disk since you read it" in result.content, result.content
        refused += 1
print(json.dumps({"done": done, "refused": refused}), flush=True)
"""

ROUNDS = 30
FILLER = "x" * 100 + "\n"


def _user(name: str) -> pwd.struct_passwd:
    from users import ensure_user
    return ensure_user(name)


def _as_user(user: pwd.struct_passwd) -> tuple[list[str], dict]:
    """A Python the user can run (root's lives under /root, 0700) that imports this tree, and Popen kwargs."""
    python = "/usr/bin/python3"
    site = next(Path(REPO / ".venv" / "lib").glob("python3*/site-packages"))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{site}", "LANG": "C.UTF-8", "HOME": "/tmp"}
    return [python], {"env": env, "user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


@pytest.fixture
def shared():
    """A workspace two users may both write, and homes apart, in a place both can reach."""
    base = Path(tempfile.mkdtemp(prefix="abhed-lock-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_writers_of_two_homes_and_two_users_lose_no_update(shared):
    """Three real processes (root with home A, root with home B, an unprivileged user with home C)
    write and edit the same two files; judged on the files on disk: every change reported done is
    there, and every refusal is the "changed since you read it" one."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start the second user's process")
    user = _user("abhed-lock-test")
    ws = shared / "ws"
    ws.mkdir()
    os.chown(ws, user.pw_uid, user.pw_gid)
    targets = [ws / "one.txt", ws / "two.txt"]
    for target in targets:
        target.write_text(FILLER * 500 + "END\n")  # 50 KB: a wide window between check and rename
        os.chown(target, user.pw_uid, user.pw_gid)
    homes = {}
    for name in "abc":
        homes[name] = shared / f"home-{name}"
        homes[name].mkdir()
    os.chown(homes["c"], user.pw_uid, user.pw_gid)
    argv = lambda tag: ["-c", WORKER, str(ws), str(homes[tag]), tag, str(ROUNDS), *map(str, targets)]  # noqa: E731
    python, kwargs = _as_user(user)
    procs = [subprocess.Popen([sys.executable, *argv(tag)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for tag in "ab"]
    procs.append(subprocess.Popen([*python, *argv("c")], cwd=shared, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, **kwargs))
    outs = [p.communicate() for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err
    reports = [json.loads(out) for out, _ in outs]
    text = {str(t): t.read_text() for t in targets}
    done = [(target, line) for report in reports for target, line in report["done"]]
    assert len(done) == 3 * ROUNDS
    lost = [line for target, line in done if line not in text[target]]
    assert lost == [], f"changes reported as done but missing from the files: {lost}"
    assert {st.st_uid for st in map(os.stat, targets)} <= {0, user.pw_uid}
    assert not [n for n in os.listdir(ws) if atomic.TEMP_MARK in n]


def test_the_rename_is_refused_when_the_file_changed_after_it_was_read(tmp_path):
    target = tmp_path / "f.txt"
    target.write_bytes(b"seen\n")
    seen = hashlib.sha256(b"seen\n").hexdigest()
    target.write_bytes(b"someone else's\n")
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(atomic.Conflict):
            atomic.replace_at(dirfd, "f.txt", b"mine\n", mode=0o644, expect=seen)
        with pytest.raises(atomic.Conflict):  # expect=None: creating, but it exists now
            atomic.replace_at(dirfd, "f.txt", b"mine\n", mode=0o644, expect=None)
        atomic.replace_at(dirfd, "f.txt", b"mine\n", mode=0o644, expect=hashlib.sha256(b"someone else's\n").hexdigest())
    finally:
        os.close(dirfd)
    assert target.read_bytes() == b"mine\n"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]  # no temporary file left behind


def _dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_the_lock_is_the_directory_s_whatever_path_names_it(ws):
    """Held through one name, it is held through a symlinked alias too (the same inode); released, it is free."""
    (ws / "d").mkdir()
    (ws / "alias").symlink_to(ws / "d")
    one, two, other = _dir(ws / "d"), _dir(ws / "alias"), _dir(ws)
    try:
        with filelock.locked(one, 1):
            with pytest.raises(BlockingIOError):
                fcntl.flock(two, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another directory: not held
        fcntl.flock(two, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released at the end of the block
    finally:
        for fd in (one, two, other):
            os.close(fd)


HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_lock_held_past_the_deadline_is_busy_naming_the_holder_then_free(ws):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ws)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    dirfd = _dir(ws)
    try:
        started = time.monotonic()
        with pytest.raises(filelock.Busy) as busy:
            filelock.acquire(dirfd, 0.3)
        assert time.monotonic() - started >= 0.3  # it did wait for the deadline
        assert busy.value.waited_s == 0.3
        comm = Path(f"/proc/{holder.pid}/comm").read_text().strip()
        assert busy.value.holders == [f"PID {holder.pid} ({comm})"]
        assert str(busy.value) == f"locked by {busy.value.holders[0]} for 0.3 s"
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait()
        with filelock.locked(dirfd, 0.3):  # free once the holder is gone
            assert filelock.holders(dirfd) == [f"PID {os.getpid()} ({Path('/proc/self/comm').read_text().strip()})"]
    finally:
        os.close(dirfd)
        holder.kill()
        holder.wait()


def test_a_waiter_gets_the_lock_when_the_holder_lets_go_before_the_deadline(ws):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ws)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    dirfd = _dir(ws)
    try:
        holder.stdin.write("\n")  # lets go in a moment, while we wait
        holder.stdin.flush()
        filelock.acquire(dirfd, 60)
        assert filelock.holders(dirfd)[0].startswith(f"PID {os.getpid()} ")
    finally:
        os.close(dirfd)
        holder.wait()


def test_no_holder_is_named_when_the_directory_is_not_locked(ws):
    dirfd = _dir(ws)
    try:
        assert filelock.holders(dirfd) == []
    finally:
        os.close(dirfd)


def test_a_descriptor_that_cannot_be_locked_is_an_oserror_not_a_wait(ws):
    """An O_PATH descriptor cannot be flocked (EBADF), as on a filesystem without locks: the caller refuses."""
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as raised:
            filelock.acquire(fd, 60)
        assert not isinstance(raised.value, BlockingIOError)
    finally:
        os.close(fd)


def _held_by_sandbox(tools, directory: Path) -> None:
    """A sandboxed background command takes the directory's lock and keeps it (the workspace is
    mounted into the sandbox, so it can); returns once the host sees the lock held."""
    started = tools("bash", command=f"flock {directory} sleep 600", description="hold the lock", background=True)
    assert not started.is_error, started.content
    dirfd = _dir(directory)
    try:
        while not filelock.holders(dirfd):
            time.sleep(0.05)
    finally:
        os.close(dirfd)


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_a_lock_a_sandboxed_command_holds_for_ever_is_a_clear_error_not_a_hang(make_tools, ws, tool):
    """The attack: `flock DIR sleep 600` in the sandbox. The call returns after files.lock_wait_s,
    names the path, the holder and what to do; the file on the host is unchanged; once the command
    is stopped, the same call works."""
    target = ws / "f.txt"
    target.write_text("old\n")
    tools = make_tools(lock_wait_s=0.5)
    tools.ok("read", path=str(target))
    _held_by_sandbox(tools, ws)
    args = {"path": str(target), "content": "new\n"} if tool == "write" else {
        "path": str(target), "old_string": "old", "new_string": "new"}
    refused = tools(tool, **args)
    assert refused.is_error and refused.metadata["reason"] == "locked", refused.content
    assert refused.content.startswith(f"Nothing was written to {target}: its directory {ws} has been locked for "
                                      "0.5 s by PID ")
    assert "(flock)" in refused.content and refused.metadata["holders"][0].endswith("(flock)")
    assert "stop that command" in refused.content and "files.lock_wait_s" in refused.content
    assert target.read_text() == "old\n"
    assert tools.ok("bash", command="kill %job-1", description="stop").startswith("job-1: stopped")
    assert not tools(tool, **args).is_error
    assert target.read_text() == "new\n"


def test_an_unlockable_directory_refuses_the_write_saying_why(tools, ws):
    from abhed.common.errors import ToolError
    from abhed.tools.write import lock, lock_failed
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)  # cannot be flocked (EBADF), as on a filesystem without locks
    try:
        with pytest.raises(ToolError) as refused:
            lock(fd, ws / "f.txt", 60)
    finally:
        os.close(fd)
    assert refused.value.metadata == {"reason": "lock_failed", "errno": 9}
    assert refused.value.message.startswith(f"Nothing was written to {ws / 'f.txt'}: its directory {ws} could not be "
                                            "locked (Bad file descriptor, errno 9)")
    error = lock_failed(ws / "f.txt", OSError(37, "No locks available"))
    assert error.message.startswith(f"Nothing was written to {ws / 'f.txt'}: its directory {ws} could not be locked "
                                    "(No locks available, errno 37), and Abhed does not write without that lock")
    assert "work on a copy on a local filesystem" in error.message
    assert error.metadata == {"reason": "lock_failed", "errno": 37}


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_the_lock_and_the_directory_descriptor_go_when_the_call_ends(tools, ws, tool):
    from fd_testing import fds_on
    target = ws / "f.txt"
    target.write_text("old\n")
    tools.ok("read", path=str(target))
    args = {"content": "new\n"} if tool == "write" else {"old_string": "old", "new_string": "new"}
    tools.ok(tool, path=str(target), **args)
    assert fds_on(ws) == []
    dirfd = _dir(ws)
    try:
        fcntl.flock(dirfd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free at once
    finally:
        os.close(dirfd)


def test_saving_a_rule_or_pins_in_a_locked_directory_says_so_and_writes_nothing(tmp_path, monkeypatch):
    from abhed.mcp.pins import save_server
    from abhed.session.config import ConfigError
    from abhed.session.rulesave import SaveError, save_rule
    monkeypatch.setattr(filelock, "WAIT_S", 0.2)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(SaveError, match=rf"The rule edit was not saved: the directory {tmp_path} is locked by "
                                            rf"PID {holder.pid} \(.+\) for 0.2 s .* Retry in a moment"):
            save_rule(tmp_path / "config.toml", "edit")
        with pytest.raises(ConfigError, match=rf"The MCP pins {tmp_path}/p.json were not saved: the directory "
                                              rf"{tmp_path} is locked by PID {holder.pid} \(.+\) for 0.2 s"):
            save_server(tmp_path / "p.json", "a", None)
        assert sorted(os.listdir(tmp_path)) == []
    finally:
        holder.kill()
        holder.wait()


def test_holders_are_those_holding_not_those_waiting_and_a_gone_locker_is_named_by_pid(tmp_path):
    """`flock DIR sleep` killed: its child keeps the lock, /proc/locks still names the dead locker;
    a second `flock DIR` blocked on it is a waiter, not a holder."""
    held = subprocess.Popen(["flock", str(tmp_path), "sleep", "600"])
    dirfd = _dir(tmp_path)
    waiter, sleeper = None, None
    try:
        children = Path(f"/proc/{held.pid}/task/{held.pid}/children")
        while not filelock.holders(dirfd) or not children.read_text().split():
            time.sleep(0.01)  # flock takes the lock, then forks its sleep
        sleeper = int(children.read_text().split()[0])
        waiter = subprocess.Popen(["flock", str(tmp_path), "true"])
        key = filelock._lock_key(dirfd)
        while f"-> FLOCK  ADVISORY  WRITE {waiter.pid} {key}" not in Path("/proc/locks").read_text():
            time.sleep(0.01)
        assert filelock.holders(dirfd) == [f"PID {held.pid} (flock)"]
        held.kill()
        held.wait()  # gone; its child sleep keeps the lock
        assert filelock.holders(dirfd) == [f"PID {held.pid}"]
        with pytest.raises(filelock.Busy, match=rf"locked by PID {held.pid} for 0.1 s"):
            filelock.acquire(dirfd, 0.1)
    finally:
        os.close(dirfd)
        held.kill()
        held.wait()
        if sleeper is not None:
            os.kill(sleeper, 9)  # the lock goes with the last descriptor
        if waiter is not None:
            waiter.wait()


@contextmanager
def held_elsewhere(directory: Path) -> Iterator[int]:
    """Another process holds `directory`'s lock for the block; yields our own descriptor of it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    dirfd = _dir(directory)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield dirfd
    finally:
        os.close(dirfd)
        holder.kill()
        holder.wait()


def test_without_proc_locks_the_holder_is_unknown_but_still_refused(ws, monkeypatch):
    monkeypatch.setattr(filelock, "PROC_LOCKS", ws / "no-such-file")
    with held_elsewhere(ws) as dirfd:
        with pytest.raises(filelock.Busy, match="locked by an unknown process for 0.1 s") as busy:
            filelock.acquire(dirfd, 0.1)
        assert busy.value.holders == []


def test_waiting_for_the_lock_sleeps_rather_than_spins(ws):
    """A held lock is polled with pauses: half a second of waiting costs little CPU time."""
    with held_elsewhere(ws) as dirfd:
        cpu = time.process_time()
        with pytest.raises(filelock.Busy):
            filelock.acquire(dirfd, 0.5)
        assert time.process_time() - cpu < 0.15

"""The session store: ids that cannot leave it, state.json replaced atomically (never written in
place), and a session held by another process waited for out loud and for a bounded time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from abhed import session as session_module
from abhed.session import SessionError, SessionState, SessionStore
from abhed_testing import REPO, abhed


@pytest.mark.parametrize("bad", ["..", ".", ".hidden", "..x", "-x", "_x", "a/b", "a\x00b", "a\n", "x" * 65, "é"])
def test_session_ids_that_could_leave_the_store_are_refused(home, ws, bad):
    store = SessionStore(home)
    for attempt in (lambda: store.open(bad), lambda: store.create(ws, bad),
                    lambda: store.use(bad, ws).__enter__()):
        with pytest.raises(SessionError) as caught:
            attempt()
        assert str(caught.value) == (f"Invalid session id {bad!r}: use 1-64 letters, digits, '.', '_' or '-', "
                                     "starting with a letter or digit.")
    assert list(home.rglob("state.json")) == []


def test_session_ids_that_are_fine(home, ws):
    store = SessionStore(home)
    for good in ("a", "9", "a..b", "A-b_c.d", "x" * 64):
        assert store.create(ws, good).dir == home / "sessions" / good
    assert store.ids() == sorted(["a", "9", "a..b", "A-b_c.d", "x" * 64])


def test_cli_refuses_dot_dot_as_a_session(ws, home):
    proc = abhed("tool", "read", json.dumps({"path": str(ws)}), "--workspace", str(ws), "--session", "..")
    assert proc.returncode == 2 and "Invalid session id '..'" in proc.stderr
    assert not (home / "state.json").exists() and not (home / "events.jsonl").exists()


def test_save_replaces_state_json_by_a_new_inode_never_in_place(home, ws):
    session = SessionStore(home).create(ws, "s")
    path = session.dir / "state.json"
    before = path.stat().st_ino
    holder = open(path, "rb")  # a reader that opened the old file keeps reading it whole
    old = holder.read()
    session.state.cwd = str(ws / "sub")
    session.save()
    assert path.stat().st_ino != before and path.stat().st_mode & 0o777 == 0o600
    holder.seek(0)
    assert holder.read() == old
    holder.close()
    assert SessionStore(home).open("s").state.cwd == str(ws / "sub")
    assert [p.name for p in session.dir.iterdir()] and all(".tmp" not in p.name for p in session.dir.iterdir())


def test_a_save_that_fails_midway_leaves_the_old_state_whole(home, ws, monkeypatch):
    session = SessionStore(home).create(ws, "s")
    session.state.cwd = "/changed"

    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError):
        session.save()
    monkeypatch.undo()
    assert SessionStore(home).open("s").state.cwd == str(ws)


def test_kill_9_during_saves_never_leaves_a_torn_state_json(home, ws):
    """A real process saving a large state over and over, killed at random points: state.json always
    loads, whole, and is one of the states it saved."""
    SessionStore(home).create(ws, "k")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from abhed.session import SessionStore
        session = SessionStore(Path({str(home)!r})).open("k")
        n = 0
        print("ready", flush=True)
        while True:
            n += 1
            session.state.cwd = "/w/" + str(n) + "/" + "x" * 200000
            session.save()
    """)
    for round_ in range(12):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "ready\n"
        time.sleep(0.01 + 0.013 * round_)  # some saves of 200 KB each, then a kill wherever it is
        child.send_signal(signal.SIGKILL)
        child.wait()
        state = SessionState.model_validate_json((home / "sessions" / "k" / "state.json").read_bytes())
        assert state.cwd == str(ws) or (state.cwd.startswith("/w/") and state.cwd.endswith("x" * 200000))


def _holder_script(home: Path, ws: Path, session_id: str) -> str:
    return textwrap.dedent(f"""
        import sys
        sys.argv = ["abhed", "run", "fix the tests"]
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from abhed.session import SessionStore
        with SessionStore(Path({str(home)!r})).use({session_id!r}, Path({str(ws)!r})):
            print("held", flush=True)
            sys.stdin.readline()
    """)


def test_a_call_on_a_session_held_by_a_run_says_what_it_waits_for_then_gives_up(home, ws, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[agent]\nsession_wait_s = 2.5\n")
    holder = subprocess.Popen([sys.executable, "-c", _holder_script(home, ws, "busy")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        proc = abhed("tool", "read", json.dumps({"path": str(ws)}), "--workspace", str(ws), "--session", "busy",
                     env={"ABHED_CONFIG": str(config)})
    finally:
        holder.communicate("\n")
    pid = holder.pid
    assert proc.returncode == 2, proc.stderr
    assert (f"abhed: waiting for session busy: it is in use by process {pid} (abhed run fix the tests); giving up "
            "after 2.5 s (agent.session_wait_s)") in proc.stderr
    assert f"Session 'busy' is still in use by process {pid} (abhed run fix the tests) after" in proc.stderr
    assert "Let that finish (or stop it), then try again; or use another session" in proc.stderr
    events = SessionStore(home).open("busy").log.load().events
    assert events == []  # the call did not run


def test_a_call_that_waited_runs_once_the_session_is_free(home, ws):
    holder = subprocess.Popen([sys.executable, "-c", _holder_script(home, ws, "turns")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    (ws / "f.txt").write_text("hello\n")
    call = subprocess.Popen([sys.executable, "-m", "abhed", "tool", "read", json.dumps({"path": str(ws / "f.txt")}),
                             "--workspace", str(ws), "--session", "turns"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ)
    told = call.stderr.readline()
    assert told.startswith("abhed: waiting for session turns: it is in use by process")
    holder.communicate("\n")
    out, _ = call.communicate(timeout=120)
    assert call.returncode == 0 and out == "     1\thello\n"


def test_use_waits_in_process_with_the_callback(home, ws, monkeypatch):
    monkeypatch.setattr(session_module, "TELL_AFTER_S", 0.0)
    holder = subprocess.Popen([sys.executable, "-c", _holder_script(home, ws, "cb")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    told: list[str] = []
    try:
        with pytest.raises(SessionError, match="still in use by process"):
            with SessionStore(home).use("cb", ws, wait_s=0.3, on_wait=told.append):
                pass
    finally:
        holder.communicate("\n")
    assert len(told) == 1 and "it is in use by process" in told[0]
    with SessionStore(home).use("cb", ws, wait_s=0.3, on_wait=told.append) as session:
        assert session.id == "cb"
    assert len(told) == 1  # a free session: no word, no wait
    assert (home / "sessions" / "cb" / "lock").read_text().startswith(f"{os.getpid()} abhed ")

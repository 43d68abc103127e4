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

from abhed.session import store as session_module
from abhed.session.storefail import StoreError
from abhed.session.store import SessionError, SessionState, SessionStore
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
    with pytest.raises(StoreError) as raised:
        session.save()
    monkeypatch.undo()
    assert SessionStore(home).open("s").state.cwd == str(ws)
    assert str(session.dir / "state.json") in raised.value.message and "filesystem is full" in raised.value.message
    assert sorted(p.name for p in session.dir.iterdir()) == ["events.head", "events.jsonl", "state.json", "summary.json"]


def test_kill_9_during_saves_never_leaves_a_torn_state_json(home, ws):
    """A real process saving a large state over and over, killed at random points: state.json always
    loads, whole, and is one of the states it saved."""
    SessionStore(home).create(ws, "k")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from abhed.session.store import SessionStore
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
        from abhed.session.store import SessionStore
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
    assert [e.kind for e in events] == ["session"]  # the call did not run: only the session's creation is logged


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


# -- the state and what a call changed (fast, in-process) ---------------------------------------------

def _record(size: int = 1, mtime: int = 1, sha: str | None = "a" * 64):
    from abhed.session.store import ReadRecord
    from abhed.session.events import now
    return ReadRecord(size=size, mtime_ns=mtime, sha256=sha, at=now())


def test_changed_since_trusts_the_hash_when_both_sides_have_one_else_size_and_mtime():
    from abhed.session.store import changed_since, digest
    record = _record(3, 100, digest(b"abc"))
    assert not changed_since(record, b"abc", 3, 100)
    assert not changed_since(record, b"abc", 3, 999)  # touched, same content
    assert changed_since(record, b"abd", 3, 100)  # same size and mtime, other content
    assert not changed_since(record, None, 3, 100)  # over the hash limit: size and mtime
    assert changed_since(record, None, 3, 101) and changed_since(record, None, 4, 100)
    unhashed = _record(3, 100, None)
    assert not changed_since(unhashed, b"xyz", 3, 100) and changed_since(unhashed, b"xyz", 3, 101)
    assert changed_since(unhashed, b"xyz", 2, 100)
    assert session_module.HASH_LIMIT == 64 * 1024 * 1024


def test_changes_since_names_exactly_what_a_call_changed_and_apply_replays_it(home, ws):
    from abhed.session.store import Plan, TodoItem, apply_changes
    session = SessionStore(home).create(ws, "c")
    session.remember(ws / "kept", b"k", 1, 1)
    session.remember(ws / "gone", b"g", 1, 1)
    mark = session.mark()
    assert session.changes_since(mark) == {}
    session.remember(ws / "new", b"n", 1, 2)
    session.forget(ws / "gone")
    session.state.cwd = str(ws / "sub")
    session.state.plan = Plan(goal="g", steps=["s"])
    session.state.todos = [TodoItem(id="1", content="t")]
    session.state.next_todo_id = 2
    changes = session.changes_since(mark)
    assert set(changes) == {"reads", "forgot", "cwd", "plan", "todos", "next_todo_id"}
    assert list(changes["reads"]) == [str(ws / "new")] and changes["forgot"] == [str(ws / "gone")]
    assert changes["cwd"] == str(ws / "sub") and changes["plan"]["goal"] == "g" and changes["next_todo_id"] == 2
    replayed = SessionState(id="c", created_at=session.state.created_at, workspace=str(ws), cwd=str(ws))
    replayed.reads[str(ws / "gone")] = session.state.reads[str(ws / "kept")]
    apply_changes(replayed, changes)
    assert set(replayed.reads) == {str(ws / "new")} and replayed.cwd == str(ws / "sub")
    assert replayed.plan == session.state.plan and replayed.todos == session.state.todos
    assert replayed.next_todo_id == 2
    mark = session.mark()
    session.state.plan = None
    assert session.changes_since(mark) == {"plan": None}
    apply_changes(replayed, {"plan": None})
    assert replayed.plan is None
    mark = session.mark()
    session.state.next_todo_id = 3  # a counter alone changes: the todos go with it
    assert session.changes_since(mark) == {"todos": [{"id": "1", "content": "t", "status": "pending"}],
                                           "next_todo_id": 3}


def test_rebuild_state_applies_the_logs_changes_in_order_and_keeps_the_rest(home, ws):
    from abhed.session.events import ActionEvent, MessageEvent, ObservationEvent
    from abhed.session.store import rebuild_state
    state = SessionState(id="r", created_at=session_module.now(), workspace=str(ws), cwd=str(ws))
    state.reads["/old"] = _record()

    def obs(changes):
        return ObservationEvent(session_id="r", action_id="a", tool="t", content="", is_error=False, duration_ms=0,
                                metadata={"state": changes})
    events = [obs({"cwd": "/one"}), MessageEvent(session_id="r", role="user", content="x"),
              ActionEvent(session_id="r", tool="t", input={}), obs({"cwd": "/two"}),
              ObservationEvent(session_id="r", action_id="a", tool="t", content="", is_error=False, duration_ms=0,
                               metadata={"state": "not a dict"})]
    rebuilt = rebuild_state(state, events)
    assert rebuilt.cwd == "/two" and "/old" in rebuilt.reads
    assert state.cwd == str(ws)  # the original is untouched


def test_a_branch_shares_the_log_and_write_lock_but_not_the_state_and_never_saves(home, ws):
    session = SessionStore(home).create(ws, "b")
    session.remember(ws / "f", b"x", 1, 1)
    session.state.cwd = str(ws / "sub")
    branch = session.branch()
    assert branch.dir == session.dir and branch.writes is session.writes and branch.id == "b"
    assert branch.state.reads == {} and branch.state.cwd == str(ws / "sub")
    assert branch.state.workspace == str(ws) and branch.state.created_at == session.state.created_at
    branch.state.cwd = "/elsewhere"
    branch.save()
    assert SessionStore(home).open("b").state.cwd == str(ws)  # state.json is the top-level agent's
    assert branch.last_read(ws / "f") is None and session.last_read(ws / "f") is not None
    assert session.last_read(ws / "f").sha256 == session_module.digest(b"x")


def test_remember_records_size_mtime_and_hash_or_none_over_the_limit(home, ws):
    session = SessionStore(home).create(ws, "m")
    session.remember(ws / "a", b"abc", 3, 77)
    session.remember(ws / "big", None, 10, 88)
    a, big = session.last_read(ws / "a"), session.last_read(ws / "big")
    assert (a.size, a.mtime_ns, a.sha256) == (3, 77, session_module.digest(b"abc"))
    assert (big.size, big.mtime_ns, big.sha256) == (10, 88, None)
    session.forget(ws / "a")
    session.forget(ws / "never")
    assert session.last_read(ws / "a") is None and session.last_read(ws / "big") is not None


def test_open_of_an_unreadable_or_missing_state_says_which_file(home, ws):
    store = SessionStore(home)
    with pytest.raises(SessionError) as missing:
        store.open("none")
    assert str(missing.value) == f"No session 'none' in {home / 'sessions'}. List them with `abhed sessions list`."
    session = store.create(ws, "bad")
    (session.dir / "state.json").write_text("{not json")
    with pytest.raises(SessionError) as bad:
        store.open("bad")
    assert str(bad.value).startswith(f"The state of session 'bad' ({session.dir / 'state.json'}) is unreadable: ")
    (session.dir / "state.json").write_text(json.dumps({"id": "bad"}))
    with pytest.raises(SessionError, match="is unreadable"):
        store.open("bad")


def test_ids_lists_sessions_with_a_state_only_and_create_makes_a_private_dir(home, ws):
    store = SessionStore(home)
    assert store.ids() == []
    session = store.create(ws)
    assert re_session_id(session.id)
    assert (session.dir.stat().st_mode & 0o777) == 0o700
    state = json.loads((session.dir / "state.json").read_text())
    assert state["workspace"] == state["cwd"] == str(ws) and state["schema_version"] == 1
    (store.root / "stray").mkdir()
    assert store.ids() == [session.id]
    with store.use(None, ws) as fresh:
        assert fresh.id != session.id and (fresh.dir / "state.json").exists()
        assert (fresh.dir.stat().st_mode & 0o777) == 0o700
    with store.use(session.id, ws) as again:
        assert again.state.created_at == session.state.created_at


def re_session_id(value: str) -> bool:
    import re
    return re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", value) is not None


def test_save_holds_the_lock_and_writes_indented_json(home, ws):
    session = SessionStore(home).create(ws, "j")
    text = (session.dir / "state.json").read_text()
    assert text.startswith('{\n "schema_version": 1,\n "id": "j"')


def test_state_defaults_and_todo_statuses():
    from abhed.session.store import Plan, TodoItem
    from pydantic import ValidationError
    assert Plan(goal="g", steps=[]).version == 1 and Plan(goal="g", steps=[]).notes == ""
    state = SessionState(id="x", created_at=session_module.now(), workspace="/w", cwd="/w")
    assert state.next_todo_id == 1 and state.schema_version == 1 and state.reads == {} and state.todos == []
    assert [TodoItem(id="1", content="c", status=s).status for s in ("pending", "in_progress", "done")] == \
        ["pending", "in_progress", "done"]
    assert TodoItem(id="1", content="c").status == "pending"
    with pytest.raises(ValidationError):
        TodoItem(id="1", content="c", status="finished")


def test_a_holder_that_wrote_nothing_is_another_process(home, ws):
    """An older Abhed (or anything else) holding the lock without saying who: still a clear error."""
    SessionStore(home).create(ws, "quiet")
    lock = home / "sessions" / "quiet" / "lock"
    script = (f"import fcntl, sys; f = open({str(lock)!r}, 'w'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True);"
              " sys.stdin.readline()")
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SessionError) as caught:
            with SessionStore(home).use("quiet", ws, wait_s=0.2, on_wait=lambda message: None):
                pass
    finally:
        holder.communicate("\n")
    assert str(caught.value).startswith("Session 'quiet' is still in use by another process after 0 s of waiting.")

"""`abhed run --mode auto` under issue 31's promise, on the replay server: judged on the workspace.

A loop with variables runs unasked (it can be undone), the courtesy list is refused for want of a
human, ask mode runs `ls`, `cat FILE` and `git status` unasked, and one undo takes the run back.
"""

from __future__ import annotations

import subprocess

from abhed.model.replay import ReplayServer, Turn
from abhed.session.store import SessionStore
from test_cli_agent import abhed


def _bash(command: str) -> tuple[str, dict]:
    return ("bash", {"command": command, "description": "step"})


def _approvals(home, session_id: str) -> list[dict]:
    from abhed.session.events import ObservationEvent
    session = SessionStore(home).open(session_id)
    return [e.metadata.get("approval", {}) for e in session.log.load().events if isinstance(e, ObservationEvent)]


def test_auto_mode_runs_the_loop_refuses_the_courtesy_list_and_undo_takes_it_back(ws, home):
    (ws / "a.txt").write_text("one\n")
    turns = [Turn(calls=[_bash("for f in a.txt b.txt; do echo two > $f; done")]),
             Turn(calls=[_bash("git reset --hard")]),
             Turn(text="Done.")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "change things", "--endpoint", server.url, "--mode", "auto", home=home, cwd=ws)
    assert proc.returncode == 4, proc.stderr  # done, but a call was refused for want of a human
    assert (ws / "a.txt").read_text() == "two\n" and (ws / "b.txt").read_text() == "two\n"
    refusal = server.requests[2]["messages"][-1]["content"]
    assert "destructive: git reset --hard discards uncommitted work" in refusal
    assert 'approval.auto_destructive = "undoable" would run it after a checkpoint' in refusal
    [session_id] = SessionStore(home).ids()
    loop, reset = _approvals(home, session_id)
    assert loop["rule"] == "undoable" and loop["reason"].startswith("undoable: checkpoint 1 is taken first; ")
    assert reset["decision"] == "ask" and reset["rule"].startswith("destructive: git reset --hard")
    undone = abhed("undo", "--to", "1", session_id, "--yes", home=home, cwd=ws)
    assert undone.returncode == 0, undone.stderr
    assert (ws / "a.txt").read_text() == "one\n" and not (ws / "b.txt").exists()


def test_with_checkpoints_off_the_loop_is_refused_and_nothing_changes(ws, home):
    (ws / "a.txt").write_text("one\n")
    turns = [Turn(calls=[_bash("for f in a.txt; do echo two > $f; done")]), Turn(text="Could not.")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "change it", "--endpoint", server.url, "--mode", "auto", home=home, cwd=ws,
                     env={"ABHED_CHECKPOINTS": "false"})
    assert proc.returncode == 4, proc.stderr
    assert (ws / "a.txt").read_text() == "one\n"
    refusal = server.requests[1]["messages"][-1]["content"]
    assert "auto mode would not run it unasked either: checkpoints are off" in refusal


def test_ask_mode_runs_reading_unasked(ws, home):
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "a.txt").write_text("one\n")
    turns = [Turn(calls=[_bash("ls")]), Turn(calls=[_bash("cat a.txt")]), Turn(calls=[_bash("git status --short")]),
             Turn(calls=[_bash("touch b.txt")]), Turn(text="Looked.")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "look", "--endpoint", server.url, "--mode", "ask", home=home, cwd=ws)
    assert proc.returncode == 4, proc.stderr  # the touch needed a human
    outputs = [server.requests[i]["messages"][-1]["content"] for i in (1, 2, 3, 4)]
    assert "a.txt" in outputs[0] and "one" in outputs[1] and "?? a.txt" in outputs[2]
    assert "Not run" in outputs[3] and not (ws / "b.txt").exists()
    [session_id] = SessionStore(home).ids()
    assert [a["rule"] for a in _approvals(home, session_id)] == ["read-only"] * 3 + ["not allowlisted"]
    assert "checkpoint" not in proc.stderr  # reading takes none

"""Resume and interrupts: the conversation, read-set, plan and todos come back from the event log,
after Ctrl-C, after a kill -9 mid-session, and with a torn last line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from abhed.agent.loop import Agent
from abhed.agent.conversation import INTERRUPTED_BEFORE, INTERRUPTED_RUNNING, rebuild
from abhed.session.events import ActionEvent, MessageEvent, RunEvent
from abhed.model.replay import ReplayServer, Turn
from abhed.session.store import SessionStore
from abhed.tools import BY_NAME
from agent_helpers import REPO, Recorder, make_agent, tool_messages


def test_ctrl_c_during_a_tool_ends_the_turn_and_the_conversation_stays_valid(ws, home, monkeypatch):
    real = BY_NAME["todo"].run

    def interrupted(args, ctx):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(BY_NAME["todo"], "run", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(BY_NAME["todo"], "run", interrupted)
    turns = [Turn(calls=[("todo", {"items": [{"content": "A"}]}), ("glob", {"pattern": "*.md"})]),
             Turn(text="Carrying on.")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server)
        outcome = agent.run("look")
        assert outcome.status == "interrupted" and outcome.exit_code == 130 and len(server.requests) == 1
        assert [m.content for m in agent.messages if m.role == "tool"] == [INTERRUPTED_RUNNING, INTERRUPTED_BEFORE]
        assert agent.run("go on").answer == "Carrying on."
    sent = server.requests[1]["messages"]
    assert [m["content"] for m in tool_messages(server.requests[1])] == [INTERRUPTED_RUNNING, INTERRUPTED_BEFORE]
    assert sent[-1] == {"role": "user", "content": "[Abhed: the user interrupted this turn.]\n\ngo on"}
    runs = [e.status for e in agent.ctx.session.log.load().events if isinstance(e, RunEvent)]
    assert runs == ["started", "interrupted", "started", "done"]


def test_ctrl_c_while_the_reply_streams(ws, home):
    class Impatient(Recorder):
        def text(self, delta: str) -> None:
            raise KeyboardInterrupt

    with ReplayServer([Turn(text="A long answer that is never finished."), Turn(text="Short.")]) as server:
        agent = make_agent(ws, home, server, display=Impatient())
        assert agent.run("explain").status == "interrupted"
        agent.display = Recorder()
        assert agent.run("briefly").answer == "Short."
    assert server.requests[1]["messages"][-1]["content"] == (
        "explain\n\n[Abhed: the user interrupted this turn.]\n\nbriefly")


def test_restore_rebuilds_conversation_read_set_plan_and_todos(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    turns = [Turn(calls=[("plan", {"goal": "g", "steps": ["s"]}),
                         ("todo", {"items": [{"content": "Fix x", "status": "in_progress"}]}),
                         ("read", {"path": str(ws / "a.py")})]),
             Turn(text="Read it.")]
    with ReplayServer(turns) as server:
        first = make_agent(ws, home, server)
        first.run("look at a.py")
    session_id = first.ctx.session.id
    state = SessionStore(home).open(session_id)
    state.state.reads, state.state.plan, state.state.todos = {}, None, []  # as if state.json lagged the log
    state.save()
    edit = {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"}
    with ReplayServer([Turn(calls=[("edit", edit)]), Turn(text="Edited.")]) as server:
        agent = make_agent(ws, home, server, session_id=session_id)
        restored, unfinished = Agent.restore(agent.ctx, agent.model, agent.gate, agent.budget)
        assert not unfinished
        assert restored.ctx.session.state.plan.goal == "g" and restored.ctx.session.state.todos[0].content == "Fix x"
        assert restored.run("now set x to 2").answer == "Edited."
    assert (ws / "a.py").read_text() == "x = 2\n"  # edit accepted: the read-set came back from the log
    first_request = server.requests[0]["messages"]
    assert [m["role"] for m in first_request] == ["system", "user", "assistant", "tool", "tool", "tool", "assistant",
                                                  "user"]


def test_a_call_the_log_shows_started_but_unfinished_is_reported_as_such(ws, home):
    with ReplayServer([Turn(text="hi")]) as server:
        agent = make_agent(ws, home, server)
    session = agent.ctx.session
    ids = {"session_id": session.id}
    session.record(MessageEvent(role="user", content="go", origin="user", **ids))
    session.record(MessageEvent(role="assistant", content="", origin="model", tool_calls=[
        {"id": "c1", "name": "edit", "arguments": "{}"}, {"id": "c2", "name": "read", "arguments": "{}"}], **ids))
    session.record(ActionEvent(tool="edit", tool_call_id="c1", input={}, **ids))  # killed here
    messages = rebuild(session.log.load().events, "main", 10_000)
    assert [(m.role, m.content) for m in messages[2:]] == [("tool", INTERRUPTED_RUNNING), ("tool", INTERRUPTED_BEFORE)]


def _abhed(*args: str, home: Path, **kw) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": ""}
    return subprocess.Popen([sys.executable, "-m", "abhed", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, **kw)


def _wait_for(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60  # a guard against hanging forever, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def test_resume_after_kill_9_mid_session_finishes_the_job(ws, home):
    (ws / "a.py").write_text("value = 1\n")
    edit = {"path": str(ws / "a.py"), "old_string": "value = 1", "new_string": "value = 2"}
    first = [Turn(calls=[("todo", {"items": [{"content": "Change the value", "status": "in_progress"}]})]),
             Turn(calls=[("read", {"path": str(ws / "a.py")})]),
             Turn(fault="stall")]  # the model is "thinking" when the process is killed
    with ReplayServer(first, stall_s=30) as server:
        proc = _abhed("run", "set value to 2", "--workspace", str(ws), "--endpoint", server.url, "--mode",
                      "accept-edits", home=home)
        _wait_for(lambda: len(server.requests) == 3, "the third request")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    [session_id] = SessionStore(home).ids()
    events = SessionStore(home).open(session_id).log.load().events
    assert [e.status for e in events if isinstance(e, RunEvent)] == ["started"]  # no end: it was killed
    second = [Turn(calls=[("edit", edit)]),
              Turn(calls=[("todo", {"items": [{"id": "t1", "status": "done"}]})]),
              Turn(text="value is now 2.")]
    with ReplayServer(second) as server:
        proc = _abhed("resume", session_id, "--endpoint", server.url, "--mode", "accept-edits", home=home)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out == "value is now 2.\n" and (ws / "a.py").read_text() == "value = 2\n"
    resumed = server.requests[0]["messages"]
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
    assert resumed[-1]["content"].startswith("[Abhed: this session stopped before the task was finished")
    assert "value = 1" in resumed[-2]["content"]  # the read before the kill is still in view
    state = json.loads((home / "sessions" / session_id / "state.json").read_text())
    assert state["todos"] == [{"id": "t1", "content": "Change the value", "status": "done"}]


def test_resume_survives_a_torn_last_line_and_says_so(ws, home):
    with ReplayServer([Turn(calls=[("glob", {"pattern": "*"})]), Turn(fault="stall")], stall_s=30) as server:
        proc = _abhed("run", "list", "--workspace", str(ws), "--endpoint", server.url, home=home)
        _wait_for(lambda: len(server.requests) == 2, "the second request")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    [session_id] = SessionStore(home).ids()
    with open(home / "sessions" / session_id / "events.jsonl", "ab") as log:
        log.write(b'{"kind": "message", "role": "assis')  # a crash mid-write
    with ReplayServer([Turn(text="Empty workspace.")]) as server:
        proc = _abhed("resume", session_id, "--endpoint", server.url, home=home)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out == "Empty workspace.\n"
    assert "torn final line" in err


def test_resume_of_a_finished_session_without_prompt_is_refused(ws, home):
    with ReplayServer([Turn(text="Done.")]) as server:
        proc = _abhed("run", "hi", "--workspace", str(ws), "--endpoint", server.url, home=home)
        proc.communicate(timeout=120)
        [session_id] = SessionStore(home).ids()
        refused = _abhed("resume", session_id, "--endpoint", server.url, home=home)
        _, err = refused.communicate(timeout=120)
    assert refused.returncode == 2 and "finished its last run" in err and f"abhed chat --session {session_id}" in err
    missing = _abhed("resume", "no-such-session", home=home)
    _, err = missing.communicate(timeout=120)
    assert missing.returncode == 2 and "No session 'no-such-session'" in err


def test_a_log_from_before_the_agent_loads_and_resumes(ws, home):
    """Sessions written by `abhed tool` (only actions and observations) still load and continue."""
    session = SessionStore(home).create(ws)
    session.record(ActionEvent(session_id=session.id, tool="read", input={"path": str(ws)}))
    loaded = session.log.load()
    assert not loaded.problems and rebuild(loaded.events, "main", 10_000) == []
    with ReplayServer([Turn(text="Hello.")]) as server:
        agent = make_agent(ws, home, server, session_id=session.id)
        restored, unfinished = Agent.restore(agent.ctx, agent.model, agent.gate, agent.budget)
        assert not unfinished and restored.run("hi").answer == "Hello."

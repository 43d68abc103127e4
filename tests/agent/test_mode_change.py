"""A change of approval mode during a session (chat's /mode, issue 17 item 1): the model is told the
new mode from its next request on (system prompt, subagents' too), the gate decides in it, the log
records it, and a resumed session continues in it."""

from __future__ import annotations

import pytest

from abhed.model.replay import ReplayServer, Turn
from abhed.session.audit import export
from abhed.session.events import ModeEvent
from abhed.session.store import SessionStore
from agent_helpers import make_agent


def system(request: dict) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    return first["content"]


def test_the_next_request_after_a_mode_change_names_the_new_mode(ws, home):
    turns = [Turn(text="First."), Turn(calls=[("bash", {"command": "touch made", "description": "make"})]),
             Turn(text="Made."), Turn(text="Child.")]
    with ReplayServer(turns) as server:
        agent = make_agent(ws, home, server, mode="ask")
        agent.run("one")
        agent.set_mode("auto")
        outcome = agent.run("two")
        agent.spawn("a side task", max_turns=2)
    assert "Approval mode: ask (" in system(server.requests[0])
    for request in server.requests[1:]:  # the main agent's next requests and the subagent's first
        assert "Approval mode: auto (edits and commands are allowed" in system(request)
        assert "Approval mode: ask" not in system(request)
    assert outcome.status == "done" and (ws / "made").exists()  # the gate decided in auto: nobody was asked


def test_a_mode_change_is_logged_audited_and_kept_for_resume(ws, home):
    with ReplayServer([]) as server:
        agent = make_agent(ws, home, server, mode="ask")
        agent.set_mode("plan")
        agent.set_mode("accept-edits")
    events = [e for e in agent.ctx.session.log.load().events if isinstance(e, ModeEvent)]
    assert [(e.mode, e.previous) for e in events] == [("plan", "ask"), ("accept-edits", "plan")]
    assert events[0].user and events[0].host
    reopened = SessionStore(home).open(agent.ctx.session.id)  # what `abhed resume` starts from
    assert reopened.state.options["mode"] == "accept-edits"
    modes = [r for r in export(reopened) if r["type"] == "mode"]
    assert [(r["mode"], r["previous"]) for r in modes] == [("plan", "ask"), ("accept-edits", "plan")]


def test_an_unknown_mode_changes_nothing(ws, home):
    with ReplayServer([]) as server:
        agent = make_agent(ws, home, server, mode="ask")
        before = agent.system
        with pytest.raises(ValueError, match="Unknown approval mode 'yolo': use one of ask, plan, accept-edits, auto"):
            agent.set_mode("yolo")
    assert agent.gate.effective().mode == "ask" and agent.system == before
    assert not [e for e in agent.ctx.session.log.load().events if isinstance(e, ModeEvent)]
    assert "mode" not in SessionStore(home).open(agent.ctx.session.id).state.options

"""A scripted model uses an admitted MCP tool end to end, through `abhed run`: the tool is offered
with its pinned definition, the call goes through approval and the server, and both events are in
the log. And `abhed doctor` tells the operator what is withheld."""

from __future__ import annotations

import json

from abhed.session.events import ActionEvent, ObservationEvent, RunEvent
from abhed.model.replay import ReplayServer, Turn
from abhed.session.store import SessionStore


def test_a_scripted_session_uses_an_admitted_mcp_tool(site):
    site.configure({"hostile": site.hostile()}, extra='[approval]\nallow = ["mcp__hostile__echo"]\n')
    assert site.abhed("mcp", "review", "hostile", "--yes").returncode == 0
    (site.control / "description").unlink(missing_ok=True)
    turns = [Turn(calls=[("mcp__hostile__echo", {"text": "ticket ABC-1 is open"})]),
             Turn(calls=[("mcp__hostile__huge", {"chars": 10})]),  # admitted, but no rule allows it: refused
             Turn(text="The ticket is open.")]
    with ReplayServer(turns) as server:
        proc = site.abhed("run", "Is ticket ABC-1 open?", "--endpoint", server.url, "--mode", "auto")
    assert proc.returncode == 4, proc.stderr  # done, but a call was refused for want of a human
    assert "--allow 'mcp__hostile__huge'" in proc.stderr and "--mode auto" not in proc.stderr
    assert proc.stdout.strip() == "The ticket is open."

    offered = {t["function"]["name"]: t["function"] for t in server.requests[0]["tools"]}
    assert offered["mcp__hostile__echo"]["description"] == "Echo the given text back."
    assert offered["mcp__hostile__echo"]["parameters"]["required"] == ["text"]
    assert "read" in offered and len(offered) == 9 + 10
    assert "not instructions to you" in server.requests[0]["messages"][0]["content"]  # the system prompt says so
    tool_results = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_results[-1]["content"] == "ticket ABC-1 is open"

    [session_id] = SessionStore(site.home).ids()
    events = SessionStore(site.home).open(session_id).log.load().events
    actions = [e for e in events if isinstance(e, ActionEvent)]
    observations = {e.action_id: e for e in events if isinstance(e, ObservationEvent)}
    assert [a.tool for a in actions] == ["mcp__hostile__echo", "mcp__hostile__huge"]
    assert actions[0].input == {"text": "ticket ABC-1 is open"}
    first, second = (observations[a.id] for a in actions)
    assert not first.is_error and first.content == "ticket ABC-1 is open"
    assert first.metadata["approval"]["rule"] == "allow: mcp__hostile__echo"
    assert second.is_error and second.metadata["error_kind"] == "not_approved"
    assert [e.status for e in events if isinstance(e, RunEvent)] == ["started", "done"]


def test_a_session_starts_without_withheld_tools_and_says_so(site):
    site.configure({"hostile": site.hostile()})
    assert site.abhed("mcp", "review", "hostile", "--yes").returncode == 0
    (site.control / "description").write_text("Echo, changed after review.")
    with ReplayServer([Turn(calls=[("mcp__hostile__echo", {"text": "x"})]), Turn(text="ok")]) as server:
        proc = site.abhed("run", "echo x", "--endpoint", server.url, "--mode", "auto")
    assert proc.returncode == 0, proc.stderr
    assert "1 tool(s) withheld until reviewed (echo): run abhed mcp review hostile" in proc.stderr
    offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert "mcp__hostile__echo" not in offered and "mcp__hostile__huge" in offered
    result = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "`mcp__hostile__echo` is withheld: changed since it was reviewed" in result


def test_doctor_says_what_is_withheld(site):
    site.configure({"hostile": site.hostile(), "broken": {"command": ["/nonexistent/server"]}})
    assert site.abhed("mcp", "review", "hostile", "--yes").returncode == 0
    (site.control / "description").write_text("Echo, changed after review.")
    proc = site.abhed("doctor", "--endpoint", "http://127.0.0.1:9/v1")
    assert proc.returncode == 1
    lines = {line.split()[2]: line for line in proc.stdout.splitlines() if line.split()[1:2] == ["mcp"]}
    assert lines["hostile"].startswith("WARN  mcp hostile")
    assert "9 tool(s) admitted; WITHHELD from the model until reviewed: mcp__hostile__echo: changed since it was " \
           "reviewed" in lines["hostile"]
    assert "Review them: abhed mcp review hostile" in lines["hostile"]
    assert lines["broken"].startswith("FAIL  mcp broken") and "/nonexistent/server" in lines["broken"]
    json.dumps(lines)

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


def requests_seen(control) -> int:
    log = control / "log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def logging_hostile(site):
    """The hostile server with its control directory in the workspace, which it can write: its log
    says whether it was started."""
    control = site.workspace / "control"
    control.mkdir()
    return control, {**site.hostile(), "command": site.hostile()["command"][:-1] + [str(control)]}


def test_tools_json_lists_mcp_tools_without_starting_servers(site):
    """`abhed tools --json`: the native tools, then each server's tools by pin (nothing started);
    a server never reviewed is one withheld entry that says what to run."""
    control, entry = logging_hostile(site)
    site.configure({"hostile": entry})
    before = json.loads(site.abhed("tools", "--json").stdout)
    assert before[9:] == [{"type": "withheld", "name": "mcp__hostile__*", "mcp": {
        "server": "hostile", "tool": None, "status": "withheld",
        "why": "never reviewed: no tool of hostile reaches the model until abhed mcp review hostile"}}]
    assert requests_seen(control) == 0  # the server was not started
    assert site.abhed("mcp", "review", "hostile", "--yes").returncode == 0
    started = requests_seen(control)
    (control / "description").write_text("Echo, changed after review.")

    listed = json.loads(site.abhed("tools", "--json").stdout)
    assert requests_seen(control) == started  # still not started: the pins alone
    native, mcp = listed[:9], listed[9:]
    assert [t["function"]["name"] for t in native][:3] == ["read", "write", "edit"]
    pins = json.loads(site.pins_file.read_text())["servers"]["hostile"]["tools"]
    assert [t["function"]["name"] for t in mcp] == [f"mcp__hostile__{name}" for name in sorted(pins)]
    echo = next(t for t in mcp if t["mcp"]["tool"] == "echo")
    assert echo == {"type": "function", "function": {"name": "mcp__hostile__echo", "description": "Echo the given text back.",
                                                     "parameters": pins["echo"]["inputSchema"]},
                    "mcp": {"server": "hostile", "tool": "echo", "status": "pinned", "hash": pins["echo"]["hash"]}}

    checked = json.loads(site.abhed("tools", "--json", "--check").stdout)
    assert requests_seen(control) > started  # --check starts the server, as a session would
    statuses = {t["mcp"]["tool"]: (t["type"], t["mcp"]["status"]) for t in checked[9:]}
    assert statuses.pop("echo") == ("withheld", "withheld")
    assert set(statuses.values()) == {("function", "admitted")} and len(statuses) == 9
    rug = next(t for t in checked if t["name" if t["type"] == "withheld" else "type"] == "mcp__hostile__echo")
    assert rug["mcp"]["why"].startswith("changed since it was reviewed")


def test_tools_lists_mcp_tools_for_a_human(site):
    site.configure({"hostile": site.hostile(), "later": {"command": ["/opt/none"]}})
    assert site.abhed("mcp", "review", "hostile", "--yes").returncode == 0
    proc = site.abhed("tools")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr
    assert lines[0].startswith("read ") and len(lines) == 9 + 10 + 1
    assert "mcp__hostile__echo  pinned  Echo the given text back." in lines
    assert "mcp__later__*  WITHHELD: never reviewed: no tool of later reaches the model until abhed mcp review later" \
        in lines
    checked = site.abhed("tools", "--check").stdout.splitlines()
    assert "mcp__hostile__echo  admitted  Echo the given text back." in checked
    assert any(line.startswith("mcp__later__*  WITHHELD: the server is not available: ") and "/opt/none" in line
               for line in checked)

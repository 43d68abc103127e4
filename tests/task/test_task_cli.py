"""Subagents through the real command line: `abhed run` shows their steps under the task call."""

from __future__ import annotations

from abhed.model.replay import ReplayServer, Turn
from abhed_testing import abhed
from subagent_helpers import Script, task


def test_abhed_run_shows_subagent_steps_labelled_under_the_task_call(ws, home):
    (ws / "app.cfg").write_text("debug = true\n")
    script = Script({
        "top task": lambda seen: (Turn(calls=[task(f"Search {ws} for config files and report their paths.",
                                                   "Find config files", agent_type="explore")])
                                  if seen.step == 0 else Turn(text="There is one: app.cfg.")),
        "config files": lambda seen: (Turn(calls=[("glob", {"pattern": "*.cfg", "path": str(ws)})])
                                      if seen.step == 0 else Turn(text=f"Found {ws}/app.cfg")),
    })
    with ReplayServer(script) as server:
        proc = abhed("run", "top task", "--endpoint", server.url, "--workspace", str(ws), env={"ABHED_HOME": str(home)})
    assert proc.returncode == 0 and proc.stdout == "There is one: app.cfg.\n"
    lines = proc.stderr.splitlines()
    start = lines.index("-> task Find config files")
    assert lines[start + 1:start + 3] == ["   [main.1 Find config files] -> glob *.cfg",
                                          f"   [main.1 Find config files]    ok: 1 file matched"]
    assert lines[start + 3] == '   ok: Subagent main.1 (explore, "Find config files") finished (2 replies, 1 tool calls).'

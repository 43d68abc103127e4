"""End to end through the real command line: a scripted model fixes a bug. It reads the code, makes
an edit that fails on whitespace, recovers from the error text, checks its fix, keeps its todo list
up to date and answers. The files, the event log and the exit status are checked; `abhed demo`
runs the very same script."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from abhed.cli import demo
from abhed.session.events import ActionEvent, MessageEvent, ObservationEvent, RunEvent
from abhed.model.replay import ReplayServer
from abhed.session.store import SessionStore
from agent_helpers import REPO


def run_abhed(*args: str, home) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": ""}
    return subprocess.run([sys.executable, "-m", "abhed", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def test_a_scripted_session_fixes_the_bug(ws, home):
    demo.make_project(ws)
    turns = demo.script(ws)
    with ReplayServer(turns) as server:
        proc = run_abhed("run", demo.PROMPT, "--workspace", str(ws), "--endpoint", server.url, "--mode", "auto",
                         home=home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == turns[-1].text

    # the files: the bug is fixed, the tab indentation kept, nothing else touched
    assert (ws / "textstats.py").read_text() == demo.MODULE.replace('text.split(" ")', "text.split()")
    assert (ws / "test_textstats.py").read_text() == demo.TESTS
    check = subprocess.run([sys.executable, "test_textstats.py"], cwd=ws, capture_output=True, text=True)
    assert check.returncode == 0 and "4 passed, 0 failed" in check.stdout

    # the event log: every call an action and an observation, in the order the model made them
    [session_id] = SessionStore(home).ids()
    session = SessionStore(home).open(session_id)
    events = session.log.load().events
    actions = [e for e in events if isinstance(e, ActionEvent)]
    observations = {e.action_id: e for e in events if isinstance(e, ObservationEvent)}
    assert [a.tool for a in actions] == ["plan", "todo", "bash", "read", "read", "todo", "edit", "edit", "todo",
                                         "bash", "todo"]
    results = [observations[a.id] for a in actions]
    failed_edit, good_edit = results[6], results[7]
    assert failed_edit.is_error and "indentation differs (tabs vs spaces)" in failed_edit.content
    assert not good_edit.is_error and good_edit.content.startswith("Edited ")
    assert sum(r.is_error for r in results) == 1
    before, after = results[2].content, results[9].content  # the tests, run in the sandbox
    assert "2 passed, 2 failed" in before and "exit code 1" in before
    assert "4 passed, 0 failed" in after and "exit code 0" in after

    # the model saw the error text before it retried
    retry_request = server.requests[4]["messages"]  # the request that got the retried edit
    assert "indentation differs (tabs vs spaces)" in retry_request[-1]["content"]

    # the run, the replies and the final state
    runs = [e.status for e in events if isinstance(e, RunEvent)]
    assert runs == ["started", "done"]
    replies = [e for e in events if isinstance(e, MessageEvent) and e.role == "assistant"]
    assert len(replies) == len(turns) and all(r.usage for r in replies)
    state = json.loads((session.dir / "state.json").read_text())
    assert [t["status"] for t in state["todos"]] == ["done", "done", "done"]
    assert state["plan"]["goal"] == "Make the failing tests in test_textstats.py pass"
    assert str(ws / "textstats.py") in state["reads"]


def test_abhed_demo_runs_on_a_machine_without_a_model_server(home, tmp_path):
    proc = run_abhed("demo", "--fast", home=home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "x old_string was not found" in out  # the failed edit, then its recovery
    assert "todos 3/3" in out and "Fixed word_count in textstats.py" in out  # markdown: `code` shown styled
    assert "abhed sessions show " in out and "throwaway workspace was removed" in out
    [session_id] = SessionStore(home).ids()
    shown = run_abhed("sessions", "show", session_id, home=home)
    assert "run done" in shown.stdout and "edit" in shown.stdout

"""No reply a model or server can send crashes `abhed run` (issue 14 items 2-4, issue 12 item 8):
arguments nested thousands deep, megabytes long, holding NUL, lone surrogates or terminal escapes,
natively or in a text protocol. Each ends as an error observation; the run goes on to its answer,
the log loads and `abhed sessions show` prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abhed.cli.commands import _shown_event, tree
from abhed.model.replay import ReplayServer, Turn
from abhed.common.terminal import printable
from agent_helpers import REPO, Recorder, make_agent

NASTY = [
    "[" * 5000 + "]" * 5000,
    '{"path": ' + "[" * 900 + "]" * 900 + "}",
    "{" * 100000,
    '{"command": "\\u0000", "description": "x"}',
    '{"path": "/w/\\ud800"}',
    '{"\\ud800": 1}',
    '{"command": "echo hi # \\u001b[1A\\u001b[2K\\u001b[1G\\u2502 bash: npm test", "description": "\\u001b[6n"}',
    json.dumps({"path": "/w/a", "content": "y" * (5 * 1024 * 1024)}),
    "not json at all",
    "",
]


def _check_log(agent) -> None:  # type: ignore[no-untyped-def]
    loaded = agent.ctx.session.log.load()
    assert not loaded.problems, loaded.problems
    for event, _ in tree(loaded.events):
        printable(_shown_event(event, "", True)).encode("utf-8")


def test_every_nasty_call_is_an_error_observation_and_the_run_ends_with_its_answer(ws, home):
    turns = [Turn(calls=[("bash" if "command" in args else "read", args)]) for args in NASTY]
    with ReplayServer([*turns, Turn(text="all done")], max_model_len=None) as server:
        agent = make_agent(ws, home, server, mode="auto")
        outcome = agent.run("try everything")
    assert outcome.status == "done" and outcome.answer == "all done", outcome
    # The hostile arguments fill the context, so some replies go to compaction summaries: every
    # call that did run is answered, and only the harmless echo succeeded.
    observations = [e for e in agent.ctx.session.log.load().events if e.kind == "observation"]
    assert len(observations) >= 6
    assert all(o.is_error != (o.content == "hi\n[exit code 0]") for o in observations)
    assert not any(o.metadata.get("error_kind") == "internal" for o in observations)
    _check_log(agent)
    assert [p.name for p in ws.iterdir() if not p.name.startswith(".")] == []


def test_text_protocol_calls_nested_too_deep_are_explained(ws, home):
    deep = "<tool_call>" + '{"name": "read", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>"
    with ReplayServer([Turn(text=deep), Turn(text="ok")], tool_parser=False) as server:
        agent = make_agent(ws, home, server, tool_format="hermes")
        outcome = agent.run("go")
    assert outcome.status == "done"
    request = server.requests[1]
    told = [m["content"] for m in request["messages"] if m["role"] in ("tool", "user")][-1]
    assert "does not parse (it is nested too deeply)" in told
    _check_log(agent)


_fragments = st.sampled_from(["[", "]", "{", "}", '"', ":", ",", "\\u0000", "\\ud800", "\\u001b[6n", "a", "1",
                              '"path"', '"/w/x"', "\\", "null", " "])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(pieces=st.lists(_fragments, max_size=40), depth=st.integers(0, 3000),
       name=st.sampled_from(["read", "write", "edit", "grep", "glob", "plan", "todo", "nosuch", ""]))
def test_fuzz_no_call_arguments_crash_the_loop(tmp_path_factory, pieces, depth, name):
    arguments = "[" * depth + "".join(pieces) + "]" * depth
    ws, home = tmp_path_factory.mktemp("ws"), tmp_path_factory.mktemp("home")
    with ReplayServer([Turn(calls=[(name, arguments)]), Turn(text="fin")]) as server:
        agent = make_agent(ws.resolve(), home, server, mode="plan", display=Recorder())
        outcome = agent.run("fuzz")
    assert outcome.status == "done" and outcome.answer == "fin"
    _check_log(agent)


def test_abhed_run_survives_hostile_calls_and_prints_no_raw_escape(ws, home):
    """The real command line, end to end, against a real HTTP server sending the calls."""
    turns = [Turn(calls=[("bash" if "command" in args else "read", args)]) for args in NASTY[:7]]
    turns.append(Turn(text="answer with \x1b[6n and \ud800"))
    with ReplayServer(turns) as server:
        proc = subprocess.run([sys.executable, "-m", "abhed", "run", "go", "--endpoint", server.url, "--workspace",
                               str(ws), "--mode", "auto"], capture_output=True, text=True, errors="replace",
                              env={**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": ""},
                              cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Internal error" not in proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr
    assert proc.stdout == "answer with \\x1b[6n and \\ud800\n"
    assert "holds a lone surrogate" in proc.stderr and "nested more than 32 levels deep" in proc.stderr
    session = next((home / "sessions").iterdir()).name
    shown = subprocess.run([sys.executable, "-m", "abhed", "sessions", "show", session, "--full"], capture_output=True,
                           text=True, env={**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": ""},
                           cwd=REPO, timeout=120)
    assert shown.returncode == 0 and "\x1b" not in shown.stdout and "\\u001b[1A" in shown.stdout

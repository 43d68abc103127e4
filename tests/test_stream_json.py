"""`abhed run --output-format stream-json` (docs/stream-json.md): a real run's stream, as a consumer reads
it: `abhed run` as a subprocess against the replay server (real HTTP and SSE), every line parsed and
validated against the schema checked into docs/, in order, ending with the object --json prints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from abhed.cli.commands import main
from abhed.cli.streamjson import STREAM_VERSION, bounded
from abhed.model.replay import ReplayServer, Turn
from abhed_testing import REPO

SCHEMA = json.loads((REPO / "docs" / "stream-json.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
ENVELOPE = ("schema_version", "type", "seq")
# Retitle the terminal, clear the screen (7-bit and C1 CSI forms), reverse the text that follows.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b2J\u202e"


def command(*args: str, home: Path, ws: Path, config: str = "") -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": ""}
    if config:
        path = ws.parent / "config.toml"
        path.write_text(config)
        env["ABHED_CONFIG"] = str(path)
    return [sys.executable, "-m", "abhed", "run", *args, "--workspace", str(ws)], env


def abhed_run(*args: str, home: Path, ws: Path, config: str = "") -> subprocess.CompletedProcess[str]:
    argv, env = command(*args, home=home, ws=ws, config=config)
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ws, timeout=120)


def parsed(stdout: str) -> list[dict]:
    """Every line of the stream, checked as a consumer relies on it: ASCII JSON, valid against the
    schema with exactly its fields, numbered in order, `start` first (when the run began), `end` last."""
    assert stdout.endswith("\n") and stdout.isascii()
    lines = [json.loads(line) for line in stdout.splitlines()]
    for number, line in enumerate(lines, start=1):
        VALIDATOR.validate(line)
        assert line["schema_version"] == STREAM_VERSION and line["seq"] == number
        fields = SCHEMA["$defs"][line["type"]]
        assert set(fields["required"]) <= set(line) <= set(fields["properties"]), line["type"]
    assert [line["type"] for line in lines].count("end") == 1 and lines[-1]["type"] == "end"
    return lines


def of(lines: list[dict], kind: str) -> list[dict]:
    return [line for line in lines if line["type"] == kind]


def result_fields(line: dict) -> dict:
    return {key: value for key, value in line.items() if key not in ENVELOPE}


def script(ws: Path) -> list[Turn]:
    return [Turn(text=f"Let me look {HOSTILE}first.", calls=[("read", {"path": str(ws / "a.py")})]),
            Turn(calls=[("edit", {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"})]),
            Turn(calls=[("write", {"path": str(ws / "b.py"), "content": "y = 3\n"})]),
            Turn(text="I set x to 2 in a.py; writing b.py was refused, so it does not exist yet.")]


@pytest.mark.slow
def test_a_real_run_streams_each_event_in_order_and_ends_with_the_json_object(ws, home, tmp_path):
    (ws / "a.py").write_text(f"x = 1\n# {HOSTILE}\n")
    with ReplayServer(script(ws), chunk_chars=8) as server:
        proc = abhed_run("set x to 2", "--endpoint", server.url, "--mode", "ask", "--allow", "edit",
                         "--output-format", "stream-json", home=home, ws=ws)
    assert proc.returncode == 4, proc.stderr  # done, a call refused for want of a human
    lines = parsed(proc.stdout)
    start, end = lines[0], lines[-1]
    assert start["type"] == "start" and start["workspace"] == str(ws) and start["mode"] == "ask"
    assert start["model"] == "replay/abhed-demo" and start["session"] == end["session"] and not start["resumed"]
    assert end["status"] == "refused" and end["exit_code"] == 4 and (ws / "a.py").read_text().startswith("x = 2")

    # The final reply's deltas (after the last reply_end before it) are the answer.
    last = max(i for i, line in enumerate(lines) if line["type"] == "reply_end" and not line["final"])
    deltas = [line["delta"] for line in of(lines[last:], "text")]
    assert len(deltas) > 1 and "".join(deltas).strip() == end["answer"]
    assert of(lines, "reply_end")[-1] == {**of(lines, "reply_end")[-1], "final": True, "discarded": False}

    # Each call: tool_call, then approval (and its request, checkpoint), then its result, by call_id.
    calls = of(lines, "tool_call")
    assert [c["name"] for c in calls] == ["read", "edit", "write"]
    assert calls[0]["arguments"] == {"path": str(ws / "a.py")}
    for call in calls:
        mine = [line for line in lines if line.get("call_id") == call["call_id"]]
        assert mine[0] is call and mine[-1]["type"] == "tool_result" and mine[-1]["name"] == call["name"]
    read, edit, write = ([line for line in lines if line.get("call_id") == c["call_id"]] for c in calls)
    assert [line["type"] for line in read] == ["tool_call", "approval", "tool_result"]
    assert read[1]["decision"] == "allow" and read[1]["decided_by"] == "check"
    assert read[2]["status"] == "ok" and "x = 1" in read[2]["output"] and read[2]["error"] is None
    assert [line["type"] for line in edit] == ["tool_call", "approval", "checkpoint", "tool_result"]
    assert edit[1]["decided_by"] == "rule" and edit[1]["rule"] == "allow: edit"
    assert edit[2]["number"] == 1 and edit[2]["undo"] == f"abhed undo --to 1 {end['session']}"
    assert [line["type"] for line in write] == ["tool_call", "approval_request", "approval", "tool_result"]
    assert write[2]["decision"] == "deny" and write[2]["decided_by"] == "nobody"
    assert write[3]["status"] == "error" and write[3]["error_kind"] == "not_approved" and write[3]["output"] == ""
    assert "No human is attached" in write[3]["error"] and not (ws / "b.py").exists()
    assert len(of(lines, "usage")) == 4 and all(u["tokens_in"] > 0 for u in of(lines, "usage"))

    # Hostile escapes arrive escaped, never raw: in the model's text and in a tool's output.
    assert not any(char in proc.stdout for char in "\x1b\x07\x9b\u202e")
    assert "\\u001b]0;pwned\\u0007\\u001b[2J\\u009b2J\\u202e" in proc.stdout
    assert HOSTILE in "".join(line["delta"] for line in of(lines, "text")) and HOSTILE in read[2]["output"]

    # The end line holds what --json prints for the same run (ids, hashes and timings aside).
    other = tmp_path / "wz"  # as long as ws: the prompts, and so the tokens, are the same size
    other.mkdir()
    (other / "a.py").write_text(f"x = 1\n# {HOSTILE}\n")
    with ReplayServer(script(other), chunk_chars=8) as server:
        plain = abhed_run("set x to 2", "--endpoint", server.url, "--mode", "ask", "--allow", "edit", "--json",
                          home=home, ws=other)
    assert plain.returncode == 4 and plain.stdout.count("\n") == 1
    printed = json.loads(plain.stdout)
    streamed = result_fields(end)
    assert list(streamed) == list(printed)  # the same fields, in the same order
    for fields in (printed, streamed):
        fields["session"] = fields["head"] = fields["usage"]["seconds"] = None
        fields["files_changed"] = [Path(p).name for p in fields["files_changed"]]
    assert streamed == printed


def test_an_interrupted_run_ends_its_stream_with_an_end_line(ws, home):
    turns = [Turn(calls=[("bash", {"command": "sleep 60", "description": "wait"})]), Turn(text="never")]
    with ReplayServer(turns) as server:
        argv, env = command("wait", "--endpoint", server.url, "--mode", "auto", "--jsonl", home=home, ws=ws)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ws)
        try:
            seen = []
            for line in proc.stdout:  # the call has started: interrupt it as Ctrl-C does
                seen.append(line)
                if json.loads(line)["type"] == "tool_call":
                    proc.send_signal(signal.SIGINT)
                    break
            rest, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.wait()
    lines = parsed("".join(seen) + rest)
    assert proc.returncode == 130, stderr
    assert lines[-1]["status"] == "interrupted" and lines[-1]["exit_code"] == 130
    assert lines[-1]["detail"] == "interrupted by the user" and lines[-1]["session"] == lines[0]["session"]


@pytest.mark.slow  # the wait for a loading server
def test_a_model_server_failing_mid_run_gives_an_error_line_then_the_end(ws, home):
    with ReplayServer([Turn(fault="status:500")], loading=1) as server:  # loading: a notice before the session opens
        proc = abhed_run("hi", "--endpoint", server.url, "--jsonl", home=home, ws=ws,
                         config="[model]\nattempts = 1\n")
    lines = parsed(proc.stdout)
    assert proc.returncode == 1 and lines[0]["type"] == "start"  # what came before it waited for it
    assert "loading" in lines[1]["message"] and lines[1]["type"] == "notice"
    error, end = lines[-2:]
    assert error["type"] == "error" and "HTTP 500" in error["message"]
    assert end["status"] == "failed" and end["exit_code"] == 1 and end["detail"] == error["message"]


@pytest.mark.slow  # the client backs off before its retry
def test_text_of_a_reply_cut_off_and_retried_is_marked_discarded(ws, home):
    with ReplayServer([Turn(fault="cut"), Turn(text="The answer.")]) as server:
        proc = abhed_run("hi", "--endpoint", server.url, "--jsonl", home=home, ws=ws,
                         config="[model]\nattempts = 2\n")
    lines = parsed(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    kinds = [line["type"] for line in lines if line["type"] in ("text", "reply_end")]
    assert kinds == ["text", "reply_end", "text", "reply_end"]
    cut, kept = [line for line in lines if line["type"] == "reply_end"]
    assert cut["discarded"] and not cut["final"] and kept["final"] and not kept["discarded"]
    assert of(lines, "text")[0]["delta"] == "Let me look" and lines[-1]["answer"] == "The answer."
    assert any("retry" in line["message"].lower() for line in of(lines, "notice"))


def test_a_run_that_cannot_begin_still_ends_its_stream(ws, home):
    proc = abhed_run("hi", "--endpoint", "http://127.0.0.1:9/v1", "--output-format", "stream-json", home=home, ws=ws,
                     config="[model]\nattempts = 1\n")
    lines = parsed(proc.stdout)
    assert proc.returncode == 1 and [line["type"] for line in lines] == ["error", "end"]
    assert "Cannot connect to the model server at http://127.0.0.1:9/v1" in lines[0]["message"]
    assert lines[1]["session"] is None and lines[1]["status"] == "failed" and lines[1]["exit_code"] == 1
    assert "Cannot connect" in proc.stderr  # the human's message stays where it was


@pytest.mark.parametrize("flags", [("--json", "--jsonl"), ("--json", "--output-format", "stream-json"),
                                   ("--jsonl", "--output-format", "text")])
def test_outputs_that_disagree_are_refused_naming_both(flags, home):
    result = CliRunner().invoke(main, ["run", "hi", "--endpoint", "http://127.0.0.1:9/v1", *flags])
    assert result.exit_code == 2 and "ask for different outputs: give one" in result.output
    assert all(flag in result.output for flag in flags if flag.startswith("--") and flag != "--output-format")


def test_a_long_output_is_bounded_with_a_note_saying_so():
    assert bounded("short") == ("short", False)
    text, cut = bounded("x" * 50, cap=10)
    assert cut and text.startswith("x" * 10 + "\n[abhed stream: output truncated: 10 of 50 characters shown")

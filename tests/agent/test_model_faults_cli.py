"""`abhed run` against a model server that stalls, restarts, never comes back, or sends too much (issue 33 items 7, 8).

The real command in a process of its own, a real fake vLLM (model.replay) and a real workspace:
judged by the exit status, what stdout and stderr say, and the workspace's files.
"""

from __future__ import annotations

import re
from pathlib import Path

from abhed.model.replay import ReplayServer, Turn
from test_cli_agent import abhed


def configured(tmp_path: Path, text: str) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text("[model]\n" + text)
    return {"ABHED_CONFIG": str(config)}


def test_run_waits_for_a_server_answering_503_and_tells_stderr_what_it_waits_for(ws, home, tmp_path):
    turns = [Turn(fault="status:503"), Turn(fault="status:503"), Turn(text="Loaded and answering.")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "hi", "--endpoint", server.url, "--workspace", str(ws), home=home,
                     env=configured(tmp_path, "attempts = 1\nmax_request_s = 120\n"))
    assert proc.returncode == 0 and proc.stdout == "Loaded and answering.\n"
    waits = re.findall(r"abhed: Waiting for the model server at (\S+) \(HTTP 503: replayed fault: HTTP 503\): "
                       r"\d+ s of 120 s \(model.max_request_s\); next try in (\d+) s\.", proc.stderr)
    assert waits == [(server.url, "1"), (server.url, "2")]  # attempts = 1: waits are not failed tries


def test_run_gives_a_clear_error_when_the_server_never_comes_back(ws, home, tmp_path):
    with ReplayServer(lambda body: Turn(fault="status:503")) as server:
        proc = abhed("run", "hi", "--endpoint", server.url, "--workspace", str(ws), home=home,
                     env=configured(tmp_path, "max_request_s = 2.5\n"))
    assert proc.returncode == 1
    said = proc.stdout + proc.stderr
    assert f"The model server at {server.url} is not serving (HTTP 503: replayed fault: HTTP 503)" in said
    assert re.search(r"Abhed waited \d s for it to come back \(3 tries; model.max_request_s = 2.5 s\): start the "
                     r"server, or raise model.max_request_s if loading its model takes longer\.", said)
    assert "Traceback" not in said and "abhed resume " in said


def test_run_refuses_a_reply_past_max_reply_bytes_and_does_not_print_it(ws, home, tmp_path):
    with ReplayServer([Turn(text="x" * 1_000_000)], chunk_chars=4096) as server:
        proc = abhed("run", "hi", "--endpoint", server.url, "--workspace", str(ws), home=home,
                     env=configured(tmp_path, "max_reply_bytes = 65536\n"))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "x" * 1000 not in said and "Traceback" not in said
    assert f"The reply from the model server at {server.url} passed 65,536 bytes (model.max_reply_bytes)" in said


def test_a_stall_inside_a_tool_call_is_told_and_the_call_runs_once(ws, home, tmp_path):
    """The stream stalls with an edit's arguments half sent; the retry's reply carries the same edit.
    Run twice, the edit would make `x = 111`; nothing runs before a reply is whole."""
    target = ws / "a.py"
    target.write_text("x = 1\n")
    edit = ("edit", {"path": str(target), "old_string": "x = 1", "new_string": "x = 11"})
    turns = [Turn(calls=[("read", {"path": str(target)})]), Turn(calls=[edit], fault="stall_in_call"),
             Turn(calls=[edit]), Turn(text="Set x to 11.")]
    with ReplayServer(turns, stall_s=30) as server:
        proc = abhed("run", "set x to 11", "--endpoint", server.url, "--workspace", str(ws), "--mode",
                     "accept-edits", home=home, env=configured(tmp_path, "stall_s = 0.5\n"))
    assert proc.returncode == 0 and proc.stdout == "Set x to 11.\n"
    assert target.read_text() == "x = 11\n" and proc.stderr.count("-> edit ") == 1
    assert (f"abhed: The model server at {server.url} stalled: its reply had begun, then nothing came for 0.5 s."
            in proc.stderr) and "Retrying in 1 s (attempt 2 of 4)." in proc.stderr

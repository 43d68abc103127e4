"""Central audit in a real `abhed run` (issue 37, item 2): the [audit] table of the config sends the
session's records to a JSON-lines file and to a syslog socket, from the session's log."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from abhed.model.replay import ReplayServer, Turn
from abhed.session.audit import parse_head, verify_session
from abhed.session.store import SessionStore
from audit_testing import Daemon, parse5424
from test_cli_agent import abhed


@pytest.mark.slow  # a whole run in a child process: about 4 s
def test_a_run_sends_start_calls_and_end_with_its_head_to_every_sink(ws, home, tmp_path):
    turns = [Turn(calls=[("bash", {"command": "echo hi > a.txt", "description": "write"})]),
             Turn(calls=[("write", {"path": str(ws / "b.txt"), "content": "b\n"})]), Turn(text="Done.")]
    with tempfile.TemporaryDirectory(prefix="abhed-audit-") as short:
        daemon = Daemon(Path(short) / "log")
        try:
            conf = tmp_path / "config.toml"
            conf.write_text(f'[audit]\nsinks = ["syslog", "jsonl"]\n[audit.syslog]\nsocket = "{daemon.path}"\n'
                            f'[audit.jsonl]\npath = "{tmp_path / "audit.jsonl"}"\n')
            with ReplayServer(turns) as server:
                proc = abhed("run", "go", "--endpoint", server.url, "--mode", "auto", home=home, cwd=ws,
                             env={"ABHED_CONFIG": str(conf)})
            frames = [parse5424(f)["record"] for f in daemon.frames()]
        finally:
            daemon.close()
    assert proc.returncode == 0, proc.stderr
    assert "audit:" not in proc.stderr  # nothing failed, nothing to tell
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [r["id"] for r in frames] == [r["id"] for r in lines]
    kinds = [r["kind"] for r in lines]
    assert kinds == ["session.create", "session.start", "run.start", "approval", "command", "approval",
                     "file.change", "run.end", "session.end"], kinds
    command = lines[4]["fields"]
    assert command["command"] == "echo hi > a.txt" and command["exit_code"] == 0
    assert lines[3]["fields"]["decided_by"] == "mode" and lines[3]["user"]
    [session_id] = SessionStore(home).ids()
    head = parse_head(lines[-1]["fields"]["head"])
    assert head is not None and verify_session(SessionStore(home).stored(session_id), kept=head).ok

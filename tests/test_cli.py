"""`abhed` as a person (or a black-box test) runs it: exit codes, output forms, stdin."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from abhed import __version__
from abhed.tools import all_tools
from abhed_testing import abhed


def test_version_from_the_module_and_the_console_script():
    assert __version__ in abhed("--version").stdout
    # Beside the venv's python, where scripts/setup installs it: the caller's PATH need not hold it.
    script = shutil.which("abhed", path=str(Path(sys.executable).parent))
    if script:
        assert __version__ in subprocess.run([script, "--version"], capture_output=True, text=True).stdout


def test_tool_prints_the_observation_and_exits_0_even_on_error(ws, home):
    (ws / "f.txt").write_text("hi\n")
    ok = abhed("tool", "read", json.dumps({"path": str(ws / "f.txt")}), "--workspace", str(ws))
    assert ok.returncode == 0 and ok.stdout == "     1\thi\n"
    err = abhed("tool", "read", json.dumps({"path": str(ws / "nope.txt")}), "--workspace", str(ws))
    assert err.returncode == 0 and err.stdout.startswith("File not found")


def test_tool_json_output_shape(ws, home):
    proc = abhed("tool", "read", json.dumps({"path": str(ws / "nope")}), "--workspace", str(ws), "--json")
    out = json.loads(proc.stdout)
    assert list(out) == ["tool", "is_error", "content"] and out["tool"] == "read" and out["is_error"] is True


def test_bad_invocations_exit_2_with_a_message(ws, home):
    unknown = abhed("tool", "raed", "{}", "--workspace", str(ws))
    assert unknown.returncode == 2 and "no tool named `raed`" in unknown.stderr and "Did you mean `read`" in unknown.stderr
    bad = abhed("tool", "read", "{oops", "--workspace", str(ws))
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr and "column 2" in bad.stderr
    nodir = abhed("tool", "read", "{}", "--workspace", str(ws / "missing"))
    assert nodir.returncode == 2


def test_arguments_from_stdin(ws, home):
    proc = abhed("tool", "write", "-", "--workspace", str(ws), input=json.dumps({"path": str(ws / "s.txt"),
                                                                                "content": "from stdin\n"}))
    assert proc.stdout.startswith(f"Created {ws / 's.txt'}") and (ws / "s.txt").read_text() == "from stdin\n"


def test_workspace_defaults_to_the_current_directory(ws, home):
    proc = abhed("tool", "read", '{"path": "x.py"}', cwd=ws)
    assert f"that is {ws / 'x.py'}" in proc.stdout


def test_a_new_session_id_is_announced_on_stderr(ws, home):
    proc = abhed("tool", "read", json.dumps({"path": str(ws)}), "--workspace", str(ws))
    assert proc.stderr.startswith("abhed: session ") and "--session" in proc.stderr


def test_invalid_config_is_a_clear_error(ws, home, tmp_path):
    bad = tmp_path / "config.toml"
    bad.write_text("[files]\ncreate_parents = 'sometimes'\n")
    proc = abhed("tool", "read", "{}", "--workspace", str(ws), env={"ABHED_CONFIG": str(bad)})
    assert proc.returncode != 0 and "files.create_parents" in proc.stderr and str(bad) in proc.stderr


def test_tools_lists_names_in_order():
    out = abhed("tools").stdout.splitlines()
    assert [line.split()[0] for line in out] == [tool.name for tool in all_tools()]


def test_mode_plan_refuses_writes_and_says_why(ws, home):
    proc = abhed("tool", "write", json.dumps({"path": str(ws / "x.txt"), "content": "x"}), "--workspace", str(ws),
                 "--mode", "plan")
    assert proc.returncode == 0 and proc.stdout.startswith("Not run: write was refused (plan mode allows read-only")
    assert not (ws / "x.txt").exists()


def test_the_approval_decision_is_recorded_in_the_event(ws, home):
    abhed("tool", "read", json.dumps({"path": str(ws)}), "--workspace", str(ws), "--session", "ap")
    events = [json.loads(line) for line in (home / "sessions" / "ap" / "events.jsonl").read_text().splitlines()]
    assert events[0]["kind"] == "session"  # its creation, then the call and its result
    assert events[2]["metadata"]["approval"] == {"decision": "allow", "rule": "read-only", "reason": "read-only tool"}


def test_operator_deny_rules_from_the_config_apply(ws, home, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[approval]\ndeny = ["write"]\n')
    proc = abhed("tool", "write", json.dumps({"path": str(ws / "x"), "content": "x"}), "--workspace", str(ws),
                 env={"ABHED_CONFIG": str(cfg)})
    assert "refused (the operator's rule deny write forbids it)" in proc.stdout

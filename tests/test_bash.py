"""bash (spec §7): every semantic bullet, run through the real bwrap sandbox."""

from __future__ import annotations

import json
import os
import time

import pytest

from abhed_testing import abhed


def sh(tools, command, **extra):
    return tools("bash", command=command, description="test step", **extra)


def test_cwd_persists_but_env_and_functions_do_not(tools, ws):
    (ws / "sub").mkdir()
    first = sh(tools, "cd sub && export FOO=bar && greet() { echo hi; }")
    assert first.content.endswith(f"[exit code 0]\n[working directory is now {ws / 'sub'}]")
    second = sh(tools, 'pwd; echo "FOO=[$FOO]"; greet')
    assert second.content.startswith(f"{ws / 'sub'}\nFOO=[]\n")
    assert "greet: command not found" in second.content and "[exit code 127]" in second.content
    assert tools.session.state.cwd == str(ws / "sub")


def test_cd_out_of_the_workspace_does_not_stick(tools, ws):
    out = sh(tools, "cd / && pwd").content
    assert out.startswith("/\n") and "working directory is now" not in out
    assert sh(tools, "pwd").content.startswith(f"{ws}\n")


def test_exit_code_is_always_reported_and_nonzero_is_not_a_tool_error(tools):
    result = sh(tools, "echo failing >&2; exit 3")
    assert not result.is_error and result.content == "failing\n[exit code 3]"
    assert result.metadata["exit_code"] == 3


def test_stdout_and_stderr_are_combined_in_order(tools):
    assert sh(tools, "echo one; echo two >&2; echo three").content == "one\ntwo\nthree\n[exit code 0]"


def test_empty_output_is_never_an_empty_string(tools):
    assert sh(tools, "true").content == "[no output]\n[exit code 0]"


def test_output_over_30k_keeps_head_and_tail_with_a_note(tools):
    out = sh(tools, "seq 1 20000").content
    assert out.startswith("1\n2\n3\n") and out.endswith("19999\n20000\n[exit code 0]")
    assert "omitted from the middle of the output" in out and len(out) < 31_000


def test_stdin_is_dev_null(tools):
    assert sh(tools, 'read line; echo "got [$line]"; cat').content == "got []\n[exit code 0]"


def test_timeout_kills_the_process_group_and_keeps_partial_output(tools, ws):
    result = sh(tools, f"echo started; (sleep 60; touch {ws}/survivor) & sleep 60", timeout_ms=1500)
    assert result.content.startswith("started\n")
    assert "[timed out after 1500 ms: the command and everything it started were killed" in result.content
    assert result.metadata["timed_out"] is True
    time.sleep(0.5)
    assert not (ws / "survivor").exists()


@pytest.mark.parametrize("value, fact", [(600_001, "less than or equal to 600000"), (0, "greater than or equal to 1")])
def test_timeout_bounds(tools, value, fact):
    assert fact in tools.err("bash", command="true", description="x", timeout_ms=value)


def test_description_is_required_and_not_blank(tools):
    assert "`description` is required" in tools.err("bash", command="ls")
    assert "approve" in tools.err("bash", command="ls", description="   ")


@pytest.mark.parametrize("command, fact", [
    ("vim notes.txt", "edit or write tools"), ("nano x", "interactive editor"), ("less log", "read tool"),
    ("git rebase -i HEAD~3", "GIT_SEQUENCE_EDITOR"), ("git add -p", "Name whole files"),
    ("git commit", "git commit -m"), ("python", "python script.py"), ("python3", "python -c"),
    ("node", "node script.js"), ("ssh host", "remote command"), ("top", "top -b -n 1"), ("psql", "script file"),
    ("cd x && vim y", "interactive editor"), ("sudo vim /etc/hosts", "interactive editor"),
])
def test_interactive_commands_are_refused_with_the_non_interactive_form(tools, command, fact):
    err = tools.err("bash", command=command, description="interactive")
    assert err.startswith("Not run: ") and fact in err


@pytest.mark.parametrize("command", ["python script.py", "python -c 'print(1)'", "git commit -m msg",
                                     "git commit --amend --no-edit", "ssh host uptime", "git add src/a.py"])
def test_non_interactive_forms_are_not_refused(tools, command):
    result = tools("bash", command=command, description="fine")
    assert not result.content.startswith("Not run:"), result.content


def test_background_job_log_read_and_stop(tools, ws):
    started = sh(tools, "echo ready; sleep 60", background=True)
    assert started.content.startswith("Started background job job-1: echo ready; sleep 60")
    log = started.metadata["log"]
    assert log == str(ws / ".abhed" / "jobs" / tools.session.id / "job-1.log")
    for _ in range(50):
        if os.path.exists(log) and os.path.getsize(log):
            break
        time.sleep(0.1)
    assert tools.ok("read", path=log).startswith("     1\tready")
    assert tools.ok("bash", command="jobs", description="list").startswith("job-1: running; log ")
    stopped = tools.ok("bash", command="kill %job-1", description="stop")
    assert stopped.startswith("job-1: stopped; log ")
    assert "No background job job-9" in tools.err("bash", command="kill %job-9", description="stop")
    assert (ws / ".abhed" / ".gitignore").read_text().endswith("*\n")


def test_a_background_job_beyond_the_cap_is_refused_naming_the_running_ones_and_how_to_stop_one(make_tools, ws):
    tools = make_tools()
    tools.settings.sandbox.max_background_jobs = 1
    assert sh(tools, "sleep 60", background=True).content.startswith("Started background job job-1: sleep 60")
    refused = tools.err("bash", command="touch started; sleep 61", description="second", background=True)
    log = ws / ".abhed" / "jobs" / tools.session.id / "job-1.log"
    lines = refused.split("\n")
    assert lines[0] == ("The background job did not start: 1 background job is running in this session, and "
                        "sandbox.max_background_jobs allows 1 at once:")
    assert lines[1].startswith("  job-1: `sleep 60` (started ") and lines[1].endswith(f" s ago; log {log})")
    assert lines[2] == ("Stop one that is no longer needed with the bash command `kill %job-1` (`jobs` lists them with their "
                        "state), or wait for one to end, then start this one again; or run the command in the foreground "
                        "(without background, with a timeout_ms long enough). The operator can raise "
                        "sandbox.max_background_jobs.")
    assert not (ws / "started").exists() and not log.with_name("job-2.log").exists()  # nothing ran, no log was made
    tools.ok("bash", command="kill %job-1", description="stop")
    assert sh(tools, "sleep 61", background=True).content.startswith("Started background job job-2: sleep 61")


def test_background_jobs_end_with_the_session(tools, ws):
    sh(tools, f"sleep 1.5; touch {ws}/late", background=True)
    tools.ctx.close()
    time.sleep(2.5)
    assert not (ws / "late").exists()


def test_background_refused_in_a_one_shot_process(ws, home):
    proc = abhed("tool", "bash", json.dumps({"command": "sleep 1", "description": "bg", "background": True}),
                 "--workspace", str(ws))
    assert "background=true needs a running agent session" in proc.stdout


def test_the_command_runs_confined(tools, tmp_path):
    out = sh(tools, f"touch {tmp_path}/outside; cat /etc/shadow; ls /root").content
    assert "Read-only file system" in out or "Permission denied" in out or "No such file" in out
    assert not (tmp_path / "outside").exists()


def test_unconfined_backend_says_so_on_every_observation(make_tools):
    tools = make_tools()
    tools.settings.sandbox.backend = "none"
    assert sh(tools, "echo x").content.startswith("[ran WITHOUT a sandbox")


def test_destructive_needs_confirm_through_the_cli(ws, home):
    (ws / "build").mkdir()
    args = json.dumps({"command": "rm -rf build", "description": "clean"})
    refused = abhed("tool", "bash", args, "--workspace", str(ws))
    assert "destructive: rm with recursive or force flags" in refused.stdout and (ws / "build").exists()
    confirmed = abhed("tool", "bash", args, "--workspace", str(ws), "--confirm")
    assert confirmed.stdout.endswith("[exit code 0]\n") and not (ws / "build").exists()


def test_a_repository_made_by_a_command_is_quarantined_and_the_observation_says_so(tools, ws, tmp_path):
    marker = tmp_path / "pwned"
    out = sh(tools, f"git init -q sub && git -C sub config core.fsmonitor 'touch {marker}; false' && echo made").content
    assert "made" in out
    assert f"[sandbox: the sandbox created a git repository (its HEAD is renamed too): {ws}/sub/.git was renamed to" in out
    import subprocess
    subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=ws / "sub", capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"})
    assert not marker.exists()  # host git in the directory ran nothing the command wrote


@pytest.mark.parametrize("background", [False, True])
def test_files_shared_with_names_outside_are_unshared_and_the_first_call_says_so(tools, ws, tmp_path, background):
    outside = tmp_path / "store-file.js"
    outside.write_text("module.exports = 1;\n")
    (ws / "node_modules").mkdir()
    os.link(outside, ws / "node_modules" / "m.js")  # pnpm's layout: a hard link into a store outside
    first = sh(tools, "chmod u+w node_modules/m.js; echo hacked > node_modules/m.js; sleep 0.2", background=background)
    assert ("[sandbox: 1 file in the workspace shared hard links with files outside it (e.g. node_modules/m.js: a local "
            "`git clone`, a pnpm store or `ln` makes them)") in first.content
    assert "1 of them (20 bytes) were replaced by copies" in first.content
    assert "shared hard links" not in sh(tools, "true").content  # told once
    assert outside.read_text() == "module.exports = 1;\n"


def test_memory_and_disk_settings_reach_the_sandbox(make_tools):
    from abhed.tools.bash import sandbox_config
    tools = make_tools()
    tools.settings.sandbox.max_memory_bytes = 256 * 1024**2
    tools.settings.sandbox.disk_reserve_bytes = None
    limits = sandbox_config(tools.settings).limits
    assert limits.memory_bytes == 256 * 1024**2 and limits.disk_reserve_bytes is None
    # The sandbox's notes name the operator's settings, and each name is one the config has.
    assert limits.setting("memory_bytes") == "sandbox.max_memory_bytes"
    assert limits.setting("disk_reserve_bytes") == "sandbox.disk_reserve_bytes"
    from abhed.tools.bash import SANDBOX_SETTING_NAMES
    for field, name in SANDBOX_SETTING_NAMES:
        assert getattr(limits, field) == getattr(tools.settings.sandbox, name.removeprefix("sandbox."))
    assert sandbox_config(tools.settings).protected_paths[:4] == (".git/hooks/", ".git/config", ".git/modules/", ".git/info/")

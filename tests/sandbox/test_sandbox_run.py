"""The foreground API the bash tool builds on: output, exit codes, cwd, timeouts, environment, errors."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sbx_helpers import DriverError, host_pids_with, unique_marker

import sandbox
from sandbox.bwrap import setup_failure


def test_output_is_stdout_and_stderr_in_arrival_order(runner, workspace):
    result = runner.run("echo out1; echo err1 >&2; echo out2; echo err2 >&2", workspace=workspace)
    assert result.output == "out1\nerr1\nout2\nerr2\n"
    assert result.exit_code == 0 and not result.timed_out
    assert result.backend == ("microvm" if runner.kind == "microvm" else "bwrap") and result.sandboxed


@pytest.mark.parametrize(("command", "code"), [("exit 7", 7), ("false", 1), ("kill -9 $$", 137), ("no-such-command-xyz", 127)])
def test_exit_code_is_reported_not_raised(runner, workspace, command, code):
    assert runner.run(command, workspace=workspace).exit_code == code


def test_stdin_is_dev_null(runner, workspace):
    result = runner.run("cat; echo cat=$?; read -r line; echo read=$?; readlink /proc/self/fd/0", workspace=workspace)
    assert result.output == "cat=0\nread=1\n/dev/null\n"


def test_cd_is_reported_and_applies_to_the_next_call_but_variables_do_not(runner, workspace):
    (workspace / "sub").mkdir()
    os.chown(workspace / "sub", runner.uid, runner.gid) if os.geteuid() == 0 else None
    first = runner.run("cd sub && export FOO=1 && greet() { echo hi; }; echo done", workspace=workspace)
    assert first.output == "done\n"  # the cwd report never shows up in the output
    assert first.final_cwd == str(workspace / "sub")
    second = runner.run(
        'pwd; echo "FOO=${FOO:-unset}"; type greet >/dev/null 2>&1 || echo no-greet', workspace=workspace, cwd=Path(first.final_cwd)
    )
    assert second.output == f"{workspace / 'sub'}\nFOO=unset\nno-greet\n"


@pytest.mark.parametrize(
    ("command", "expect_cwd", "code"),
    [
        ("cd sub; exit 3", "sub", 3),  # exit keeps both the cwd report and the status
        ("cd sub; (cd ..; exit 0); false", "sub", 1),  # subshells do not report
        ("cd sub; set -e; false; echo unreachable", "sub", 1),
        ("cd /", None, 0),  # outside the workspace: not reported as a usable cwd
        ("cd /tmp", None, 0),
        ("cd sub; exec true", None, 0),  # the shell was replaced: nothing to report
        ("cd sub; trap 'echo bye' EXIT", None, 0),  # the command took over the EXIT trap
        ("cd sub; exec 3>&- 9>&- 10>&- 11>&- 12>&-", "sub", 0),  # fds scripts use stay theirs
        ("cd sub; exec 200>&-", None, 0),  # our control fd closed: silently no report
    ],
)
def test_final_cwd_reporting(root_runner, command, expect_cwd, code):
    workspace = root_runner.new_workspace()
    (workspace / "sub").mkdir()
    result = root_runner.run(command, workspace=workspace)
    assert result.exit_code == code
    assert result.final_cwd == (None if expect_cwd is None else str(workspace / expect_cwd))
    assert "unreachable" not in result.output and "Bad file descriptor" not in result.output


def test_commands_using_low_fds_keep_their_data_and_the_cwd_report(root_runner):
    workspace = root_runner.new_workspace()
    (workspace / "sub").mkdir()
    result = root_runner.run("exec 3>out.txt 9>out9.txt; echo hi >&3; echo nine >&9; cd sub", workspace=workspace)
    assert (workspace / "out.txt").read_text() == "hi\n"
    assert (workspace / "out9.txt").read_text() == "nine\n"
    assert result.final_cwd == str(workspace / "sub")


def test_timeout_kills_the_command_and_keeps_partial_output(runner, workspace):
    marker = unique_marker()
    result = runner.run(f"echo before; sleep {marker}; echo after", workspace=workspace, timeout_s=1)
    assert result.timed_out and result.exit_code is None
    assert result.output == "before\n"
    assert host_pids_with(marker) == []


def test_output_is_bounded_keeping_head_and_tail_with_exact_counts(runner, workspace):
    full = "".join(f"{i}\n" for i in range(1, 100001))
    result = runner.run("seq 1 100000", workspace=workspace, output_limit_chars=1000)
    assert result.omitted_chars == len(full) - 1000
    assert result.output.startswith(full[:500])
    assert result.output.endswith(full[-500:])
    assert f"[... {len(full) - 1000} characters (" in result.output


def test_unbounded_output_when_no_limit(root_runner):
    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        result = sb.run("seq 1 100000", cwd=workspace, timeout_s=60)
    assert result.head == "".join(f"{i}\n" for i in range(1, 100001)) and result.tail == ""
    assert result.omitted_chars == 0 and not result.truncated


def test_output_bound_counts_characters_not_bytes(root_runner):
    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        result = sb.run("for i in $(seq 3000); do printf 'é€'; done", cwd=workspace, timeout_s=60, output_limit_chars=100)
    assert result.head == "é€" * 25 and result.tail == "é€" * 25
    assert result.omitted_chars == 6000 - 100 and result.omitted_lines == 0


def test_curated_environment(runner, workspace):
    result = runner.run("env | sort", workspace=workspace)
    env = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
    assert env["TERM"] == "dumb" and env["PAGER"] == "cat" and env["GIT_PAGER"] == "cat"
    assert env["GIT_EDITOR"] == "true" and env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["HOME"] == "/tmp/home" and env["TMPDIR"] == "/tmp" and env["LANG"] == "C.UTF-8"
    assert env["PATH"].split(":")[:4] == ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"]
    assert set(env) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "TERM",
        "PAGER",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_TERMINAL_PROMPT",
        "PWD",
        "SHLVL",
        "_",
        "OLDPWD",
    }


def test_home_is_writable_and_private(runner, workspace):
    result = runner.run("echo x > ~/.cache-test && cat ~/.cache-test && touch /tmp/t && echo ok", workspace=workspace)
    assert result.output == "x\nok\n"


def test_env_passthrough(root_runner):
    workspace = root_runner.new_workspace()
    environ = {"PATH": "/usr/bin", "ABHED_PASS": "yes", "ABHED_KEEP_OUT": "no"}
    with sandbox.Sandbox(sandbox.SandboxConfig(env_passthrough=("ABHED_PASS", "ABHED_ABSENT")), workspace, environ=environ) as sb:
        result = sb.run('echo "$ABHED_PASS ${ABHED_KEEP_OUT:-unset} ${ABHED_ABSENT:-absent}"', cwd=workspace, timeout_s=60)
    assert result.output == "yes unset absent\n"


def test_git_never_waits_for_an_editor_or_pager(root_runner):
    if shutil.which("git", path="/usr/bin:/bin") is None:
        pytest.skip("needs git in /usr/bin")
    workspace = root_runner.new_workspace()
    command = "git init -q . 2>/dev/null; git -c user.name=a -c user.email=a@b commit -q --allow-empty -m one && git -c user.name=a -c user.email=a@b commit --amend -q --allow-empty && git log --format=%s"
    # .git is protected only once it exists; a fresh repo is created by the operator, not here
    config = {"protected_paths": []}
    result = root_runner.run(command, workspace=workspace, config=config, timeout_s=60)
    assert result.exit_code == 0 and result.output == "one\n"


def test_extra_binds(root_runner, tmp_path):
    workspace = root_runner.new_workspace()
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "data").write_text("read me\n")
    result = root_runner.run(
        f"cat {ro}/data; echo x > {ro}/new; echo y > {rw}/new && echo wrote",
        workspace=workspace,
        config={"ro_binds": [str(ro)], "rw_binds": [str(rw)]},
    )
    assert "read me" in result.output and "Read-only file system" in result.output and "wrote" in result.output
    assert not (ro / "new").exists() and (rw / "new").read_text() == "y\n"


def test_hidden_paths_are_unreadable(root_runner, tmp_path):
    workspace = root_runner.new_workspace()
    (workspace / "secrets.env").write_text("TOKEN=abc\n")
    (workspace / "keys").mkdir()
    (workspace / "keys" / "id").write_text("KEY\n")
    config = {"hidden_paths": [str(workspace / "secrets.env"), str(workspace / "keys")]}
    result = root_runner.run("cat secrets.env; ls keys; cat keys/id; echo end", workspace=workspace, config=config)
    assert "TOKEN" not in result.output and "KEY" not in result.output and "Permission denied" in result.output


# -- none and microvm backends -------------------------------------------------------------------


def test_none_backend_runs_unconfined_and_says_so(runner, workspace):
    (workspace / "sub").mkdir()
    if os.geteuid() == 0:
        os.chown(workspace / "sub", runner.uid, runner.gid)
    result = runner.run(
        "cd sub; echo out; echo err >&2; test -d /proc/1 && echo host-proc", workspace=workspace, config={"backend": "none"}
    )
    assert result.backend == "none" and not result.sandboxed
    assert result.output == "out\nerr\nhost-proc\n"
    assert result.final_cwd == str(workspace / "sub")


def test_none_backend_result_carries_the_warning(root_runner):
    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), workspace) as sb:
        result = sb.run("true", cwd=workspace, timeout_s=60)
    assert result.warning == "ran WITHOUT a sandbox (the operator chose backend 'none')"
    assert sandbox.UNSANDBOXED_WARNING in result.warning


def test_none_backend_kills_the_process_group_on_timeout_and_at_the_end(runner, workspace):
    markers = [unique_marker(), unique_marker()]
    ended = runner.run(f"sleep {markers[0]} & echo started", workspace=workspace, config={"backend": "none"})
    assert ended.output == "started\n"
    timed = runner.run(f"sleep {markers[1]}", workspace=workspace, timeout_s=1, config={"backend": "none"})
    assert timed.timed_out
    for marker in markers:
        assert host_pids_with(marker) == []


def test_microvm_backend_without_an_image_says_how_to_build_one(root_runner, tmp_path):
    workspace = root_runner.new_workspace()
    config = sandbox.SandboxConfig(backend="microvm", microvm=sandbox.MicrovmConfig(image_dir=tmp_path / "no-image"))
    with pytest.raises(sandbox.BackendUnavailable) as err:
        sandbox.Sandbox(config, workspace)
    message = str(err.value)
    assert message.startswith(f"microvm image {tmp_path / 'no-image'} is unusable: cannot read ")
    assert "scripts/build-microvm" in message


# -- Which bwrap, and failing closed -----------------------------------------------------------


def test_bwrap_inside_the_workspace_is_refused(root_runner):
    workspace = root_runner.new_workspace()
    fake = workspace / "tools" / "bwrap"
    fake.parent.mkdir()
    shutil.copy2("/bin/true", fake)
    with pytest.raises(sandbox.BackendUnavailable) as err:
        sandbox.Sandbox(sandbox.SandboxConfig(bwrap_path=fake), workspace)
    assert f"the bwrap binary {fake} is inside {workspace}" in str(err.value)
    assert "would run unconfined" in str(err.value)


def test_bwrap_symlinked_from_the_workspace_is_refused(root_runner):
    workspace = root_runner.new_workspace()
    link = workspace / "bwrap"
    link.symlink_to(sandbox.Sandbox(sandbox.SandboxConfig(), workspace)._launcher.bwrap)
    with pytest.raises(sandbox.BackendUnavailable, match="inside"):
        sandbox.Sandbox(sandbox.SandboxConfig(bwrap_path=link), workspace)


def test_bwrap_is_never_looked_up_on_path_or_in_cwd(root_runner, tmp_path, monkeypatch):
    workspace = root_runner.new_workspace()
    fake_dir = tmp_path / "fakebin"
    fake_dir.mkdir()
    (fake_dir / "bwrap").write_text('#!/bin/sh\ntouch /tmp/abhed-fake-bwrap-ran\nexec "$@"\n')
    (fake_dir / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_dir))
    monkeypatch.chdir(fake_dir)
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        assert sb._launcher.bwrap != fake_dir / "bwrap"
        assert sb.run("echo ok", cwd=workspace, timeout_s=60).output == "ok\n"
    assert not Path("/tmp/abhed-fake-bwrap-ran").exists()


def test_something_that_is_not_bwrap_is_refused(root_runner):
    workspace = root_runner.new_workspace()
    with pytest.raises(sandbox.BackendUnavailable, match="did not report a version"):
        sandbox.Sandbox(sandbox.SandboxConfig(bwrap_path=Path("/bin/true")), workspace)
    with pytest.raises(sandbox.BackendUnavailable, match="is not an executable file"):
        sandbox.Sandbox(sandbox.SandboxConfig(bwrap_path=Path("/nonexistent/bwrap")), workspace)


def test_setup_failure_raises_and_the_command_does_not_run(runner, workspace):
    gone = runner.new_workspace()  # a directory the runner's user may remove
    code = f"""
import shutil
sb = sandbox.Sandbox(config_from({{"ro_binds": [{str(gone)!r}]}}), {str(workspace)!r})
shutil.rmtree({str(gone)!r})
try:
    sb.run("touch ran", cwd={str(workspace)!r}, timeout_s=60)
    answer = "ran"
except sandbox.SandboxSetupError as exc:
    answer = [str(exc), exc.detail]
"""
    message, detail = runner.exec(code)
    assert not (workspace / "ran").exists()
    assert message.startswith("The sandbox could not be set up, so the command did not run (bwrap said: ")
    assert str(gone) in detail and "abhed doctor" in message


def test_the_command_never_runs_without_its_limits(root_runner, monkeypatch):
    from sandbox import launcher

    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        monkeypatch.setattr(launcher, "apply_rlimits", lambda pid, limits: (_ for _ in ()).throw(PermissionError(1, "denied")))
        with pytest.raises(sandbox.SandboxSetupError, match="Could not apply the resource limits"):
            sb.run("touch ran-1", cwd=workspace, timeout_s=60)
        monkeypatch.undo()
        # The sandbox's pid 1 cannot be identified (e.g. its pid was reused): not started either.
        monkeypatch.setattr(launcher, "_parent_pid", lambda pid: -1)
        with pytest.raises(sandbox.SandboxSetupError, match="could not be set up, so the command did not run"):
            sb.run("touch ran-2", cwd=workspace, timeout_s=60)
    assert not (workspace / "ran-1").exists() and not (workspace / "ran-2").exists()


@pytest.mark.parametrize(
    "stderr",
    [
        "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.",
        "bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)",
        "bwrap: setting up uid map: Permission denied",
        "bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted",
    ],
)
def test_user_namespace_failures_are_recognised(stderr):
    error = setup_failure(Path("/usr/bin/bwrap"), stderr)
    assert isinstance(error, sandbox.UserNamespacesUnavailable)
    text = str(error)
    assert text.startswith("bwrap backend not available on this host: the kernel refused to create the sandbox's user namespace")
    assert "user.max_user_namespaces" in text and "kernel.unprivileged_userns_clone" in text
    assert "apparmor_restrict_unprivileged_userns" in text and "backend 'none'" in text and stderr in text


def test_user_namespaces_disabled_live(runner):
    """With user.max_user_namespaces=0 (set in a private user namespace) run() says what to fix."""
    if shutil.which("unshare", path="/usr/bin:/bin") is None:
        pytest.skip("needs util-linux unshare to set up a host without user namespaces")
    workspace = runner.new_workspace()
    argv, kwargs = runner.driver_argv()
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    code = f"""
try:
    with sandbox.Sandbox(config_from({{"limits": {{"processes": None}}}}), {str(workspace)!r}) as sb:
        sb.run("true", cwd={str(workspace)!r}, timeout_s=60)
    answer = ["ran"]
except sandbox.UserNamespacesUnavailable as exc:
    answer = ["refused", str(exc), sandbox.probe(config_from({{"limits": {{"processes": None}}}})).summary]
"""
    import json

    out = subprocess.run(
        ["unshare", "--user", "--map-root-user", "/bin/sh", "-c", script, "sh", *argv],
        input=json.dumps({"op": "exec", "code": code}),
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )
    answer = json.loads(out.stdout)
    assert answer["ok"], answer
    status, message, probe_summary = answer["result"]
    assert status == "refused"
    assert "max_*_namespaces exceeded" in message and "sysctl -w user.max_user_namespaces=15000" in message
    assert probe_summary.startswith("bwrap backend NOT usable: bwrap backend not available on this host")


# -- Argument errors ---------------------------------------------------------------------------


def test_cwd_must_be_inside_the_workspace(runner, workspace):
    with pytest.raises((sandbox.PathError, DriverError)) as err:
        runner.run("true", workspace=workspace, cwd=Path("/usr"))
    assert "cwd /usr is outside the workspace" in str(err.value)


def test_cwd_escaping_through_a_symlink_is_refused(root_runner):
    workspace = root_runner.new_workspace()
    (workspace / "link").symlink_to("/etc")
    with pytest.raises(sandbox.PathError, match="resolves to /etc"):
        root_runner.run("true", workspace=workspace, cwd=workspace / "link")


@pytest.mark.parametrize("bad", ["relative/dir", "/", "/tmp", "/home", "/usr/share", "/var", "/nonexistent-abhed"])
def test_unusable_workspaces_are_refused(bad):
    with pytest.raises(sandbox.PathError) as err:
        sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), bad)
    assert "workspace" in str(err.value)


def test_timeout_must_be_positive(root_runner):
    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), workspace) as sb:
        for bad in (0, -1, float("nan"), float("inf"), True):
            with pytest.raises(ValueError, match="timeout_s must be a positive number of seconds"):
                sb.run("true", cwd=workspace, timeout_s=bad)


def test_a_closed_sandbox_refuses_to_run(root_runner):
    workspace = root_runner.new_workspace()
    sb = sandbox.Sandbox(sandbox.SandboxConfig(), workspace)
    sb.close()
    with pytest.raises(sandbox.SandboxError, match="closed"):
        sb.run("true", cwd=workspace, timeout_s=60)


def test_per_command_pids_cgroups_are_removed(root_runner):
    workspace = root_runner.new_workspace()
    sb = sandbox.Sandbox(sandbox.SandboxConfig(), workspace)
    parents = sb._launcher.cgroup_parents
    if not parents:
        pytest.skip("no cgroup in use (not host root, or no limits that need one)")
    for _ in range(3):
        sb.run("ls / >/dev/null; sleep 0.1 & true", cwd=workspace, timeout_s=60)
    sb.close()
    for parent in parents:
        assert list(parent.path.glob(f"run-{os.getpid()}-*")) == []


def test_module_level_run(root_runner):
    workspace = root_runner.new_workspace()
    result = sandbox.run("echo hi", workspace=workspace, cwd=workspace, timeout_s=60, config=sandbox.SandboxConfig())
    assert result.output == "hi\n" and result.backend == "bwrap"


def test_probe_reports_a_working_sandbox(runner):
    report = runner.exec("r = sandbox.probe(); answer = [r.ok, r.backend, r.summary, list(r.details)]")
    ok, backend, summary, details = report
    assert ok and backend == "bwrap" and summary == "bwrap sandbox works"
    assert any(line.startswith("bwrap: ") and "bubblewrap " in line for line in details)
    assert any(line.startswith("process limit: ") for line in details)


def test_probe_of_none_and_microvm():
    none = sandbox.probe(sandbox.SandboxConfig(backend="none"))
    assert none.ok and "ran WITHOUT a sandbox" in none.summary
    vm = sandbox.probe(sandbox.SandboxConfig(backend="microvm", microvm=sandbox.MicrovmConfig(image_dir=Path("/nonexistent"))))
    assert not vm.ok and vm.summary.startswith("microvm backend NOT usable: microvm image /nonexistent is unusable")

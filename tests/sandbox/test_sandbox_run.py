"""The foreground API the bash tool builds on: output, exit codes, cwd, timeouts, environment, errors."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sbx_helpers import DriverError, fds_in_a_fresh_process, host_pids_with, unique_marker, wait_until

import sandbox
from sandbox.bwrap import setup_failure


def test_output_is_stdout_and_stderr_in_arrival_order(runner, workspace):
    result = runner.run("echo out1; echo err1 >&2; echo out2; echo err2 >&2", workspace=workspace)
    assert result.output == "out1\nerr1\nout2\nerr2\n"
    assert result.exit_code == 0 and not result.timed_out
    assert result.backend == runner.backend and result.sandboxed


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
    assert env["GIT_EDITOR"] == "true" and env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_OPTIONAL_LOCKS"] == "0"
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
        "GIT_OPTIONAL_LOCKS",
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


def test_none_backend_stops_reading_when_an_escaped_process_holds_the_output(root_runner):
    """A process that left the process group (setsid) keeps the output pipe open for its whole life;
    run() stops reading after the command ended (DRAIN_S) instead of waiting for it. The escaped
    process is the operator's problem with backend none (docs): we end it ourselves here."""
    workspace = root_runner.new_workspace()
    marker = unique_marker()
    try:
        escape = f"setsid sh -c 'echo > ready; exec sleep {marker}' & while [ ! -e ready ]; do sleep 0.01; done; echo left"
        result = root_runner.run(escape, workspace=workspace, config={"backend": "none"})
        assert (result.output, result.exit_code, result.timed_out) == ("left\n", 0, False)
        assert host_pids_with(marker) != []  # still running: nothing closed its end of the pipe
    finally:
        for pid in host_pids_with(marker):
            os.kill(pid, 9)


def test_output_written_after_a_timeout_kill_is_still_collected_while_the_pipe_drains(root_runner):
    """With backend none a process that left the group survives the kill and may still write: what
    it writes within DRAIN_S of the timeout is kept (bwrap kills everything, so there it is EOF)."""
    workspace = root_runner.new_workspace()
    marker = unique_marker()
    late = f"setsid sh -c 'sleep 0.3; echo late; sleep {marker}' & echo early; sleep 60"
    try:
        result = root_runner.run(late, workspace=workspace, timeout_s=0.2, config={"backend": "none"})
    finally:
        for pid in host_pids_with(marker):
            os.kill(pid, 9)
    assert result.timed_out and result.output == "early\nlate\n"


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
        monkeypatch.undo()
        # bwrap's report names no pid (garbled, or bwrap failed first): nothing to limit, nothing runs.
        monkeypatch.setattr(launcher, "_child_pid", lambda info: None)
        with pytest.raises(sandbox.SandboxSetupError, match="could not be set up, so the command did not run"):
            sb.run("touch ran-3", cwd=workspace, timeout_s=60)
    assert not any((workspace / f"ran-{n}").exists() for n in (1, 2, 3))


def test_the_none_backend_never_runs_a_command_without_its_rlimits(root_runner, monkeypatch):
    """The unconfined shell waits for a go that never comes: it is killed, not left to read EOF and run."""
    from sandbox import launcher

    workspace = root_runner.new_workspace()
    marker = unique_marker()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), workspace) as sb:
        monkeypatch.setattr(launcher, "apply_rlimits", lambda pid, limits: (_ for _ in ()).throw(PermissionError(1, "denied")))
        with pytest.raises(sandbox.SandboxSetupError, match=r"Could not apply the resource limits \(\[Errno 1\] denied\); the command did not run."):
            sb.run(f"touch ran; sleep {marker}", cwd=workspace, timeout_s=60)
    # A shell left alive would read EOF on its go pipe and run the command within milliseconds.
    ran = wait_until(lambda: (workspace / "ran").exists() or host_pids_with(marker) != [], timeout_s=2)
    for pid in host_pids_with(marker):
        os.kill(pid, 9)
    assert not ran


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


def test_cwd_that_is_a_file_or_missing_is_refused(root_runner):
    workspace = root_runner.new_workspace()
    (workspace / "notes.txt").write_text("x")
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), workspace) as sb:
        for bad in (workspace / "notes.txt", workspace / "missing"):
            with pytest.raises(sandbox.PathError) as err:
                sb.run("true", cwd=bad, timeout_s=60)
            assert str(err.value) == (
                f"cwd {bad} does not exist or is not a directory; use {workspace} or an existing directory below it."
            )
        with pytest.raises(sandbox.PathError, match="cwd must be an absolute path, got 'sub'; for example "):
            sb.run("true", cwd="sub", timeout_s=60)


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


def _real_dirs(places):
    return [p for p in places if os.path.isdir(p) and os.path.realpath(p) == p]


# Written out here, not read from sandbox.box: a place dropped there must fail this test.
NEVER_A_WORKSPACE = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc", "/sys",
                     "/dev", "/run", "/var", "/tmp", "/root", "/home")


@pytest.mark.parametrize("place", _real_dirs(NEVER_A_WORKSPACE))
def test_every_system_and_private_directory_is_refused_as_a_workspace(place):
    """Each entry counts (on merged-/usr hosts /bin, /sbin, /lib* resolve into /usr and are caught there)."""
    with pytest.raises(sandbox.PathError) as err:
        sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), place)
    assert str(err.value) == (
        f"workspace {place} is not allowed: it is or contains {place}, which a sandboxed command must never be able to "
        "write. Use a project directory instead, e.g. /srv/projects/myapp or ~/src/myapp."
    )


@pytest.mark.parametrize(
    "inside", [d for d in ("/proc/sys", "/sys/kernel", "/dev/pts", "/run/lock", "/usr/share", "/etc/ssl") if os.path.isdir(d)]
)
def test_a_workspace_inside_a_system_directory_is_refused(inside):
    with pytest.raises(sandbox.PathError) as err:
        sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), inside)
    place = "/" + inside.split("/")[1]
    assert f"workspace {inside} is not allowed: it lies inside the system directory {place}, which must stay read-only" in str(err.value)


def test_a_workspace_containing_the_home_directory_is_refused(tmp_path, monkeypatch):
    home = tmp_path / "home-of-operator"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(sandbox.PathError, match=f"it is or contains {home}, which"):
        sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), home)
    ok = home / "project"
    ok.mkdir()
    sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), ok).close()  # below home is fine


def test_a_relative_or_missing_workspace_says_what_to_use():
    with pytest.raises(sandbox.PathError, match="workspace must be an absolute path, got 'rel/dir'; for example /"):
        sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), "rel/dir")
    with pytest.raises(sandbox.PathError, match="workspace /nonexistent-abhed does not exist or is not a directory"):
        sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), "/nonexistent-abhed")


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
    before = _own_cgroups(parents)   # an earlier test's session may still be removing its own
    for _ in range(3):
        sb.run("ls / >/dev/null; sleep 0.1 & true", cwd=workspace, timeout_s=60)
    sb.close()
    assert _own_cgroups(parents) <= before


def _own_cgroups(parents) -> set:
    """This process's session and command cgroups under the parents (ws-<key>/session-<pid>-.../run-<pid>-<n>)."""
    pid = os.getpid()
    patterns = (f"run-{pid}-*", f"ws-*/session-{pid}-*", f"ws-*/session-{pid}-*/run-*")
    return {path for parent in parents for pattern in patterns for path in parent.path.glob(pattern)}


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_no_descriptor_outlives_its_command(root_runner, backend):
    """Pipes, pidfds (the sandbox's pid 1 too) are closed when each command ends, however it ended."""
    out = fds_in_a_fresh_process(f"""
with sandbox.Sandbox(sandbox.SandboxConfig(backend={backend!r}), workspace) as sb:
    sb.run("true", cwd=workspace, timeout_s=60)  # whatever is opened once per session
    out["before"] = sorted(os.listdir("/proc/self/fd"))
    for command, timeout in (("true", 60), ("exit 3", 60), ("sleep 60 & echo started", 60), ("sleep 60", 0.3)):
        sb.run(command, cwd=workspace, timeout_s=timeout)
    out["after"] = sorted(os.listdir("/proc/self/fd"))
""", root_runner.new_workspace())
    assert out["after"] == out["before"]


def test_without_a_disk_reserve_nothing_watches_the_command(runner, workspace):
    """limits.disk_reserve_bytes = None: no reserve, no watch (the collector must not call one)."""
    result = runner.run("echo hi; sleep 0.2; echo bye", workspace=workspace, config={"limits": {"disk_reserve_bytes": None}})
    assert (result.output, result.exit_code, result.notes) == ("hi\nbye\n", 0, ())


def test_a_cgroup_that_cannot_be_made_stops_the_command_and_removes_the_ones_made(root_runner, tmp_path):
    """As root: the pids cgroup is made, the next one fails. Nothing runs, and the pids cgroup made
    for the command is removed again (judged in the real cgroup hierarchy)."""
    from sandbox.limits import CgroupParent

    workspace = root_runner.new_workspace()
    sb = sandbox.Sandbox(sandbox.SandboxConfig(), workspace)
    real = sb._launcher.cgroup_parents
    if not real:
        pytest.skip("no cgroup in use (not host root)")
    broken = CgroupParent(tmp_path / "no-such-hierarchy", 1, ("memory",))
    before = _own_cgroups(real[:1])
    sessions = sb._launcher.session_cgroups
    sessions.roots = (real[0], broken)
    try:
        # The session's cgroups: the one made in the first hierarchy goes again, its workspace's directory too.
        with pytest.raises(sandbox.SandboxSetupError) as err:
            sb.run("touch ran", cwd=workspace, timeout_s=60)
        assert str(err.value).startswith(f"Could not create the session's cgroup {sessions.path_under(broken).parent} (No such "
                                         "file or directory); the command did not run.")
        assert not (workspace / "ran").exists()
        assert _own_cgroups(real[:1]) <= before and not sessions.path_under(real[0]).parent.exists()
        # The command's: the session's exist, the second command cgroup cannot be made.
        sessions.roots = real[:1]
        made = sessions.parents()
        sessions._made = (made[0], broken)
        with pytest.raises(sandbox.SandboxSetupError) as err:
            sb.run("touch ran", cwd=workspace, timeout_s=60)
        assert str(err.value).startswith(f"Could not create the command's cgroup under {broken.path} (No such file or directory); the command did not run.")
        assert not (workspace / "ran").exists() and not list(made[0].path.glob("run-*"))
        sessions._made = made
    finally:
        sb.close()
    assert _own_cgroups(real[:1]) <= before


def test_a_thread_stuck_in_the_command_cgroup_stops_the_command(root_runner, monkeypatch):
    """As root with cgroup v1: Abhed's thread joins the command's cgroups to start bwrap there. If it
    cannot go back, the command must not run (judged on the host), bwrap is gone, and the error says
    where the thread is stuck and what to do."""
    from sandbox.limits import ThreadInCgroups

    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        if not any(c.version == 1 for c in sb._launcher.cgroup_parents):
            pytest.skip("no cgroup v1 hierarchy in use (not host root, or cgroup v2 only)")
        started = []
        real_popen = subprocess.Popen
        monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(real_popen(*a, **k)) or started[-1])
        real_leave = ThreadInCgroups.leave  # still called: this test's thread must really go home
        monkeypatch.setattr(ThreadInCgroups, "leave", lambda self: real_leave(self) or "/sys/fs/cgroup/pids/x (Permission denied)")
        with pytest.raises(sandbox.SandboxSetupError) as err:
            sb.run("touch ran", cwd=workspace, timeout_s=60)
    assert str(err.value) == (
        "Could not move Abhed's thread back out of the command's cgroup: /sys/fs/cgroup/pids/x (Permission denied); "
        "the command did not run. Run 'abhed doctor', and restart Abhed: that thread's next commands would share the cgroup."
    )
    # bwrap was killed before its block fd closed: its pid 1 got SIGKILL (--die-with-parent) first.
    assert not (workspace / "ran").exists()
    assert len(started) == 1 and started[0].returncode is not None


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_the_command_sees_itself_run_as_bash_with_no_startup_files(runner, workspace, backend):
    """$0 is "bash", as in a plain `bash -c`; the shell runs with --noprofile --norc."""
    result = runner.run('echo "$0"; shopt -q login_shell && echo login; echo "$-"', workspace=workspace, config={"backend": backend})
    zero, flags = result.output.split("\n")[0], result.output.split("\n")[-2]
    assert zero == "bash" and "login" not in result.output and "i" not in flags


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_a_host_without_bash_runs_commands_with_sh_and_the_same_wrapper(root_runner, backend):
    """find_shell falls back to /bin/sh: its wrapper reports the start and the final cwd the same way."""
    from sandbox.shell import Shell

    workspace = root_runner.new_workspace()
    (workspace / "sub").mkdir()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend=backend), workspace) as sb:
        sb._launcher.shell = Shell("/bin/sh", False)
        result = sb.run('echo "$0"; cd sub; exit 4', cwd=workspace, timeout_s=60)
    assert (result.output, result.exit_code, result.final_cwd) == ("sh\n", 4, workspace / "sub")


@pytest.mark.parametrize("bash", [True, False])
def test_the_none_backend_waits_for_its_rlimits_before_running(root_runner, monkeypatch, bash):
    """The unconfined shell reads a go byte first: even when setting the rlimits is slow (delayed
    here), the command never runs before them."""
    import time

    from sandbox import launcher
    from sandbox.shell import Shell

    real = launcher.apply_rlimits
    monkeypatch.setattr(launcher, "apply_rlimits", lambda pid, limits: (time.sleep(0.3), real(pid, limits)))
    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), workspace) as sb:
        sb._launcher.shell = Shell("/bin/bash", True) if bash else Shell("/bin/sh", False)
        result = sb.run("ulimit -f", cwd=workspace, timeout_s=60)
    assert result.output.strip().isdigit(), result.output  # 2 GiB in the shell's units, not "unlimited"


def test_a_bwrap_that_cannot_be_started_leaves_no_descriptor_and_no_cgroup(root_runner, tmp_path):
    """The binary vanished after the session began: the spawn fails, and every pipe end and cgroup
    made for the command is released (judged in /proc/self/fd and the real cgroup hierarchy)."""
    workspace = root_runner.new_workspace()
    out = fds_in_a_fresh_process(f"""
with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
    sb.run("true", cwd=workspace, timeout_s=60)
    out["before"] = sorted(os.listdir("/proc/self/fd"))
    sb._launcher.bwrap = {str(tmp_path / "gone" / "bwrap")!r}
    try:
        sb.run("touch ran", cwd=workspace, timeout_s=60)
    except FileNotFoundError as exc:
        out["raised"] = str(exc)
    out["after"] = sorted(os.listdir("/proc/self/fd"))
    parents = sb._launcher.cgroup_parents
out["left"] = [str(p) for parent in parents for p in parent.path.glob(f"run-{{os.getpid()}}-*")]
""", workspace)
    assert "gone/bwrap" in out["raised"]
    assert out["after"] == out["before"]
    assert out["left"] == []
    assert not (workspace / "ran").exists()


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


def test_describe_names_each_cgroup_for_what_it_limits(root_runner):
    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        lines = sb.describe()
        parents = sb._launcher.cgroup_parents
    process = next(line for line in lines if line.startswith("process limit: "))
    memory = next(line for line in lines if line.startswith("memory limit: "))
    pids = [p for p in parents if "pids" in p.controllers]
    mem = [p for p in parents if "memory" in p.controllers]
    expected = "process limit: 1024 (RLIMIT_NPROC per sandbox user namespace"
    expected += "".join(f", plus pids cgroup v{p.version} at {p.path} as host root" for p in pids) + ")"
    assert process == expected
    if mem:
        assert memory == f"memory limit: 4294967296 bytes per command (memory cgroup v{mem[0].version} at {mem[0].path})"
    else:
        assert memory.startswith("memory limit: 4294967296 bytes per command (RLIMIT_DATA per process: ")
    assert lines[:2] == ["backend: bwrap", f"workspace: {workspace}"]


def test_probe_of_none_and_microvm():
    none = sandbox.probe(sandbox.SandboxConfig(backend="none"))
    assert none.ok and "ran WITHOUT a sandbox" in none.summary
    vm = sandbox.probe(sandbox.SandboxConfig(backend="microvm", microvm=sandbox.MicrovmConfig(image_dir=Path("/nonexistent"))))
    assert not vm.ok and vm.summary.startswith("microvm backend NOT usable: microvm image /nonexistent is unusable")

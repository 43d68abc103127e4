"""Background mode: start, read the log, poll, stop; and no job outlives its session or process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from sbx_helpers import host_pids_with, unique_marker, wait_until

import sandbox


def test_start_read_poll_stop(runner, workspace):
    marker = unique_marker()
    log = workspace.parent / f"{workspace.name}-job.log"
    code = f"""
import time
from pathlib import Path
log = Path({str(log)!r})
with sandbox.Sandbox(config_from({{}}), {str(workspace)!r}) as sb:
    job = sandbox.start_background("echo ready; echo oops >&2; sleep {marker}", sandbox=sb, cwd={str(workspace)!r}, log_path=log)
    deadline = time.monotonic() + 60
    while "oops" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    running = sandbox.poll(job)
    stopped = sandbox.stop(job)
    again = job.stop()
    answer = {{
        "id": job.id, "backend": job.backend, "log": log.read_text(),
        "running": [running.running, running.exit_code, running.stopped, running.log_bytes],
        "stopped": [stopped.running, stopped.exit_code, stopped.stopped],
        "again": [again.running, again.stopped],
        "jobs": [j.id for j in sb.jobs()],
    }}
"""
    answer = runner.exec(code)
    assert answer["log"] == "ready\noops\n"
    assert answer["running"] == [True, None, False, len("ready\noops\n")]
    assert answer["stopped"] == [False, None, True]
    assert answer["again"] == [False, True]  # stop is idempotent
    assert answer["id"] == "job-1" and answer["jobs"] == ["job-1"] and answer["backend"] == "bwrap"
    assert host_pids_with(marker) == []


def test_a_job_that_ends_by_itself_reports_its_status_and_leaves_nothing(root_runner):
    workspace = root_runner.new_workspace()
    marker = unique_marker()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        job = sb.start_background(f"setsid sleep {marker} & echo bye; exit 3", cwd=workspace, log_path=workspace / "job.log")
        assert wait_until(lambda: not job.poll().running)
        status = job.poll()
        assert (status.running, status.exit_code, status.stopped) == (False, 3, False)
        assert (workspace / "job.log").read_text() == "bye\n"
        assert host_pids_with(marker) == []  # what the job started died with it


def test_closing_the_session_stops_every_job(runner, workspace):
    markers = [unique_marker(), unique_marker()]
    code = f"""
sb = sandbox.Sandbox(config_from({{}}), {str(workspace)!r})
jobs = [sb.start_background("sleep " + m, cwd={str(workspace)!r}, log_path={str(workspace)!r} + "/" + m + ".log") for m in {markers!r}]
sb.close()
try:
    sb.start_background("true", cwd={str(workspace)!r}, log_path={str(workspace)!r} + "/late.log")
    late = "started"
except sandbox.SandboxError as exc:
    late = str(exc)
answer = [[j.poll().stopped for j in jobs], late]
"""
    stopped, late = runner.exec(code)
    assert stopped == [True, True]
    assert "closed" in late
    for marker in markers:
        assert host_pids_with(marker) == []


def test_background_jobs_die_with_the_process_that_started_them(runner, workspace):
    marker = unique_marker()
    code = f"""
import sys, time
sb = sandbox.Sandbox(config_from({{}}), {str(workspace)!r})
sb.start_background("setsid sleep {marker} & sleep {marker}", cwd={str(workspace)!r}, log_path={str(workspace)!r} + "/job.log")
print("STARTED", flush=True)
time.sleep(600)
"""
    argv, kwargs = runner.driver_argv()
    driver = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, **kwargs)
    driver.stdin.write(json.dumps({"op": "exec", "code": code}).encode())
    driver.stdin.close()
    try:
        assert driver.stdout.readline().strip() == b"STARTED"
        assert wait_until(lambda: len(host_pids_with(marker)) >= 2)
        driver.send_signal(signal.SIGKILL)  # no cleanup code runs: only the kernel can help
        driver.wait()
        assert wait_until(lambda: host_pids_with(marker) == []), f"survivors: {host_pids_with(marker)}"
    finally:
        driver.kill()
        for pid in host_pids_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_job_started_from_a_short_lived_thread_keeps_running(root_runner):
    """PR_SET_PDEATHSIG follows the thread that started bwrap: that must not be the caller's."""
    import threading

    workspace = root_runner.new_workspace()
    marker = unique_marker()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        jobs = []
        worker = threading.Thread(
            target=lambda: jobs.append(sb.start_background(f"sleep {marker}", cwd=workspace, log_path=workspace / "j.log"))
        )
        worker.start()
        worker.join()
        assert wait_until(lambda: host_pids_with(marker) != [])
        # the starting thread is gone; give the kernel a moment to act on it if it were going to
        assert not wait_until(lambda: not jobs[0].poll().running, timeout_s=0.5)
        assert host_pids_with(marker) != []
    assert host_pids_with(marker) == []  # and closing the session still ends it


def test_log_growth_is_bounded_by_the_file_size_limit(root_runner):
    workspace = root_runner.new_workspace()
    config = sandbox.SandboxConfig(limits=sandbox.Limits(file_size_bytes=100_000))
    with sandbox.Sandbox(config, workspace) as sb:
        job = sb.start_background("yes 'a fairly long line of output'; echo not-reached", cwd=workspace, log_path=workspace / "job.log")
        assert wait_until(lambda: not job.poll().running)
        # The writer hit RLIMIT_FSIZE: SIGXFSZ (25), and so did the shell's own echo: 128 + 25.
        assert job.poll().exit_code == 153
    assert os.path.getsize(workspace / "job.log") == 100_000


@pytest.mark.parametrize("problem", ["exists", "relative", "symlink", "no-dir"])
def test_log_path_must_be_a_new_file(root_runner, problem):
    workspace = root_runner.new_workspace()
    target = workspace / "victim.txt"
    target.write_text("keep me\n")
    log = {
        "exists": target,
        "relative": Path("job.log"),
        "symlink": workspace / "link.log",
        "no-dir": workspace / "missing" / "job.log",
    }[problem]
    if problem == "symlink":
        log.symlink_to(target)
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        with pytest.raises(sandbox.PathError) as err:
            sb.start_background("echo x", cwd=workspace, log_path=log)
    assert target.read_text() == "keep me\n"
    expected = {
        "exists": "already exists",
        "relative": "must be an absolute path",
        "symlink": "already exists",
        "no-dir": "cannot create the log file",
    }[problem]
    assert expected in str(err.value)


def test_a_background_job_that_cannot_start_raises_with_bwraps_message(root_runner):
    workspace = root_runner.new_workspace()
    gone = root_runner.new_workspace()
    sb = sandbox.Sandbox(sandbox.SandboxConfig(ro_binds=(gone,)), workspace)
    gone.rmdir()
    with pytest.raises(sandbox.SandboxSetupError) as err:
        sb.start_background("touch ran", cwd=workspace, log_path=workspace / "job.log")
    assert "could not be set up, so the command did not run" in str(err.value)
    assert str(gone) in err.value.detail
    assert not (workspace / "ran").exists() and sb.jobs() == ()


def test_none_backend_background_job(root_runner):
    workspace = root_runner.new_workspace()
    marker = unique_marker()
    with sandbox.Sandbox(sandbox.SandboxConfig(backend="none"), workspace) as sb:
        job = sb.start_background(f"echo up; sleep {marker}", cwd=workspace, log_path=workspace / "job.log")
        assert job.backend == "none" and not job.sandboxed
        assert wait_until(lambda: (workspace / "job.log").read_text() == "up\n")
        assert job.stop().stopped
    assert host_pids_with(marker) == []


def test_unknown_job_id_says_which_exist(root_runner):
    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        sb.start_background("true", cwd=workspace, log_path=workspace / "a.log")
        with pytest.raises(KeyError, match="known: job-1"):
            sb.job("job-9")
        assert sb.job("job-1").id == "job-1"


def test_a_job_starting_while_the_session_closes_is_stopped_and_refused(root_runner):
    """close() runs on another thread while a background job is being spawned: the job must not
    outlive the session, and the caller learns the session is closed (judged on the host)."""
    import threading

    workspace = root_runner.new_workspace()
    marker = unique_marker()
    sb = sandbox.Sandbox(sandbox.SandboxConfig(), workspace)
    real_spawn = sb._launcher.spawn

    def spawn_then_close(*args, **kwargs):
        spawned = real_spawn(*args, **kwargs)
        closer = threading.Thread(target=sb.close)
        closer.start()
        assert wait_until(lambda: sb._closed)  # close() has begun; it waits for this spawn to return
        return spawned

    sb._launcher.spawn = spawn_then_close
    with pytest.raises(sandbox.SandboxError, match="This sandbox session is closed"):
        sb.start_background(f"sleep {marker}", cwd=workspace, log_path=workspace / "job.log")
    assert wait_until(lambda: host_pids_with(marker) == [])
    assert sb.jobs() == ()


def test_the_disk_watch_leaves_jobs_alone_above_the_reserve_and_runs_once_per_session(root_runner):
    import threading
    import time

    from sandbox.box import JOB_WATCH_S

    workspace = root_runner.new_workspace()
    markers = [unique_marker(), unique_marker()]
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        jobs = [sb.start_background(f"sleep {m}", cwd=workspace, log_path=workspace / f"{m}.log") for m in markers]
        time.sleep(JOB_WATCH_S * 5)  # the watch has looked several times
        for job in jobs:
            status = job.poll()
            assert (status.running, status.stopped, status.note) == (True, False, None)
        watchers = [t for t in threading.enumerate() if t.name == "abhed-sandbox-disk"]
        assert len(watchers) == 1
    assert wait_until(lambda: all(host_pids_with(m) == [] for m in markers))
    no_reserve = sandbox.SandboxConfig(limits=sandbox.Limits(disk_reserve_bytes=None))
    with sandbox.Sandbox(no_reserve, workspace) as sb:
        job = sb.start_background("sleep 60", cwd=workspace, log_path=workspace / "plain.log")
        assert sb._disk_watcher is None and job.poll().running


@pytest.mark.parametrize("bash", [True, False])
def test_a_background_job_does_not_hold_the_control_pipe(root_runner, bash):
    """Only the start is reported for a job: the wrapper closes its control descriptor before the
    command runs, so the job cannot write into Abhed's pipe (its descriptors, listed by itself)."""
    from sandbox.shell import BASH_CTL_FD, Shell

    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        sb._launcher.shell = Shell("/bin/bash", True) if bash else Shell("/bin/sh", False)
        job = sb.start_background("ls /proc/self/fd", cwd=workspace, log_path=workspace / "fds.log")
        assert wait_until(lambda: not job.poll().running)
    fds = (workspace / "fds.log").read_text().split()
    assert fds and str(BASH_CTL_FD if bash else 9) not in fds, fds


@pytest.mark.parametrize("how", ["born-in", "moved-early", "pid1-moved-alone"])
def test_bwrap_and_pid1_are_in_the_command_cgroups_before_the_sandbox_runs(root_runner, monkeypatch, how):
    """bwrap is started from inside the command's cgroup v1 cgroups (sandbox.limits.ThreadInCgroups),
    else moved there while it builds the sandbox (BwrapLauncher._join_cgroups_early); either way
    the sandbox's pid 1 is in them before it goes on. Without both, pid 1's own move must still put
    it there: the check in _limit_sandbox moves what is not in. No thread of Abhed stays behind."""
    from sandbox.limits import ThreadInCgroups

    workspace = root_runner.new_workspace()
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as sb:
        if not sb._launcher.cgroup_parents:
            pytest.skip("no cgroup is used on this host (not host root, no delegated hierarchy)")
        if how != "born-in":
            monkeypatch.setattr(ThreadInCgroups, "enter", lambda self, cgroups: ())
        early, born = sb._launcher._join_cgroups_early, []
        sb._launcher._join_cgroups_early = lambda spawned, born_in: (born.append(born_in), how != "pid1-moved-alone" and early(spawned, born_in))
        job = sb.start_background("sleep 60", cwd=workspace, log_path=workspace.parent / f"{workspace.name}-cg-{how}.log")
        bwrap, cgroups = job._spawned.popen.pid, job._spawned.cgroups
        members = [set((c.path / "cgroup.procs").read_text().split()) for c in cgroups]
        tasks = [set((c.path / "tasks").read_text().split()) for c in cgroups]
        pid1 = Path(f"/proc/{bwrap}/task/{bwrap}/children").read_text().split()
        ours = set(os.listdir("/proc/self/task"))
        job.stop()
    assert len(cgroups) == len(sb._launcher.cgroup_parents) and len(pid1) == 1
    assert born == [tuple(c for c in cgroups if c.version == 1) if how == "born-in" else ()]  # v1: no process move at all
    for cgroup, procs, threads in zip(cgroups, members, tasks):
        assert set(pid1) <= procs, (cgroup.path, pid1, procs)
        assert (str(bwrap) in procs) == (how != "pid1-moved-alone"), (cgroup.path, bwrap, procs)
        assert not threads & ours, (cgroup.path, threads & ours)  # the spawning thread went back home

"""sandbox.freeze: every sandboxed process of a workspace stopped, whichever process started it, then let go.

Judged on the host: a sandboxed job that keeps appending to a file appends nothing while frozen and
goes on after; every process of a forking job is in state T; a process the sandbox had stopped
itself stays stopped; a sandbox of another workspace runs on. As root and as an unprivileged user
(the freeze runs in the same user's process, as `abhed undo` would).
"""

from __future__ import annotations

import pytest

# Runs in the runner's process (root here, or a driver as the unprivileged user): `sandbox` is imported.
SCENARIO = r"""
import os, time, pathlib
from sandbox import freeze

ws = pathlib.Path(WS)
other = pathlib.Path(OTHER)
cfg = config_from({"backend": "bwrap"})
COUNTER = "while :; do echo x >> count; done"
FORKS = "while :; do (echo y >> forks; sleep 0.01) & sleep 0.005; done"

def size(p):
    return (p).stat().st_size if p.exists() else 0

def states(root_pid):
    found, stack = {}, [root_pid]
    while stack:
        pid = stack.pop()
        try:
            data = open(f"/proc/{pid}/stat").read()
            children = open(f"/proc/{pid}/task/{pid}/children").read().split()
        except OSError:
            continue
        if pid != root_pid:
            found[pid] = data[data.rindex(")") + 2]
        stack += [int(c) for c in children]
    return found

with sandbox.Sandbox(cfg, ws) as sb, sandbox.Sandbox(cfg, other) as elsewhere:
    counter = sb.start_background(COUNTER, cwd=ws, log_path=ws / "counter.log")
    forks = sb.start_background(FORKS, cwd=ws, log_path=ws / "forks.log")
    paused = sb.start_background("sleep 600", cwd=ws, log_path=ws / "paused.log")
    free = elsewhere.start_background(COUNTER, cwd=other, log_path=other / "counter.log")
    time.sleep(0.5)
    bwraps = {job: job._spawned.popen.pid for job in (counter, forks, paused, free)}
    sleeper = [pid for pid, st in states(bwraps[paused]).items() if open(f"/proc/{pid}/comm").read().strip() == "sleep"]
    os.kill(sleeper[0], 19)  # SIGSTOP by the sandbox's own hand, before any freeze
    time.sleep(0.1)
    held = freeze.freeze(ws)
    a, b, c = size(ws / "count"), size(ws / "forks"), size(other / "count")
    time.sleep(0.5)
    frozen_growth = size(ws / "count") - a, size(ws / "forks") - b
    other_growth = size(other / "count") - c
    frozen_states = {name: sorted(set(states(bwraps[job]).values())) for name, job in
                     (("counter", counter), ("forks", forks))}
    held_count = len(held.stopped)
    stopped_sleeper_held = sleeper[0] in held.stopped
    held.thaw()
    a = size(ws / "count")
    time.sleep(0.5)
    thawed_growth = size(ws / "count") - a
    sleeper_state = open(f"/proc/{sleeper[0]}/stat").read().rsplit(")", 1)[1].split()[0]
    os.kill(sleeper[0], 18)
answer = {"frozen_growth": frozen_growth, "other_growth": other_growth, "frozen_states": frozen_states,
          "held": held_count, "thawed_growth": thawed_growth, "sleeper_state": sleeper_state,
          "stopped_sleeper_held": stopped_sleeper_held}
"""


@pytest.mark.parametrize("who", ["root", "user"])
def test_freeze_stops_every_sandboxed_process_of_the_workspace_and_thaw_lets_them_go(request, who: str) -> None:
    runner = request.getfixturevalue(f"{who}_runner")
    ws, other = runner.new_workspace(), runner.new_workspace()
    code = SCENARIO.replace("WS", repr(str(ws)), 1).replace("OTHER", repr(str(other)), 1)
    got = runner.exec(code, timeout_s=120)
    assert got["frozen_growth"] == [0, 0], "a frozen job still wrote"
    for job, states in got["frozen_states"].items():  # T: stopped; Z: exited, its stopped parent cannot reap it
        assert "T" in states and set(states) <= {"T", "Z"}, f"a process of the {job} job was not stopped: {states}"
    assert got["held"] >= 4  # the counter's shell, the forking shell and its children, the sandboxes' inits
    assert got["other_growth"] > 0, "a sandbox of another workspace was stopped too"
    assert got["thawed_growth"] > 0, "the job did not go on after the thaw"
    assert got["sleeper_state"] == "T" and not got["stopped_sleeper_held"], \
        "a process the sandbox had stopped itself was continued"


def test_a_pid_reused_between_the_scan_and_the_signal_is_not_stopped(monkeypatch) -> None:
    """The pidfd is checked against the start time the scan saw: another process under that pid is left alone."""
    import signal
    import subprocess

    from sandbox import freeze

    victim = subprocess.Popen(["sleep", "30"])
    try:
        real = freeze._read_stat(victim.pid)
        held = freeze.Frozen()
        freeze._stop(victim.pid, freeze._Proc(real.ppid, real.state, real.start + 1), held)
        assert held.stopped == {}
        state = open(f"/proc/{victim.pid}/stat").read().rsplit(")", 1)[1].split()[0]
        assert state not in "Tt"  # never stopped
        freeze._stop(victim.pid, real, held)
        assert list(held.stopped) == [victim.pid]
        held.thaw()
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()

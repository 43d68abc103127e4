"""abhed.common.hostproc: every program Abhed runs on the host on the model's behalf has a deadline, its own
process group, and dies with Abhed. Judged by the host's process table, never by what was returned."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from abhed.common import hostproc

REPO = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"


def wait_gone(pid: int) -> bool:
    for _ in range(300):
        if not alive(pid):
            return True
        time.sleep(0.01)
    return False


def test_a_run_returns_what_the_child_printed_and_its_status() -> None:
    done = hostproc.run(["sh", "-c", "cat; echo err >&2; exit 3"], input=b"in\n", timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"in\n", b"err\n")
    assert hostproc.run(["true"], timeout=30).stdout == b""


def test_past_its_deadline_the_child_and_everything_it_started_are_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 600 & echo $! > {pids}; echo $$ >> {pids}; wait"
    started = time.monotonic()
    with pytest.raises(hostproc.Timeout) as stopped:
        hostproc.run(["sh", "-c", script], timeout=1)
    assert time.monotonic() - started < 30
    assert str(stopped.value) == f"`sh -c {script}` was still running after 1 s and was stopped"
    assert stopped.value.seconds == 1 and stopped.value.argv[0] == "sh"
    for pid in map(int, pids.read_text().split()):
        assert wait_gone(pid), f"process {pid} outlived the deadline"


def test_the_child_has_a_process_group_of_its_own(tmp_path: Path) -> None:
    done = hostproc.run(["sh", "-c", "ps -o pgid= -p $$; echo $$"], timeout=30)
    pgid, pid = done.stdout.split()
    assert pgid == pid and int(pgid) != os.getpgrp()


def test_an_interrupt_while_waiting_kills_the_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    main = threading.main_thread()

    def interrupt() -> None:
        for _ in range(500):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.01)
        signal.pthread_kill(main.ident, signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        hostproc.run(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 600"], timeout=600)
    assert wait_gone(int(pidfile.read_text())), "Ctrl-C left the child running"


DIES_WITH = r"""
import sys
from abhed.common import hostproc
proc = hostproc.popen([sys.argv[1], "600"])
print(proc.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("sleep", ["sleep", shutil.which("sleep")], ids=["by name: preexec_fn", "by path: setpriv"])
def test_the_child_dies_with_abhed_even_on_kill_9(sleep: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", DIES_WITH, sleep], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.kill()
    parent.wait()
    assert wait_gone(child), "the child outlived Abhed"


def test_a_streaming_child_is_stopped_at_its_deadline_and_says_so() -> None:
    with pytest.raises(hostproc.Timeout):
        with hostproc.streaming(["cat"], timeout=0.5) as proc:
            proc.stdin.write(b"hello\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == b"hello\n"
            time.sleep(1.5)
            assert proc.stdout.read() == b""  # killed: its output ended
    assert not alive(proc.pid)


def test_a_streaming_child_ended_in_time_raises_nothing_and_is_reaped() -> None:
    with hostproc.streaming(["cat"], timeout=30) as proc:
        proc.stdin.write(b"x\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"x\n"
    assert proc.returncode is not None and not alive(proc.pid)


def test_a_run_returns_at_once_when_the_child_is_done_and_works_without_a_pidfd(monkeypatch) -> None:
    """hostproc.run waits on the child's exit (a pidfd), not in steps; on a kernel without
    pidfd_open it still returns the output, the status, and stops a child at its deadline."""
    started = time.monotonic()
    for _ in range(20):
        assert hostproc.run(["true"], timeout=30, watch=lambda pid: False).returncode == 0
    assert time.monotonic() - started < 20   # (no step of its own: a generous bound, not a benchmark)

    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    done = hostproc.run(["sh", "-c", "cat; echo err >&2; exit 3"], input=b"in" * 50000, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"in" * 50000, b"err\n")
    with pytest.raises(hostproc.Timeout):
        hostproc.run(["sh", "-c", "exec sleep 600"], timeout=1)
    looked: list[int] = []
    with pytest.raises(hostproc.Stuck):
        hostproc.run(["sleep", "600"], timeout=60, watch=lambda pid: looked.append(pid) or len(looked) > 2)
    assert len(looked) == 3


def test_the_watch_is_not_asked_about_a_short_run_and_stops_a_long_one(monkeypatch) -> None:
    looked: list[int] = []
    monkeypatch.setattr(hostproc, "WATCH_AFTER_S", 10.0)   # (so that `true` surely ends before, however busy the host)
    hostproc.run(["true"], timeout=30, watch=lambda pid: looked.append(pid) or True)
    assert looked == []   # done before WATCH_AFTER_S: never looked at (not stopped either)
    monkeypatch.setattr(hostproc, "WATCH_AFTER_S", 0.1)
    proc_pids: list[int] = []
    with pytest.raises(hostproc.Stuck):
        hostproc.run(["sh", "-c", "exec sleep 600"], timeout=60, watch=lambda pid: proc_pids.append(pid) or True)
    assert proc_pids and wait_gone(proc_pids[0])


def test_a_run_past_max_output_is_killed_and_said():
    with pytest.raises(hostproc.TooMuch):
        hostproc.run(["sh", "-c", "head -c 300000 /dev/zero; sleep 30"], timeout=20, max_output=100000)   # (and not 30 s later)
    assert hostproc.run(["sh", "-c", "head -c 1000 /dev/zero"], timeout=20, max_output=1000).stdout == b"\0" * 1000


def test_a_program_given_by_path_is_started_through_setpriv_without_a_python_function_in_the_child() -> None:
    """No preexec_fn: the child is started with vfork, not a fork that copies Abhed's page tables."""
    line, first = hostproc._dying_with_abhed(["/bin/true", "x"])
    assert line[-2:] == ["/bin/true", "x"] and line[1:4] == ["--pdeathsig", "KILL", "--"], line
    assert first is None
    assert hostproc._dying_with_abhed(["true"])[1] is not None  # by name: Popen's own lookup, as before


def test_a_missing_program_still_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        hostproc.run([str(tmp_path / "no-such-program")], timeout=5)


def test_a_child_whose_abhed_died_before_setpriv_set_the_signal_ends_before_the_program_runs(tmp_path: Path) -> None:
    """setpriv does not check the parent; the sh after it does: a parent that is not Abhed any more
    (it died, the child went to init) means the program never starts."""
    line, _ = hostproc._dying_with_abhed(["/bin/sh", "-c", f"touch {tmp_path / 'ran'}"])
    line[line.index(str(os.getpid()))] = str(os.getpid() + 1_000_000)  # as if Abhed had died: another parent
    done = subprocess.run(line)
    assert done.returncode == 127 and not (tmp_path / "ran").exists()

"""isolate.run: a parser of hostile input runs in a child bounded in time and memory, and leaves
nothing behind (checked on the host: no child process survives)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from abhed.common import isolate
from fd_testing import pipes

SHORT = isolate.Bounds(seconds=1, memory=256 * 1024 * 1024)


def _children() -> list[int]:
    """This process's children, whichever of its threads forked them."""
    pids = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as handle:
                pids += [int(pid) for pid in handle.read().split()]
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return sorted(pids)


def _add(a, b):
    return a + b


def _fail():
    raise ValueError("the parser's own complaint")


def _spin():
    while True:
        pass


def _hog():
    hoard = []
    while True:
        hoard.append(bytearray(64 * 1024 * 1024))


def _crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def _sleep():
    import time
    time.sleep(60)


def test_the_result_comes_back():
    assert isolate.run(_add, 2, 3) == 5
    assert isolate.run(_add, b"x" * 5_000_000, b"y") == b"x" * 5_000_000 + b"y"  # more than a pipe's buffer


def test_the_function_s_own_exception_is_raised_here():
    with pytest.raises(ValueError, match="the parser's own complaint"):
        isolate.run(_fail)


@pytest.mark.parametrize("function", [_spin, _sleep])
def test_a_child_that_never_ends_is_stopped_at_the_bound_and_reaped(function):
    before = _children()
    with pytest.raises(isolate.Exceeded, match=r"^it took more than 1 seconds$"):  # wall clock, not CPU
        isolate.run(function, bounds=SHORT)
    assert _children() == before


def test_a_child_that_eats_memory_is_stopped_at_the_bound():
    with pytest.raises(isolate.Exceeded, match="it needed more than 256 MiB of memory"):
        isolate.run(_hog, bounds=isolate.Bounds(seconds=60, memory=256 * 1024 * 1024))  # time is not the bound hit


def _quit():
    os._exit(3)  # a parser that ends the process itself, or dies in a way that leaves no signal


def test_a_child_that_ends_without_an_answer_is_reported():
    with pytest.raises(isolate.Exceeded, match=r"^the parser stopped without an answer \(out of memory or a crash\)$"):
        isolate.run(_quit, bounds=SHORT)


def test_a_child_that_crashes_is_reported():
    with pytest.raises(isolate.Exceeded, match=r"the parser crashed \(SIGSEGV\)"):
        isolate.run(_crash, bounds=SHORT)


@pytest.mark.parametrize("function", [_add, _fail, _spin])
def test_no_descriptor_is_left_open_whatever_the_child_did(function):
    before = pipes()
    try:
        isolate.run(function, *((1, 2) if function is _add else ()), bounds=SHORT)
    except (ValueError, isolate.Exceeded):
        pass
    assert pipes() - before == set()


def _huge():
    return b"x" * (64 * 1024 * 1024)  # with pickle's few bytes around it: over the documented 64 MiB


def test_a_result_over_the_limit_is_refused_not_read_whole():
    before = _children()
    with pytest.raises(isolate.Exceeded, match=r"^its result was larger than 64 MiB$"):
        isolate.run(_huge, bounds=isolate.Bounds(seconds=60, memory=512 * 1024 * 1024))
    assert _children() == before


class _Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lambda")
        self.callback = lambda: None

    def __reduce__(self):
        raise TypeError("cannot pickle")


def _raise_unpicklable():
    raise _Unpicklable()


def _noisy():
    os.write(2, b"a parser's complaint\n")
    return "done"


def test_an_exception_that_cannot_cross_the_pipe_still_comes_back_in_words():
    with pytest.raises(RuntimeError, match=r"^_Unpicklable: holds a lambda$"):
        isolate.run(_raise_unpicklable)


def test_nothing_the_parser_writes_to_stderr_reaches_the_terminal(capfd):
    assert isolate.run(_noisy) == "done"
    assert capfd.readouterr().err == ""


def _interrupted():
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaches the whole foreground process group, the child too
    return "finished"


def test_ctrl_c_is_left_to_the_parent_the_child_finishes_its_work():
    assert isolate.run(_interrupted) == "finished"


@contextlib.contextmanager
def sleeping_child(bounds: isolate.Bounds):
    """The pid of a child of isolate.run that sleeps once confined (Seccomp: 2 in its status), read
    from the host; the child is killed on leaving, and run's exception kept in the list yielded."""
    before, outcome = set(_children()), []

    def call():
        try:
            isolate.run(_sleep, bounds=bounds)
        except Exception as exc:  # killed below: Exceeded
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    try:
        pid = None
        while (pid is None or "Seccomp:\t2" not in _status(pid)) and thread.is_alive():
            pid = next(iter(set(_children()) - before), None)
            time.sleep(0.01)
        assert thread.is_alive(), outcome  # the child is still there, confined and sleeping
        yield pid, outcome
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        thread.join()


def _status(pid: int) -> str:
    with open(f"/proc/{pid}/status") as handle:
        return handle.read()


def _sleeping(pid: int) -> bool:
    """In a sleeping syscall (nanosleep, after whatever it did first)."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "S"


def _limit(pid: int, name: str) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as handle:
        line = next(line for line in handle if line.startswith(name))
    soft, hard = line[len(name):].split()[:2]
    return int(soft), int(hard)


def test_the_child_is_confined_as_the_host_sees_it():
    """no_new_privs, a seccomp filter, and nothing open but /dev/null and the answer pipe (common/confine.py)."""
    held = os.open(__file__, os.O_RDONLY)  # Abhed's own descriptors are not the child's
    try:
        with sleeping_child(isolate.Bounds(seconds=60)) as (pid, _):
            status = _status(pid)
            fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    finally:
        os.close(held)
    assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status
    assert sorted(fds) == [0, 1, 2, max(fds)] and max(fds) >= 3, fds
    assert [fds[0], fds[1], fds[2]] == ["/dev/null"] * 3 and fds[max(fds)].startswith("pipe:["), fds


@pytest.mark.parametrize("bounds, seconds, memory", [(isolate.Bounds(), 20, 768 * 1024 * 1024),  # the defaults
                                                     (isolate.Bounds(seconds=2.5, memory=300 << 20), 2.5, 300 << 20)])
def test_the_child_may_add_the_bound_s_memory_and_use_its_seconds_of_cpu(bounds, seconds, memory):
    with sleeping_child(bounds) as (pid, _):  # read on the host: the confined child cannot open /proc
        (soft_as, hard_as), (soft_cpu, hard_cpu) = _limit(pid, "Max address space"), _limit(pid, "Max cpu time")
        with open(f"/proc/{pid}/statm", "rb") as handle:
            mapped = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    assert soft_as == hard_as and memory - 8 * 1024 * 1024 < soft_as - mapped <= memory
    # the wall clock (seconds) stops a single-threaded child first; the CPU limit is the backstop
    assert seconds < soft_cpu <= seconds + 1 and hard_cpu > soft_cpu


def test_a_crash_report_never_reaches_the_terminal_whichever_descriptor_faulthandler_writes_to():
    read_end, write_end = os.pipe()
    faulthandler.enable(file=write_end)  # as pytest does: onto a duplicate of the terminal's stderr, not fd 2
    try:
        with pytest.raises(isolate.Exceeded, match=r"the parser crashed \(SIGSEGV\)"):
            isolate.run(_crash, bounds=SHORT)
    finally:
        faulthandler.enable(file=sys.__stderr__)
        os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        assert pipe.read() == b""


def _out_of_cpu():
    os.kill(os.getpid(), signal.SIGXCPU)  # what the kernel sends at the CPU limit (several threads get there first)
    return "not reached"


def test_a_child_stopped_by_the_cpu_limit_is_reported_as_out_of_time():
    with pytest.raises(isolate.Exceeded, match=r"^it took more than 1 seconds of CPU time$"):
        isolate.run(_out_of_cpu, bounds=SHORT)


def test_a_child_whose_parent_died_before_it_was_confined_ends_at_once():
    """confine() arms the parent-death signal, then finds Abhed already gone (another pid is its parent
    now): it exits, status 0, before any other step, and never returns to parse."""
    from abhed.common import confine
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            confine.confine(parent=os.getppid() + 1_000_000)  # not our parent: as if Abhed had died
            os.write(write_end, b"returned")
        finally:
            os._exit(3)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert said == b"" and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_step_the_kernel_refuses_is_an_error_with_the_kernel_s_reason():
    from abhed.common import confine
    with pytest.raises(OSError, match=r"^\[Errno 22\] PR_SET_NO_NEW_PRIVS: Invalid argument$"):
        # arg3 must be 0: the kernel refuses, as it would refuse a step on a host without seccomp
        confine._check(confine._prctl(confine.PR_SET_NO_NEW_PRIVS, 1, 1, 0, 0), "PR_SET_NO_NEW_PRIVS")
    confine._check(0, "a step that worked")  # no error


# Abhed on the user's terminal: its 0, 1 and 2 are a pty. The decoder writes an escape sequence to
# each, then sleeps.
ON_A_TERMINAL = """
import os, sys, time
from abhed.common import isolate
def decoder():
    for fd in (0, 1, 2):
        try:
            os.write(fd, b"\\x1b]0;pwned\\x07")
        except OSError:
            pass
    time.sleep(600)
isolate.run(decoder, bounds=isolate.Bounds(seconds=600))
"""


def test_the_child_gets_none_of_abhed_s_terminal():
    import pty
    import subprocess
    master, slave = pty.openpty()
    abhed = subprocess.Popen([sys.executable, "-c", ON_A_TERMINAL], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    try:
        child = None
        while child is None and abhed.poll() is None:
            kids = Path(f"/proc/{abhed.pid}/task/{abhed.pid}/children").read_text().split()
            if kids and "Seccomp:\t2" in _status(int(kids[0])) and _sleeping(int(kids[0])):
                child = int(kids[0])
            time.sleep(0.01)
        assert child is not None
        fds = [os.readlink(f"/proc/{child}/fd/{fd}") for fd in (0, 1, 2)]
        ours = [os.readlink(f"/proc/{abhed.pid}/fd/{fd}") for fd in (0, 1, 2)]
    finally:
        abhed.kill()
        abhed.wait()
    assert fds == ["/dev/null"] * 3 and all(link.startswith("/dev/pts/") for link in ours), (fds, ours)
    os.set_blocking(master, False)
    try:
        written = os.read(master, 4096)
    except OSError:  # EAGAIN, or EIO once no process holds the terminal: nothing was written
        written = b""
    os.close(master)
    assert b"pwned" not in written

"""Every sandboxed process of one workspace held still while the host restores it, then let go.

An undo rewrites files all over the workspace. A sandboxed process of any session could rearrange
the workspace meanwhile -- a background job, an MCP server, a command another Abhed process runs
there -- swapping a directory for a symlink in a loop. The restore itself writes only through
descriptors opened beneath the workspace (so nothing lands outside whatever happens), but a
workspace changing under it would be restored to a mix. So before an undo, every process that runs
in a sandbox of the workspace is stopped, and continued afterwards.

Which processes: each bwrap started for a workspace carries `--bind WS WS` on its command line
(/proc/PID/cmdline: readable for one's own processes, and for all as root), and everything the
sandbox runs descends from that bwrap: its child is the init of a pid namespace, to which orphans
are re-parented, and no process can leave its pid namespace. The microvm backend's qemu runs in
such a bwrap as well: stopping qemu stops the whole guest.

How: SIGSTOP through a pidfd, opened and checked against the process's start time so that a pid
reused in between is never signalled; repeated until a scan of /proc finds no process of those
trees still running (a child forked while its parent was being stopped is caught in the next
round), then each is waited for until the kernel shows it stopped. `Frozen.thaw` sends SIGCONT to
exactly the processes it stopped: one the sandbox had stopped itself stays stopped.

Not covered: processes of another user (unless Abhed runs as root), and backend `none`, which
confines nothing and has no sandbox to find.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

STOPPED = frozenset("Tt")  # stopped, or stopped by a tracer: either way it runs nothing
GONE = frozenset("ZX")  # a zombie runs nothing either
ROUNDS = 200
WAIT_S = 5.0


class FreezeError(Exception):
    """Some sandboxed process of the workspace could not be stopped; the message says which."""


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to it)
class _Proc:
    ppid: int
    state: str
    start: int  # clock ticks after boot: with the pid, what names one process for good


@dataclass
class Frozen:
    """The processes a freeze stopped (pid -> pidfd), to be continued by `thaw`."""

    stopped: dict[int, int] = field(default_factory=dict)

    def thaw(self) -> None:
        for pidfd in self.stopped.values():
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGCONT)
            except ProcessLookupError:
                pass  # it exited meanwhile (killed by its session, or its sandbox ended)
            finally:
                os.close(pidfd)
        self.stopped.clear()


@contextmanager
def frozen(workspace: Path) -> Iterator[Frozen]:
    """Every sandboxed process of `workspace` stopped for the duration of the block."""
    held = freeze(workspace)
    try:
        yield held
    finally:
        held.thaw()


def freeze(workspace: Path) -> Frozen:
    """Stop every sandboxed process of `workspace` (see the module docstring); FreezeError when one
    would not stop within WAIT_S seconds (then none stays stopped)."""
    held = Frozen()
    try:
        _stop_all(str(workspace), held)
    except BaseException:
        held.thaw()
        raise
    return held


def _stop_all(workspace: str, held: Frozen) -> None:
    deadline = time.monotonic() + WAIT_S
    for _ in range(ROUNDS):
        procs = _scan()
        members = _members(procs, workspace)
        running = [pid for pid in members if procs[pid].state not in STOPPED | GONE]
        for pid in running:
            if pid not in held.stopped:
                _stop(pid, procs[pid], held)
        waiting = [pid for pid in members if pid in held.stopped and procs[pid].state not in STOPPED | GONE]
        if not running and not waiting:
            return
        if time.monotonic() > deadline:
            raise FreezeError(f"{len(running)} sandboxed processes of {workspace} did not stop within {WAIT_S:g} s "
                              f"(pids {', '.join(map(str, sorted(running)[:10]))}): they may be waiting on a disk "
                              "or a network filesystem. Stop the sandboxed jobs of that workspace, then try again.")
        time.sleep(0.001)
    raise FreezeError(f"the sandboxed processes of {workspace} kept starting new ones faster than they could be "
                      "stopped; stop the sandboxed jobs of that workspace, then try again.")


def _stop(pid: int, proc: _Proc, held: Frozen) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        now = _read_stat(pid)
        if now is None or now.start != proc.start:
            raise ProcessLookupError  # the pid now names another process
        signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        os.close(pidfd)
        return
    held.stopped[pid] = pidfd


def _members(procs: dict[int, _Proc], workspace: str) -> list[int]:
    """The processes below each bwrap sandbox of `workspace` (the bwraps themselves run nothing of the model's)."""
    children: dict[int, list[int]] = {}
    for pid, proc in procs.items():
        children.setdefault(proc.ppid, []).append(pid)
    found: list[int] = []
    stack = [child for pid in procs if _is_sandbox_of(pid, workspace) for child in children.get(pid, [])]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _is_sandbox_of(pid: int, workspace: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    if not argv or os.path.basename(argv[0]) != b"bwrap":
        return False
    ws = os.fsencode(workspace)
    return any(argv[i:i + 3] == [b"--bind", ws, ws] for i in range(len(argv) - 2))


def _scan() -> dict[int, _Proc]:
    procs = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            proc = _read_stat(int(entry.name))
            if proc is not None:
                procs[int(entry.name)] = proc
    return procs


def _read_stat(pid: int) -> _Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # after the command name, which may hold spaces and parens
    return _Proc(ppid=int(fields[1]), state=fields[0].decode(), start=int(fields[19]))

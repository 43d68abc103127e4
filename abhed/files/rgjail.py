"""rg reading by name, in a read-only view of one allowed root (sandbox.bwrap.reader_argv).

The descriptor path (ripgrep.rg_search without a jail) opens every file in Abhed's process and
hands rg /proc/self/fd/N: safe, but a descriptor per file and rg resolving a magic link per file
cost 4-8x rg on a big tree. Here rg opens names itself, inside a mount namespace that holds only
the searched root (read-only, at its own path) and an execute-only copy of rg. A name a sandboxed
job turned into a symlink (to /etc, to the home directory) leads to a file of that root or to
nothing: the boundary by construction, for one bwrap start per batch of names.

What the view does not stop, the caller handles:
- a FIFO swapped in after the walk: rg blocks opening or reading it (rg searches whatever it is
  named). `Watch` sees rg stuck (a thread's wchan in a FIFO wait, as a fast hint; whatever the
  kernel, no progress at all for STALL_S); the run is then killed (`hostproc.Stuck`) and that
  batch is searched through descriptors, which refuse anything but a regular file. Devices
  cannot be opened (every bwrap bind is nodev); a socket refuses open (ENXIO).
- a file rg cannot read there (a link that leads nowhere, a file only host root may read: rg
  holds no capability): rg reports it, and the caller searches it through descriptors, which
  give the same answer, and the same message, as before.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.backends import BACKENDS, capabilities
from sandbox.bwrap import bwrap_version, locate_bwrap, reader_argv
from sandbox.errors import SandboxError

# Where rg appears inside the view (a name in the view's own tmpfs root, outside every root).
EXE_AT = Path("/abhed-rg")
# The execute-only copies of rg in the cache: rg-SIZE-MTIME_NS (exec_only_copy).
COPY_NAME = re.compile(r"rg-[0-9]+-[0-9]+")
# The kernel's view of a failed bwrap: its own messages start with this (rg's with "rg: ").
BWRAP_SAID = b"bwrap: "



@dataclass(frozen=True)
class Jail:
    """How to run rg in a view of `root`: bwrap, and the execute-only copy of rg."""

    bwrap: Path
    exe: Path
    root: Path

    def argv(self, options: list[str], cwd: Path) -> list[str]:
        return reader_argv(self.bwrap, (self.root,), self.exe, EXE_AT, cwd, tuple(options))


# bwrap's path (or why there is none) per configured path and writable roots: one look per process.
_bwrap_seen: dict[tuple, Path | None] = {}
# Set when bwrap could not build a view on this host (no user namespaces): the process stops trying.
_broken: list[str] = []


def jail_for(rg: Path, root: Path, *, backend: str, bwrap_path: Path | None, writable: tuple[Path, ...],
             home: Path) -> Jail | None:
    """The jail for searching below `root`, or None (then rg reads descriptors): the sandbox backend
    is not bwrap (the operator chose none or microvm: no bwrap to rely on), bwrap is missing or
    refused, or failed before on this host, rg is not a static executable (the view has no
    libraries), `root` is / (nothing could be bound beside it), or no execute-only copy of rg can
    be kept outside the roots."""
    if backend not in BACKENDS or not capabilities(backend).host_bwrap or _broken or root == Path("/") or EXE_AT == root or root in EXE_AT.parents:
        return None
    key = (bwrap_path, writable)
    if key not in _bwrap_seen:
        try:
            found = locate_bwrap(bwrap_path, writable_roots=writable)
            bwrap_version(found)
            _bwrap_seen[key] = found
        except SandboxError:
            _bwrap_seen[key] = None
    bwrap = _bwrap_seen[key]
    if bwrap is None or not is_static(rg):
        return None
    exe = exec_only_copy(rg, home / "cache", writable)
    return None if exe is None else Jail(bwrap, exe, root)


def failed(stderr: bytes) -> bool:
    """Whether bwrap itself failed (it did not start rg); then this process stops using jails."""
    if stderr.startswith(BWRAP_SAID):
        _broken.append(stderr.decode("utf-8", "replace")[:300])
        return True
    return False


def is_static(exe: Path) -> bool:
    """Whether the ELF executable `exe` names no program interpreter (needs no shared library)."""
    try:
        with open(exe, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only (what the wheels ship)
                return False
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except (OSError, struct.error, IndexError):
        return False
    PT_INTERP = 3
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != PT_INTERP for i in range(phnum))


def exec_only_copy(rg: Path, cache: Path, writable: tuple[Path, ...]) -> Path | None:
    """A copy of rg that only its owner can execute and nobody can read (mode 0111), in Abhed's
    cache (made once, reused): inside the view, a name leading to it cannot be searched. None when
    the cache lies where sandboxed commands write (they could replace it) or cannot be made."""
    cache = Path(os.path.realpath(cache))
    if any(cache == w or w in cache.parents for w in writable):
        return None
    st = os.stat(rg)
    exe = cache / f"rg-{st.st_size}-{st.st_mtime_ns}"
    if _is_exec_only(exe, st.st_size):
        return exe
    try:
        os.makedirs(cache, mode=0o700, exist_ok=True)
        temp = cache / f".{exe.name}.{os.getpid()}.tmp"
        with open(rg, "rb") as src, open(temp, "wb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW, 0o600)) as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.chmod(temp, 0o111)
        os.replace(temp, exe)
    except OSError:
        return None
    _remove_older(cache, exe.name)
    return exe if _is_exec_only(exe, st.st_size) else None


def _remove_older(cache: Path, keep: str) -> None:
    """Remove the copies of earlier rg builds from `cache` (names rg-SIZE-MTIME other than `keep`),
    through the directory's descriptor (no link followed on the way, none followed by unlink).
    Best effort: a copy another Abhed still uses is made again by it when it next needs one."""
    try:
        fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in os.listdir(fd):
            if name != keep and COPY_NAME.fullmatch(name):
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    pass
    finally:
        os.close(fd)


def _is_exec_only(path: Path, size: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o111 and st.st_uid == os.geteuid()
            and st.st_size == size)


# Watch: rg that has made no progress this long (no CPU time, no page fault, no byte read, no
# thread running or waiting on a disk) is taken to be stuck; its batch is searched by descriptor.
# (A false stall costs a second search of the batch, never a wrong answer.)
STALL_S = 0.3


class Watch:
    """hostproc.run's watch over one jailed run (bwrap and the rg it started): True once rg cannot
    go on. Two rules: a thread asleep where a FIFO's reader waits (its wchan, a fast hint: kernels
    rename these functions, and wchan may be unreadable), and, whatever the kernel, no progress
    at all for STALL_S (see _progress)."""

    def __init__(self) -> None:
        self.mark: object = None
        self.since = time.monotonic()

    def __call__(self, bwrap_pid: int) -> bool:
        pids = [bwrap_pid, *_children(bwrap_pid)]
        if any(_waits_on_fifo(pid) for pid in pids[1:]):
            return True
        now, mark = time.monotonic(), _progress(pids)
        if mark is None or mark != self.mark:
            self.mark, self.since = mark, now
            return False
        return now - self.since >= STALL_S


CHILDREN = "/proc/{pid}/task/{pid}/children"  # (a kernel built without CONFIG_PROC_CHILDREN has none)


def _children(pid: int) -> list[int]:
    """The processes `pid` started (rg, for bwrap): its children file, or, on a kernel without
    one, the other members of its process group (hostproc gives it its own)."""
    try:
        with open(CHILDREN.format(pid=pid)) as f:
            return [int(child) for child in f.read().split()]
    except FileNotFoundError:
        return _group_members(pid)
    except OSError:
        return []


def _group_members(pgid: int) -> list[int]:
    """The processes of process group `pgid`, its leader `pgid` left out."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pgid:
            fields = _stat(f"/proc/{entry}/stat")
            if fields and fields[2] == str(pgid):
                members.append(int(entry))
    return members


def _stat(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (state first); [] when it is gone."""
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _progress(pids: list[int]) -> tuple | None:
    """What the processes have done so far: per process its page faults (minor, major), CPU
    time (user, system) and, where readable, bytes read; None while one of their threads runs
    or waits on a disk (state R or D: moving, whatever the counters say)."""
    marks: list[object] = []
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone
        for tid in threads:
            state = _stat(f"/proc/{pid}/task/{tid}/stat")[:1]
            if state and state[0] in "RD":
                return None
        fields = _stat(f"/proc/{pid}/stat")
        marks.append((pid, *fields[7:8], *fields[9:10], *fields[11:13], _bytes_read(pid)))
    return tuple(marks)


def _bytes_read(pid: int) -> int:
    """rchar of /proc/PID/io (bytes read by any means), -1 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])
    except (OSError, StopIteration, ValueError, IndexError):
        return -1


def waits_on_fifo(wchan: str) -> bool:
    """Whether a thread asleep in `wchan` waits on a FIFO: its open without a writer
    (wait_for_partner, fifo_open) or a read from a writer that sends nothing (pipe_read,
    pipe_wait_readable, 6.18's anon_pipe_read...). Not a write (pipe_write, pipe_wait_writable):
    rg's output goes to a pipe of ours, and its standard input is /dev/null, so a read of a pipe
    can only be a FIFO's."""
    return wchan == "wait_for_partner" or "fifo" in wchan or ("pipe" in wchan and "writ" not in wchan)


def _waits_on_fifo(pid: int) -> bool:
    """Whether a thread of `pid` is asleep in a FIFO wait, by its wchan (False when unreadable)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                if waits_on_fifo(f.read().strip()):
                    return True
        except OSError:
            continue
    return False

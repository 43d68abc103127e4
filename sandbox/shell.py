"""The shell that runs a command, the small wrapper script around it, and its environment.

The command runs as ``bash -c WRAPPER bash COMMAND`` (``sh`` when the host has no bash).
The wrapper:

1. moves the launcher's control pipe to a fixed high fd (bash: 200, sh: 9, the highest it
   can name), so scripts that use fds 3..9 neither clobber it nor get our bytes in their
   files, and bash's own saved descriptors (10 and up) never alias it;
2. (none backend only) waits until the launcher has applied the rlimits -- bwrap does this
   wait itself through ``--block-fd``;
3. writes ``R`` on the control pipe: "the sandbox is set up and the command starts now".
   No ``R`` means setup failed and the command never ran;
4. in foreground mode, installs an EXIT trap that writes ``\\0C`` + ``pwd -P`` on the control
   pipe and exits with the command's own status, so the caller learns the final working
   directory without touching the command's output or exit code;
5. ``eval``s the command in the wrapper's own shell, so a ``cd`` is seen by the trap.

The command can see and write the control pipe; whatever it reports as its cwd is advisory
and the caller must check it is inside the workspace (``Sandbox.resolve_cwd`` does that).
If the command replaces the shell (``exec prog``) or overrides the EXIT trap, no cwd is
reported and ``Result.final_cwd`` is None.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sandbox.config import SandboxConfig

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_HOME = "/tmp/home"  # inside the private /tmp: writable, gone after the command
BASH_CTL_FD = 200  # where the wrapper keeps the control pipe (Limits.open_files must exceed it)


@dataclass(frozen=True)  # pragma: no mutate  (nothing assigns to a Shell; frozen documents it)
class Shell:
    path: str
    is_bash: bool

    def argv(self, script: str, command: str) -> list[str]:
        if self.is_bash:
            # --noprofile/--norc: no host rc files; $0 stays "bash" as with a plain bash -c.
            return [self.path, "--noprofile", "--norc", "-c", script, "bash", command]
        return [self.path, "-c", script, "sh", command]


def find_shell() -> Shell:
    """bash if the host has one (the sandbox sees the host's /usr), else /bin/sh."""
    for candidate in ("/bin/bash", "/usr/bin/bash"):
        if os.access(candidate, os.X_OK):
            return Shell(candidate, True)
    return Shell("/bin/sh", False)


def wrapper_script(shell: Shell, *, ctl_fd: int, report_cwd: bool, go_fd: int | None = None) -> str:
    """The wrapper described in the module docstring, for this shell and these fd numbers."""
    if shell.is_bash:
        lines = [f"exec {BASH_CTL_FD}>&{ctl_fd} {ctl_fd}>&-"]
        ctl = str(BASH_CTL_FD)
        if go_fd is not None:
            lines.append(f"read -r -u {go_fd} __abhed_go; exec {go_fd}<&-; unset __abhed_go")
        builtin = "builtin "
    else:
        lines = [f"exec 9>/dev/fd/{ctl_fd}"]
        ctl = "9"
        if go_fd is not None:
            lines.append(f"read __abhed_go </dev/fd/{go_fd}; unset __abhed_go")
        builtin = ""
    if report_cwd:
        # 2>/dev/null comes first so that a closed control fd fails silently.
        lines.append(
            f'trap \'__abhed_status=$?; {{ {builtin}printf "\\000C"; {builtin}pwd -P; }} 2>/dev/null >&{ctl}; exit "$__abhed_status"\' EXIT'
        )
    lines.append(f"{builtin}printf R >&{ctl}")
    if not report_cwd:
        lines.append(f"exec {ctl}>&-")
    # The command runs in this shell (so `cd` reaches the trap); the unset hides our variable.
    lines.append('__abhed_cmd=$1; shift; eval "unset __abhed_cmd; $__abhed_cmd"')
    return "\n".join(lines) + "\n"


def parse_control(data: bytes) -> tuple[bool, str | None]:
    """(the command started, its final working directory if reported) from the control pipe."""
    started = data.startswith(b"R")
    marker = data.rfind(b"\0C")
    if not started or marker < 0:
        return started, None
    cwd = data[marker + 2 :]
    if cwd.endswith(b"\n"):
        cwd = cwd[:-1]
    text = os.fsdecode(cwd)
    return True, (text if text.startswith("/") and "\0" not in text else None)


def sandbox_env(config: SandboxConfig, *, home: str, tmpdir: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The curated environment: nothing from the host except the operator's allowlist."""
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": home,
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "TERM": "dumb",  # no colour codes, no cursor movement in captured output
        "PAGER": "cat",  # git log, man, systemctl ... would otherwise wait in less
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "true",  # commit/merge/tag without -m accept the default message, never open vim
        "GIT_TERMINAL_PROMPT": "0",  # a credential prompt fails instead of hanging on /dev/null
        # `git status` and friends refresh the index on the side when they may; a command that only
        # reads must not change the repository's state behind the checkpoints' back.
        "GIT_OPTIONAL_LOCKS": "0",
    }
    for name in config.env_passthrough:
        if name in environ:
            env[name] = environ[name]
    return env
